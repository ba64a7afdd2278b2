"""Approval requests: created by a protected publish or a rollback the environment's revert
policy holds (one pending per document × environment), then approved or rejected by a second
person, or withdrawn by the requester."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from console.kernel.audit import AuditAction, actor_label, audit_record
from console.kernel.errors import Conflict, ValidationFailed
from console.kernel.policy import check_user_can_decide_approval, check_user_can_withdraw_approval
from console.kernel.reasons import reason_clean
from console.kernel.sessions import require_recent_authentication
from console.kernel.transactions import service_transaction
from console.kernel.writes import create_or_refuse, update_or_refuse
from strategies.releases.models import ApprovalRequest, Release, ReleaseEvent
from strategies.releases.selectors import pending_for, waiting_finding
from strategies.releases.selectors.refusals import CHANGE_RECORD_REQUIRED
from strategies.releases.services.change_records import _change_record_request
from strategies.releases.services.checks import check_approved_go_live, check_rollback_target
from strategies.releases.services.move import _release_move, history_time
from strategies.releases.services.notifications import _notify_requested
from strategies.releases.services.rollout_steps import _rollout_approved
from strategies.releases.services.state import _current, _stale, approval_state


def _approval_create(
    *,
    version,
    environment,
    live,
    actor,
    reason,
    kind=ApprovalRequest.Kind.PUBLISH,
    rollout=None,
    at: datetime | None = None,
) -> ApprovalRequest:
    """One pending request per document × environment (the database says so too), bound to
    the version's content hash and the live revision; its webhooks hear approval.requested.
    `at`: when it was asked, for loading a recorded history (the demo's); now unless given."""
    document = version.document

    def already_waiting() -> Conflict:
        # The database refused a second pending request: the same refusal as the judgement's.
        pending = pending_for(document=document, environment=environment)
        waiting = waiting_finding(
            pending=pending, document_key=document.key, environment=environment
        )
        return Conflict(
            waiting.message,
            code=waiting.code,
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
        rollout=rollout,
        requested_at=history_time(live, at),
    )
    audit_record(
        actor=actor,
        action=AuditAction.APPROVAL_REQUEST,
        target=approval,
        agent=document.agent,
        after=approval_state(approval),
    )
    _notify_requested(approval)
    return approval


def _decide(
    approval: ApprovalRequest, *, actor, status: str, note: str, at: datetime | None = None
) -> ApprovalRequest:
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
        decided_at=at or timezone.now(),
        decision_note=note,
    )
    approval.refresh_from_db()
    return approval


# What approving is, in the words of the password prompt (console.kernel.sessions).
APPROVE_WORDS = {
    ApprovalRequest.Kind.PUBLISH: "approve this release",
    ApprovalRequest.Kind.ROLLBACK: "approve this rollback",
    ApprovalRequest.Kind.ROLLOUT: "approve this staged rollout",
}


@service_transaction
def approval_approve(
    *, approval: ApprovalRequest, actor, note: str = "", at: datetime | None = None
) -> Release:
    """A second person approves: the version goes live (bound to the hash and base revision).
    A publish request is checked against the target runtime again; a rollback request goes
    back to its version as an immediate rollback would, recorded as a rollback. `at`: when,
    for loading a recorded history (the demo's; not before the request); now unless given."""
    if at is not None and at < approval.requested_at:
        raise ValidationFailed(
            "An approval cannot be decided before it was requested.", code="history_out_of_order"
        )
    approval = _decide(
        approval, actor=actor, status=ApprovalRequest.Status.APPROVED, note=note, at=at
    )
    require_recent_authentication(actor, action=APPROVE_WORDS[approval.kind])
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
    if approval.kind == ApprovalRequest.Kind.ROLLOUT:
        # The plan starts: nothing moves live now (it does when the rollout completes).
        _rollout_approved(approval, actor=actor)
        return live
    if approval.kind == ApprovalRequest.Kind.ROLLBACK:
        check_rollback_target(release=live, to_version=version)
        action = ReleaseEvent.Action.ROLLBACK
    else:
        refused = check_approved_go_live(approval=approval, live=live)
        if any(finding.code == CHANGE_RECORD_REQUIRED for finding in refused):
            # Four-eyes given; the change system has not approved yet: the decision stands
            # and the go-live happens when it does (strategies.releases.services.changes).
            _change_record_request(
                version=version,
                environment=approval.environment,
                actor=approval.requested_by,
                path="publish",
                reason=approval.reason,
                approval=approval,
            )
            audit_record(
                actor=actor,
                action=AuditAction.APPROVAL_APPROVE_HELD,
                target=approval,
                agent=approval.document.agent,
                after=approval_state(approval),
            )
            return live
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
        at=at,
    )


@service_transaction(durable=True)
def approval_reject(*, approval: ApprovalRequest, actor, note: str) -> ApprovalRequest:
    note = reason_clean(note, ask="Say why you reject it (the requester reads this).", path="note")
    approval = _decide(approval, actor=actor, status=ApprovalRequest.Status.REJECTED, note=note)
    audit_record(
        actor=actor,
        action=AuditAction.APPROVAL_REJECT,
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
    return _approval_withdraw(approval, actor=actor, reason=reason)


def _approval_withdraw(approval: ApprovalRequest, *, actor, reason: str) -> ApprovalRequest:
    """pending → withdrawn, audited; the caller checked who may and why."""
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
        action=AuditAction.APPROVAL_WITHDRAW,
        target=approval,
        agent=approval.document.agent,
        before=before,
        after=approval_state(approval),
    )
    return approval
