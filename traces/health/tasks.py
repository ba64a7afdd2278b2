"""Periodic health jobs (CELERY_BEAT_SCHEDULE in console/settings.py)."""

from __future__ import annotations

from celery import shared_task

from traces.health import services


@shared_task(name="health.purge_expired")
def purge_expired() -> int:
    """Drop the counter rows past their 30 days."""
    return services.counters_purge_expired()
