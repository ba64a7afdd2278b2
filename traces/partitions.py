"""Daily range partitions of traces_trace and traces_candidate (docs/traces-storage.md).

Plain SQL on a connection, no models. Migration 0005 holds its own frozen copy of what it
needs, so a change here does not change what that migration does.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

PARENTS = ("traces_trace", "traces_candidate")
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
    """Create the missing day partitions of both tables for `days`. Returns the names created."""
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


def expired_partitions(cursor, *, before: date) -> list[tuple[str, str]]:
    """(parent, partition) of the day partitions wholly before `before`: candidates first."""
    found = []
    for parent in ("traces_candidate", "traces_trace"):
        for day in sorted(existing_days(cursor, parent)):
            if day < before:
                found.append((parent, partition_name(parent, day)))
    return found
