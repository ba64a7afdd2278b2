"""Writes of the health app besides ingest's counters (traces.health.counters): retention."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from traces.health.models import RETENTION_DAYS

PURGE_BATCH = 20_000


HEALTH_TABLES = (("health_counter", "minute"), ("health_counter_hour", "hour"))


def counters_purge_expired(
    *,
    now: datetime | None = None,
    batch_size: int = PURGE_BATCH,
    tables: tuple[tuple[str, str], ...] = HEALTH_TABLES,
) -> int:
    """Delete counter rows (minutes and hours) older than RETENTION_DAYS, in short batches
    (ingest goes on meanwhile). `tables`: (table, time column) pairs — the health counters
    unless given (the rollout counters pass theirs). Returns how many rows."""
    cutoff = (now or timezone.now()) - timedelta(days=RETENTION_DAYS)
    total = 0
    for table, column in tables:
        while True:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    f"DELETE FROM {table} WHERE ctid = ANY(ARRAY("  # noqa: S608 (constants)
                    f"SELECT ctid FROM {table} WHERE {column} < %s LIMIT %s))",
                    [cutoff, batch_size],
                )
                deleted = cursor.rowcount
            total += deleted
            if deleted < batch_size:
                break
    return total
