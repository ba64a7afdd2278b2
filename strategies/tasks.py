"""Celery tasks of the releases area: thin wrappers around services."""

from __future__ import annotations

from celery import shared_task

from strategies import webhooks


@shared_task(
    name="strategies.deliver_webhook", bind=True, autoretry_for=(), max_retries=webhooks.MAX_TRIES
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
    from strategies.runtime_auth import last_used_flush

    return last_used_flush()


# The lead may move this entry into console/celery.py with the other periodic tasks.
def _register_beat_entry() -> None:
    from console.celery import app

    app.conf.beat_schedule.setdefault(
        "strategies.flush_token_last_used",
        {"task": "strategies.flush_token_last_used", "schedule": 60.0},
    )


_register_beat_entry()
