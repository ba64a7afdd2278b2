"""The one way a staged rollout changes: `_rollout_change`, on the rollout's row locked
(`_rollout_locked`, SELECT … FOR UPDATE), so of two people (or a person and the guard
evaluator) acting at once one wins and the other sees the rollout as it now stands. Each
change grows the rollout's revision (part of the config ETag), appends a line to its
timeline and writes its audit row; the caller re-renders the runtime payload once and then
sends the webhook (`_rollout_notify`), as for a shadow."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from console.kernel.audit import AuditAction, actor_label, audit_record
from strategies.delivery import config as runtime_config
from strategies.releases.models import ApprovalRequest, Release, ReleaseEvent, Rollout
from strategies.releases.services.notifications import _notify_rollout
from strategies.releases.services.state import rollout_conflict, rollout_state
from strategies.releases.transitions import rollout_allows

ROLLOUT_FINISHED = "rollout_finished"  # completed, rolled back or stopped: nothing more to do
ROLLOUT_STATE = "rollout_state"  # the action does not apply to the state it is in now
# Each change of the timeline, and the audit action it is written as.
ROLLOUT_AUDIT = {
    "start": AuditAction.ROLLOUT_START,
    "approve": AuditAction.ROLLOUT_APPROVE,
    "pause": AuditAction.ROLLOUT_PAUSE,
    "resume": AuditAction.ROLLOUT_RESUME,
    "step": AuditAction.ROLLOUT_STEP,
    "extend": AuditAction.ROLLOUT_EXTEND,
    "complete": AuditAction.ROLLOUT_COMPLETE,
    "stop": AuditAction.ROLLOUT_STOP,
    "rollback": AuditAction.ROLLOUT_ROLLBACK,
    "watch_warn": AuditAction.ROLLOUT_WATCH_WARN,
    "watch_end": AuditAction.ROLLOUT_WATCH_END,
}
# The guards' evaluation, by name (it lives in traces, above this job: no import).
EVALUATE_TASK = "rollouts.evaluate"
ENDING = {
    "complete": Rollout.State.COMPLETED,
    "stop": Rollout.State.STOPPED,
    "rollback": Rollout.State.ROLLED_BACK,
}


@dataclass(frozen=True)
class RolloutChange:
    """What one change did, for the webhook sent once the payload is rendered."""

    rollout: Rollout
    action: str
    actor: object
    evidence: dict | None
    when: object


def _rollout_locked(rollout: Rollout) -> Rollout:
    """The rollout's row, locked until the transaction ends (read again: what it is now)."""
    return (
        Rollout.objects.select_for_update(of=("self",))
        .select_related("document__agent", "environment", "version", "control_version")
        .get(pk=rollout.pk)
    )


def _rollout_expect(rollout: Rollout, action: str, *, words: str = "") -> None:
    """409 unless the (locked) rollout's state allows `action` (the one table,
    `transitions.ROLLOUT_TRANSITIONS`): `rollout_finished` once it ended, `rollout_state` when
    it is active but the action does not apply (already paused). `words`: the action as the
    message says it (the action's own name unless given)."""
    if rollout_allows(rollout, action):
        return
    words = words or action
    if not rollout.active:
        raise rollout_conflict(
            rollout,
            f"{rollout.key} is {rollout.get_state_display().lower()}"
            f"{f' (by {rollout.ended_by})' if rollout.ended_by else ''}: nothing to {words}.",
            code=ROLLOUT_FINISHED,
        )
    raise rollout_conflict(
        rollout,
        f"{rollout.key} is {rollout.get_state_display().lower()} now: it cannot {words}.",
        code=ROLLOUT_STATE,
    )


def _rollout_change(
    rollout: Rollout,
    *,
    actor,
    action: str,
    reason: str = "",
    evidence: dict | None = None,
    evidence_field: str = "evidence",
    audit_extra: dict | None = None,
    **fields,
) -> RolloutChange:
    """Apply `fields` to the locked `rollout` (an ending action sets its end), grow its
    revision, add the timeline line and write the audit row (with the evidence a guard saw,
    kept in `evidence_field`: `evidence`, or `watch_warning` for a warning of the watch; and
    `audit_extra`, what the judgement flagged, e.g. that it goes live unreviewed)."""
    before = rollout_state(rollout, request_ids=True)  # the audit row is the record
    now = timezone.now()
    if action in ENDING:
        fields.update(state=ENDING[action], ended_by=actor_label(actor), ended_at=now)
        fields.setdefault("end_reason", reason)
    if evidence is not None:
        fields[evidence_field] = evidence
    for name, value in fields.items():
        setattr(rollout, name, value)
    entry = {
        "at": now.isoformat(),
        "action": action,
        "actor": actor_label(actor),
        "step": rollout.step,
        "share": rollout.share,
        "reason": reason,
    }
    Rollout.objects.filter(pk=rollout.pk).update(
        **fields, revision=F("revision") + 1, log=[*rollout.log, entry], updated_at=now
    )
    rollout.refresh_from_db()
    audit_record(
        actor=actor,
        action=ROLLOUT_AUDIT[action],
        target=rollout,
        agent=rollout.document.agent,
        before=before,
        after={**rollout_state(rollout, request_ids=True), "reason": reason, **(audit_extra or {})},
    )
    if rollout.state == Rollout.State.RUNNING and rollout.step_started_at is not None:
        bake_end = rollout.step_started_at + timedelta(seconds=rollout.bake_seconds)
        # Robust: a broker error cannot fail the committed change; beat's period still judges.
        transaction.on_commit(lambda: _judge_at(bake_end), robust=True)
    return RolloutChange(rollout=rollout, action=action, actor=actor, evidence=evidence, when=now)


