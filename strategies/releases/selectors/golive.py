"""The one go-live judgement: may version V go live in environment E now, moved by this person
or by the system, and what must it carry — an approval, a preview, the unreviewed mark.

Every way a version goes live asks it (docs/releases.md, "One go-live judgement"): a publish
(and so a promotion, a config-as-code apply and a shadow's promotion, which are publishes),
the decision of an approval, a rollout's start, each of its moves to a larger share (the
plan's approval, an advance, a step that baked) and its completion, a rollback by hand or
from a watch warning, and a guard's rollback. A deferred go-live — an approval decided later,
a rollout's next step — asks again at the moment it happens, against the environment as it is
then. Where a path differs from a plain publish, the difference is written once, in `RULES`,
with its reason.

The answer is a list of findings: refusals (severity error) in the order the services raise
them, and flags (`approval_required`: a second person first; `unreviewed`: goes live without
the approval the environment normally asks, during a break-glass; `preview_few_traces`: give a
reason). `go_live_outcome` reads the answer as one word.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from context_runtime import canonical
from context_runtime.findings import FLAG, Finding, blocking
from context_runtime.manifest import SPLIT

from console.kernel.audit import SystemActor
from console.kernel.policy import publish_refusal, rollback_needs_approval
from strategies.catalog.selectors import runtime_feature_finding, validation_context
from strategies.documents.models import Document
from strategies.documents.regression_hook import regression_refusals
from strategies.releases.preview_hook import preview_finding
from strategies.releases.selectors.calendar import calendar_findings
from strategies.releases.selectors.changes import change_record_usable, requires_change_record
from strategies.releases.selectors.refusals import (
    ALREADY_LIVE,
    APPROVAL_REQUIRED,
    CHANGE_RECORD_REQUIRED,
    REPLACES_REQUEST,
    STALE_REVISION,
    UNREVIEWED,
    replaced_by_new_request,
    runtime_refusals,
    target_refusals,
    waiting_finding,
)


class Path(StrEnum):
    """The ways a version goes live (a promotion, an apply and a shadow's promotion are
    publishes; a rollback from a watch warning is a rollback)."""

    PUBLISH = "publish"
    APPROVAL = "approval"
    ROLLOUT_START = "rollout_start"
    ROLLOUT_STEP = "rollout_step"
    ROLLOUT_FINISH = "rollout_finish"
    ROLLBACK = "rollback"
    GUARD_ROLLBACK = "guard_rollback"


class Protection(StrEnum):
    """How a path meets the environment's second-person rule."""

    REQUEST = "request"  # protected: an approval request instead (a publish, a rollout's plan)
    GIVEN = "given"  # this is the second person's approval
    PLAN = "plan"  # protected now: the rollout's plan must have been approved
    REVERT = "revert"  # the revert policy: a rollback request instead
    GUARD = "guard"  # guard rollbacks need a person: the rollout pauses instead
    NONE = "none"


@dataclass(frozen=True)
class Rules:
    """What a path must satisfy. `rights`: the judgement asks the actor's right to publish
    there (elsewhere the policy asks: the approver's, the rollback's, the rollout operator's;
    the system has none to ask). `serves`: the environment's runtime must serve the version
    now (an archived environment serves nothing new). `preview`: `require_preview` applies.
    `split`: the runtime must declare `split`. `new_version`: the version must not be live
    there already. `change_record`: where the environment requires an external change record,
    an approved, unexpired one of this content. `calendar`: a freeze or the change hours hold
    it (`selectors.calendar`). `why`: where it differs from a plain publish, and why."""

    rights: bool
    serves: bool
    preview: bool
    protection: Protection
    split: bool = False
    new_version: bool = False
    change_record: bool = False
    calendar: bool = True
    why: str = ""


