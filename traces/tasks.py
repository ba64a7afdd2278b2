"""Periodic trace jobs (scheduled by CELERY_BEAT_SCHEDULE in console/settings.py): the
retention purge, hourly rollups and the day partitions. Thin wrappers around traces.services."""

from __future__ import annotations

from celery import shared_task

from traces import services
from traces.outcomes import services as outcome_services


@shared_task(name="traces.purge_expired")
def purge_expired() -> dict:
    """Delete expired snapshots; drop the days every environment is done with as partitions;
    delete the rest of a shorter retention's traces in batches; the outcomes reported for
    requests with them (the same retention); and the kinds of candidate no trace names."""
    return {
        "snapshots": services.snapshots_purge_expired(),
        "days_dropped": services.partitions_drop_expired(),
        "traces": services.traces_purge_expired(),
        "outcomes": outcome_services.outcomes_purge_expired(),
        "kinds": services.kinds_purge_unnamed(),
    }


@shared_task(name="traces.count_pending_outcomes")
def count_pending_outcomes() -> int:
    """Count on the health counters the outcomes that arrived before their trace."""
    return outcome_services.outcomes_count_pending()


@shared_task(name="traces.rollup_recent_hours")
def rollup_recent_hours(lookback_hours: int = 3) -> list[str]:
    """Recompute the hourly counts of recently closed hours (idempotent)."""
    hours = services.rollup_recent_hours(lookback_hours=lookback_hours)
    return [hour.isoformat() for hour in hours]


@shared_task(name="traces.partitions_maintain")
def partitions_maintain() -> dict:
    """Create the day partitions a week ahead (the purge drops the expired ones)."""
    return services.partitions_maintain()
