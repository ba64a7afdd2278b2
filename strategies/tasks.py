"""Celery tasks of the releases area: thin wrappers around services."""

from __future__ import annotations

from celery import shared_task

from strategies.delivery import webhooks
from strategies.runtime.auth import last_used_flush


@shared_task(
    name=webhooks.DELIVER_TASK, bind=True, autoretry_for=(), max_retries=webhooks.MAX_TRIES
)
def deliver_webhook(self, delivery_id: int) -> str:
    """One try of a webhook delivery; schedules the next one with exponential backoff."""
    status, tries = webhooks.delivery_try(delivery_id=delivery_id)
    if status == webhooks.WebhookDelivery.Status.PENDING:
        raise self.retry(countdown=webhooks.retry_delay(tries))
    return status


@shared_task(name="strategies.flush_token_last_used", autoretry_for=())
def flush_token_last_used() -> int:
    """Copy the runtime tokens' last-used times from Redis to the database."""
    return last_used_flush()
