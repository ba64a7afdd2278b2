"""Operator API for standing alerts (docs/alerts.md): an agent's rules, its alerts (history)
and silences. Thin: parse, ask the policy, call one service or selector."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.kernel.api_schema import ErrorSerializer
from console.kernel.limits import check_request_size
from console.kernel.policy import Capability, requires
from strategies.catalog.models import Environment
from traces.alerts import selectors, serializers, services

REQUEST_BYTES = 8 * 1024
TAGS = ["alerts"]
_ERRORS = {
    400: OpenApiResponse(ErrorSerializer, description="Invalid; nothing saved."),
    403: OpenApiResponse(ErrorSerializer),
    404: OpenApiResponse(ErrorSerializer),
}


def _rule_out(rule) -> dict:
    return {**services.rule_state(rule), "level": rule.level, "level_since": rule.level_since}


def _alert_out(alert) -> dict:
    return {
        "id": alert.pk,
        "rule": alert.rule_id,
        "rule_name": alert.rule.name,
        "environment": alert.environment.key,
        "level": alert.level,
        "current_level": alert.current_level,
        "fired_at": alert.fired_at,
        "resolved_at": alert.resolved_at,
        "resolved_because": alert.resolved_because,
        "value": alert.value,
        "threshold": alert.threshold,
        "baseline": alert.baseline,
        "traffic": alert.traffic,
        "window_start": alert.window_start,
        "window_end": alert.window_end,
        "request_ids": alert.request_ids,
        "changes": alert.changes,
        "silenced": alert.silenced,
        "notified_level": alert.notified_level,
        "held": alert.held,
        "links": services.alert_links(alert),
    }


@extend_schema(
    methods=["GET"],
    operation_id="alert_rules_list",
    summary="An agent's alert rules with their standing",
    responses={200: serializers.AlertRuleOut(many=True), **_ERRORS},
    tags=TAGS,
)
@extend_schema(
    methods=["POST"],
    operation_id="alert_rules_create",
    summary="Create an alert rule (Roll back on the agent; audited)",
    description=(
        "A threshold out of range (a rate outside 0..1, a warning not before the alert in the "
        "comparison's direction, a window outside 1..1440 minutes) is refused: 400 "
        "`validation_failed` with each finding at its field, nothing saved."
    ),
    request=serializers.AlertRuleRequest,
    responses={201: serializers.AlertRuleOut, **_ERRORS},
    tags=TAGS,
)
@api_view(["GET", "POST"])
@requires(Capability.VIEW_TRACES)
def alert_rules(request, agent: str):
    if request.method == "GET":
        return Response([_rule_out(r) for r in selectors.rules_of(agent=request.agent)])
    check_request_size(request, REQUEST_BYTES, what="An alert rule")
    serializer = serializers.AlertRuleRequest(data=request.data)
    serializer.is_valid(raise_exception=True)
    values = dict(serializer.validated_data)
    environment = values.pop("environment")
    rule = services.rule_create(
        agent=request.agent, environment=environment, values=values, actor=request.user
    )
    return Response(_rule_out(rule), status=201)


@extend_schema(
    methods=["GET"],
    operation_id="alert_rule_get",
    summary="One alert rule",
    responses={200: serializers.AlertRuleOut, **_ERRORS},
    tags=TAGS,
)
@extend_schema(
    methods=["PATCH"],
    operation_id="alert_rule_update",
    summary="Change an alert rule (Roll back on the agent; audited)",
    description="Only the fields given change. A stale `revision` is refused (409 with the "
    "current state); switching a rule off resolves its open alert.",
    request=serializers.AlertRuleUpdateRequest,
    responses={200: serializers.AlertRuleOut, 409: OpenApiResponse(ErrorSerializer), **_ERRORS},
    tags=TAGS,
)
@api_view(["GET", "PATCH"])
@requires(Capability.VIEW_TRACES)
def alert_rule_detail(request, agent: str, pk: int):
    rule = selectors.rule_get(agent=request.agent, pk=pk)
    if request.method == "GET":
        return Response(_rule_out(rule))
    check_request_size(request, REQUEST_BYTES, what="An alert rule")
    serializer = serializers.AlertRuleUpdateRequest(data=request.data)
    serializer.is_valid(raise_exception=True)
    values = dict(serializer.validated_data)
    revision = values.pop("revision", None)
    rule = services.rule_update(rule=rule, values=values, actor=request.user, revision=revision)
    return Response(_rule_out(rule))


@extend_schema(
    operation_id="alerts_list",
    summary="An agent's alerts, newest first (open and resolved)",
    parameters=[
        OpenApiParameter("environment", str, description="An environment's key."),
        OpenApiParameter("rule", int, description="One rule's alerts."),
        OpenApiParameter("before", int, description="Alerts older than this id (next page)."),
    ],
    responses={200: serializers.AlertOut(many=True), **_ERRORS},
    tags=TAGS,
)
@api_view(["GET"])
@requires(Capability.VIEW_TRACES)
def alerts(request, agent: str):
    environment = None
    if request.GET.get("environment"):
        environment = Environment.objects.filter(key=request.GET["environment"]).first()
    rule = None
    if (request.GET.get("rule") or "").isdigit():
        rule = selectors.rule_get(agent=request.agent, pk=int(request.GET["rule"]))
    before = request.GET.get("before")
    found = selectors.history(
        agent=request.agent,
        environment=environment,
        rule=rule,
        before_id=int(before) if (before or "").isdigit() else None,
    )
    if request.GET.get("environment") and environment is None:
        found = []
    return Response([_alert_out(a) for a in found])


@extend_schema(
    methods=["GET"],
    operation_id="alert_silences_list",
    summary="An agent's silences, newest first",
    responses={200: serializers.AlertSilenceOut(many=True), **_ERRORS},
    tags=TAGS,
)
@extend_schema(
    methods=["POST"],
    operation_id="alert_silences_create",
    summary="Silence alerts (Roll back on the agent; audited)",
    description="Of one rule, or of the agent in one environment or all, until `ends_at`, "
    "with a reason. Silenced alerts are recorded (marked silenced), not sent: held, and "
    "what is still owed is sent at the first evaluation after the silence ends.",
    request=serializers.AlertSilenceRequest,
    responses={201: serializers.AlertSilenceOut, **_ERRORS},
    tags=TAGS,
)
@api_view(["GET", "POST"])
@requires(Capability.VIEW_TRACES)
def alert_silences(request, agent: str):
    if request.method == "GET":
        return Response(
            [services.silence_state(s) for s in selectors.silences_of(agent=request.agent)]
        )
    check_request_size(request, REQUEST_BYTES, what="A silence")
    serializer = serializers.AlertSilenceRequest(data=request.data)
    serializer.is_valid(raise_exception=True)
    silence = services.silence_create(
        agent=request.agent, values=dict(serializer.validated_data), actor=request.user
    )
    return Response(services.silence_state(silence), status=201)


@extend_schema(
    operation_id="alert_silences_lift",
    summary="Lift a silence now (Roll back on the agent; audited)",
    responses={204: None, **_ERRORS},
    tags=TAGS,
)
@api_view(["DELETE"])
@requires(Capability.ROLLBACK)
def alert_silence_detail(request, agent: str, pk: int):
    silence = selectors.silence_get(agent=request.agent, pk=pk)
    services.silence_lift(silence=silence, actor=request.user)
    return Response(status=204)
