"""The refusals the release writes raise, each from one judgement: a publish from
`selectors.publish_refusals` (the go-live judgement's publish, with the same status, code and
message it always had), an approved publish from the go-live judgement at its decision, a
shadow from `selectors.shadow_refusals` (the runtime's part raised as a publish's), a
rollback from `selectors.rollback_targets`."""

from __future__ import annotations

from context_runtime.findings import Finding, blocking

from console.kernel.errors import Conflict, ValidationFailed
from console.kernel.policy import refuse_publish, refuse_sensitive, shadow_refusal
from strategies.catalog.models import Environment
from strategies.documents.models import Version
from strategies.releases.models import Release
from strategies.releases.selectors import (
    ALREADY_LIVE,
    APPROVAL_PENDING,
    NOT_A_STRATEGY,
    NOT_ALLOWED,
    NOT_FOUND,
    NOT_FROZEN,
    NOTHING_LIVE,
    PREVIEW_REQUIRED,
    SENSITIVE_SECTION,
    SHADOW_RUNNING,
    STALE_REVISION,
    is_runtime_finding,
    pending_for,
    rollback_targets,
    unreviewed_versions,
)
from strategies.releases.selectors.golive import Candidate, Path, go_live_refusals
from strategies.releases.selectors.refusals import CALENDAR_CODES
from strategies.releases.services.state import (
    _current,
    _release_state,
    _stale,
    approval_state,
    shadow_conflict,
)


def publish_refuse(
    refusals: list[Finding], *, version: Version, environment: Environment, actor
) -> None:
    """Raise the first of the judgement's refusals, in the order a publish always has: who
    may (404/403), already live (409), stale (409), what the target runtime cannot serve
    (400 not_publishable, every reason), sensitive sections (403), a request already waiting
    (409). Passes when nothing refuses (a flag such as `approval_required` is no refusal)."""
    refused = blocking(refusals)
    if not refused:
        return
    document = version.document
    codes = {finding.code: finding for finding in refused}
    for code in (NOT_FOUND, NOT_ALLOWED):
        refuse_publish(
            codes.get(code),
            user=actor,
            environment=environment,
            agent=document.agent,
            target=document,
        )
    if ALREADY_LIVE in codes:
        raise Conflict(
            codes[ALREADY_LIVE].message,
            code=ALREADY_LIVE,
            extra={"current": _release_state(_current(document, environment))},
        )
    if STALE_REVISION in codes:
        raise _stale(document, environment, codes[STALE_REVISION].message)
    _refuse_target(refused, version=version, environment=environment, actor=actor)
    calendar_refuse(refused)
    if PREVIEW_REQUIRED in codes:
        raise Conflict(
            codes[PREVIEW_REQUIRED].message,
            code=PREVIEW_REQUIRED,
            details=[codes[PREVIEW_REQUIRED].as_dict()],
        )
    if APPROVAL_PENDING in codes:
        pending = pending_for(document=document, environment=environment)
        raise Conflict(
            codes[APPROVAL_PENDING].message,
            code=APPROVAL_PENDING,
            extra={"current": approval_state(pending) if pending else None},
        )


def calendar_refuse(refused: list[Finding], *, extra: dict | None = None) -> None:
    """Raise (409 `frozen` / `outside_change_hours`, every such reason in `details`) when a
    freeze or the change hours hold the go-live now: time, not the request, must change."""
    held = [f for f in refused if f.code in CALENDAR_CODES]
    if held:
        raise Conflict(
            " ".join(f.message for f in held),
            code=held[0].code,
            details=[f.as_dict() for f in held],
            extra=extra,
        )


