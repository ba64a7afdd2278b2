"""Periodic regression-set jobs (CELERY_BEAT_SCHEDULE in console/settings.py)."""

from __future__ import annotations

from celery import shared_task

from traces.regressions import services


@shared_task(name="regressions.purge_expired")
def purge_expired() -> int:
    """Drop the members past their set's retention (audited per set)."""
    return services.members_purge_expired()
