"""Go-lives scheduled from the pages: the "Schedule for…" part of the publish and rollout
start pages (a local date and time in the environment's zone, the next window the calendar
allows) and the cancel button of the releases page. Through the same services as the API
(`services.schedules`): a refusal is shown at the time field, nothing saved."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from django.contrib import messages
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from console.kernel import clock
from console.kernel.errors import NotFound, ValidationFailed
from console.kernel.policy import Capability, refuse, requires
from strategies.releases.models import ScheduledGoLive
from strategies.releases.selectors.calendar import calendar_summary, local_words
from strategies.releases.services import schedules
from strategies.releases.views.lookups import _overview_url

SCHEDULE_BUTTON = "schedule"  # the value of the form's `when` button that schedules


def wants_schedule(request) -> bool:
    """The form was sent with its "Schedule" button, not its go-live-now one."""
    return request.method == "POST" and request.POST.get("when") == SCHEDULE_BUTTON


def time_typed_for_now(request) -> ValidationFailed | None:
    """A time typed, then the go-live-now button (or Enter in the field): refused, so nothing
    goes live now by mistake; None when the form asks for now without a time."""
    if request.method != "POST" or wants_schedule(request):
        return None
    if not request.POST.get("run_at", "").strip():
        return None
    return ValidationFailed(
        "You gave a time: press the Schedule button to go live then, or clear the time to go "
        "live now.",
        code="ambiguous_when",
    )


def _field_refused(path: str, message: str) -> ValidationFailed:
    return ValidationFailed(
        message, code="invalid", details=[{"path": path, "code": "invalid", "message": message}]
    )


def datetime_from_form(value: str, zone: str, *, path: str = "run_at") -> datetime:
    """A form's datetime-local value, read as a local time in the environment's zone. A
    local time a DST change repeats is read with the earlier offset (zoneinfo's fold=0)."""
    value = (value or "").strip()
    if not value:
        raise _field_refused(path, "Give a date and time.")
    try:
        local = datetime.fromisoformat(value)
    except ValueError:
        raise _field_refused(path, "Give a date and time as YYYY-MM-DD HH:MM.") from None
    if local.tzinfo is not None:  # not what the browser sends, but a time with its offset holds
        return local
    return local.replace(tzinfo=ZoneInfo(zone))


def schedule_context(request, environment, *, error=None) -> dict:
    """The "Schedule for…" part of a go-live page: the environment's zone, the window the
    calendar allows next, what was typed and, when refused, why (at the field)."""
    summary = calendar_summary(environment)
    zone = summary.time_zone
    now = clock.now()
    allowed = summary.next_allowed
    if allowed is None:
        next_words = "none within a year (a freeze without end)"
    elif allowed <= now:
        next_words = f"now (change hours: {summary.hours})"
    else:
        next_words = f"{local_words(allowed, zone)} (change hours: {summary.hours})"
    errors = []
    if error is not None:
        details = [d if isinstance(d, dict) else d.as_dict() for d in (error.details or [])]
        errors = [error.message] + [
            d["message"] for d in details if d.get("message") and d["message"] not in error.message
        ]
    return {
        "schedule_zone": zone,
        "schedule_min": f"{now.astimezone(ZoneInfo(zone)):%Y-%m-%dT%H:%M}",
        "schedule_next": next_words,
        "schedule_next_at": allowed if allowed and allowed > now else None,
        "schedule_frozen_until": summary.frozen_until,
        "schedule_value": request.POST.get("run_at", "") if request.method == "POST" else "",
        "schedule_errors": errors,
        "schedule_error_code": getattr(error, "code", ""),
    }


def schedule_from_form(request, *, version, environment, kind, plan=None, unit="task"):
    """Create the ScheduledGoLive the form asks for, through the API's service; a refusal
    (past, in a freeze, outside the change hours, no right, cannot go live) is raised."""
    zone = calendar_summary(environment).time_zone
    planned = schedules.scheduled_golive_create(
        version=version,
        environment=environment,
        actor=request.user,
        run_at=datetime_from_form(request.POST.get("run_at", ""), zone),
        kind=kind,
        plan=plan,
        unit=unit,
        reason=request.POST.get("reason", ""),
    )
    what = "the rollout of" if kind == ScheduledGoLive.Kind.ROLLOUT_START else "the publish of"
    messages.success(
        request,
        f"Scheduled {what} {version.document.key} v{version.number} in {environment.key} for "
        f"{local_words(planned.run_at, zone)}. It is judged again then, as you: it goes live "
        "(or asks for approval) or is refused with the reason, and you are told.",
    )
    return planned


@require_POST
@requires(Capability.VIEW_CONFIG)  # the service allows the requester or an admin
def schedule_cancel(request, agent, pk: int):
    """Cancel a go-live still scheduled (the releases page's button), audited with the
    reason given in its confirmation."""
    planned = (
        ScheduledGoLive.objects.select_related("document__agent", "environment", "version")
        .filter(pk=pk, document__agent=request.agent)
        .first()
    )
    if planned is None:
        refuse(
            NotFound("No such scheduled go-live."),
            user=request.user,
            capability=Capability.VIEW_CONFIG,
        )
    # A refusal (not the requester nor an admin: 403; already run: 409) is the error page.
    schedules.scheduled_golive_cancel(
        schedule=planned, actor=request.user, reason=request.POST.get("reason", "")
    )
    messages.success(
        request,
        f"Cancelled: {planned.document.key} v{planned.version.number} will not go live in "
        f"{planned.environment.key} at its time.",
    )
    return redirect(_overview_url(request.agent))
