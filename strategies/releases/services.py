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
from dataclasses import dataclass, field

from context_runtime.findings import blocking
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from console.kernel.audit import actor_label, audit_record, describe_actor
from console.kernel.errors import ApplicationError, Conflict, ValidationFailed
from console.kernel.policy import (
    check_user_can_decide_approval,
    check_user_can_enable_sensitive,
    check_user_can_publish_to,
    check_user_can_request_rollback,
    check_user_can_withdraw_approval,
    rollback_needs_approval,
)
from console.kernel.reasons import reason_clean
from console.kernel.transactions import service_transaction
from console.kernel.writes import create_or_refuse, update_or_refuse
from strategies.catalog.models import Environment
from strategies.catalog.selectors import sensitive_paths_added
from strategies.delivery import config as runtime_config
from strategies.delivery import webhooks
from strategies.delivery.models import APPROVAL_REQUESTED_EVENT, WEBHOOK_EVENT
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
    approval: ApprovalRequest | None = None,
) -> Release:
    """Move the pointer. `approval`: the request this change applies (its approver is
    `actor`, its requester `actor_label`), named in the history, the audit and the webhook."""
    approved_by = str(approval.decided_by) if approval is not None else ""
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
    _notify(release, before, action, rendered.etag, now, actor=actor, approval=approval)
    audit_record(
        actor=actor,
        action=f"release.{action}",
        target=release,
        agent=document.agent,
        before=_release_state(before),
        after={**_release_state(release), "reason": reason, "approved_by": approved_by},
    )
    return release


def _actor_context(actor) -> dict:
    """Who made a change, as webhooks name them: {type: user|token|system, name, token}."""
    described = describe_actor(actor)
    return {
        "type": described["actor_type"],
        "name": described["actor_label"],
        "token": described.get("actor_token_label") or None,
    }


def _approval_context(approval: ApprovalRequest | None) -> dict | None:
    if approval is None:
        return None
    return {
        "id": approval.pk,
        "requester": str(approval.requested_by),
        "approver": str(approval.decided_by) if approval.decided_by_id else None,
    }


def _event_send(*, environment: Environment, event: str, body: dict) -> None:
    """Outbox rows for the environment's webhooks that hear `event` (in this transaction),
    queued once it commits."""
    payload = json.dumps(body, separators=(",", ":")).encode()
    ids = webhooks.deliveries_create(environment=environment, payload=payload, event=event)
    if ids:
        # Robust: a broker error cannot fail the committed change; the outbox rows stay
        # pending and the relay task (strategies.relay_webhook_deliveries) queues them.
        transaction.on_commit(lambda: webhooks.deliveries_send(ids), robust=True)


def _when(moment) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _notify(
    release: Release, before: Release | None, action: str, etag: str, when, *, actor, approval
) -> None:
    _event_send(
        environment=release.environment,
        event=WEBHOOK_EVENT,
        body={
            "event": WEBHOOK_EVENT,
            "agent": release.document.agent.key,
            "environment": release.environment.key,
            "document": release.document.key,
            "action": action,
            "from_version": before.version.number if before else None,
            "to_version": release.version.number,
            "etag": etag,
            "occurred_at": _when(when),
            "actor": _actor_context(actor),
            "approval": _approval_context(approval),
        },
    )


def approval_url(approval: ApprovalRequest) -> str:
    """The approval page: absolute when the console knows its public address
    (settings.CONSOLE_PUBLIC_URL), else the path."""
    path = reverse("approval-detail", args=[approval.document.agent.key, approval.pk])
    base = settings.CONSOLE_PUBLIC_URL.rstrip("/")
    return f"{base}{path}"


def _notify_requested(approval: ApprovalRequest) -> None:
    _event_send(
        environment=approval.environment,
        event=APPROVAL_REQUESTED_EVENT,
        body={
            "event": APPROVAL_REQUESTED_EVENT,
            "agent": approval.document.agent.key,
            "environment": approval.environment.key,
            "document": approval.document.key,
            "kind": approval.kind,
            "version": approval.version.number,
            "requested_by": str(approval.requested_by),
            "reason": approval.reason,
            "approval_id": approval.pk,
            "url": approval_url(approval),
            "occurred_at": _when(approval.requested_at),
        },
    )


# --- publish ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PublishOutcome:
    """What a publish or a rollback did: went live, or waits for a second person."""

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


def _what(kind: str) -> str:
    return "rollback" if kind == ApprovalRequest.Kind.ROLLBACK else "publish"


