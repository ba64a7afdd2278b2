"""Writes for releases: publish, approvals, rollback, manifests reported by runtimes,
runtime token revocation and webhooks. One transaction and one audit row per action.

Every move of a release pointer goes through `_release_move`: a conditional UPDATE on the
release revision (or, for the first publish, an INSERT guarded by the unique constraint).
Of two concurrent changes exactly one wins; the other gets 409 with the current state. Each
winning change appends exactly one ReleaseEvent with the revision it produced, re-renders
the runtime payload and queues the webhooks, all in the same transaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from context_runtime.findings import blocking
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from console.audit import actor_label, audit_record
from console.errors import Conflict, ValidationFailed
from console.policy import (
    check_user_can_decide_approval,
    check_user_can_enable_sensitive,
    check_user_can_publish_to,
    check_user_can_roll_back,
    check_user_can_withdraw_approval,
    service_transaction,
)
from console.reasons import reason_clean
from console.writes import create_or_refuse, update_or_refuse
from strategies.catalog.models import Environment
from strategies.catalog.selectors import sensitive_paths_added
from strategies.delivery import config as runtime_config
from strategies.delivery import webhooks
from strategies.documents.models import Document, Version
from strategies.documents.services import version_freeze
from strategies.releases.models import ApprovalRequest, Release, ReleaseEvent
from strategies.releases.selectors import rollback_targets, target_findings


def _release_state(release: Release | None) -> dict | None:
    if release is None:
        return None
    return {
        "document": release.document.key,
        "environment": release.environment.key,
        "version": release.version.number,
        "revision": release.revision,
        "updated_by": release.updated_by,
        "updated_at": release.updated_at.isoformat() if release.updated_at else None,
    }


def _current(document: Document, environment: Environment) -> Release | None:
    return (
        Release.objects.select_related("document", "environment", "version")
        .filter(document=document, environment=environment)
        .first()
    )


def _stale(document, environment, message: str) -> Conflict:
    return Conflict(
        message,
        code="stale_revision",
        extra={"current": _release_state(_current(document, environment))},
    )


# --- validation against the target environment -------------------------------------------------
def check_publishable(*, version: Version, environment: Environment, actor) -> None:
    """Refuse (400) a version the target runtime cannot serve, with every reason."""
    errors = blocking(target_findings(version=version, environment=environment))
    if errors:
        raise ValidationFailed(
            f"{version.document.key} v{version.number} cannot go live in {environment.key}: "
            + " ".join(e.message for e in errors),
            code="not_publishable",
            details=[e.as_dict() for e in errors],
        )
    live = _current(version.document, environment)
    check_user_can_enable_sensitive(
        actor,
        version.document.agent,
        sensitive_paths_added(version.body, baseline=[live.version.body] if live else []),
    )


# --- the one way a release pointer moves ---------------------------------------------------------
def _release_move(
    *,
    document: Document,
    environment: Environment,
    to_version: Version,
    action: str,
    actor,
    actor_label: str,
    reason: str,
    expected_revision: int | None,
    approved_by: str = "",
) -> Release:
    before = _current(document, environment)
    now = timezone.now()
    if before is None:
        if expected_revision not in (None, 0):
            raise _stale(document, environment, "The release changed since you loaded it.")
        release = create_or_refuse(
            Release,
            lambda: _stale(
                document, environment, "Someone else published here at the same moment."
            ),
            document=document,
            environment=environment,
            version=to_version,
            revision=1,
            updated_by=actor_label,
        )
    else:
        expected = before.revision if expected_revision is None else expected_revision
        update_or_refuse(
            Release.objects.filter(pk=before.pk, revision=expected),
            lambda: _stale(
                document,
                environment,
                f"The release of {document.key} in {environment.key} changed since you loaded "
                "it (someone else published or rolled back). Reload and decide again.",
            ),
            version=to_version,
            revision=F("revision") + 1,
            updated_by=actor_label,
            updated_at=now,
        )
        release = _current(document, environment)
    ReleaseEvent.objects.create(
        release=release,
        revision=release.revision,
        action=action,
        from_version=before.version if before else None,
        to_version=to_version,
        actor=actor_label,
        approved_by=approved_by,
        reason=reason,
    )
    # A pending request was reviewed against what was live; once that moves it is void.
    ApprovalRequest.objects.filter(
        document=document, environment=environment, status=ApprovalRequest.Status.PENDING
    ).exclude(base_revision=release.revision).update(
        status=ApprovalRequest.Status.VOID,
        decided_at=now,
        decision_note=f"Void: the release moved to v{to_version.number} ({action}).",
    )
    rendered = runtime_config.payload_refresh(agent=document.agent, environment=environment)
    _notify(release, before, action, rendered.etag, now)
    audit_record(
        actor=actor,
        action=f"release.{action}",
        target=release,
        agent=document.agent,
        before=_release_state(before),
        after={**_release_state(release), "reason": reason, "approved_by": approved_by},
    )
    return release


def _notify(release: Release, before: Release | None, action: str, etag: str, when) -> None:
    payload = json.dumps(
        {
            "event": webhooks.EVENT,
            "agent": release.document.agent.key,
            "environment": release.environment.key,
            "document": release.document.key,
            "action": action,
            "from_version": before.version.number if before else None,
            "to_version": release.version.number,
            "etag": etag,
            "occurred_at": when.isoformat().replace("+00:00", "Z"),
        },
        separators=(",", ":"),
    ).encode()
    ids = webhooks.deliveries_create(environment=release.environment, payload=payload)
    if ids:
        # Robust: a broker error cannot fail the committed change; the outbox rows stay
        # pending and the relay task (strategies.relay_webhook_deliveries) queues them.
        transaction.on_commit(lambda: webhooks.deliveries_send(ids), robust=True)


# --- publish ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PublishOutcome:
    release: Release | None = None  # set when the version went live
    approval: ApprovalRequest | None = None  # set when it waits for a second person


@service_transaction
def release_publish(
    *,
    version: Version,
    environment: Environment,
    actor,
    reason: str = "",
    expected_revision: int | None = None,
) -> PublishOutcome:
    """Put `version` live in `environment` — or, in a protected environment, ask for approval.

    A draft is frozen first. The version is validated against the environment's latest
    manifest; anything the runtime cannot serve blocks the publish with the reasons.
    """

    document = version.document
    agent = document.agent
    check_user_can_publish_to(actor, environment, agent, target=document)
    live = _current(document, environment)
    if live is not None and live.version_id == version.pk:
        raise Conflict(
            f"{document.key} v{version.number} is already live in {environment.key}.",
            code="already_live",
            extra={"current": _release_state(live)},
        )
    if expected_revision is not None and (live.revision if live else 0) != expected_revision:
        raise _stale(document, environment, "The release changed since you loaded it.")
    check_publishable(version=version, environment=environment, actor=actor)
    if version.is_draft:
        version = version_freeze(draft=version, actor=actor)
    if environment.protected:
        return PublishOutcome(
            approval=_approval_create(
                version=version, environment=environment, live=live, actor=actor, reason=reason
            )
        )
    release = _release_move(
        document=document,
        environment=environment,
        to_version=version,
        action=ReleaseEvent.Action.PUBLISH,
        actor=actor,
        actor_label=actor_label(actor),
        reason=reason,
        expected_revision=expected_revision,
    )
    return PublishOutcome(release=release)


def _approval_create(*, version, environment, live, actor, reason) -> ApprovalRequest:
    document = version.document

    def already_waiting() -> Conflict:
        pending = ApprovalRequest.objects.filter(
            document=document, environment=environment, status=ApprovalRequest.Status.PENDING
        ).first()
        return Conflict(
            f"A publish of {document.key} to {environment.key} already waits for approval"
            + (
                f" (v{pending.version.number}, requested by {pending.requested_by})."
                if pending
                else "."
            ),
            code="approval_pending",
            extra={"current": approval_state(pending) if pending else None},
        )

    approval = create_or_refuse(
        ApprovalRequest,
        already_waiting,
        document=document,
        environment=environment,
        version=version,
        content_hash=version.content_hash,
        base_revision=live.revision if live else 0,
        requested_by=actor,
        reason=reason,
    )
    audit_record(
        actor=actor,
        action="approval.request",
        target=approval,
        agent=document.agent,
        after=approval_state(approval),
    )
    return approval


def approval_state(approval: ApprovalRequest) -> dict:
    return {
        "id": approval.pk,
        "document": approval.document.key,
        "environment": approval.environment.key,
        "version": approval.version.number,
        "content_hash": approval.content_hash,
        "base_revision": approval.base_revision,
        "status": approval.status,
        "requested_by": str(approval.requested_by),
        "reason": approval.reason,
        "decided_by": str(approval.decided_by) if approval.decided_by_id else None,
        "decision_note": approval.decision_note,
    }


def _decide(approval: ApprovalRequest, *, actor, status: str, note: str) -> ApprovalRequest:
    """Conditional pending → decided: of two deciders exactly one wins (the other: 409)."""
    check_user_can_decide_approval(actor, approval)

    def already_decided() -> Conflict:
        approval.refresh_from_db()
        return Conflict(
            f"This request is already {approval.status}.",
            code="already_decided",
            extra={"current": approval_state(approval)},
        )

    update_or_refuse(
        ApprovalRequest.objects.filter(pk=approval.pk, status=ApprovalRequest.Status.PENDING),
        already_decided,
        status=status,
        decided_by=actor,
        decided_at=timezone.now(),
        decision_note=note,
    )
    approval.refresh_from_db()
    return approval


@service_transaction
def approval_approve(*, approval: ApprovalRequest, actor, note: str = "") -> Release:
    """A second person approves: the version goes live (bound to the hash and base revision)."""
    approval = _decide(approval, actor=actor, status=ApprovalRequest.Status.APPROVED, note=note)
    version = approval.version
    if version.content_hash != approval.content_hash:
        raise Conflict(
            "The version changed since the request; it must be requested again.",
            code="content_changed",
            extra={"current": approval_state(approval)},
        )
    live = _current(approval.document, approval.environment)
    if (live.revision if live else 0) != approval.base_revision:
        raise _stale(
            approval.document,
            approval.environment,
            "What is live changed since this request was made; it must be requested again.",
        )
    check_publishable(
        version=version, environment=approval.environment, actor=approval.requested_by
    )
    release = _release_move(
        document=approval.document,
        environment=approval.environment,
        to_version=version,
        action=ReleaseEvent.Action.APPROVE,
        actor=actor,
        actor_label=actor_label(approval.requested_by),
        reason=approval.reason,
        expected_revision=approval.base_revision,
        approved_by=actor_label(actor),
    )
    return release


@service_transaction
def approval_reject(*, approval: ApprovalRequest, actor, note: str) -> ApprovalRequest:
    note = reason_clean(note, ask="Say why you reject it (the requester reads this).", path="note")
    approval = _decide(approval, actor=actor, status=ApprovalRequest.Status.REJECTED, note=note)
    audit_record(
        actor=actor,
        action="approval.reject",
        target=approval,
        agent=approval.document.agent,
        after=approval_state(approval),
    )
    return approval


@service_transaction
def approval_withdraw(*, approval: ApprovalRequest, actor, reason: str) -> ApprovalRequest:
    """The requester takes back their own pending request (pending → withdrawn): it no longer
    blocks a new request for the same document and environment."""
    check_user_can_withdraw_approval(actor, approval)
    reason = reason_clean(
        reason, ask="Say why you withdraw the request (recorded in the audit log)."
    )
    before = approval_state(approval)

    def not_pending() -> Conflict:
        approval.refresh_from_db()
        return Conflict(
            f"This request is already {approval.status}; there is nothing to withdraw.",
            code="already_decided",
            extra={"current": approval_state(approval)},
        )

    update_or_refuse(
        ApprovalRequest.objects.filter(pk=approval.pk, status=ApprovalRequest.Status.PENDING),
        not_pending,
        status=ApprovalRequest.Status.WITHDRAWN,
        decided_by=actor,
        decided_at=timezone.now(),
        decision_note=reason,
    )
    approval.refresh_from_db()
    audit_record(
        actor=actor,
        action="approval.withdraw",
        target=approval,
        agent=approval.document.agent,
        before=before,
        after=approval_state(approval),
    )
    return approval


# --- rollback ----------------------------------------------------------------------------------------
def check_rollback_target(*, release: Release, to_version: Version) -> None:
    """Refuse (400) a version that was never live in the release's environment, or is live
    there now: a rollback goes back to exactly the version asked for, or nowhere."""
    if to_version.pk not in {v.pk for v in rollback_targets(release)}:
        raise ValidationFailed(
            f"v{to_version.number} was never live in {release.environment.key} (or is live now); "
            "a rollback goes back to a version that was live there before.",
            code="not_a_rollback_target",
            details=[
                {"path": "version", "code": "invalid_choice", "message": "not a previous release"}
            ],
        )


@service_transaction
def release_rollback(
    *,
    release: Release,
    to_version: Version,
    actor,
    reason: str,
    expected_revision: int | None = None,
) -> Release:
    """Break-glass: move back to an earlier live version at once, even in protected envs."""
    agent = release.document.agent
    check_user_can_roll_back(actor, agent, target=release)
    reason = reason_clean(
        reason, ask="Give a reason for the rollback (recorded in the history and the audit log)."
    )
    check_rollback_target(release=release, to_version=to_version)
    return _release_move(
        document=release.document,
        environment=release.environment,
        to_version=to_version,
        action=ReleaseEvent.Action.ROLLBACK,
        actor=actor,
        actor_label=actor_label(actor),
        reason=reason,
        expected_revision=expected_revision,
    )


# --- manifests reported by runtimes --------------------------------------------------------------------