RULES: dict[Path, Rules] = {
    Path.PUBLISH: Rules(
        rights=True,
        serves=True,
        preview=True,
        protection=Protection.REQUEST,
        new_version=True,
        change_record=True,
        why="The plain publish: every other path is judged as this one at its moment.",
    ),
    Path.APPROVAL: Rules(
        rights=False,
        serves=True,
        preview=True,
        protection=Protection.GIVEN,
        change_record=True,
        why="The approver's right is the policy's (`check_user_can_decide_approval`); the "
        "runtime is asked again with the requester's sensitive-section rights, and the "
        "preview is one finished within a day before the request or later.",
    ),
    Path.ROLLOUT_START: Rules(
        rights=True,
        serves=True,
        preview=True,
        protection=Protection.REQUEST,
        split=True,
        new_version=True,
        change_record=True,
        why="A publish in steps: the runtime must also declare `split`, and the whole plan "
        "is approved once; its change record is asked at the start, its later moves carry it.",
    ),
    Path.ROLLOUT_STEP: Rules(
        rights=False,
        serves=True,
        preview=True,
        protection=Protection.PLAN,
        split=True,
        why="A larger share goes live later than the start was judged: the environment is "
        "asked again as it is now. The operator's right is the policy's "
        "(`check_user_can_rollout`); the guards move it as the system. A preview counts "
        "from a day before the rollout started. A freeze or closed change hours refuse a "
        "person's advance and pause the guards' move, as every refusal of a later move does: "
        "the larger share waits for a person to resume it once changes are allowed again, "
        "rather than the system widening it the moment a freeze ends.",
    ),
    Path.ROLLOUT_FINISH: Rules(
        rights=False,
        serves=True,
        preview=True,
        protection=Protection.PLAN,
        split=True,
        why="As a step: the version goes live for every unit (the runtime still declares "
        "`split`: the completed rollout's paired watch runs on a share of units).",
    ),
    Path.ROLLBACK: Rules(
        rights=False,
        serves=False,
        preview=False,
        protection=Protection.REVERT,
        calendar=False,
        why="The emergency move back to a version that was live and reviewed there: the "
        "runtime served it, no preview is asked, and an archived environment can still be "
        "rolled back. The rollback right and the target are asked by the rollback itself. "
        "No external change record either: an emergency move does not wait for a change board; "
        "and never held by a freeze or the change hours.",
    ),
    Path.GUARD_ROLLBACK: Rules(
        rights=False,
        serves=False,
        preview=False,
        protection=Protection.GUARD,
        calendar=False,
        why="The system ends a rollout on evidence: the version live before stays live, so "
        "nothing new is served; where the environment asks a person for guard rollbacks, "
        "the rollout pauses instead. No external change record: an emergency move.",
    ),
}

# One word for what the judgement said (the table-driven tests compare these).
REFUSED, NEEDS_APPROVAL, LIVE, LIVE_UNREVIEWED = "refused", "approval", "live", "live_unreviewed"


def goes_live_unreviewed(environment, *, path: Path, approved: bool = False) -> bool:
    """The one rule of "unreviewed": the version goes live without the approval the
    environment normally asks for, because a break-glass switched that approval off — a
    publish (or a rollout's completion) while `protected` is relaxed, a rollback while the
    revert policy is. An approved change never is. Marked so, it is never a rollback target."""
    if approved:
        return False
    protection = RULES[path].protection
    if protection in (Protection.REQUEST, Protection.PLAN):
        return environment.relaxed_by_break_glass("protected")
    if protection == Protection.REVERT:
        return environment.relaxed_by_break_glass("rollback_needs_approval")
    return False


def unreviewed_finding(environment) -> Finding:
    """The flag of a change that goes live unreviewed: a break-glass switched approvals off."""
    return Finding(
        "environment",
        UNREVIEWED,
        f"{environment.key} is in break-glass (approvals switched off by "
        f"{environment.break_glass_by}: {environment.break_glass_reason}): this goes live "
        "unreviewed, is marked so and is never offered as a rollback target.",
        severity=FLAG,
    )


