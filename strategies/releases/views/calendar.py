"""An environment's calendar page (admins): its freeze windows (list, add, remove), its change
hours and the freeze break-glass (start, end). Thin: each form posts to its own URL, calls one
service of `services.calendar` (the API's), and on a refusal the page is shown again with what
was typed and each reason at its field, nothing saved (docs/schedules-and-freezes.md)."""

from __future__ import annotations

from zoneinfo import available_timezones

from django.conf import settings
from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET, require_POST

from console.kernel.errors import ApplicationError
from console.kernel.policy import Capability, Everywhere, requires
from strategies.catalog.selectors import environment_get
from strategies.releases.selectors.calendar import (
    DAY_NAMES,
    calendar_summary,
    change_hours_of,
    freeze_windows_of,
    local_words,
)
from strategies.releases.services import calendar
from strategies.releases.views.scheduling import datetime_from_form

ADMINS = requires(Everywhere(Capability.MANAGE_CATALOG), agent_kwarg=None)
# Each form's fields: a refusal's detail at one of them is shown there, any other at the top.
FORM_FIELDS = {
    "freeze": ("starts_at", "ends_at", "reason"),
    "hours": ("days", "opens_at", "closes_at", "time_zone"),
    "glass": ("reason", "minutes"),
}


def _zones() -> list[str]:
    return sorted(available_timezones())


def _field_errors(form: str, error: ApplicationError) -> dict:
    """{field: [messages]} of one form's refusal; "general" holds what belongs to no field."""
    found: dict[str, list[str]] = {}
    for detail in error.details or []:
        detail = detail if isinstance(detail, dict) else detail.as_dict()
        field = detail.get("path", "")
        field = field if field in FORM_FIELDS[form] else "general"
        found.setdefault(field, []).append(detail["message"])
    if not found:
        found["general"] = [error.message]
    elif not any(error.message in m for messages_ in found.values() for m in messages_):
        # The refusal's own words ("Say why nothing may go live then") before the field's.
        next(iter(found.values())).insert(0, error.message)
    return found


def _page(request, environment, *, form: str = "", error=None, values=None) -> TemplateResponse:
    summary = calendar_summary(environment)
    hours = change_hours_of(environment)
    zone = summary.time_zone
    hours_values = {
        "days": list(hours.days) if hours else [],  # none ticked: any time, as now
        "opens_at": f"{hours.opens_at:%H:%M}" if hours else "09:00",
        "closes_at": f"{hours.closes_at:%H:%M}" if hours else "17:00",
        "time_zone": zone,
    }
    forms = {"freeze": {}, "hours": hours_values, "glass": {"minutes": "60"}}
    if form:
        forms[form] = values or {}
    context = {
        "environment": environment,
        "summary": summary,
        "next_allowed_words": local_words(summary.next_allowed, zone)
        if summary.next_allowed
        else "",
        "windows": freeze_windows_of(environment),
        "hours": hours,
        "zone": zone,
        "zones": _zones(),
        "days": [
            (number, name, number in [int(d) for d in forms["hours"].get("days", [])])
            for number, name in enumerate(DAY_NAMES)
        ],
        "values": forms,
        "errors": {form: _field_errors(form, error)} if error is not None else {},
        "max_minutes": settings.FREEZE_BREAK_GLASS_MAX_MINUTES,
    }
    status = error.status if error is not None else 200
    return TemplateResponse(request, "releases/calendar.html", context, status=status)


def _back(environment):
    return redirect("environment-calendar", environment=environment.key)


@require_GET
@ADMINS
def calendar_page(request, environment):
    return _page(request, environment_get(key=environment))


@require_POST
@ADMINS
def calendar_freeze_add(request, environment):
    environment = environment_get(key=environment)
    zone = calendar_summary(environment).time_zone
    values = {k: request.POST.get(k, "") for k in FORM_FIELDS["freeze"]}
    try:
        window = calendar.freeze_window_create(
            environment=environment,
            starts_at=datetime_from_form(values["starts_at"], zone, path="starts_at"),
            ends_at=datetime_from_form(values["ends_at"], zone, path="ends_at"),
            reason=values["reason"],
            actor=request.user,
        )
    except ApplicationError as error:
        return _page(request, environment, form="freeze", error=error, values=values)
    messages.success(
        request,
        f"{environment.key} is frozen from {local_words(window.starts_at, zone)} to "
        f"{local_words(window.ends_at, zone)}: nothing but a rollback goes live then.",
    )
    return _back(environment)


@require_POST
@ADMINS
def calendar_freeze_remove(request, environment, pk: int):
    environment = environment_get(key=environment)
    calendar.freeze_window_delete(window_id=pk, environment=environment, actor=request.user)
    messages.success(request, f"Freeze window removed: {environment.key} is no longer held by it.")
    return _back(environment)


@require_POST
@ADMINS
def calendar_hours_set(request, environment):
    environment = environment_get(key=environment)
    values = {
        "days": request.POST.getlist("days"),
        "opens_at": request.POST.get("opens_at", ""),
        "closes_at": request.POST.get("closes_at", ""),
        "time_zone": request.POST.get("time_zone", ""),
    }
    try:
        days = [int(day) for day in values["days"]]
    except ValueError:
        days = values["days"]  # the service refuses it at `days`, in its words
    try:
        hours = calendar.change_hours_set(
            environment=environment,
            days=days,
            opens_at=values["opens_at"],
            closes_at=values["closes_at"],
            time_zone=values["time_zone"],
            actor=request.user,
        )
    except ApplicationError as error:
        values["days"] = [d for d in values["days"] if str(d).isdigit()]
        return _page(request, environment, form="hours", error=error, values=values)
    words = calendar.change_hours_state(hours).get("words", "any time")
    messages.success(request, f"{environment.key} takes changes {words}.")
    return _back(environment)


@require_POST
@ADMINS
def calendar_break_glass_start(request, environment):
    environment = environment_get(key=environment)
    values = {k: request.POST.get(k, "") for k in FORM_FIELDS["glass"]}
    try:
        minutes = int(values["minutes"])
    except ValueError:
        minutes = None  # the service refuses it at `minutes`, saying the range
    try:
        # Without a recent sign-in the service raises ReauthenticationRequired: the middleware
        # asks for the password and sends this form again.
        glass = calendar.freeze_break_glass_start(
            environment=environment, reason=values["reason"], minutes=minutes, actor=request.user
        )
    except ApplicationError as error:
        return _page(request, environment, form="glass", error=error, values=values)
    messages.success(
        request,
        f"Freeze break-glass in {environment.key} until {local_words(glass.ends_at)}: go-lives "
        "pass its freezes and change hours, each marked on the release history.",
    )
    return _back(environment)


@require_POST
@ADMINS
def calendar_break_glass_end(request, environment):
    environment = environment_get(key=environment)
    calendar.freeze_break_glass_end(environment=environment, actor=request.user)
    messages.success(
        request, f"Freeze break-glass ended: {environment.key}'s calendar holds again."
    )
    return _back(environment)
