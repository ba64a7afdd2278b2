"""The publish judgement — what `release_publish` would refuse, asked without writing —
and the preview of what a publish or a rollback would change; what is live and what waits
for a document in an environment, and the versions that may be published."""

from __future__ import annotations

from dataclasses import dataclass

from context_runtime.diff import diff_bodies
from context_runtime.findings import FLAG, Finding, blocking

from console.kernel.policy import publish_refusal, sensitive_refusals
from strategies.catalog.models import Environment
from strategies.catalog.selectors import (
    ValidationContext,
    body_findings,
    environment_list,
    manifest_latest,
    sensitive_paths_added,
    sensitive_sections_on,
)
from strategies.documents.models import Document, Version
from strategies.releases.models import ApprovalRequest, Release
from strategies.releases.plans import INVALID_PLAN
from strategies.releases.preview_hook import preview_finding

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
JUDGEMENT_CODES = frozenset(
    {
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


def publish_refusals(
    *, version: Version, environment: Environment, actor, expected_revision: int | None = None
) -> list[Finding]:
    """Everything `release_publish` would say to putting `version` live in `environment` as
    `actor`, nothing written: its refusals (severity error) in the order it raises them, and,
    for a protected environment, the flag that it asks a second person instead
    (`approval_required`). `expected_revision`: the release revision the caller loaded."""
    document = version.document
    return body_publish_refusals(
        actor=actor,
        agent=document.agent,
        environment=environment,
        document_key=document.key,
        kind=document.kind,
        number=version.number,
        body=version.body,
        live=live_release(document=document, environment=environment),
        pending=pending_for(document=document, environment=environment),
        expected_revision=expected_revision,
    )


def body_publish_refusals(
    *,
    actor,
    agent,
    environment: Environment,
    document_key: str,
    kind: str,
    number: int | None,
    body,
    live: Release | None,
    pending: ApprovalRequest | None,
    expected_revision: int | None = None,
    context: ValidationContext | None = None,
) -> list[Finding]:
    """`publish_refusals` for a body that may not be a version here yet (an import's): `agent`
    None for an agent not created yet, `number` None for a version not created yet; `live` and
    `pending` as read for the document here, `context` to judge many bodies against one
    environment."""
    refusals = []
    rights = publish_refusal(actor, environment, agent)
    if rights is not None:
        refusals.append(rights)
    if live is not None and number is not None and live.version.number == number:
        refusals.append(
            Finding(
                "version",
                ALREADY_LIVE,
                f"{document_key} v{number} is already live in {environment.key}.",
            )
        )
    if expected_revision is not None and (live.revision if live else 0) != expected_revision:
        refusals.append(
            Finding("expected_revision", STALE_REVISION, "The release changed since you loaded it.")
        )
    refusals += target_refusals(
        actor=actor,
        agent=agent,
        environment=environment,
        kind=kind,
        body=body,
        live=live,
        context=context,
    )
    if environment.require_preview and kind == Document.Kind.STRATEGY:
        finding = preview_finding(
            agent=agent, environment=environment, document_key=document_key, body=body, actor=actor
        )
        if finding is not None:
            refusals.append(finding)
    if environment.protected:
        if replaced_by_new_request(pending, actor, number):
            refusals.append(
                Finding(
                    "environment",
                    REPLACES_REQUEST,
                    f"Your waiting request for {document_key} v{pending.version.number} in "
                    f"{environment.key} is withdrawn and replaced by this one.",
                    severity=FLAG,
                )
            )
        elif pending is not None:
            refusals.append(
                waiting_finding(pending=pending, document_key=document_key, environment=environment)
            )
        refusals.append(
            Finding(
                "environment",
                APPROVAL_REQUIRED,
                f"{environment.key} is protected: an approval request is created.",
                severity=FLAG,
            )
        )
    elif environment.relaxed_by_break_glass("protected"):
        refusals.append(unreviewed_finding(environment))
    return refusals


def unreviewed_finding(environment: Environment) -> Finding:
    """The flag of a publish that goes live unreviewed: a break-glass switched approvals off."""
    return Finding(
        "environment",
        UNREVIEWED,
        f"{environment.key} is in break-glass (approvals switched off by "
        f"{environment.break_glass_by}: {environment.break_glass_reason}): this goes live "
        "unreviewed, is marked so and is never offered as a rollback target.",
        severity=FLAG,
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


# --- what is live and what waits; what a publish or a rollback would change ---------------------
def live_release(*, document, environment) -> Release | None:
    return (
        Release.objects.select_related("version", "document__agent", "environment")
        .filter(document=document, environment=environment)
        .first()
    )


def pending_for(*, document, environment) -> ApprovalRequest | None:
    """The request waiting for document × environment (at most one), if any."""
    return (
        ApprovalRequest.objects.select_related("version", "requested_by", "document__agent")
        .filter(document=document, environment=environment, status=ApprovalRequest.Status.PENDING)
        .first()
    )


def target_findings(*, version: Version, environment: Environment) -> list[Finding]:
    """Every finding for `version` against what `environment`'s runtime implements now."""
    return body_findings(kind=version.document.kind, body=version.body, environment=environment)


def publishable_versions(*, document) -> list[Version]:
    return list(document.versions.order_by("-number"))


@dataclass
class ChangePreview:
    """What a publish or rollback of `version` in `environment` would do."""

    version: Version
    environment: Environment
    live: Release | None
    changes: list
    findings: list  # every finding against the target manifest
    blocking: list
    sensitive: list[str]
    manifest_version: int | None
    live_in: list[str]  # environments where this version is live now
    skipped: list[str]  # earlier environments (promotion order) where it is not live


def change_preview(*, version: Version, environment: Environment) -> ChangePreview:
    live = live_release(document=version.document, environment=environment)
    findings = target_findings(version=version, environment=environment)
    live_in = list(
        Release.objects.filter(version=version)
        .order_by("environment__position")
        .values_list("environment__key", flat=True)
    )
    manifest_row = manifest_latest(environment=environment)
    return ChangePreview(
        version=version,
        environment=environment,
        live=live,
        changes=diff_bodies(
            version.document.kind, live.version.body if live else None, version.body
        ),
        findings=findings,
        blocking=blocking(findings),
        sensitive=sensitive_sections_on(version.body)
        if version.document.kind == Document.Kind.PROFILE
        else [],
        manifest_version=manifest_row.version if manifest_row else None,
        live_in=live_in,
        skipped=[
            e.key
            for e in environment_list()
            if e.position < environment.position and e.key not in live_in
        ],
    )
