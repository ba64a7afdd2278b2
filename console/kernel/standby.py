"""Reads that can wait for replication go to a streaming standby (issue 36, item 4).

`STANDBY_DATABASE_URL` names a hot standby of the primary (PostgreSQL streaming replication,
docs/scale-out.md "Reads from a streaming standby"). Reads opt in, never the other way round:
a view marked `@lag_tolerant` (the trace search, list, page and export, the version health
pages, their API twins) has its GET's ORM reads sent there by `StandbyRouter`, and code that
reads in bulk (a preview's replay, the health counters) asks `read_alias()` for its raw SQL.
Everything else — every write, every read inside a transaction on the primary, every page
that must show what its user has just changed — stays on the primary.

The standby is used while it answers and is at most `STANDBY_MAX_LAG_SECONDS` behind; a
standby that is down, too far behind or no longer a standby (promoted) gives the reads back
to the primary, logged once at each change of state. The state is checked at most every
`STANDBY_CHECK_SECONDS` per process, and at once after a read on it failed.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.utils import timezone

log = logging.getLogger(__name__)

STANDBY = "standby"

# Set while a lag-tolerant view or bulk read runs (per thread and per task: a contextvar).
_opted_in: contextvars.ContextVar[bool] = contextvars.ContextVar("standby_reads", default=False)
# The lag of the standby the current request read from (None: it read the primary only).
_lag_read: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "standby_lag_read", default=None
)

# Seconds behind the primary: 0 when every WAL record received is replayed, else the age of
# the last transaction replayed (what a reader misses is at most that old).
_LAG_SQL = """
    SELECT pg_is_in_recovery(),
           CASE WHEN NOT pg_is_in_recovery() THEN NULL
                WHEN pg_last_wal_receive_lsn() IS NOT NULL
                     AND pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
                ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0)
           END