@dataclass(frozen=True)
class Candidate:
    """What would go live: a version, or a body that is not a version here yet (an import's:
    `agent` None for an agent not created yet, `number` None for a version not created)."""

    agent: object
    document_key: str
    kind: str
    number: int | None
    body: object

    @classmethod
    def of(cls, version) -> Candidate:
        document = version.document
        return cls(document.agent, document.key, document.kind, version.number, version.body)


def go_live_refusals(
    path: Path,
    candidate: Candidate,
    *,
    environment,
    actor,
    live,
    pending=None,
    expected_revision: int | None = None,
    approved: bool = False,
    preview_since: datetime | None = None,
    context=None,
) -> list[Finding]:
    """Everything that stops `candidate` going live in `environment` by `path` now, and what
    it must carry, nothing written. `live`: the release there now; `pending`: the request
    waiting there; `approved`: a second person approved this change (a rollout's plan);
    `preview_since`: a preview counts from this time on (a deferred go-live: the request's
    or the rollout's start); `context`: to judge many bodies against one environment."""
    rules = RULES[path]
    system = isinstance(actor, SystemActor)
    refusals: list[Finding] = []
    if rules.rights and not system:
        rights = publish_refusal(actor, environment, candidate.agent)
        if rights is not None:
            refusals.append(rights)
    number = candidate.number
    if rules.new_version and live is not None and live.version.number == number:
        refusals.append(
            Finding(
                "version",
                ALREADY_LIVE,
                f"{candidate.document_key} v{number} is already live in {environment.key}.",
            )
        )
    if expected_revision is not None and (live.revision if live else 0) != expected_revision:
        refusals.append(
            Finding("expected_revision", STALE_REVISION, "The release changed since you loaded it.")
        )
    refusals += _served_refusals(
        rules, candidate, environment=environment, actor=actor, live=live, context=context
    )
    if rules.preview and environment.require_preview and candidate.kind == Document.Kind.STRATEGY:
        finding = preview_finding(
            agent=candidate.agent,
            environment=environment,
            document_key=candidate.document_key,
            body=candidate.body,
            actor=actor,
            at=preview_since,
        )
        if finding is not None:
            refusals.append(finding)
    refusals += _regression_set_refusals(path, candidate, environment=environment)
    refusals += _protection_findings(
        path, candidate, environment=environment, actor=actor, pending=pending, approved=approved
    )
    change_record = _change_record_finding(rules, candidate, environment=environment)
    if change_record is not None:
        refusals.append(change_record)
    if rules.calendar:
        refusals += calendar_findings(environment)
    return refusals


def _change_record_finding(rules: Rules, candidate: Candidate, *, environment) -> Finding | None:
    """Where the environment requires an external change record (docs/change-approvals.md),
    the path needs an approved one of this very content whose window is still open; beside,
    never instead of, the second person's approval."""
    if not rules.change_record or not requires_change_record(environment):
        return None
    content_hash = canonical.content_hash(candidate.body)
    if change_record_usable(environment=environment, content_hash=content_hash) is not None:
        return None
    return Finding(
        "environment",
        CHANGE_RECORD_REQUIRED,
        f"{environment.key} requires an approved external change record for this content: "
        "asking to go live sends the change request to the change system, and the go-live "
        "waits for its approval.",
    )


def _regression_set_refusals(path: Path, candidate: Candidate, *, environment) -> list[Finding]:
    """The regression sets `environment` requires must pass (issue 35): a refusal naming each
    failing set and its failing members. A publish, an approval, a rollout's start — not a
    rollback (back to what was live) nor a rollout's later moves (judged at its start)."""
    if path not in (Path.PUBLISH, Path.APPROVAL, Path.ROLLOUT_START):
        return []
    if candidate.kind != Document.Kind.STRATEGY:
        return []
    label = f"v{candidate.number}" if candidate.number is not None else "this version"
    return regression_refusals(
        agent=candidate.agent,
        environment=environment,
        document_key=candidate.document_key,
        body=candidate.body,
        label=label,
    )