def _judge_at(when) -> None:
    """Have the guards judge the running rollouts when a step's bake ends, so the step ends
    then and not up to one beat period (ROLLOUTS_EVALUATE_SECONDS) later. Every change that
    leaves a rollout running (a start, a step, a resume, an extension) asks this; a judgement
    that finds nothing due is a no-op, one that finds the rollout moved gets a 409 and skips."""
    queue = getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", None)
    current_app.send_task(EVALUATE_TASK, eta=when, queue=queue)


def _rollout_notify(change: RolloutChange, *, etag: str) -> None:
    _notify_rollout(
        change.rollout,
        action=change.action,
        etag=etag,
        when=change.when,
        actor=change.actor,
        evidence=change.evidence,
    )


def _rollout_stopped_by_move(
    release: Release, action: str, *, actor, completing: Rollout | None
) -> list[RolloutChange]:
    """A person published or rolled back by hand where a rollout is active: it stops (what
    they put live is what runtimes serve), saying why; a paired watch there ends. The
    completing rollout's own publish is no such move."""
    verb = "rolled back to" if action == ReleaseEvent.Action.ROLLBACK else "published"
    why = (
        f"v{release.version.number} was {verb} by hand in {release.environment.key} "
        f"({action}, release revision {release.revision})."
    )
    changes = []
    exclude = completing.pk if completing else None
    active = (
        Rollout.objects.active()
        .filter(document=release.document, environment=release.environment)
        .exclude(pk=exclude)
        .first()
    )
    if active is not None:
        rollout = _rollout_locked(active)
        if rollout.active:  # else ended meanwhile
            _rollout_void_request(
                rollout, note=f"Void: v{release.version.number} was {verb} by hand."
            )
            changes.append(
                _rollout_change(rollout, actor=actor, action="stop", reason=f"Stopped: {why}")
            )
    watched = _rollout_watch_ended(
        document=release.document,
        environment=release.environment,
        actor=actor,
        reason=f"Watch ended: {why}",
        exclude=exclude,
    )
    if watched is not None:
        changes.append(watched)
    return changes


def _rollout_watch_ended(
    *, document, environment, actor, reason: str, exclude=None
) -> RolloutChange | None:
    """End the paired watch of `document` in `environment`, if one runs (audited; its
    runtimes stop the watch's shadow with the payload re-rendered by the caller)."""
    watching = (
        Rollout.objects.watching()
        .filter(document=document, environment=environment)
        .exclude(pk=exclude)
        .first()
    )
    if watching is None:
        return None
    rollout = _rollout_locked(watching)
    if not rollout_allows(rollout, "watch_end"):
        return None  # ended meanwhile
    return _rollout_change(
        rollout, actor=actor, action="watch_end", reason=reason, watch_ended_at=timezone.now()
    )


def _rollout_void_request(rollout: Rollout, *, note: str) -> None:
    """Its plan's request, if it still waits, stops waiting (the rollout it asked for ended)."""
    ApprovalRequest.objects.filter(rollout=rollout, status=ApprovalRequest.Status.PENDING).update(
        status=ApprovalRequest.Status.VOID, decided_at=timezone.now(), decision_note=note
    )


def _rollout_refresh(change: RolloutChange, *also: RolloutChange | None) -> Rollout:
    """Re-render the runtime payload (a new ETag, the config stream's NOTIFY), then queue the
    webhook of the change (and of `also`: changes of other rollouts there in the same
    transaction): every change of a rollout ends so."""
    rollout = change.rollout
    rendered = runtime_config.payload_refresh(
        agent=rollout.document.agent, environment=rollout.environment
    )
    for each in (change, *also):
        if each is not None:
            _rollout_notify(each, etag=rendered.etag)
    return rollout
