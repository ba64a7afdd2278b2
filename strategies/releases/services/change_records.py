"""External change records inside a go-live's transaction (issue 34 item 1): asked by the
go-live that needs one (`_change_record_request`, sent after commit) and named by the release
move that went live on one (`_change_record_use`: the history shows its change number).
Beneath `move`, `publish`, `approvals` and `rollout`; the answers are `changes`'."""

from __future__ import annotations

from datetime import timedelta

from celery import current_app
from context_runtime.diff import diff_bodies
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console.kernel.audit import AuditAction, actor_label, audit_record
from console.kernel.errors import Conflict
from console.kernel.writes import create_or_refuse
from strategies.releases.models import ApprovalRequest, ChangeRecord, ChangeSystem, ReleaseEvent
from strategies.releases.preview_hook import preview_summary
from strategies.releases.selectors.changes import (
    change_record_usable,
    change_record_waiting,
    requires_change_record,
)
from strategies.releases.services.state import _current

CHANGE_REQUEST_EVENT = "change.requested"
SEND_TASK = "strategies.send_change_request"


def _change_record_use(*, event: ReleaseEvent, environment, actor) -> ChangeRecord | None:
    """Name the approved record this publish (or approved publish) went live on. The go-live
    judgement already asked for it; a rollback and a guard's rollback need none."""
    if event.action not in (ReleaseEvent.Action.PUBLISH, ReleaseEvent.Action.APPROVE):
        return None
    if not requires_change_record(environment):
        return None
    record = change_record_usable(
        environment=environment, content_hash=event.to_version.content_hash
    )
    if record is None:  # a rollout's later move: its start carried the record
        return None
    if record.release_event_id is None:
        ChangeRecord.objects.filter(pk=record.pk, release_event__isnull=True).update(
            release_event=event
        )
        record.release_event = event
    audit_record(
        actor=actor,
        action=AuditAction.CHANGE_RECORD_USE,
        target=record,
        agent=event.to_version.document.agent,
        after={
            "change_record": record.public_id,
            "change_number": record.change_number,
            "environment": environment.key,
            "document": event.to_version.document.key,
            "version": event.to_version.number,
            "release_revision": event.revision,
        },
    )
    return record


def change_record_state(record: ChangeRecord) -> dict:
    """A change record as the API, the audit and the pages show it."""
    delivery = (
        "delivered"
        if record.delivered_at
        else ("not delivered yet" if record.state == ChangeRecord.State.WAITING else "not sent")
    )
    return {
        "id": record.public_id,
        "environment": record.environment.key,
        "agent": record.document.agent.key,
        "document": record.document.key,
        "version": record.version.number,
        "content_hash": record.content_hash,
        "path": record.path,
        "state": record.state,
        "change_number": record.change_number,
        "comment": record.comment,
        "requested_by": record.requested_by_label,
        "requested_at": record.created_at.isoformat(),
        "decided_by": record.decided_by,
        "decided_at": record.decided_at.isoformat() if record.decided_at else None,
        "valid_until": record.valid_until.isoformat() if record.valid_until else None,
        "approval": record.approval_id,
        "delivery": {
            "status": delivery,
            "tries": record.tries,
            "last_error": record.last_error,
            "delivered_at": record.delivered_at.isoformat() if record.delivered_at else None,
        },
        "go_live_refused": record.go_live_refused,
        "release_revision": record.release_event.revision if record.release_event_id else None,
    }


def change_record_words(record: ChangeRecord) -> str:
    """One line for the pages: the state, with what a waiting record waits on."""
    number = f" {record.change_number}" if record.change_number else ""
    if record.state == ChangeRecord.State.WAITING:
        if record.delivered_at is None:
            error = f", last error: {record.last_error}" if record.last_error else ""
            return (
                f"Waiting for change record {record.public_id} — not delivered yet "
                f"({record.tries} tries{error}). Never approved until the change system says so."
            )
        return f"Waiting for change record {record.public_id}: the change system has not answered."
    if record.state == ChangeRecord.State.APPROVED:
        until = record.valid_until.strftime("%Y-%m-%d %H:%M UTC") if record.valid_until else ""
        return f"Change record{number} approved, usable until {until}."
    if record.state == ChangeRecord.State.REJECTED:
        comment = f": {record.comment}" if record.comment else ""
        return f"Change record{number} rejected{comment}."
    if record.state == ChangeRecord.State.EXPIRED:
        return f"Change record {record.public_id}{number} expired: ask again to go live."
    return f"Change record {record.public_id} could not be sent: {record.last_error}"


# --- asking: a record, sent after commit ---------------------------------------------------------
def _change_record_request(
    *,
    version,
    environment,
    actor,
    path: str,
    reason: str = "",
    approval: ApprovalRequest | None = None,
    go_live: dict | None = None,
) -> ChangeRecord:
    """The record this go-live waits on, inside the caller's transaction: the one already
    waiting for this content here (asking again does not ask twice; it takes the newest
    approval request and go-live), or a new one, sent after commit."""
    document = version.document
    system = ChangeSystem.objects.get(environment=environment)
    waiting = change_record_waiting(
        environment=environment, document=document, content_hash=version.content_hash
    )
    if waiting is not None:
        updates = {"go_live": go_live or waiting.go_live, "reason": reason or waiting.reason}
        if approval is not None:
            updates["approval"] = approval
        ChangeRecord.objects.filter(pk=waiting.pk).update(**updates)
        waiting.refresh_from_db()
        return waiting
    live = _current(document, environment)
    now = timezone.now()
    changes = diff_bodies(document.kind, live.version.body if live else None, version.body)
    preview = preview_summary(user=actor, version=version, environment=environment) or {}
    saved = preview.get("preview") or None
    record = create_or_refuse(
        ChangeRecord,
        lambda: Conflict(
            "A change request for this content was sent at the same moment.",
            code="change_record_waiting",
        ),
        environment=environment,
        document=document,
        version=version,
        content_hash=version.content_hash,
        path=path,
        requested_by=actor if getattr(actor, "is_authenticated", False) else None,
        requested_by_label=actor_label(actor),
        reason=reason,
        approval=approval,
        go_live=go_live or {},
        diff_summary={
            "from_version": live.version.number if live else None,
            "to_version": version.number,
            "changes": [change.as_dict() for change in changes][:200],
            "count": len(changes),
        },
        preview_summary={
            "id": saved["pk"],
            "state": saved["state"],
            "traces": saved.get("traces"),
            "headline": saved.get("sentence", ""),
        }
        if saved
        else {},
        # A waiting record's window is the time the system has to answer.
        valid_until=now + timedelta(hours=system.validity_hours),
        # Sent after commit at once; if that message is lost, the beat's relay sends it then.
        next_try_at=now + timedelta(minutes=2),
        created_at=now,
    )
    audit_record(
        actor=actor,
        action=AuditAction.CHANGE_RECORD_REQUEST,
        target=record,
        agent=document.agent,
        after=change_record_state(record),
    )
    record_id = record.pk
    transaction.on_commit(lambda: change_records_send([record_id]))
    return record


def change_records_send(record_ids: list[int]) -> None:
    """Queue one send try of each record (the task is named: no task import here)."""
    queue = getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", None)
    for record_id in record_ids:
        current_app.send_task(SEND_TASK, args=(record_id,), queue=queue)
