"""Operator API for regression sets: the sets of an agent, their members, and checks — a
strategy body, a version or a configuration file (config as code) against them. Thin: parse
strictly, call the services and selectors the pages call."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.kernel.api_schema import ErrorSerializer
from console.kernel.limits import check_request_size
from console.kernel.policy import Capability, check_user_can_check_regressions, requires
from strategies.exchange.format import MAX_FILE_BYTES
from traces import selectors as trace_selectors
from traces.regressions import junit, selectors, services
from traces.regressions.serializers import (
    CheckOut,
    CheckRequest,
    MemberAddRequest,
    MemberOut,
    RegressionSetCreateRequest,
    RegressionSetOut,
    RegressionSetUpdateRequest,
    RequiredInOut,
    RequiredInRequest,
)

TAGS = ["regressions"]
BODY_LIMIT = 64 * 1024
CHECK_LIMIT = MAX_FILE_BYTES + 64 * 1024


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


ERRORS = {
    400: _error("Invalid input: every mistake at its field, nothing saved."),
    403: _error("You may not do this on this agent."),
    404: _error("Unknown, or outside your scope."),
}


def _set_out(regression_set) -> dict:
    return selectors.set_export(regression_set, regression_set.members.count())


@extend_schema(
    methods=["GET"],
    operation_id="regression_sets_list",
    summary="The agent's regression sets",
    responses={200: RegressionSetOut(many=True), **ERRORS},
    tags=TAGS,
)
@extend_schema(
    methods=["POST"],
    operation_id="regression_sets_create",
    summary="Create a regression set of one of the agent's strategies",
    description="Needs the right to keep requests in regression sets. Audited.",
    request=RegressionSetCreateRequest,
    responses={201: RegressionSetOut, **ERRORS},
    tags=TAGS,
)
@api_view(["GET", "POST"])
@requires(Capability.VIEW_TRACES)
def regression_sets(request, agent: str):
    if request.method == "GET":
        return Response(
            [
                selectors.set_export(s, s.member_count)
                for s in selectors.regression_sets(agent=request.agent)
            ]
        )
    check_request_size(request, BODY_LIMIT, what="A regression set")
    serializer = RegressionSetCreateRequest(data=request.data)
    serializer.is_valid(raise_exception=True)
    created = services.regression_set_create(
        actor=request.user, agent=request.agent, **serializer.validated_data
    )
    return Response(selectors.set_export(created, 0), status=201)


@extend_schema(
    methods=["GET"],
    operation_id="regression_sets_retrieve",
    responses={200: RegressionSetOut, **ERRORS},
    tags=TAGS,
)
@extend_schema(
    methods=["PATCH"],
    operation_id="regression_sets_update",
    summary="Edit a set's name, description, retention or reason",
    description="Send the revision you read: 409 `stale_revision` with the current state when "
    "someone changed it since. A new retention applies to every member. Audited.",
    request=RegressionSetUpdateRequest,
    responses={200: RegressionSetOut, 409: _error("Stale revision."), **ERRORS},
    tags=TAGS,
)
@extend_schema(
    methods=["DELETE"],
    operation_id="regression_sets_delete",
    summary="Delete a set and its members",
    responses={204: None, **ERRORS},
    tags=TAGS,
)
@api_view(["GET", "PATCH", "DELETE"])
@requires(Capability.VIEW_TRACES)
def regression_set_detail(request, agent: str, pk: int):
    found = selectors.regression_set_get(user=request.user, agent=request.agent, pk=pk)
    if request.method == "GET":
        return Response(_set_out(found))
    if request.method == "DELETE":
        services.regression_set_delete(actor=request.user, regression_set=found)
        return Response(status=204)
    check_request_size(request, BODY_LIMIT, what="A regression set")
    serializer = RegressionSetUpdateRequest(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = dict(serializer.validated_data)
    revision = data.pop("revision")
    updated = services.regression_set_update(
        actor=request.user, regression_set=found, revision=revision, changes=data
    )
    return Response(_set_out(updated))


@extend_schema(
    methods=["GET"],
    operation_id="regression_members_list",
    summary="The requests a set keeps",
    description="A look at kept requests: written to the access log (`regression_set.view`).",
    responses={200: MemberOut(many=True), **ERRORS},
    tags=TAGS,
)
@extend_schema(
    methods=["POST"],
    operation_id="regression_members_add",
    summary="Keep a request in the set, with its expectations and a note",
    description="The request must be of the set's agent and strategy and replayable; each "
    "expectation is judged against the version it used and the strategy's current version "
    "(an unknown item, source, reason, status or version: 400 at its field, nothing kept). "
    "The member keeps what a replay needs (never a body) for the set's retention. Audited.",
    request=MemberAddRequest,
    responses={201: MemberOut, 409: _error("Already in the set; or ambiguous id."), **ERRORS},
    tags=TAGS,
)
@api_view(["GET", "POST"])
@requires(Capability.VIEW_TRACES)
def regression_set_members(request, agent: str, pk: int):
    found = selectors.regression_set_get(user=request.user, agent=request.agent, pk=pk)
    if request.method == "GET":
        members = list(selectors.members_of(found))
        services.regression_look_record(
            actor=request.user,
            regression_set=found,
            agent=request.agent,
            detail={"members": len(members), "api": True},
        )
        return Response([selectors.member_export(m) for m in members])
    check_request_size(request, BODY_LIMIT, what="A member")
    serializer = MemberAddRequest(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    trace = trace_selectors.trace_get_visible(
        user=request.user, request_id=data["request_id"], environment=data["environment"]
    )
    member = services.member_add(
        actor=request.user,
        regression_set=found,
        trace=trace,
        expectations=data["expectations"],
        note=data["note"],
    )
    return Response(selectors.member_export(member), status=201)


@extend_schema(
    methods=["GET"],
    operation_id="regression_members_retrieve",
    responses={200: MemberOut, **ERRORS},
    tags=TAGS,
)
@extend_schema(
    methods=["DELETE"],
    operation_id="regression_members_remove",
    summary="Remove a request from its set",
    description="Audited. The last request of a set some environment requires is refused "
    "(409 `last_member_of_required_set`, at `member`; `current.required_in` names where): "
    "empty, the set would check nothing — make it not required there first.",
    responses={
        204: None,
        **ERRORS,
        409: _error("The last request of a set an environment requires: nothing removed."),
    },
    tags=TAGS,
)
@api_view(["GET", "DELETE"])
@requires(Capability.VIEW_TRACES)
def regression_member_detail(request, agent: str, pk: int):
    member = selectors.member_get(agent=request.agent, pk=pk)
    if request.method == "DELETE":
        services.member_remove(actor=request.user, member=member)
        return Response(status=204)
    services.regression_look_record(
        actor=request.user,
        regression_set=member.set,
        agent=request.agent,
        detail={"member": member.request_id, "api": True},
    )
    return Response(selectors.member_export(member))


@extend_schema(
    operation_id="regression_check",
    summary="Check a strategy body, a version or a configuration file against the sets",
    description="Give `file` (a configuration file's text, config as code: each strategy's "
    "draft, or its newest version, against the agent's sets of that strategy), or `strategy` "
    "with `body` or `version`. Per member and expectation: passed, failed (with the recorded "
    "and the checked decisions of the items concerned), or not_checkable (with why: never "
    "passed). With `output: junit` the answer is JUnit XML, as the `regression_check` command "
    "writes it, for a CI job to gate a pull request (errors stay JSON). Read-only; the look "
    "is written to the access log (`regression_set.check`).",
    request=CheckRequest,
    responses={
        (200, "application/json"): CheckOut,
        (200, "application/xml"): OpenApiTypes.STR,
        **ERRORS,
    },
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.VIEW_TRACES)
def regression_check(request, agent: str):
    check_request_size(request, CHECK_LIMIT, what="A check")
    serializer = CheckRequest(data=request.data)
    serializer.is_valid(raise_exception=True)
    check_user_can_check_regressions(request.user, request.agent)
    wanted = dict(serializer.validated_data)
    output = wanted.pop("output")
    found = selectors.check_request(agent=request.agent, **wanted)
    services.regression_look_record(
        actor=request.user,
        checked=True,
        regression_set=None,
        agent=request.agent,
        detail={
            "checked": [c.label for c in found][:20],
            "sets": [c.regression_set.pk for c in found][:50],
            "api": True,
        },
    )
    if output == "junit":
        return HttpResponse(junit.junit_xml(found), content_type="application/xml; charset=utf-8")
    return Response(
        {"outcome": selectors.overall_outcome(found), "sets": [c.as_dict() for c in found]}
    )


@extend_schema(
    methods=["GET"],
    operation_id="regression_sets_required_in_retrieve",
    summary="The environments that require a set to pass",
    responses={200: RequiredInOut, **ERRORS},
    tags=TAGS,
)
@extend_schema(
    methods=["PUT"],
    operation_id="regression_sets_required_in_update",
    summary="Name the environments that require a set to pass before a version goes live",
    description="An environment's rule (the permission to manage agents and environments). "
    "The one go-live judgement then refuses a publish, an approval and a rollout start that "
    "fail the set (`regression_set_failed`). An empty set cannot be required: 400 at "
    "`required_in` (`empty_set`), nothing saved. Audited.",
    request=RequiredInRequest,
    responses={200: RequiredInOut, **ERRORS},
    tags=TAGS,
)
@api_view(["GET", "PUT"])
@requires(Capability.VIEW_TRACES)
def regression_set_required_in(request, agent: str, pk: int):
    found = selectors.regression_set_get(user=request.user, agent=request.agent, pk=pk)
    if request.method == "PUT":
        check_request_size(request, BODY_LIMIT, what="A list of environments")
        serializer = RequiredInRequest(data=request.data)
        serializer.is_valid(raise_exception=True)
        found = services.regression_set_require(
            actor=request.user,
            regression_set=found,
            environments=serializer.validated_data["environments"],
        )
    keys = sorted(found.required_in.values_list("key", flat=True))
    return Response({"set": found.pk, "required_in": keys})
