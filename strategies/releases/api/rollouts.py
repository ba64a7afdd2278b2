"""Staged rollouts (issue 23): the list, one rollout, start, the operator's actions, and the
rollback from a paired watch's warning."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.access.api import paginated
from console.kernel.errors import NotFound
from console.kernel.policy import Capability, requires
from strategies.catalog.selectors import environment_get
from strategies.documents import selectors as documents
from strategies.releases import selectors
from strategies.releases import services as releases
from strategies.releases.api.common import (
    READ_ERRORS,
    TAGS,
    WRITE_ERRORS,
    _error,
    _outcome,
    _page_of,
    _parse,
    _query,
)
from strategies.releases.models import ChangeRecord
from strategies.releases.serializers import (
    ReleaseOutcomeSerializer,
    RolloutActionRequest,
    RolloutFilter,
    RolloutOutcomeSerializer,
    RolloutSerializer,
    RolloutStartRequest,
)
from strategies.releases.services import rollout_state
from strategies.releases.services.change_records import change_record_state
from strategies.releases.services.changes import rollout_start_or_ask

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
    return _page_of(request, rollouts, lambda page: _shown(request, *page))


def _shown(request, *rollouts) -> list[dict]:
    """The rollouts as the caller may read them: the request ids their evidence names only
    with the right to see the agent's traces, and then the look is in the access log (one
    row per response)."""
    ids = releases.rollout_evidence_look(user=request.user, agent=request.agent, rollouts=rollouts)
    return [rollout_state(rollout, request_ids=ids) for rollout in rollouts]


@extend_schema(
    summary="One staged rollout: its step, share, bake, guards and evidence",
    description="The request ids its evidence names (`request_ids` in `guards[].evidence`, "
    "`evidence` and `watch.warning`) only for a caller who may see the agent's traces; "
    "that read is in the access log like every other list of request ids.",
    responses={200: RolloutSerializer, **READ_ERRORS},
    tags=TAGS,
)
@api_view(["GET"])
@requires(Capability.VIEW_CONFIG)
def rollout_detail(request, agent, pk: int):
    return Response(_shown(request, _rollout(request, pk))[0])


@extend_schema(
    summary="Roll a version out in steps (a staged rollout)",
    description="201 with the rollout, running at its first step; 202 with it waiting for "
    "approval where the environment is protected (the whole plan is approved once); 202 with "
    "`change_record` where the environment requires an external change record not approved "
    "yet (the rollout starts once it is). The runtime must declare split in its manifest.",
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
    rollout = rollout_start_or_ask(
        version=documents.version_get(document=doc, number=data["version"]),
        environment=env,
        actor=request.user,
        plan=data.get("plan") or releases.default_plan(env),
        unit=data["unit"],
        reason=data["reason"],
    )
    if isinstance(rollout, ChangeRecord):  # it waits for the external change system
        return Response({"change_record": change_record_state(rollout)}, status=202)
    waiting = rollout.state == rollout.State.AWAITING_APPROVAL
    return Response({"rollout": _shown(request, rollout)[0]}, status=202 if waiting else 201)


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
    return Response({"rollout": _shown(request, rollout)[0]})


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
