"""Console-wide Celery tasks."""

from __future__ import annotations

from celery import shared_task
from django.core.cache import cache
from django.db import connection

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
