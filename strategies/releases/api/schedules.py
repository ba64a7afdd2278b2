"""Go-lives scheduled for a time (create, list, cancel) and an environment's calendar: its
freeze windows, change hours and freeze break-glass (docs/schedules-and-freezes.md)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.kernel.errors import NotFound
from console.kernel.policy import Capability, Everywhere, refuse, requires
from strategies.catalog.selectors import environment_get
from strategies.documents import selectors as documents
from strategies.releases.api.common import READ_ERRORS, TAGS, WRITE_ERRORS, _parse
from strategies.releases.models import ScheduledGoLive
from strategies.releases.selectors.calendar import (
    calendar_summary,
    change_hours_of,
    freeze_windows_of,
)
from strategies.releases.serializers.schedules import (
    CalendarSerializer,
    ChangeHoursRequest,
    ChangeHoursSerializer,
    FreezeBreakGlassRequest,
    FreezeBreakGlassSerializer,
    FreezeWindowRequest,
    FreezeWindowSerializer,
    ScheduleCancelRequest,
    ScheduleRequest,
    ScheduleSerializer,
)
from strategies.releases.services import calendar, schedules


@extend_schema(
    summary="Schedule a publish or a rollout start for a time",
    description="Judged again at its time as you: it goes live (or asks for approval), or "
    "ends refused with the reason. 400 `in_the_past`, `frozen`, `outside_change_hours` "
    "(at `run_at`), `not_schedulable` (it could not go live at any time as things are).",
    request=ScheduleRequest,
    responses={201: ScheduleSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.VIEW_CONFIG)  # the service checks the right to publish there
def schedule_create(request, agent, document, environment):
    data = _parse(request, ScheduleRequest)
    doc = documents.document_get(agent=request.agent, key=document)
    planned = schedules.scheduled_golive_create(
        version=documents.version_get(document=doc, number=data["version"]),
        environment=environment_get(key=environment),
        actor=request.user,
        run_at=data["run_at"],
        kind=data["kind"],
        plan=data.get("plan", "staged"),
        unit=data["unit"],
        reason=data["reason"],
    )
    return Response(schedules.schedule_state(planned), status=201)


@extend_schema(
    summary="The agent's go-lives still scheduled, soonest first",
    responses={200: ScheduleSerializer(many=True), **READ_ERRORS},
    tags=TAGS,
)
@api_view(["GET"])
@requires(Capability.VIEW_CONFIG)
def schedule_list(request, agent):
    rows = ScheduledGoLive.objects.filter(
        document__agent=request.agent, state__in=ScheduledGoLive.OPEN_STATES
    ).select_related("document__agent", "environment", "version", "requested_by", "rollout")
    return Response([schedules.schedule_state(row) for row in rows])


@extend_schema(
    summary="Cancel a scheduled go-live (yours, or as an admin)",
    request=ScheduleCancelRequest,
    responses={200: ScheduleSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.VIEW_CONFIG)  # the service allows the requester or an admin
def schedule_cancel(request, agent, pk: int):
    data = _parse(request, ScheduleCancelRequest)
    planned = ScheduledGoLive.objects.filter(pk=pk, document__agent=request.agent).first()
    if planned is None:
        refuse(
            NotFound("No such scheduled go-live."),
            user=request.user,
            capability=Capability.VIEW_CONFIG,
        )
    cancelled = schedules.scheduled_golive_cancel(
        schedule=planned, actor=request.user, reason=data["reason"]
    )
    return Response(schedules.schedule_state(cancelled))


def calendar_state(environment) -> dict:
    summary = calendar_summary(environment)
    return {
        "environment": environment.key,
        "frozen_until": summary.frozen_until,
        "freeze_reason": summary.freeze_reason,
        "hours_open": summary.hours_open,
        "hours_next_open": summary.hours_next_open,
        "change_hours": calendar.change_hours_state(change_hours_of(environment)),
        "freeze_windows": [calendar.freeze_window_state(w) for w in freeze_windows_of(environment)],
        "break_glass": calendar.freeze_break_glass_state(summary.break_glass)
        if summary.break_glass
        else None,
    }


@extend_schema(
    summary="An environment's calendar: freeze windows to come, change hours, break-glass",
    responses={200: CalendarSerializer, **READ_ERRORS},
    tags=TAGS,
)
@api_view(["GET"])
@requires(Capability.VIEW_CONFIG, agent_kwarg=None, anywhere=True)
def calendar_detail(request, environment):
    return Response(CalendarSerializer(calendar_state(environment_get(key=environment))).data)


@extend_schema(
    summary="Add a freeze window (nothing but a rollback goes live inside it)",
    request=FreezeWindowRequest,
    responses={201: FreezeWindowSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Everywhere(Capability.MANAGE_CATALOG), agent_kwarg=None)
def freeze_window_create(request, environment):
    data = _parse(request, FreezeWindowRequest)
    window = calendar.freeze_window_create(
        environment=environment_get(key=environment), actor=request.user, **data
    )
    return Response(calendar.freeze_window_state(window), status=201)


@extend_schema(
    summary="Remove a freeze window",
    request=None,
    responses={204: None, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["DELETE"])
@requires(Everywhere(Capability.MANAGE_CATALOG), agent_kwarg=None)
def freeze_window_delete(request, environment, pk: int):
    calendar.freeze_window_delete(
        window_id=pk, environment=environment_get(key=environment), actor=request.user
    )
    return Response(status=204)


@extend_schema(
    summary="Set the change hours (no days: changes at any time)",
    request=ChangeHoursRequest,
    responses={200: ChangeHoursSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["PUT"])
@requires(Everywhere(Capability.MANAGE_CATALOG), agent_kwarg=None)
def change_hours_put(request, environment):
    data = _parse(request, ChangeHoursRequest)
    hours = calendar.change_hours_set(
        environment=environment_get(key=environment), actor=request.user, **data
    )
    return Response(calendar.change_hours_state(hours))


@extend_schema(
    summary="Start a freeze break-glass: go-lives pass the freeze for some minutes (audited)",
    request=FreezeBreakGlassRequest,
    responses={201: FreezeBreakGlassSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Everywhere(Capability.MANAGE_CATALOG), agent_kwarg=None)
def freeze_break_glass_start(request, environment):
    data = _parse(request, FreezeBreakGlassRequest)
    glass = calendar.freeze_break_glass_start(
        environment=environment_get(key=environment), actor=request.user, **data
    )
    return Response(calendar.freeze_break_glass_state(glass), status=201)


@extend_schema(
    summary="End the freeze break-glass in force",
    request=None,
    responses={200: FreezeBreakGlassSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Everywhere(Capability.MANAGE_CATALOG), agent_kwarg=None)
def freeze_break_glass_end(request, environment):
    glass = calendar.freeze_break_glass_end(
        environment=environment_get(key=environment), actor=request.user
    )
    return Response(calendar.freeze_break_glass_state(glass))
