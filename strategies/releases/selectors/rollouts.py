"""Reads for staged rollouts (issue 23) and their paired watch: the rollouts active, running
or watching, what `rollout_start` would refuse (asked without writing), the start page's
preview, the request ids of a guard's evidence (and the evidence without them, for a reader
who may not see traces) and the actions a person may take."""

from __future__ import annotations

from context_runtime.findings import Finding
from django.db.models import Q, Sum

from console.kernel.policy import user_can_rollout
from strategies.catalog.models import Environment
from strategies.documents.models import Version
from strategies.releases.models import ApprovalRequest, Rollout
from strategies.releases.plans import INVALID_PLAN, TEMPLATES, UNITS, plan_findings
from strategies.releases.selectors.golive import Candidate, Path, go_live_refusals
from strategies.releases.selectors.publish import live_release, pending_for
from strategies.releases.selectors.refusals import INVALID_UNIT, NOTHING_LIVE, ROLLOUT_ACTIVE
from strategies.releases.selectors.shadow import (
    frozen_strategy_refusals,
    judged_preview,
)
from strategies.releases.transitions import ROLLOUT_OPERATOR_ACTIONS, rollout_allows


# --- staged rollouts (issue 23) ------------------------------------------------------------------
def active_rollout(*, document, environment) -> Rollout | None:
    """The rollout active (waiting for approval, running or paused) here, if any."""
    return (
        Rollout.objects.active()
        .select_related("document__agent", "environment", "version", "control_version")
        .filter(document=document, environment=environment)
        .first()
    )


def rollout_get(*, agent, key: str) -> Rollout | None:
    return (
        Rollout.objects.select_related(
            "document__agent", "environment", "version", "control_version"
        )
        .filter(document__agent=agent, key=key)
        .first()
    )


def rollout_of_trace(*, agent_id: int, key: str) -> Rollout | None:
    """The rollout a trace names (its rollout block's id), of the trace's agent only."""
    return (
        Rollout.objects.select_related("version", "control_version")
        .filter(document__agent_id=agent_id, key=key)
        .first()
    )


def rollout_list(*, agent, state: str = "", document_key: str = "", environment_key: str = ""):
    """The rollouts of an agent, newest first, filtered (the API's list and the pages)."""
    rollouts = Rollout.objects.filter(document__agent=agent).select_related(
        "document__agent", "environment", "version", "control_version"
    )
    if state:
        rollouts = rollouts.filter(state=state)
    if document_key:
        rollouts = rollouts.filter(document__key=document_key)
    if environment_key:
        rollouts = rollouts.filter(environment__key=environment_key)
    return rollouts.order_by("-started_at", "-id")


def rollouts_running() -> list[Rollout]:
    """Every running rollout, oldest first: what the evaluator looks at every 30 s."""
    return list(
        Rollout.objects.filter(state=Rollout.State.RUNNING)
        .select_related("document__agent", "environment", "version", "control_version")
        .order_by("started_at", "id")
    )


def rollouts_in(*, agent, environment) -> tuple[list[Rollout], list[Rollout], int]:
    """(the rollouts the runtime applies — running or paused —, the completed ones in their
    paired watch, with their documents and versions, the sum of the revisions of every
    rollout ever here): what the config payload renders and how its ETag's revision counts
    them."""
    rows = Rollout.objects.filter(document__agent=agent, environment=environment)
    applied = list(  # one query for both
        rows.filter(Q(state__in=Rollout.SERVED_STATES) | Q(pk__in=rows.watching().values("pk")))
        .select_related("document", "version", "control_version")
        .order_by("document__key")
    )
    served = [r for r in applied if r.state in Rollout.SERVED_STATES]
    watching = [r for r in applied if r.watching]
    return served, watching, rows.aggregate(total=Sum("revision"))["total"] or 0


def rollouts_watching() -> list[Rollout]:
    """Every rollout in its paired watch, oldest first: what the evaluator looks at."""
    return list(
        Rollout.objects.watching()
        .select_related("document__agent", "environment", "version", "control_version")
        .order_by("ended_at", "id")
    )


def watch_warnings(*, agents=None, document=None, environment=None) -> list[Rollout]:
    """The watches that warned and still run (the release rows and the dashboard show them,
    with their one-click rollback)."""
    rows = Rollout.objects.watching().exclude(watch_warning={})
    if agents is not None:
        rows = rows.filter(document__agent__in=agents)
    if document is not None:
        rows = rows.filter(document=document)
    if environment is not None:
        rows = rows.filter(environment=environment)
    return list(
        rows.select_related(
            "document__agent", "environment", "version", "control_version"
        ).order_by("-ended_at", "-id")
    )


