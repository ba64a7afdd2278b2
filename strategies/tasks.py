"""Celery tasks of delivery and the runtime: webhook deliveries, and the beat jobs that repair
what a lost push or message left behind (CELERY_BEAT_SCHEDULE in console/settings.py).
Thin wrappers around strategies.delivery and strategies.runtime.auth."""

from __future__ import annotations

from celery import shared_task

from strategies.delivery import webhooks
from strategies.delivery.config import cache_reconcile
from strategies.releases.services import change_records, changes
from strategies.releases.services.schedules import schedules_run_due
from strategies.runtime.auth import last_used_flush, refused_flush, revocations_reconcile
from strategies.runtime.instances import instances_purge


@shared_task(
    name=webhooks.DELIVER_TASK, bind=True, autoretry_for=(), max_retries=webhooks.MAX_TRIES
)
def deliver_webhook(self, delivery_id: int) -> str:
    """One try of a webhook delivery; schedules the next one with exponential backoff.

    The task's id names its claim on the try, so a message redelivered after its worker died
    takes its unfinished try over; a duplicate message finds the try `BUSY` and stops.
    """
    status, tries = webhooks.delivery_try(delivery_id=delivery_id, claimant=self.request.id or "")
    if status == webhooks.WebhookDelivery.Status.PENDING:
        raise self.retry(countdown=webhooks.retry_delay(tries))
    return status


@shared_task(name=webhooks.FAN_OUT_TASK, autoretry_for=())
def deliver_webhooks(delivery_ids: list[int]) -> int:
    """Many deliveries queued in one message (an alert tick firing dozens): one try message
    each, as `deliveries_send` would have queued them one by one."""
    webhooks.deliveries_send_each(delivery_ids)
    return len(delivery_ids)


@shared_task(name="strategies.flush_token_last_used", autoretry_for=())
def flush_token_last_used() -> int:
    """Copy the runtime tokens' last-used times, and the refused attempts of revoked tokens,
    from Redis to the database; forget runtimes unheard for a week."""
    return last_used_flush() + refused_flush() + instances_purge()


@shared_task(name="strategies.reconcile_runtime_cache", autoretry_for=())
def reconcile_runtime_cache() -> int:
    """Make Redis and every process's mirror follow PostgreSQL: payloads whose push after
    commit was lost, tombstones of revocations whose push was lost. Returns the repairs."""
    return cache_reconcile() + revocations_reconcile()


@shared_task(name="strategies.relay_webhook_deliveries", autoretry_for=())
def relay_webhook_deliveries() -> int:
    """Queue again the webhook deliveries left pending by a lost message."""
    return webhooks.deliveries_relay()


@shared_task(name=change_records.SEND_TASK, bind=True, autoretry_for=(), max_retries=None)
def send_change_request(self, record_id: int) -> str:
    """One try of a change request (docs/change-approvals.md); the next after a backoff."""
    outcome = changes.change_record_send_try(record_id=record_id)
    if outcome == "retry":
        record_tries = changes.change_record_tries(record_id)
        raise self.retry(countdown=changes.retry_delay(record_tries))
    return outcome


@shared_task(name="strategies.change_records_tick", autoretry_for=())
def change_records_tick() -> dict:
    """Poll the waiting change records' systems, relay unsent requests, expire windows."""
    return {
        "decided": changes.change_records_poll(),
        "relayed": changes.change_records_relay(),
        "expired": changes.change_records_expire(),
    }


@shared_task(name="strategies.schedules_run_due", autoretry_for=())
def run_due_schedules() -> int:
    """The go-lives scheduled for now: each claimed once, judged again, fired or refused."""
    return schedules_run_due()