def _served_refusals(
    rules: Rules, candidate: Candidate, *, environment, actor, live, context
) -> list[Finding]:
    """What the environment's runtime cannot serve now (an archived environment: nothing new),
    with the actor's sensitive-section rights where a person moves it; and `split` undeclared
    where the path serves a share."""
    if not rules.serves:
        return []
    if rules.split and context is None:
        context = validation_context(environment=environment)
    if isinstance(actor, SystemActor) or actor is None:
        # The system moves only what a person started: sensitive rights were asked then.
        refusals = runtime_refusals(
            kind=candidate.kind, body=candidate.body, environment=environment, context=context
        )
    else:
        refusals = target_refusals(
            actor=actor,
            agent=candidate.agent,
            environment=environment,
            kind=candidate.kind,
            body=candidate.body,
            live=live,
            context=context,
        )
    if rules.split:
        unsupported = runtime_feature_finding(
            environment=environment, feature=SPLIT, context=context
        )
        if unsupported is not None:
            refusals.append(unsupported)
    return refusals


def _protection_findings(
    path: Path, candidate: Candidate, *, environment, actor, pending, approved
) -> list[Finding]:
    """How the path meets the environment's second-person rule (`RULES[path].protection`)."""
    protection = RULES[path].protection
    findings: list[Finding] = []
    if protection == Protection.REQUEST and environment.protected:
        if path == Path.PUBLISH and replaced_by_new_request(pending, actor, candidate.number):
            findings.append(
                Finding(
                    "environment",
                    REPLACES_REQUEST,
                    f"Your waiting request for {candidate.document_key} "
                    f"v{pending.version.number} in {environment.key} is withdrawn and replaced "
                    "by this one.",
                    severity=FLAG,
                )
            )
        elif pending is not None:
            findings.append(
                waiting_finding(
                    pending=pending, document_key=candidate.document_key, environment=environment
                )
            )
        what = (
            "the whole plan waits for a second person's approval, once."
            if path == Path.ROLLOUT_START
            else "an approval request is created."
        )
        findings.append(
            Finding(
                "environment",
                APPROVAL_REQUIRED,
                f"{environment.key} is protected: {what}",
                severity=FLAG,
            )
        )
    elif path == Path.ROLLOUT_START and pending is not None:
        # A rollout waits for no request, protected or not (a rollback request may wait).
        findings.append(
            waiting_finding(
                pending=pending, document_key=candidate.document_key, environment=environment
            )
        )
    elif protection == Protection.PLAN and environment.protected and not approved:
        findings.append(
            Finding(
                "environment",
                APPROVAL_REQUIRED,
                f"{environment.key} is protected now and this rollout's plan was never "
                "approved (it started while approvals were off): it cannot go further alone. "
                "Stop it and start it again — the plan then waits for a second person.",
            )
        )
    elif protection == Protection.REVERT and rollback_needs_approval(environment):
        findings.append(
            Finding(
                "environment",
                APPROVAL_REQUIRED,
                f"{environment.key}'s revert policy asks a second person: a rollback request "
                "is created.",
                severity=FLAG,
            )
        )
    elif protection == Protection.GUARD and environment.guard_rollbacks_need_approval:
        findings.append(
            Finding(
                "environment",
                APPROVAL_REQUIRED,
                f"{environment.key} asks a person to approve guard rollbacks: the rollout "
                "pauses instead.",
                severity=FLAG,
            )
        )
    if goes_live_unreviewed(environment, path=path, approved=approved):
        findings.append(unreviewed_finding(environment))
    return findings


def go_live_outcome(findings: list[Finding]) -> str:
    """The judgement in one word: refused, needs an approval, live, or live unreviewed."""
    if blocking(findings):
        return REFUSED
    codes = {finding.code for finding in findings}
    if APPROVAL_REQUIRED in codes:
        return NEEDS_APPROVAL
    return LIVE_UNREVIEWED if UNREVIEWED in codes else LIVE