def rollout_refusals(
    *, version: Version, environment: Environment, actor, plan, unit: str
) -> list[Finding]:
    """Everything `rollout_start` would say to rolling `version` out in `environment`,
    nothing written: the go-live judgement of a rollout's start (`golive.Path.ROLLOUT_START`:
    who may, already live, what the runtime cannot serve or split, a required preview, in a
    protected environment the flag that the plan asks a second person first, in a break-glass
    the flag that it goes live unreviewed, a request already waiting), then what a rollout is
    (a frozen strategy replacing a live version, one at a time) and its plan and unit.
    `rollout_refuse` raises them in its order."""
    document = version.document
    live = live_release(document=document, environment=environment)
    active = active_rollout(document=document, environment=environment)
    refusals = go_live_refusals(
        Path.ROLLOUT_START,
        Candidate.of(version),
        environment=environment,
        actor=actor,
        live=live,
        pending=None
        if active is not None
        else pending_for(document=document, environment=environment),
    )
    refusals += frozen_strategy_refusals(
        version,
        not_strategy="roll out in steps; {key} is the agent's profile: publish it.",
        what="a rollout serves",
    )
    if live is None:
        refusals.append(
            Finding(
                "environment",
                NOTHING_LIVE,
                f"Nothing of {document.key} is live in {environment.key}: a rollout replaces "
                "the live version step by step. Publish one first.",
            )
        )
    if active is not None:
        refusals.append(
            Finding(
                "environment",
                ROLLOUT_ACTIVE,
                f"{active.key} (v{active.version.number}) is already "
                f"{active.get_state_display().lower()} for {document.key} in {environment.key}: "
                "one rollout at a time. Finish or stop it first.",
            )
        )
    return refusals + plan_unit_findings(plan, unit)


def plan_unit_findings(plan, unit: str) -> list[Finding]:
    """A plan is a template's name or a list of steps; a unit is one of UNITS."""
    findings = []
    if isinstance(plan, str):
        if plan not in TEMPLATES:
            findings.append(
                Finding(
                    "plan",
                    INVALID_PLAN,
                    f"Unknown plan {plan!r}: {', '.join(TEMPLATES)}, or a list of steps.",
                )
            )
    else:
        findings += plan_findings(plan)
    if unit not in UNITS:
        findings.append(
            Finding("unit", INVALID_UNIT, f"A unit is one of {', '.join(UNITS)}, not {unit!r}.")
        )
    return findings


def rollout_go_live_refusals(rollout, *, path: Path, actor) -> list[Finding]:
    """The judgement of a rollout's next move (`ROLLOUT_STEP`: a larger share; or
    `ROLLOUT_FINISH`: live for all), asked at the moment it happens against the environment
    as it is now: protected since (the plan must have been approved), requiring a preview
    since (one finished at most a day before the rollout started, or later), archived, or a
    runtime that can no longer serve the version or the split."""
    live = live_release(document=rollout.document, environment=rollout.environment)
    approved = rollout.approvals.filter(status=ApprovalRequest.Status.APPROVED).exists()
    return go_live_refusals(
        path,
        Candidate.of(rollout.version),
        environment=rollout.environment,
        actor=actor,
        live=live,
        approved=approved,
        preview_since=rollout.started_at,
    )


def rollout_preview(*, version: Version, environment: Environment, actor, plan, unit="task"):
    """What rolling `version` out in `environment` would do, as the start page shows it."""
    return judged_preview(
        version=version,
        environment=environment,
        refusals=rollout_refusals(
            version=version, environment=environment, actor=actor, plan=plan, unit=unit
        ),
    )


REQUEST_IDS_KEPT = 5


def evidence_request_ids(facts) -> list[str]:
    """The request ids a guard's facts name — its own `request_ids`, then those of the kinds
    it breached, then any — at most five: one click from the rollout page to the trace."""
    facts = facts or {}
    kinds = facts.get("kinds") or {}
    ordered = [facts, *(kinds[k] for k in facts.get("breached") or () if k in kinds)]
    ordered += [entry for entry in kinds.values() if isinstance(entry, dict)]
    found: list[str] = []
    for entry in ordered:
        for request_id in entry.get("request_ids") or ():
            if request_id not in found:
                found.append(request_id)
    return found[:REQUEST_IDS_KEPT]


def _named_request_ids(facts, found: list[str]) -> None:
    if isinstance(facts, dict):
        for key, value in facts.items():
            if key == "request_ids" and isinstance(value, list):
                found.extend(rid for rid in value if rid not in found)
            else:
                _named_request_ids(value, found)
    elif isinstance(facts, list):
        for entry in facts:
            _named_request_ids(entry, found)


def rollout_request_ids(rollout: Rollout) -> list[str]:
    """Every request id the rollout's evidence names — its guards' last evaluation, what
    paused or ended it, its watch's warning: real requests, each with a verdict on it."""
    found: list[str] = []
    for facts in (rollout.guards, rollout.evidence, rollout.watch_warning):
        _named_request_ids(facts, found)
    return found


def without_request_ids(facts):
    """`facts` (a guard's evidence, a warning) with every `request_ids` left out: what a
    reader without the right to see traces gets (docs/rollout-evidence.md)."""
    if isinstance(facts, dict):
        return {k: without_request_ids(v) for k, v in facts.items() if k != "request_ids"}
    if isinstance(facts, list):
        return [without_request_ids(entry) for entry in facts]
    return facts


def rollout_actions(*, user, rollout: Rollout) -> dict[str, bool]:
    """Which operator actions `user` may take on `rollout` now (the page's buttons, the API's
    list): the state table allows it (`transitions.rollout_allows`) and the policy does."""
    return {
        action: rollout_allows(rollout, action)
        and user_can_rollout(user, rollout.environment, rollout.document.agent, action)
        for action in ROLLOUT_OPERATOR_ACTIONS
    }
