"""Writes of when changes may go live in an environment: its freeze windows, its change hours
and the freeze break-glass. Each needs the right to manage environments (an admin, as the
approvals break-glass does), is one transaction and writes its audit row; bad input is a
field error and changes nothing."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from django.conf import settings

from console.kernel import clock
from console.kernel.audit import AuditAction, actor_label, audit_record
from console.kernel.errors import NotFound, ValidationFailed
from console.kernel.policy import Capability, check_user_can
from console.kernel.reasons import reason_clean
from console.kernel.sessions import require_recent_authentication
from console.kernel.transactions import service_transaction
from strategies.catalog.models import Environment
from strategies.releases.models import ChangeHours, FreezeBreakGlass, FreezeWindow
from strategies.releases.selectors.calendar import freeze_break_glass_at, hours_words


def _field_error(path: str, message: str, code: str = "invalid") -> ValidationFailed:
    return ValidationFailed(message, details=[{"path": path, "code": code, "message": message}])


def _aware(value, *, path: str) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise _field_error(path, "Give a date and time with its time zone.")
    return value


def freeze_window_state(window: FreezeWindow) -> dict:
    return {
        "id": window.pk,
        "environment": window.environment.key,
        "starts_at": window.starts_at.isoformat(),
        "ends_at": window.ends_at.isoformat(),
        "reason": window.reason,
        "created_by": window.created_by,
    }


@service_transaction(durable=True)
def freeze_window_create(
    *, environment: Environment, starts_at, ends_at, reason: str, actor
) -> FreezeWindow:
    """Freeze `environment` from `starts_at` to `ends_at` (aware; the end after the start and
    still ahead), saying why. Windows may overlap."""
    check_user_can(actor, Capability.MANAGE_CATALOG, target=environment)
    starts_at = _aware(starts_at, path="starts_at")
    ends_at = _aware(ends_at, path="ends_at")
    if ends_at <= starts_at:
        raise _field_error("ends_at", "A freeze ends after it starts.")
    if ends_at <= clock.now():
        raise _field_error("ends_at", "This freeze would already be over: give a later end.")
    reason = reason_clean(reason, ask="Say why nothing may go live then (shown on the refusals).")
    window = FreezeWindow.objects.create(
        environment=environment,
        starts_at=starts_at,
        ends_at=ends_at,
        reason=reason,
        created_by=actor_label(actor),
        created_at=clock.now(),
    )
    audit_record(
        actor=actor,
        action=AuditAction.FREEZE_WINDOW_CREATE,
        target=environment,
        after=freeze_window_state(window),
    )
    return window


@service_transaction(durable=True)
def freeze_window_delete(*, window_id: int, environment: Environment, actor) -> None:
    """Remove a freeze window (a wrong one, or to lift a freeze early), audited."""
    check_user_can(actor, Capability.MANAGE_CATALOG, target=environment)
    window = (
        FreezeWindow.objects.select_for_update()
        .filter(pk=window_id, environment=environment)
        .first()
    )
    if window is None:
        raise NotFound("No such freeze window here.")
    before = freeze_window_state(window)
    window.delete()
    audit_record(
        actor=actor, action=AuditAction.FREEZE_WINDOW_DELETE, target=environment, before=before
    )


def change_hours_state(hours: ChangeHours | None) -> dict:
    if hours is None or not hours.days:
        return {"days": [], "opens_at": None, "closes_at": None, "time_zone": None}
    return {
        "days": sorted(hours.days),
        "opens_at": f"{hours.opens_at:%H:%M}",
        "closes_at": f"{hours.closes_at:%H:%M}",
        "time_zone": hours.time_zone,
        "words": hours_words(hours),
    }


def _time(value, *, path: str) -> time:
    if isinstance(value, time):
        return value.replace(second=0, microsecond=0)
    try:
        return time.fromisoformat(str(value)).replace(second=0, microsecond=0)
    except ValueError:
        raise _field_error(path, "Give a time as HH:MM, e.g. 09:00.") from None


def zone_clean(value) -> str:
    """An IANA time zone name (Europe/London), or a field error."""
    name = str(value or "").strip()
    if name not in available_timezones():
        raise _field_error("time_zone", f"{name!r} is not a time zone; e.g. Europe/London.")
    try:
        ZoneInfo(name)
    except ZoneInfoNotFoundError:
        raise _field_error("time_zone", f"{name!r} is not a time zone.") from None
    return name


@service_transaction(durable=True)
def change_hours_set(
    *, environment: Environment, days, opens_at=None, closes_at=None, time_zone="UTC", actor
) -> ChangeHours | None:
    """Set when changes may go live in `environment`: `days` (0 Monday … 6 Sunday) from
    `opens_at` to `closes_at` local time in `time_zone`; closing at or before opening runs
    past midnight. No days: any time (the hours are removed)."""
    check_user_can(actor, Capability.MANAGE_CATALOG, target=environment)
    if not isinstance(days, list | tuple) or any(
        not isinstance(d, int) or isinstance(d, bool) or not 0 <= d <= 6 for d in days
    ):
        raise _field_error("days", "Days are numbers 0 (Monday) to 6 (Sunday).")
    current = ChangeHours.objects.select_for_update().filter(environment=environment).first()
    before = change_hours_state(current)
    if not days:
        if current is not None:
            current.delete()
        hours = None
    else:
        opens = _time(opens_at, path="opens_at")
        closes = _time(closes_at, path="closes_at")
        if opens == closes:
            raise _field_error("closes_at", "Hours that close when they open are never open.")
        zone = zone_clean(time_zone)
        hours = current or ChangeHours(environment=environment)
        hours.days = sorted(set(days))
        hours.opens_at, hours.closes_at, hours.time_zone = opens, closes, zone
        hours.updated_by, hours.updated_at = actor_label(actor), clock.now()
        hours.save()
    after = change_hours_state(hours)
    if after != before:
        audit_record(
            actor=actor,
            action=AuditAction.CHANGE_HOURS_SET,
            target=environment,
            before=before,
            after=after,
        )
    return hours


def freeze_break_glass_state(glass: FreezeBreakGlass) -> dict:
    return {
        "id": glass.pk,
        "environment": glass.environment.key,
        "reason": glass.reason,
        "started_by": glass.started_by,
        "started_at": glass.started_at.isoformat(),
        "ends_at": glass.ends_at.isoformat(),
        "ended_at": glass.ended_at.isoformat() if glass.ended_at else None,
    }


@service_transaction(durable=True)
def freeze_break_glass_start(
    *, environment: Environment, reason: str, minutes: int, actor
) -> FreezeBreakGlass:
    """Let go-lives through `environment`'s freezes and change hours for `minutes` (at most
    FREEZE_BREAK_GLASS_MAX_MINUTES), saying why: one admin, signed in recently, audited; what
    goes live meanwhile is marked on the release history."""
    check_user_can(actor, Capability.MANAGE_CATALOG, target=environment)
    longest = settings.FREEZE_BREAK_GLASS_MAX_MINUTES
    if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= longest:
        raise _field_error("minutes", f"A freeze break-glass lasts 1 to {longest} minutes.")
    reason = reason_clean(
        reason,
        ask="Say why changes must go live during the freeze (recorded in the audit log).",
    )
    require_recent_authentication(actor, action="let changes through a freeze (break-glass)")
    now = clock.now()
    glass = FreezeBreakGlass.objects.create(
        environment=environment,
        reason=reason,
        started_by=actor_label(actor),
        started_at=now,
        ends_at=now + timedelta(minutes=minutes),
    )
    audit_record(
        actor=actor,
        action=AuditAction.FREEZE_BREAK_GLASS_START,
        target=environment,
        after=freeze_break_glass_state(glass),
    )
    return glass


@service_transaction(durable=True)
def freeze_break_glass_end(*, environment: Environment, actor) -> FreezeBreakGlass:
    """End the freeze break-glass in force before its time, audited."""
    check_user_can(actor, Capability.MANAGE_CATALOG, target=environment)
    glass = freeze_break_glass_at(environment)
    if glass is None:
        raise NotFound(f"No freeze break-glass is in force in {environment.key}.")
    before = freeze_break_glass_state(glass)
    glass.ended_at, glass.ended_by = clock.now(), actor_label(actor)
    glass.save(update_fields=["ended_at", "ended_by"])
    audit_record(
        actor=actor,
        action=AuditAction.FREEZE_BREAK_GLASS_END,
        target=environment,
        before=before,
        after=freeze_break_glass_state(glass),
    )
    return glass
