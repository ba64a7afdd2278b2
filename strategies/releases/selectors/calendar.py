"""When changes may go live in an environment: its freeze windows (nothing but a rollback
goes live inside one), its change hours (days and local times in an IANA time zone; none:
any time) and a freeze break-glass (one person lets go-lives through, time-limited). The
go-live judgement asks `calendar_findings` for every path but a rollback; a schedule asks it
for the time it is set to. Every rule reads the time from `console.kernel.clock`.

The rules on times (`freeze_until`, `hours_open_at`, `hours_next_open`) are pure: they take
the rows (or anything with the same attributes) and a time, so the unit tests run them at a
freeze's edge, across midnight and across a DST change without a database."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from context_runtime.findings import FLAG, Finding

from console.kernel import clock
from strategies.releases.models import ChangeHours, FreezeBreakGlass, FreezeWindow, ScheduledGoLive
from strategies.releases.selectors.refusals import FREEZE_BREAK_GLASS, FROZEN, OUTSIDE_CHANGE_HOURS

DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


# --- the rules on times (pure) -----------------------------------------------------------------
def freeze_until(windows: Iterable, at: datetime) -> tuple[object, datetime] | None:
    """The freeze covering `at` (start inclusive, end exclusive) and when the environment
    thaws: overlapping and touching windows chain, so "until" is when no window covers the
    time any more. None: not frozen at `at`."""
    windows = list(windows)
    covering = [w for w in windows if w.starts_at <= at < w.ends_at]
    if not covering:
        return None
    first = max(covering, key=lambda w: w.ends_at)
    until = first.ends_at
    while True:
        later = [w for w in windows if w.starts_at <= until < w.ends_at]
        if not later:
            return first, until
        until = max(w.ends_at for w in later)


def _zone(hours) -> ZoneInfo:
    return ZoneInfo(hours.time_zone)


def _opening(hours, day: date) -> tuple[datetime, datetime]:
    """The window that opens on local `day`: closing at or before opening runs past midnight.
    A local time the DST change skips is read with the offset before the change (zoneinfo's
    fold=0), so a window never vanishes on that day."""
    zone = _zone(hours)
    opens = datetime.combine(day, hours.opens_at, tzinfo=zone)
    closes_day = day + timedelta(days=1) if hours.closes_at <= hours.opens_at else day
    closes = datetime.combine(closes_day, hours.closes_at, tzinfo=zone)
    return opens, closes


def _openings(hours, at: datetime, days_ahead: int):
    """Every window opening from the local day before `at` to `days_ahead` days after."""
    local_day = at.astimezone(_zone(hours)).date()
    for offset in range(-1, days_ahead + 1):
        day = local_day + timedelta(days=offset)
        if day.weekday() in hours.days:
            yield _opening(hours, day)


def hours_open_at(hours, at: datetime) -> bool:
    """Are changes allowed at `at` by these change hours? None or no days: any time."""
    if hours is None or not hours.days:
        return True
    return any(opens <= at < closes for opens, closes in _openings(hours, at, 0))


def hours_next_open(hours, at: datetime) -> datetime | None:
    """When the change hours next open after `at` (None: they never close)."""
    if hours is None or not hours.days:
        return None
    return next((opens for opens, _ in _openings(hours, at, 8) if opens > at), None)


def hours_words(hours) -> str:
    """ "Mon–Fri 09:00–17:00 Europe/London", or "any time"."""
    if hours is None or not hours.days:
        return "any time"
    days = sorted(set(hours.days))
    if len(days) > 2 and days == list(range(days[0], days[-1] + 1)):
        day_words = f"{DAY_NAMES[days[0]]}–{DAY_NAMES[days[-1]]}"
    else:
        day_words = ", ".join(DAY_NAMES[d] for d in days)
    overnight = " (to the next day)" if hours.closes_at <= hours.opens_at else ""
    return (
        f"{day_words} {hours.opens_at:%H:%M}–{hours.closes_at:%H:%M}{overnight} {hours.time_zone}"
    )


def local_words(moment: datetime, zone: str = "UTC") -> str:
    """A time as an operator in `zone` reads it, with UTC beside it when that differs."""
    local = moment.astimezone(ZoneInfo(zone))
    utc = moment.astimezone(ZoneInfo("UTC"))
    words = f"{local:%a %Y-%m-%d %H:%M} {zone}"
    return words if local.utcoffset() == timedelta(0) else f"{words} ({utc:%H:%M} UTC)"


# --- the environment's calendar, read ----------------------------------------------------------
def change_hours_of(environment) -> ChangeHours | None:
    return ChangeHours.objects.filter(environment=environment).first()


def freeze_windows_of(environment, *, since: datetime | None = None) -> list[FreezeWindow]:
    """The environment's freeze windows not over at `since` (default: now), earliest first."""
    since = clock.now() if since is None else since
    return list(FreezeWindow.objects.filter(environment=environment, ends_at__gt=since))


