"""Writes of the rollout evidence besides ingest's counters (traces.rollouts.counters):
retention, kept as long as the health counters and by the same batched delete."""

from __future__ import annotations

from datetime import datetime

from django.db import connection, transaction

from traces.health.services import counters_purge_expired
from traces.rollouts.counters import HOURS, MINUTES

ROLLOUT_TABLES = (MINUTES, HOURS)

_ORPHAN_SAMPLES = """
DELETE FROM rollout_sample s
WHERE NOT EXISTS (SELECT 1 FROM rollout_counter_hour h
                  WHERE h.rollout_key = s.rollout_key AND h.step = s.step)
"""


def rollout_counters_purge_expired(*, now: datetime | None = None) -> int:
    """Delete rollout counter rows past the counters' retention (30 days), and the sample
    ids of steps none of whose hours is left. Returns the counter rows deleted. The beat
    runs it every 6 hours (traces.rollouts.tasks.purge_expired)."""
    deleted = counters_purge_expired(now=now, tables=ROLLOUT_TABLES)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_ORPHAN_SAMPLES)
    return deleted
