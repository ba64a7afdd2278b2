"""Writes of the health app besides ingest's counters (traces.health.counters): retention."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from traces.health.counters import HEALTH_HOURS, HEALTH_MINUTES, CounterTable
from traces.health.models import RETENTION_DAYS

PURGE_BATCH = 20_000


HEALTH_TABLES = (HEALTH_MINUTES, HEALTH_HOURS)


def counters_purge_expired(
    *,
    now: datetime | None = None,
    batch_size: int = PURGE_BATCH,
    tables: tuple[CounterTable, ...] = HEALTH_TABLES,
) -> int:
    """Delete counter rows (minutes and hours) older than RETENTION_DAYS, in short batches
    (ingest goes on meanwhile). `tables`: the health counters unless given (the rollout
    counters pass theirs). Each batch locks its rows in the one order of counter rows
    (`counters_write_tables`: by key) before deleting them, so a writer still adding to an
    expired row (a late trace or outcome, where retention is longer) never deadlocks with
    it. Returns how many rows."""
    cutoff = (now or timezone.now()) - timedelta(days=RETENTION_DAYS)
    total = 0
    for table in tables:
        while True:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(_purge_batch(table), [cutoff, batch_size])
                deleted = cursor.rowcount
            total += deleted
            if deleted < batch_size:
                break
    return total


def _purge_batch(table: CounterTable) -> str:
    # Python sorts the writers' keys by code point: "C" is that order for text.
    order = ", ".join(
        f'{name} COLLATE "C"' if kind == "text" else name for name, kind in table.key.items()
    )
    name, column = table.table, table.time_column
    return (
        f"DELETE FROM {name} WHERE ctid = ANY(ARRAY("  # noqa: S608 (constants)
        f"SELECT ctid FROM {name} WHERE ctid = ANY(ARRAY("
        f"SELECT ctid FROM {name} WHERE {column} < %s LIMIT %s))"
        f" ORDER BY {order} FOR UPDATE))"
    )