def freeze_break_glass_at(environment, at: datetime | None = None) -> FreezeBreakGlass | None:
    """The freeze break-glass in force in `environment` at `at` (default: now), if any."""
    at = clock.now() if at is None else at
    return (
        FreezeBreakGlass.objects.filter(
            environment=environment, started_at__lte=at, ends_at__gt=at, ended_at__isnull=True
        )
        .order_by("-ends_at")
        .first()
    )


def calendar_refusals(environment, at: datetime) -> list[Finding]:
    """What the calendar refuses at `at`, a break-glass aside: `frozen` naming the window and
    when the environment thaws, `outside_change_hours` naming the hours and when they next
    open."""
    findings = []
    hours = change_hours_of(environment)
    zone = getattr(hours, "time_zone", "UTC")
    frozen = freeze_until(freeze_windows_of(environment, since=at), at)
    if frozen is not None:
        window, until = frozen
        findings.append(
            Finding(
                "environment",
                FROZEN,
                f"{environment.key} is frozen until {local_words(until, zone)}: "
                f"{window.reason} (freeze set by {window.created_by}). Only a rollback goes "
                "live inside a freeze.",
            )
        )
    if not hours_open_at(hours, at):
        opens = hours_next_open(hours, at)
        findings.append(
            Finding(
                "environment",
                OUTSIDE_CHANGE_HOURS,
                f"{environment.key} takes changes {hours_words(hours)}; it is outside those "
                f"hours now"
                + (f" — they next open {local_words(opens, hours.time_zone)}." if opens else "."),
            )
        )
    return findings


def calendar_findings(environment, *, at: datetime | None = None) -> list[Finding]:
    """The go-live judgement's calendar part, at `at` (default: now): the refusals, or —
    while a freeze break-glass is in force — one flag instead, saying the change goes through
    under it (and is marked so on the release history)."""
    at = clock.now() if at is None else at
    refusals = calendar_refusals(environment, at)
    if not refusals:
        return []
    glass = freeze_break_glass_at(environment, at)
    if glass is None:
        return refusals
    return [
        Finding(
            "environment",
            FREEZE_BREAK_GLASS,
            f"{environment.key} is in a freeze break-glass until {local_words(glass.ends_at)} "
            f"({glass.started_by}: {glass.reason}): this goes live despite "
            + " and ".join(
                "the freeze" if f.code == FROZEN else "the change hours" for f in refusals
            )
            + ", and is marked so on the release history.",
            severity=FLAG,
        )
    ]


def goes_live_through_freeze(environment) -> bool:
    """A go-live now needs the freeze break-glass (the calendar refuses it without one): the
    move marks its history row so (`ReleaseEvent.freeze_break_glass`)."""
    return any(f.code == FREEZE_BREAK_GLASS for f in calendar_findings(environment))


def calendar_next_allowed(environment, *, at: datetime | None = None) -> datetime | None:
    """The first moment from `at` (default: now) when the calendar lets a go-live through
    without a break-glass: `at` itself when it does now; past every freeze and into the
    change hours otherwise. None when none comes within a year (a freeze without end)."""
    at = clock.now() if at is None else at
    windows = freeze_windows_of(environment, since=at)
    hours = change_hours_of(environment)
    moment = at
    for _ in range(400):  # each turn leaves a freeze or closed hours: bounded, never a loop
        frozen = freeze_until(windows, moment)
        if frozen is not None:
            moment = frozen[1]
            continue
        if not hours_open_at(hours, moment):
            moment = hours_next_open(hours, moment)
            if moment is None:
                return None
            continue
        return moment if moment - at < timedelta(days=366) else None
    return None


@dataclass(frozen=True)
class CalendarSummary:
    """What the releases page says of an environment's calendar now."""

    frozen_until: datetime | None
    freeze_reason: str
    next_freeze: FreezeWindow | None
    hours: str
    hours_open: bool
    hours_next_open: datetime | None
    time_zone: str
    break_glass: FreezeBreakGlass | None
    next_allowed: datetime | None  # now, or when a go-live is next let through


def calendar_summary(environment, *, at: datetime | None = None) -> CalendarSummary:
    at = clock.now() if at is None else at
    windows = freeze_windows_of(environment, since=at)
    frozen = freeze_until(windows, at)
    hours = change_hours_of(environment)
    return CalendarSummary(
        frozen_until=frozen[1] if frozen else None,
        freeze_reason=frozen[0].reason if frozen else "",
        next_freeze=next((w for w in windows if w.starts_at > at), None),
        hours=hours_words(hours),
        hours_open=hours_open_at(hours, at),
        hours_next_open=hours_next_open(hours, at),
        time_zone=getattr(hours, "time_zone", "UTC"),
        break_glass=freeze_break_glass_at(environment, at),
        next_allowed=calendar_next_allowed(environment, at=at),
    )


def schedules_open(*, agents) -> list[ScheduledGoLive]:
    """The go-lives still scheduled (or running) on these agents, soonest first."""
    return list(
        ScheduledGoLive.objects.filter(
            document__agent__in=agents, state__in=ScheduledGoLive.OPEN_STATES
        )
        .select_related("document__agent", "environment", "version", "requested_by")
        .order_by("run_at", "id")
    )
