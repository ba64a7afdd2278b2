"""Daily range partitions of traces_trace (docs/traces-storage.md).

Plain SQL on a connection, no models. Migration 0005 holds its own frozen copy of what it
needs, so a change here does not change what that migration does.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

PARENTS = ("traces_trace",)
# traces_candidate's day partitions are matched too: a day its table (dropped by migration
# 0013) left detached but not dropped is still found and dropped by the purge.
_NAME = re.compile(r"^(traces_trace|traces_candidate)_p(\d{8})$")


def partition_name(parent: str, day: date) -> str:
    return f"{parent}_p{day:%Y%m%d}"


def _bounds(day: date) -> tuple[str, str]:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return start.isoformat(), (start + timedelta(days=1)).isoformat()


def existing_days(cursor, parent: str) -> set[date]:
    """The days that have a partition attached to `parent`."""
    cursor.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = %s::regclass",
        [parent],
    )
    days = set()
    for (name,) in cursor.fetchall():
        match = _NAME.match(name)
        if match and match.group(1) == parent:
            days.add(datetime.strptime(match.group(2), "%Y%m%d").date())
    return days


def ensure_days(cursor, days) -> list[str]:
    """Create the missing day partitions for `days`. Returns the names created."""
    created = []
    for parent in PARENTS:
        have = existing_days(cursor, parent)
        for day in sorted(set(days) - have):
            low, high = _bounds(day)
            name = partition_name(parent, day)
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF {parent} "
                f"FOR VALUES FROM ('{low}') TO ('{high}')"
            )
            created.append(name)
    return created


def ensure_range(cursor, *, today: date, days_back: int, days_ahead: int) -> list[str]:
    return ensure_days(
        cursor, [today + timedelta(days=d) for d in range(-days_back, days_ahead + 1)]
    )


def retention_cutoff(now: datetime, retention_days: int) -> datetime:
    """The start of the oldest UTC day a retention of `retention_days` still keeps: a trace
    goes with its whole day, once all of that day is older than the retention (so up to a
    day after its own time). Days are partitions, so a day every environment is done with
    can go as a partition instead of row by row."""
    day = (now - timedelta(days=retention_days)).astimezone(UTC).date()
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def expired_partitions(cursor, *, before: date) -> list[tuple[str, str | None, bool]]:
    """(partition, parent, detach pending) of the day partitions wholly before `before`,
    candidates first. Found by name, so a day left behind by an interrupted drop is found
    too: half-detached (`parent` set, pending True: DETACH … CONCURRENTLY was cancelled in
    its second phase) or detached but not dropped (`parent` None). Half-detached ones come
    first: while one is pending, PostgreSQL refuses to detach any other of its parent."""
    cursor.execute(
        "SELECT c.relname, p.relname, coalesce(i.inhdetachpending, false) FROM pg_class c"
        " LEFT JOIN pg_inherits i ON i.inhrelid = c.oid"
        " LEFT JOIN pg_class p ON p.oid = i.inhparent"
        " WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')"
        " AND c.relname ~ '^traces_(trace|candidate)_p[0-9]{8}$'"
    )
    found = []
    for name, parent, pending in cursor.fetchall():
        match = _NAME.match(name)
        day = datetime.strptime(match.group(2), "%Y%m%d").date()
        if day < before:
            is_trace = match.group(1) != "traces_candidate"
            found.append((not pending, is_trace, day, name, parent, pending))
    return [(name, parent, pending) for *_, name, parent, pending in sorted(found)]


def drop_partition(
    cursor, *, name: str, parent: str | None, pending: bool, concurrently: bool = True
) -> None:
    """Detach a day partition (concurrently: without blocking its parent; that refuses a
    transaction block, so the connection must be in autocommit), then drop it; finish a
    detach an earlier run left half done."""
    if parent is not None:
        how = "FINALIZE" if pending else ("CONCURRENTLY" if concurrently else "")
        cursor.execute(f"ALTER TABLE {parent} DETACH PARTITION {name} {how}")
    cursor.execute(f"DROP TABLE IF EXISTS {name}")