def shadow_refuse(refusals: list[Finding], *, version: Version, environment, actor) -> None:
    """Raise the first of the shadow judgement's refusals: who may (404/403), not a frozen
    strategy (400), nothing live (409), a shadow already running or a stale revision (409
    with the current shadow), then what the runtime cannot serve or does not declare (400
    not_publishable, every reason, as a publish says it). Passes when nothing refuses."""
    refused = blocking(refusals)
    if not refused:
        return
    document = version.document
    codes = {finding.code: finding for finding in refused}
    for code in (NOT_FOUND, NOT_ALLOWED):
        if code in codes:
            refuse_publish(
                shadow_refusal(actor, environment, document.agent),
                user=actor,
                environment=environment,
                agent=document.agent,
                target=document,
            )
    for code in (NOT_A_STRATEGY, NOT_FROZEN):
        if code in codes:
            raise ValidationFailed(codes[code].message, code=code, details=[codes[code].as_dict()])
    if NOTHING_LIVE in codes:
        raise Conflict(codes[NOTHING_LIVE].message, code=NOTHING_LIVE, extra={"current": None})
    for code in (SHADOW_RUNNING, STALE_REVISION):
        if code in codes:
            raise shadow_conflict(document, environment, codes[code].message, code=code)
    _refuse_target(
        refused, version=version, environment=environment, actor=actor, verb="run as shadow"
    )


def _refuse_target(
    refused: list[Finding], *, version: Version, environment, actor, verb: str = "go live"
) -> None:
    runtime = [f for f in refused if is_runtime_finding(f)]
    if runtime:
        raise ValidationFailed(
            f"{version.document.key} v{version.number} cannot {verb} in {environment.key}: "
            + " ".join(f.message for f in runtime),
            code="not_publishable",
            details=[f.as_dict() for f in runtime],
        )
    refuse_sensitive(
        [f for f in refused if f.code == SENSITIVE_SECTION],
        user=actor,
        agent=version.document.agent,
    )


def check_approved_go_live(*, approval, live: Release | None) -> list[Finding]:
    """The go-live judgement of an approved publish, asked at the moment of the decision
    (`golive.Path.APPROVAL`): refuse (400) a version the target runtime cannot serve now —
    an archived environment serves nothing new — with every reason; (403) sensitive sections
    the requester may not switch on; (409 `preview_required`) where the environment requires
    a preview (since the request, perhaps) and none finished within a day before the request
    or later. Returns the blocking findings it does not raise (`change_record_required`: the
    caller waits for the change system)."""
    version = approval.version
    refused = blocking(
        go_live_refusals(
            Path.APPROVAL,
            Candidate.of(version),
            environment=approval.environment,
            actor=approval.requested_by,
            live=live,
            preview_since=approval.requested_at,
        )
    )
    _refuse_target(
        refused, version=version, environment=approval.environment, actor=approval.requested_by
    )
    calendar_refuse(refused, extra={"current": approval_state(approval)})
    preview = next((f for f in refused if f.code == PREVIEW_REQUIRED), None)
    if preview is not None:
        raise Conflict(
            preview.message,
            code=PREVIEW_REQUIRED,
            details=[preview.as_dict()],
            extra={"current": approval_state(approval)},
        )
    return refused


def check_rollback_target(*, release: Release, to_version: Version) -> None:
    """Refuse (400) a version that was never live in the release's environment, or is live
    there now: a rollback goes back to exactly the version asked for, or nowhere. Refuse (409
    `unreviewed_version`) one that only went live there unreviewed, during a break-glass:
    going back to it would make what nobody reviewed the safe state."""
    if to_version.pk not in {v.pk for v in rollback_targets(release)}:
        if to_version.pk in {v.pk for v in unreviewed_versions(release)}:
            raise Conflict(
                f"v{to_version.number} went live in {release.environment.key} unreviewed, "
                "during a break-glass (without the approval the environment requires), so it "
                "is not a rollback target. Publish it for approval instead, or roll back to a "
                "reviewed version.",
                code="unreviewed_version",
                details=[
                    {
                        "path": "version",
                        "code": "unreviewed_version",
                        "message": "went live unreviewed (break-glass)",
                    }
                ],
                extra={"current": _release_state(release)},
            )
        raise ValidationFailed(
            f"v{to_version.number} was never live in {release.environment.key} (or is live now); "
            "a rollback goes back to a version that was live there before.",
            code="not_a_rollback_target",
            details=[
                {"path": "version", "code": "invalid_choice", "message": "not a previous release"}
            ],
        )
