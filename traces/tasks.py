"""Periodic trace jobs (scheduled in console.settings.CELERY_BEAT_SCHEDULE): retention purge
and hourly rollups."""

from __future__ import annotations

from celery import shared_task

from traces import services


@shared_task(name="traces.purge_expired")
def purge_expired() -> dict:
    """Delete expired snapshots, then traces past their environment's retention, in batches."""
    return {
        "snapshots": services.snapshots_purge_expired(),
        "traces": services.traces_purge_expired(),
    }


@shared_task(name="traces.rollup_recent_hours")
def rollup_recent_hours(lookback_hours: int = 3) -> list[str]:
    """Recompute the hourly counts of recently closed hours (idempotent)."""
    hours = services.rollup_recent_hours(lookback_hours=lookback_hours)
    return [hour.isoformat() for hour in hours]


@shared_task(name="traces.partitions_maintain")
def partitions_maintain() -> dict:
    """Create the day partitions a week ahead; detach (concurrently) and drop the days past
    the longest environment retention."""
    return services.partitions_maintain()
