"""The one clock of the clock-driven rules: freeze windows, change hours and scheduled
go-lives ask `now()`, never `timezone.now()` directly, so a test can set the time those rules
see (`clock_set`, the `clock` fixture) and run them at a freeze's edge or across a DST change
with the real database, the real services and the real task — no mock. Unset, it is the real
time; a separate process (a real worker) always runs on the real time."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

_set_to: datetime | None = None
_set_at: datetime | None = None


def now() -> datetime:
    """The current time as the rules see it: real, or the time a test set, moving on with the
    real clock from there (a task that runs for a second still sees a second pass)."""
    if _set_to is None:
        return timezone.now()
    return _set_to + (timezone.now() - _set_at)


def clock_set(at: datetime | None) -> None:
    """Make `now()` read `at` from this moment on (aware datetimes only); None: real time."""
    global _set_to, _set_at
    if at is not None and timezone.is_naive(at):
        raise ValueError("the clock is set to an aware datetime")
    _set_to, _set_at = at, timezone.now()


def clock_advance(by: timedelta) -> datetime:
    """Move the set clock on by `by` (from real time when unset); returns the new now."""
    clock_set(now() + by)
    return now()
