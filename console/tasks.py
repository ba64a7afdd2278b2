"""Console-wide Celery tasks."""

from __future__ import annotations

from celery import shared_task
from django.core.cache import cache
from django.db import connection

from console.access.services import chain_checkpoints_write
from console.access.siem import drain_all
from console.models import WorkerHeartbeat


@shared_task(name="console.heartbeat")
def heartbeat(marker: str) -> str:
    """Proves the worker path end to end: writes the marker to the cache and the database."""

    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
    cache.set(f"heartbeat:{marker}", now.isoformat(), 300)

    WorkerHeartbeat.objects.update_or_create(marker=marker, defaults={"seen_at": now})
    return marker


@shared_task(name="console.chain_checkpoint")
def chain_checkpoint() -> list[int]:
    """Beat, every AUDIT_CHECKPOINT_MINUTES: anchor the audit chains' heads (checkpoint rows
    and a line on the `console.kernel.audit.anchor` logger). Returns the checkpoint ids."""
    return [checkpoint.pk for checkpoint in chain_checkpoints_write()]


@shared_task(name="console.siem_drain")
def siem_drain() -> dict[str, int]:
    """Beat, every SIEM_DRAIN_SECONDS (and kicked when a destination is added or resumed):
    send each active SIEM destination its backlog. Returns events sent per destination id."""
    return {str(pk): result.sent for pk, result in drain_all().items()}
