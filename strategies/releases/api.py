"""Operator API for releases, approvals and promotions (/api/v1/). Thin: parse strictly, ask
the policy (`@requires`), call the same services as the pages, answer. A change that went
live answers 200 with the release; one that waits for a second person 202 with the request.
Errors come out in the shared shape (console/kernel/errors.py)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.access.api import OperatorPagination, paginated
from console.kernel.api_schema import ErrorSerializer
from console.kernel.errors import NotFound
from console.kernel.limits import check_request_size
from console.kernel.policy import Capability, agents_where, refuse, requires
from strategies.catalog.selectors import environment_get, environment_list
from strategies.documents import selectors as documents
from strategies.releases import selectors
from strategies.releases import services as releases
from strategies.releases.serializers import (
    AgentReleasesSerializer,
    ApprovalDecisionSerializer,
    ApprovalFilter,
    ApprovalSerializer,
    ApproveRequest,
    HistoryFilter,
    PromoteRequest,
    PromotionSerializer,
    PublishRequest,
    RejectRequest,
    ReleaseEventSerializer,
    ReleaseOutcomeSerializer,
    RollbackRequest,
    RolloutActionRequest,
    RolloutFilter,
    RolloutOutcomeSerializer,
    RolloutSerializer,
    RolloutStartRequest,
    ShadowOutcomeSerializer,
    ShadowPromoteRequest,
    ShadowStartRequest,
    ShadowStopRequest,
    WithdrawRequest,
)
from strategies.releases.services import (
    approval_state,
    release_state,
    rollout_state,
    shadow_state,
)

# A release request is a few small fields; anything near this is not one.
BODY_LIMIT = 16 * 1024
TAGS = ["releases"]


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


READ_ERRORS = {
    400: _error("Unknown or invalid filter."),
    403: _error("Not allowed on this agent."),
    404: _error("Unknown, or outside your scope."),
}
WRITE_ERRORS = {
    400: _error("Invalid input: unknown field, not publishable, not a rollback target."),
    403: _error("Not allowed (e.g. your own request, a sensitive section)."),
    404: _error("Unknown agent, document, version or environment, or outside your scope."),
    409: _error(
        "Stale revision, already live, already decided or a request already waits; "
        "`unreviewed_version`: a rollback to a version that went live unreviewed (during a "
        "break-glass). `current` holds the current state."
    ),
    413: _error("Body larger than 16 KiB."),
}


def _parse(request, serializer_class) -> dict:
    """Size limit first (nothing parsed for an oversize body), then the strict serializer."""
    check_request_size(request, BODY_LIMIT, what="A release request")
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _query(request, serializer_class) -> dict:
    serializer = serializer_class(data=request.query_params.dict())
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _page(request, items, serialize) -> Response:
    paginator = OperatorPagination()  # at most OperatorPagination.max_limit rows
    page = paginator.paginate_queryset(items, request)
    return paginator.get_paginated_response([serialize(item) for item in page])


def _outcome(outcome) -> Response:
    """200 {release} when it went live, 202 {approval} when it waits for a second person."""
    if outcome.approval is not None:
        return Response({"approval": approval_state(outcome.approval)}, status=202)
    return Response({"release": release_state(outcome.release)})


def _version(document, number):
    if number == "draft":
        draft = documents.draft_get(document=document)
        if draft is None:
            raise NotFound(f"{document.key} has no open draft.", code="no_draft")
        return draft
    return documents.version_get(document=document, number=number)


# --- what is live --------------------------------------------------------------------------------
@extend_schema(
    summary="What is live per document × environment, and the requests that wait",
    responses={200: AgentReleasesSerializer, **READ_ERRORS},
    tags=TAGS,
)
@api_view(["GET"])
@requires(Capability.VIEW_CONFIG)
def release_list(request, agent):
    rows = selectors.release_grid(user=request.user, agent=request.agent)
    return Response(
        {
            "agent": request.agent.key,
            "environments": [
                {
                    "key": env.key,
                    "name": env.name,
                    "position": env.position,
                    "protected": env.protected,
                    "rollback_needs_approval": env.rollback_needs_approval,
                }
                for env in environment_list()
            ],
            "documents": [
                {
                    "key": row.document.key,
                    "kind": row.document.kind,
                    "latest_version": row.latest.number if row.latest else None,
                    "releases": {
                        cell.environment.key: _release_out(row.document, cell) for cell in row.cells
                    },
                    "shadows": {
                        cell.environment.key: _shadow_out(row.document, cell) for cell in row.cells
                    },
                }
                for row in rows
            ],
            "pending": [
                approval_state(a) for a in selectors.pending_approvals(agents=[request.agent])
            ],
        }
    )


def _release_out(document, cell) -> dict | None:
    if cell.release is None:
        return None
    release = cell.release
    release.document, release.environment = document, cell.environment  # already loaded
    return release_state(release)


def _shadow_out(document, cell) -> dict | None:
    if cell.shadow is None:
        return None
    shadow = cell.shadow
    shadow.document, shadow.environment = document, cell.environment  # already loaded
    return shadow_state(shadow)


@extend_schema(
    operation_id="v1_agents_releases_history_list",  # a page: named as the list it is
    summary="Release history of an agent, newest first",
    parameters=[HistoryFilter],
    responses={200: paginated(ReleaseEventSerializer), **READ_ERRORS},
    tags=TAGS,
)
@api_view(["GET"])
@requires(Capability.VIEW_CONFIG)
def release_history(request, agent):
    params = _query(request, HistoryFilter)
    events = selectors.history_events(
        agent=request.agent,
        document_key=params.get("document", ""),
        environment_key=params.get("environment", ""),
    )
    return _page(request, events, lambda e: ReleaseEventSerializer(e).data)


# --- publish and rollback ------------------------------------------------------------------------
@extend_schema(
    summary="Publish a version (or the open draft) to an environment",
    description="200 with the release when it is live; 202 with the approval request when "
    "the environment is protected.",
    request=PublishRequest,
    responses={200: ReleaseOutcomeSerializer, 202: ReleaseOutcomeSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.VIEW_CONFIG)  # the service checks the right to publish here
def release_publish(request, agent, document, environment):
    data = _parse(request, PublishRequest)
    doc = documents.document_get(agent=request.agent, key=document)
    env = environment_get(key=environment)
    outcome = releases.release_publish(
        version=_version(doc, data["version"]),
        environment=env,
        actor=request.user,
        reason=data["reason"],
        expected_revision=data.get("expected_revision"),
    )
    return _outcome(outcome)


@extend_schema(
    summary="Roll back to a version that was live in this environment before",
    description="200 with the release at once; 202 with the approval request where the "
    "environment's revert policy asks for a second person.",
    request=RollbackRequest,
    responses={200: ReleaseOutcomeSerializer, 202: ReleaseOutcomeSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.ROLLBACK)
def release_rollback(request, agent, document, environment):
    data = _parse(request, RollbackRequest)
    doc = documents.document_get(agent=request.agent, key=document)
    env = environment_get(key=environment)
    release = selectors.live_release(document=doc, environment=env)
    if release is None:
        raise NotFound(f"Nothing of {doc.key} is live in {env.key}: nothing to roll back.")
    outcome = releases.release_rollback(
        release=release,
        to_version=documents.version_get(document=doc, number=data["version"]),
        actor=request.user,
        reason=data["reason"],
        expected_revision=data.get("expected_revision"),
    )
    return _outcome(outcome)


# --- shadow releases ---------------------------------------------------------------------------------
SHADOW_ERRORS = {
    **WRITE_ERRORS,
    400: _error(
        "Invalid input; `not_a_strategy`, `not_frozen`; `not_publishable`: the runtime cannot "
        "serve the version or does not declare shadow support (a `shadow_unsupported` detail)."
    ),
    409: _error(
        "`shadow_running` (one per document and environment), `no_shadow`, `nothing_live`, "
        "`stale_revision`; `current` holds the shadow as it now stands."
    ),
}


@extend_schema(
    summary="Run a version as shadow beside the live one",
    description="The runtime selects with it on the same requests and reports what it would "
    "have chosen; users get only the live version, so no approval is asked, even in a "
    "protected environment. Checked against the environment's manifest like a publish.",
    request=ShadowStartRequest,
    responses={200: ShadowOutcomeSerializer, **SHADOW_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.VIEW_CONFIG)  # the service checks the right to run shadows here
def shadow_start(request, agent, document, environment):
    data = _parse(request, ShadowStartRequest)
    doc = documents.document_get(agent=request.agent, key=document)
    shadow = releases.shadow_start(
        version=documents.version_get(document=doc, number=data["version"]),
        environment=environment_get(key=environment),
        actor=request.user,
        reason=data["reason"],
        expected_revision=data.get("expected_revision"),
    )
    return Response({"shadow": shadow_state(shadow)})


@extend_schema(
    summary="Stop the shadow, saying why",
    request=ShadowStopRequest,
    responses={200: ShadowOutcomeSerializer, **SHADOW_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.VIEW_CONFIG)  # the service checks the right to run shadows here
def shadow_stop(request, agent, document, environment):
    data = _parse(request, ShadowStopRequest)
    shadow = releases.shadow_stop(
        document=documents.document_get(agent=request.agent, key=document),
        environment=environment_get(key=environment),
        actor=request.user,
        reason=data["reason"],
        expected_revision=data.get("expected_revision"),
    )
    return Response({"shadow": shadow_state(shadow)})


@extend_schema(
    summary="Promote the shadow to live (a publish of its version)",
    description="200 with the release when it is live (the shadow stops); 202 with the "
    "approval request when the environment is protected (the shadow runs on until the "
    "request is approved).",
    request=ShadowPromoteRequest,
    responses={200: ReleaseOutcomeSerializer, 202: ReleaseOutcomeSerializer, **SHADOW_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.VIEW_CONFIG)  # the service checks the right to publish here
def shadow_promote(request, agent, document, environment):
    data = _parse(request, ShadowPromoteRequest)
    outcome = releases.shadow_promote(
        document=documents.document_get(agent=request.agent, key=document),
        environment=environment_get(key=environment),
        actor=request.user,
        reason=data["reason"],
        version=data.get("version"),
        expected_revision=data.get("expected_revision"),
    )
    return _outcome(outcome)


# --- promotion ---------------------------------------------------------------------------------------
@extend_schema(
    summary="Publish to the target what is live in the source (one, some or all documents)",
    description="All or nothing. 200 when every changed document went live; 202 when any "
    "waits for approval (one request per changed document in a protected target). Each "
    "document's outcome: published, requested or unchanged.",
    request=PromoteRequest,
    responses={200: PromotionSerializer, 202: PromotionSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.VIEW_CONFIG)  # the service checks the right to publish to the target
def release_promote(request, agent):
    data = _parse(request, PromoteRequest)
    source = environment_get(key=data["source"])
    target = environment_get(key=data["target"])
    chosen = None
    if "documents" in data:
        chosen = [
            documents.document_get(agent=request.agent, key=key)
            for key in dict.fromkeys(data["documents"])
        ]
    outcome = releases.release_promote(
        agent=request.agent,
        source=source,
        target=target,
        documents=chosen,
        actor=request.user,
        reason=data["reason"],
    )
    body = {
        "source": source.key,
        "target": target.key,
        "results": [
            {
                "document": item.document.key,
                "outcome": item.outcome,
                "from_version": item.from_version,
                "to_version": item.to_version,
                "note": item.note,
                "release": release_state(item.release),
                "approval": approval_state(item.approval) if item.approval else None,
            }
            for item in outcome.items
        ],
    }
    return Response(body, status=202 if outcome.requested else 200)


# --- approvals ---------------------------------------------------------------------------------------
VIEWERS = requires(Capability.VIEW_CONFIG, agent_kwarg=None, anywhere=True)
APPROVERS = requires(Capability.APPROVE, agent_kwarg=None, anywhere=True)


def _approval(request, pk: int):
    """The request when its agent is one the caller sees; otherwise it does not exist."""
    approval = selectors.approval_in_scope(
        agents=agents_where(request.user, Capability.VIEW_CONFIG), pk=pk
    )
    if approval is None:
        refuse(
            NotFound("No such approval request."),
            user=request.user,
            capability=Capability.VIEW_CONFIG,
        )
    return approval


@extend_schema(
    operation_id="v1_approvals_list",  # a page: named as the list it is
    summary="Approval requests on the agents you can see, newest first",
    parameters=[ApprovalFilter],
    responses={200: paginated(ApprovalSerializer), **READ_ERRORS},
    tags=TAGS,
)
@api_view(["GET"])
@VIEWERS
def approval_list(request):
    params = _query(request, ApprovalFilter)
    approvals = selectors.approval_list(
        agents=agents_where(request.user, Capability.VIEW_CONFIG),
        status=params.get("status", ""),
        agent_key=params.get("agent", ""),
        environment_key=params.get("environment", ""),
    )
    return _page(request, approvals, approval_state)


@extend_schema(
    summary="One approval request",
    responses={200: ApprovalSerializer, **READ_ERRORS},
    tags=TAGS,
)
@api_view(["GET"])
@VIEWERS
def approval_detail(request, pk: int):
    return Response(approval_state(_approval(request, pk)))


@extend_schema(
    summary="Approve a request (not your own): the version goes live",
    request=ApproveRequest,
    responses={200: ApprovalDecisionSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@APPROVERS
def approval_approve(request, pk: int):
    data = _parse(request, ApproveRequest)
    approval = _approval(request, pk)
    release = releases.approval_approve(
        approval=approval, actor=request.user, note=data.get("note", "")
    )
    approval.refresh_from_db()
    return Response({"approval": approval_state(approval), "release": release_state(release)})


@extend_schema(
    summary="Reject a request (not your own), saying why",
    request=RejectRequest,
    responses={200: ApprovalDecisionSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@APPROVERS
def approval_reject(request, pk: int):
    data = _parse(request, RejectRequest)
    approval = releases.approval_reject(
        approval=_approval(request, pk), actor=request.user, note=data["note"]
    )
    return Response({"approval": approval_state(approval)})


@extend_schema(
    summary="Withdraw your own pending request, saying why",
    request=WithdrawRequest,
    responses={200: ApprovalDecisionSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@VIEWERS
def approval_withdraw(request, pk: int):
    data = _parse(request, WithdrawRequest)
    approval = releases.approval_withdraw(
        approval=_approval(request, pk), actor=request.user, reason=data["reason"]
    )
    return Response({"approval": approval_state(approval)})


# --- staged rollouts (issue 23) ---------------------------------------------------------------------
ROLLOUT_ERRORS = {
    **WRITE_ERRORS,
    400: _error(
        "Invalid input; `invalid_plan` (at its step), `invalid_unit`, `not_a_strategy`, "
        "`not_frozen`; `not_publishable`: the runtime cannot serve the version; "
        "`split_unsupported`: its manifest does not declare split."
    ),
    409: _error(
        "`rollout_active` (one per document and environment), `rollout_finished` (completed, "
        "rolled back or stopped), `rollout_state` (e.g. already paused), `nothing_live`, "
        "`already_live`, `approval_pending`; `current` holds the rollout as it now stands."
    ),
}
ROLLOUT_ACTIONS = releases.ROLLOUT_OPERATOR_ACTIONS


def _rollout(request, pk: int):
    rollout = selectors.rollout_get(agent=request.agent, key=f"ro-{pk}")
    if rollout is None:
        raise NotFound(f"{request.agent.key} has no rollout ro-{pk}.")
    return rollout


@extend_schema(
    operation_id="v1_agents_rollouts_list",
    summary="Staged rollouts of an agent, newest first",
    parameters=[RolloutFilter],
    responses={200: paginated(RolloutSerializer), **READ_ERRORS},
    tags=TAGS,
)
@api_view(["GET"])
@requires(Capability.VIEW_CONFIG)
def rollout_list(request, agent):
    params = _query(request, RolloutFilter)
    rollouts = selectors.rollout_list(
        agent=request.agent,
        state=params.get("state", ""),
        document_key=params.get("document", ""),
        environment_key=params.get("environment", ""),
    )
    return _page(request, rollouts, rollout_state)


@extend_schema(
    summary="One staged rollout: its step, share, bake, guards and evidence",
    responses={200: RolloutSerializer, **READ_ERRORS},
    tags=TAGS,
)
@api_view(["GET"])
@requires(Capability.VIEW_CONFIG)
def rollout_detail(request, agent, pk: int):
    return Response(rollout_state(_rollout(request, pk)))


@extend_schema(
    summary="Roll a version out in steps (a staged rollout)",
    description="201 with the rollout, running at its first step; 202 with it waiting for "
    "approval where the environment is protected (the whole plan is approved once). The "
    "runtime must declare split in its manifest.",
    request=RolloutStartRequest,
    responses={201: RolloutOutcomeSerializer, 202: RolloutOutcomeSerializer, **ROLLOUT_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.VIEW_CONFIG)  # the service checks the right to publish here
def rollout_start(request, agent, document, environment):
    data = _parse(request, RolloutStartRequest)
    doc = documents.document_get(agent=request.agent, key=document)
    env = environment_get(key=environment)
    rollout = releases.rollout_start(
        version=documents.version_get(document=doc, number=data["version"]),
        environment=env,
        actor=request.user,
        plan=data.get("plan") or releases.default_plan(env),
        unit=data["unit"],
        reason=data["reason"],
    )
    waiting = rollout.state == rollout.State.AWAITING_APPROVAL
    return Response({"rollout": rollout_state(rollout)}, status=202 if waiting else 201)


@extend_schema(
    summary="Pause, resume, advance, finish or stop a staged rollout",
    description="pause: hold at its step (runtimes keep its share); resume: run on, the bake "
    "starts again; advance: the next step now; finish: the new version live now; stop: the "
    "live version alone again (a reason is required). Publishing rights here, or the right "
    "to roll back for stop.",
    request=RolloutActionRequest,
    responses={200: RolloutOutcomeSerializer, **ROLLOUT_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.VIEW_CONFIG)  # the service checks the right to act on rollouts here
def rollout_action(request, agent, pk: int, action: str):
    data = _parse(request, RolloutActionRequest)
    rollout = ROLLOUT_ACTIONS[action](
        rollout=_rollout(request, pk), actor=request.user, reason=data["reason"]
    )
    return Response({"rollout": rollout_state(rollout)})


@extend_schema(
    operation_id="v1_agents_rollouts_watch_rollback_create",
    summary="Roll back from a paired watch's warning (one click, no re-analysis)",
    description="The ordinary rollback to the version the completed rollout replaced, its "
    "audit row carrying the watch warning's evidence (counts, bound, request ids). 200 with "
    "the release at once; 202 with the approval request where the environment's revert "
    "policy asks for a second person. Needs the right to roll back.",
    request=RolloutActionRequest,
    responses={
        200: ReleaseOutcomeSerializer,
        202: ReleaseOutcomeSerializer,
        **WRITE_ERRORS,
        409: _error(
            "`watch_ended` (the watch is over), `watch_no_warning` (nothing warned), "
            "`release_changed` (the release no longer serves the rollout's version), "
            "`stale_revision`; `current` holds the rollout as it now stands."
        ),
    },
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.ROLLBACK)
def rollout_watch_rollback(request, agent, pk: int):
    data = _parse(request, RolloutActionRequest)
    outcome = releases.rollout_watch_rollback(
        rollout=_rollout(request, pk), actor=request.user, reason=data["reason"]
    )
    return _outcome(outcome)
