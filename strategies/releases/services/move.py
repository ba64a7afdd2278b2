"""The one way a release pointer moves: `_release_move`, a conditional UPDATE on the release
revision (or, for the first publish, an INSERT guarded by the unique constraint). Of two
concurrent changes exactly one wins; the other gets 409 with the current state. Each winning
change appends exactly one ReleaseEvent with the revision it produced, voids the requests
reviewed against what was live, re-renders the runtime payload, queues the webhooks and writes
its audit row, all in the same transaction. A publish of the version running as shadow there
is its promotion: the shadow stops in the same transaction (its own event, audit row and
webhook)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import F
from django.utils import timezone

from console.kernel.audit import AuditAction, audit_record
from console.kernel.errors import Conflict, ValidationFailed
from console.kernel.writes import create_or_refuse, update_or_refuse
from strategies.catalog.models import Environment
from strategies.delivery import config as runtime_config
from strategies.documents.models import Document, Version
from strategies.releases.models import ApprovalRequest, Release, ReleaseEvent, Rollout
from strategies.releases.selectors.calendar import freeze_break_glass_at, goes_live_through_freeze
from strategies.releases.selectors.golive import Path, goes_live_unreviewed
from strategies.releases.services.change_records import _change_record_use
from strategies.releases.services.notifications import _notify
from strategies.releases.services.rollout_move import _rollout_notify, _rollout_stopped_by_move
from strategies.releases.services.shadow_move import ShadowChange, _shadow_move, _shadow_notify
from strategies.releases.services.state import _current, _release_state, _shadow_current, _stale

# The audit action of each way a release pointer moves.
RELEASE_ACTIONS = {
    ReleaseEvent.Action.PUBLISH: AuditAction.RELEASE_PUBLISH,
    ReleaseEvent.Action.APPROVE: AuditAction.RELEASE_APPROVE,
    ReleaseEvent.Action.ROLLBACK: AuditAction.RELEASE_ROLLBACK,
}


def history_time(release: Release | None, at: datetime | None) -> datetime:
    """When a move happens: now, or `at` when a recorded history is loaded — refused in the
    future or before the release's newest event, so its history still reads in time order
    (the events are append-only: a wrong time could never be corrected)."""
    now = timezone.now()
    if at is None:
        return now
    newest = (
        ReleaseEvent.objects.filter(release=release).order_by("-occurred_at").first()
        if release is not None
        else None
    )
    if at > now or (newest is not None and at < newest.occurred_at):
        raise ValidationFailed(
            "A release's history is appended in time order: "
            f"{at.isoformat()} is in the future or before its last event.",
            code="history_out_of_order",
        )
    return at


def _shadow_promoted(release: Release, action: str, *, actor) -> ShadowChange | None:
    """A publish (or an approved one) of the version running as shadow here has promoted it:
    stop the shadow, saying so. A rollback, or a publish of another version, leaves it."""
    if action not in (ReleaseEvent.Action.PUBLISH, ReleaseEvent.Action.APPROVE):
        return None
    shadow = _shadow_current(release.document, release.environment)
    if shadow is None or shadow.version_id != release.version_id:
        return None
    try:
        return _shadow_move(
            document=release.document,
            environment=release.environment,
            live=release,
            to_version=None,
            actor=actor,
            reason=f"Promoted: v{release.version.number} is live ({action}).",
            expected_revision=shadow.revision,
        )
    except Conflict:
        return None  # stopped meanwhile by someone else: nothing left to stop


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
    rollout: Rollout | None = None,
    evidence: dict | None = None,
    at: datetime | None = None,
) -> Release:
    """Move the pointer. `approval`: the request this change applies (its approver is
    `actor`, its requester `actor_label`), named in the history, the audit and the webhook.
    `rollout`: the staged rollout this publish completes; any other rollout active here is
    stopped by the move (a person decided what is live), and a paired watch here ends.
    `evidence`: what the move was decided on (a watch warning's), kept in its audit row.
    `at`: when it happened, for loading a recorded history (the demo's releases of days ago);
    now unless given."""
    approved_by = str(approval.decided_by) if approval is not None else ""
    # Unreviewed: the go-live judgement's one rule, for the path this move's action is.
    path = Path.ROLLBACK if action == ReleaseEvent.Action.ROLLBACK else Path.PUBLISH
    unreviewed = goes_live_unreviewed(environment, path=path, approved=approval is not None)
    # Let through a freeze or closed change hours by a freeze break-glass: marked so.
    through_freeze = (
        freeze_break_glass_at(environment)
        if path == Path.PUBLISH and goes_live_through_freeze(environment)
        else None
    )
    before = _current(document, environment)
    now = history_time(before, at)
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
            updated_at=now,
            updated_by=actor_label,
            unreviewed=unreviewed,
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
            unreviewed=unreviewed,
        )
        release = _current(document, environment)
    event = ReleaseEvent.objects.create(
        release=release,
        revision=release.revision,
        action=action,
        from_version=before.version if before else None,
        to_version=to_version,
        actor=actor_label,
        approved_by=approved_by,
        reason=reason,
        unreviewed=unreviewed,
        freeze_break_glass=through_freeze is not None,
        occurred_at=now,
    )
    _change_record_use(event=event, environment=environment, actor=actor)
    # A pending request was reviewed against what was live; once that moves it is void.
    ApprovalRequest.objects.filter(
        document=document, environment=environment, status=ApprovalRequest.Status.PENDING
    ).exclude(base_revision=release.revision).update(
        status=ApprovalRequest.Status.VOID,
        decided_at=now,
        decision_note=f"Void: the release moved to v{to_version.number} ({action}).",
    )
    promoted = _shadow_promoted(release, action, actor=actor)
    stopped = _rollout_stopped_by_move(release, action, actor=actor, completing=rollout)
    rendered = runtime_config.payload_refresh(agent=document.agent, environment=environment)
    _notify(release, before, action, rendered.etag, now, actor=actor, approval=approval)
    if promoted is not None:
        _shadow_notify(promoted, etag=rendered.etag, actor=actor)
    for change in stopped:
        _rollout_notify(change, etag=rendered.etag)
    audit_record(
        actor=actor,
        action=RELEASE_ACTIONS[action],
        target=release,
        agent=document.agent,
        before=_release_state(before),
        after={
            **_release_state(release),
            "reason": reason,
            "approved_by": approved_by,
            **({"evidence": evidence} if evidence else {}),
            # The break-glass it went live under, so the audit row says so by itself.
            **(
                {
                    "break_glass_reason": environment.break_glass_reason,
                    "break_glass_by": environment.break_glass_by,
                }
                if unreviewed
                else {}
            ),
            **(
                {
                    "freeze_break_glass_reason": through_freeze.reason,
                    "freeze_break_glass_by": through_freeze.started_by,
                }
                if through_freeze is not None
                else {}
            ),
        },
    )
    return release
