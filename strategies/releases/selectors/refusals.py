"""The vocabulary of the go-live judgement's refusals: the codes of its own findings (every
other blocking finding is the target runtime's), the refusal of a request already waiting, and
what the target runtime cannot serve (with the actor's sensitive-section rights, or nobody's).
Beneath `golive` (the judgement) and the publish, shadow and rollout selectors."""

from __future__ import annotations

from context_runtime.findings import Finding, blocking

from console.kernel.policy import sensitive_refusals
from strategies.catalog.selectors import body_findings, sensitive_paths_added
from strategies.releases.models import ApprovalRequest, Release
from strategies.releases.plans import INVALID_PLAN

# --- the publish judgement ----------------------------------------------------------------------
# What `release_publish` would refuse, asked without writing: the publish raises from it, the
# import's plan (strategies.exchange) shows it. Its own findings carry these codes; every other
# finding is the target runtime's (`target_findings`: its manifest, an archived environment, a
# runtime that has not reported yet).
NOT_FOUND = "not_found"  # the agent is out of the user's scope
NOT_ALLOWED = "forbidden"  # the user may not publish to this environment
ALREADY_LIVE = "already_live"
STALE_REVISION = "stale_revision"
SENSITIVE_SECTION = "sensitive_section"  # switched on without the permission
APPROVAL_PENDING = "approval_pending"  # a request already waits here (protected environment)
APPROVAL_REQUIRED = "approval_required"  # protected: a request instead (a flag, not a refusal)
REPLACES_REQUEST = "replaces_request"  # the actor's own waiting publish request gives way (a flag)
UNREVIEWED = "unreviewed"  # break-glass: goes live without the usual approval (a flag)
PREVIEW_REQUIRED = "preview_required"  # the environment requires a recent impact preview
PREVIEW_FEW_TRACES = "preview_few_traces"  # the preview covered few traces (a flag: give a reason)
# The environment requires an external change record and none approved, unexpired, of this
# content exists (issue 34 item 1): the service asks the change system and the go-live waits.
CHANGE_RECORD_REQUIRED = "change_record_required"
# A regression set the environment requires fails (issue 35; traces.regressions answers through
# strategies.documents.regression_hook). Not in JUDGEMENT_CODES on purpose: like what the
# runtime cannot serve, it is raised with every reason as `not_publishable` (400).
REGRESSION_SET_FAILED = "regression_set_failed"
# A shadow's own (`shadow_refusals`); the runtime's refusals are the publish's, plus the
# runtime's declaration of shadow support (`shadow_unsupported`).
NOT_A_STRATEGY = "not_a_strategy"
NOT_FROZEN = "not_frozen"
NOTHING_LIVE = "nothing_live"
SHADOW_RUNNING = "shadow_running"
# A staged rollout's own (`rollout_refusals`); the runtime's are the publish's, plus its
# declaration of split support (`split_unsupported`).
ROLLOUT_ACTIVE = "rollout_active"
INVALID_UNIT = "invalid_unit"
# When changes may go live (`selectors.calendar`): inside a freeze window, outside the
# environment's change hours (refusals, never of a rollback), or let through by a freeze
# break-glass (a flag: marked on the release history).
FROZEN = "frozen"
OUTSIDE_CHANGE_HOURS = "outside_change_hours"
FREEZE_BREAK_GLASS = "freeze_break_glass"
CALENDAR_CODES = (FROZEN, OUTSIDE_CHANGE_HOURS)
JUDGEMENT_CODES = frozenset(
    {
        FROZEN,
        OUTSIDE_CHANGE_HOURS,
        FREEZE_BREAK_GLASS,
        ROLLOUT_ACTIVE,
        INVALID_PLAN,
        INVALID_UNIT,
        NOT_A_STRATEGY,
        NOT_FROZEN,
        NOTHING_LIVE,
        SHADOW_RUNNING,
        PREVIEW_REQUIRED,
        PREVIEW_FEW_TRACES,
        NOT_FOUND,
        NOT_ALLOWED,
        ALREADY_LIVE,
        STALE_REVISION,
        SENSITIVE_SECTION,
        APPROVAL_PENDING,
        APPROVAL_REQUIRED,
        REPLACES_REQUEST,
        UNREVIEWED,
        CHANGE_RECORD_REQUIRED,
    }
)


def is_runtime_finding(finding: Finding) -> bool:
    """A finding of the target runtime (`target_findings`), not one of the judgement's own."""
    return finding.code not in JUDGEMENT_CODES


def request_kind_word(kind: str) -> str:
    return "rollback" if kind == ApprovalRequest.Kind.ROLLBACK else "publish"


def replaced_by_new_request(pending: ApprovalRequest | None, actor, number: int | None) -> bool:
    """A new publish request replaces the one waiting when that one is the same person's own
    publish request for another version (they asked for v3, now they ask for v4): it is
    withdrawn, not a dead end. Someone else's request, a rollback, or the same version asked
    again still waits."""
    return (
        pending is not None
        and pending.kind == ApprovalRequest.Kind.PUBLISH
        and pending.requested_by_id is not None
        and pending.requested_by_id == getattr(actor, "pk", None)
        and pending.version.number != number
    )


def waiting_finding(*, pending: ApprovalRequest | None, document_key: str, environment) -> Finding:
    """A request already waits for this document × environment (at most one may)."""
    what = request_kind_word(pending.kind) if pending else "request"
    whose = (
        f" (v{pending.version.number}, requested by {pending.requested_by})." if pending else "."
    )
    return Finding(
        "",
        APPROVAL_PENDING,
        f"A {what} of {document_key} in {environment.key} already waits for approval{whose}",
    )


def target_refusals(
    *, actor, agent, environment, kind: str, body, live: Release | None, context=None
) -> list[Finding]:
    """What stops this content going live in `environment` whoever asks and whatever waits:
    the target runtime's blocking findings, then the sensitive sections it switches on (against
    what is live there) that `actor` may not enable. An approval checks these again."""
    added = sensitive_paths_added(body, baseline=[live.version.body] if live else [])
    return runtime_refusals(
        kind=kind, body=body, environment=environment, context=context
    ) + sensitive_refusals(actor, agent, added)


def runtime_refusals(*, kind: str, body, environment, context=None) -> list[Finding]:
    """The target runtime's blocking findings for a body (its manifest, an archived
    environment, a runtime that has not reported yet): the part of the judgement that asks
    nobody's rights."""
    return blocking(body_findings(kind=kind, body=body, environment=environment, context=context))