def _approval_create(
    *, version, environment, live, actor, reason, kind=ApprovalRequest.Kind.PUBLISH
) -> ApprovalRequest:
    """One pending request per document × environment (the database says so too), bound to
    the version's content hash and the live revision; its webhooks hear approval.requested."""
    document = version.document

    def already_waiting() -> Conflict:
        pending = ApprovalRequest.objects.filter(
            document=document, environment=environment, status=ApprovalRequest.Status.PENDING
        ).first()
        return Conflict(
            f"A {_what(pending.kind) if pending else 'request'} of {document.key} in "
            f"{environment.key} already waits for approval"
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
        kind=kind,
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
    _notify_requested(approval)
    return approval


def approval_state(approval: ApprovalRequest) -> dict:
    return {
        "id": approval.pk,
        "kind": approval.kind,
        "agent": approval.document.agent.key,
        "document": approval.document.key,
        "environment": approval.environment.key,
        "version": approval.version.number,
        "content_hash": approval.content_hash,
        "base_revision": approval.base_revision,
        "status": approval.status,
        "requested_by": str(approval.requested_by),
        "requested_at": approval.requested_at.isoformat() if approval.requested_at else None,
        "reason": approval.reason,
        "decided_by": str(approval.decided_by) if approval.decided_by_id else None,
        "decided_at": approval.decided_at.isoformat() if approval.decided_at else None,
        "decision_note": approval.decision_note,
    }


def release_state(release: Release | None) -> dict | None:
    """A release as the API and the audit show it (None: nothing live)."""
    return _release_state(release)


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
    """A second person approves: the version goes live (bound to the hash and base revision).
    A publish request is checked against the target runtime again; a rollback request goes
    back to its version as an immediate rollback would, recorded as a rollback."""
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
    if approval.kind == ApprovalRequest.Kind.ROLLBACK:
        check_rollback_target(release=live, to_version=version)
        action = ReleaseEvent.Action.ROLLBACK
    else:
        check_publishable(
            version=version, environment=approval.environment, actor=approval.requested_by
        )
        action = ReleaseEvent.Action.APPROVE
    return _release_move(
        document=approval.document,
        environment=approval.environment,
        to_version=version,
        action=action,
        actor=actor,
        actor_label=actor_label(approval.requested_by),
        reason=approval.reason,
        expected_revision=approval.base_revision,
        approval=approval,
    )


@service_transaction(durable=True)
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


@service_transaction(durable=True)
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


@service_transaction(durable=True)
def release_rollback(
    *,
    release: Release,
    to_version: Version,
    actor,
    reason: str,
    expected_revision: int | None = None,
) -> PublishOutcome:
    """Break-glass: move back to an earlier live version at once, even in protected envs —
    unless the environment's revert policy asks for a second person: then the rollback is an
    approval request bound to `to_version` and the live revision, like a protected publish."""
    agent = release.document.agent
    needs_approval = rollback_needs_approval(release.environment)
    check_user_can_request_rollback(actor, agent, target=release)
    reason = reason_clean(
        reason, ask="Give a reason for the rollback (recorded in the history and the audit log)."
    )
    check_rollback_target(release=release, to_version=to_version)
    if needs_approval:
        live = _current(release.document, release.environment)
        if expected_revision is not None and live.revision != expected_revision:
            raise _stale(
                release.document, release.environment, "The release changed since you loaded it."
            )
        return PublishOutcome(
            approval=_approval_create(
                version=to_version,
                environment=release.environment,
                live=live,
                actor=actor,
                reason=reason,
                kind=ApprovalRequest.Kind.ROLLBACK,
            )
        )
    return PublishOutcome(
        release=_release_move(
            document=release.document,
            environment=release.environment,
            to_version=to_version,
            action=ReleaseEvent.Action.ROLLBACK,
            actor=actor,
            actor_label=actor_label(actor),
            reason=reason,
            expected_revision=expected_revision,
        )
    )


# --- promotion ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PromotionItem:
    """One document of a promotion: what the target had, what the source has, what happened."""

    PUBLISHED = "published"
    REQUESTED = "requested"
    UNCHANGED = "unchanged"

    document: Document
    outcome: str
    from_version: int | None  # live in the target before
    to_version: int | None  # live in the source
    note: str = ""
    release: Release | None = None
    approval: ApprovalRequest | None = None


@dataclass(frozen=True)
class PromotionOutcome:
    source: Environment
    target: Environment
    items: list[PromotionItem] = field(default_factory=list)

    @property
    def requested(self) -> list[PromotionItem]:
        return [i for i in self.items if i.outcome == PromotionItem.REQUESTED]

    @property
    def published(self) -> list[PromotionItem]:
        return [i for i in self.items if i.outcome == PromotionItem.PUBLISHED]


def _promotion_refused(source, target, failures: list[tuple[Document, ApplicationError]]):
    lines = [f"{doc.key}: {error.message}" for doc, error in failures]
    details = []
    for doc, error in failures:
        inner = error.details or [{"path": "", "code": error.code, "message": error.message}]
        for detail in inner:
            path = f"documents.{doc.key}" + (f".{detail['path']}" if detail.get("path") else "")
            details.append({**detail, "path": path})
    return ValidationFailed(
        f"Nothing was promoted from {source.key} to {target.key}: "
        f"{len(failures)} document{'s' if len(failures) != 1 else ''} cannot go. "
        + " ".join(lines),
        code="promotion_refused",
        details=details,
    )


@service_transaction(durable=True)
def release_promote(
    *,
    agent,
    source: Environment,
    target: Environment,
    documents: list[Document] | None = None,
    actor,
    reason: str,
) -> PromotionOutcome:
    """Publish to `target` what is live in `source`, for `documents` (None: all of the agent's),
    in one transaction. Each document whose live version differs goes through the publish's
    checks (target manifest, sensitive sections, approval where protected: one request per
    document). All or nothing: when any document fails a check, nothing is written and every
    failing document is reported with its reasons."""
    check_user_can_publish_to(actor, target, agent)
    if source.pk == target.pk:
        raise ValidationFailed(
            "Choose two different environments to promote between.",
            code="same_environment",
            details=[{"path": "target", "code": "invalid", "message": "Same as the source."}],
        )
    reason = reason_clean(
        reason, ask="Give a reason for the promotion (recorded in the history and audit log)."
    )
    if documents is None:
        documents = list(Document.objects.filter(agent=agent).order_by("kind", "key"))
    plan: list[tuple[Document, Release | None, Release | None]] = []
    failures: list[tuple[Document, ApplicationError]] = []
    for document in documents:
        if document.agent_id != agent.pk:
            raise ValidationFailed(f"{document.key} is not a document of {agent.key}.")
        have, want = _current(document, target), _current(document, source)
        plan.append((document, have, want))
        if want is None or (have is not None and have.version_id == want.version_id):
            continue
        try:
            if target.protected:
                _check_nothing_waits(document, target)
            check_publishable(version=want.version, environment=target, actor=actor)
        except ApplicationError as error:
            failures.append((document, error))
    if failures:
        raise _promotion_refused(source, target, failures)
    items = [
        _promote_one(document, have, want, source, target, actor, reason)
        for document, have, want in plan
    ]
    outcome = PromotionOutcome(source=source, target=target, items=items)
    audit_record(
        actor=actor,
        action="release.promote",
        target=(
            "promotion",
            f"{source.key}->{target.key}",
            f"{agent.key}: {source.key} → {target.key}",
        ),
        agent=agent,
        after={
            "source": source.key,
            "target": target.key,
            "reason": reason,
            "documents": {i.document.key: i.outcome for i in items},
        },
    )
    return outcome


def _check_nothing_waits(document: Document, environment: Environment) -> None:
    pending = ApprovalRequest.objects.filter(
        document=document, environment=environment, status=ApprovalRequest.Status.PENDING
    ).first()
    if pending is not None:
        raise Conflict(
            f"a {_what(pending.kind)} of v{pending.version.number} already waits for approval "
            f"(requested by {pending.requested_by}).",
            code="approval_pending",
        )


def _promote_one(document, have, want, source, target, actor, reason) -> PromotionItem:
    base = {
        "document": document,
        "from_version": have.version.number if have else None,
        "to_version": want.version.number if want else None,
    }
    if want is None:
        return PromotionItem(
            outcome=PromotionItem.UNCHANGED, note=f"Nothing is live in {source.key}.", **base
        )
    if have is not None and have.version_id == want.version_id:
        return PromotionItem(
            outcome=PromotionItem.UNCHANGED, note=f"Already the same in {target.key}.", **base
        )
    published = release_publish(
        version=want.version,
        environment=target,
        actor=actor,
        reason=reason,
        expected_revision=have.revision if have else 0,
    )
    if published.approval is not None:
        return PromotionItem(outcome=PromotionItem.REQUESTED, approval=published.approval, **base)
    return PromotionItem(outcome=PromotionItem.PUBLISHED, release=published.release, **base)


# --- manifests reported by runtimes --------------------------------------------------------------------