"""


def configured() -> bool:
    return STANDBY in settings.DATABASES


@dataclass(frozen=True)
class StandbyState:
    usable: bool
    lag_seconds: float | None
    reason: str  # why not usable ("" when usable)
    checked_at: float  # time.monotonic()

    def as_report(self) -> dict:
        return {
            "configured": True,
            "used": self.usable,
            "lag_seconds": None if self.lag_seconds is None else round(self.lag_seconds, 3),
            "reason": self.reason,
        }


_lock = threading.Lock()
_state: StandbyState | None = None


def _probe() -> StandbyState:
    """Ask the standby how far behind it is (a short query on its own connection)."""
    now = time.monotonic()
    try:
        with connections[STANDBY].cursor() as cursor:
            cursor.execute(_LAG_SQL)
            in_recovery, lag = cursor.fetchone()
    except DatabaseError as exc:
        connections[STANDBY].close()  # a broken connection is not reused
        return StandbyState(False, None, f"unreachable: {str(exc).strip()[:200]}", now)
    if not in_recovery:
        return StandbyState(False, None, "not a standby (not in recovery): promoted?", now)
    lag = float(lag)
    if lag > settings.STANDBY_MAX_LAG_SECONDS:
        return StandbyState(
            False,
            lag,
            f"{lag:.1f} s behind the primary (more than {settings.STANDBY_MAX_LAG_SECONDS} s)",
            now,
        )
    return StandbyState(True, lag, "", now)


def standby_state(*, refresh: bool = False) -> StandbyState | None:
    """The standby's state as this process last saw it, checked again when older than
    STANDBY_CHECK_SECONDS; None when no standby is configured."""
    global _state
    if not configured():
        return None
    with _lock:
        stale = _state is None or (
            time.monotonic() - _state.checked_at >= settings.STANDBY_CHECK_SECONDS
        )
        if refresh or stale:
            previous, _state = _state, _probe()
            if previous is None or previous.usable != _state.usable:
                if _state.usable:
                    log.info("standby: reads go to the standby (%.1f s behind)", _state.lag_seconds)
                else:
                    log.warning(
                        "standby: reads fall back to the primary: the standby is %s", _state.reason
                    )
        return _state


def standby_failed(exc: Exception) -> None:
    """A read on the standby failed: check it again now (the next reads go to the primary
    until it answers)."""
    log.warning("standby: a read failed (%s); checking it again", str(exc).strip()[:200])
    standby_state(refresh=True)


def read_alias(*, as_of: datetime | None = None) -> str:
    """The database a read should use now: the standby when the read is opted in (a
    lag-tolerant view, a `reads_from_standby()` block) and not inside a transaction on the
    primary, while the standby is usable (and, with `as_of`, has replayed everything committed
    by then); else the primary."""
    if not _opted_in.get() or connections[DEFAULT_DB_ALIAS].in_atomic_block:
        return DEFAULT_DB_ALIAS
    state = standby_state()
    if state is None or not state.usable:
        return DEFAULT_DB_ALIAS
    if as_of is not None and timezone.now() - timedelta(seconds=state.lag_seconds) < as_of:
        return DEFAULT_DB_ALIAS
    _lag_read.set(state.lag_seconds)
    return STANDBY


@contextlib.contextmanager
def reads_from_standby():
    """Reads in this block may go to the standby (`read_alias`, StandbyRouter)."""
    opted, lag = _opted_in.set(True), _lag_read.set(None)
    try:
        yield
    finally:
        _opted_in.reset(opted)
        _lag_read.reset(lag)


class _StandbyReadFailed(Exception):
    pass


def _answer(view, request, args, kwargs, *, standby: bool = True):
    """The view's answer rendered inside `reads_from_standby()` (templates read lazily),
    saying where it read: `X-Console-Read-From: standby; lag=0.4` or `primary`."""
    with reads_from_standby() if standby else contextlib.nullcontext():
        try:
            response = view(request, *args, **kwargs)
            if callable(getattr(response, "render", None)) and not response.is_rendered:
                response = response.render()
        except DatabaseError as exc:
            if _lag_read.get() is None:
                raise  # the primary's own error: nothing to fall back to
            raise _StandbyReadFailed from exc
        lag = _lag_read.get()
    response["X-Console-Read-From"] = "primary" if lag is None else f"standby; lag={lag:.1f}"
    return response


def lag_tolerant(view):
    """A view whose GET may read from the standby: outermost but for the schema's decorator
    (`@lag_tolerant` above `@api_view` or `@require_GET`). Should a read on the standby fail
    mid-way, the view runs again on the primary — a look may then be logged twice, never
    missed."""

    @functools.wraps(view)
    def reading_from_standby(request, *args, **kwargs):
        if request.method not in ("GET", "HEAD") or not configured():
            return view(request, *args, **kwargs)
        try:
            return _answer(view, request, args, kwargs)
        except _StandbyReadFailed as failed:
            standby_failed(failed.__cause__)
            return _answer(view, request, args, kwargs, standby=False)

    return reading_from_standby


def lag_read() -> float | None:
    """Seconds behind of the standby this request read from (None: it read the primary)."""
    return _lag_read.get()


# Only the trace data is read from the standby. Who may see it — grants, roles, accounts,
# tokens, sessions — and what the catalog says are always read from the primary: a grant
# revoked a second ago is revoked, however far behind the standby is.
TRACE_DATA_APPS = frozenset({"traces", "health", "outcomes", "previews", "rollouts"})


class StandbyRouter:
    """Installed only when a standby is configured. Reads of trace data opted in go to the
    standby while it is usable; a read inside a transaction on the primary stays there (it must see that
    transaction's writes, and SELECT … FOR UPDATE cannot run on a standby); every write, and
    a save of a row read from the standby, goes to the primary."""

    def db_for_read(self, model, **hints):
        if model._meta.app_label not in TRACE_DATA_APPS:
            return DEFAULT_DB_ALIAS
        return read_alias()

    def db_for_write(self, model, **hints):
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1, obj2, **hints):
        # One data set on two servers: rows of either may be related.
        return {obj1._state.db, obj2._state.db} <= {DEFAULT_DB_ALIAS, STANDBY}

    def allow_migrate(self, db, app_label, **hints):
        return db != STANDBY  # the standby follows the primary's schema by replication


def health_section() -> dict:
    """For /healthz: whether reads go to a standby, how far behind it is, or why not."""
    state = standby_state()
    return {"configured": False} if state is None else state.as_report()
