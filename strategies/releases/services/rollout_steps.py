"""A rollout going further: each move to a larger share — the plan's approval (its first
step), an advance by hand, a step that baked — and its completion ask the one go-live
judgement again (`golive.rollout_go_live_refusals`), against the environment as it is at
that moment. A person's move is refused with the judgement's reason; the guards' (the
system's) becomes a pause saying why: it never completes silently."""

from __future__ import annotations

from datetime import timedelta

from context_runtime.findings import blocking
from django.conf import settings
from django.utils import timezone

from console.kernel.audit import SystemActor, actor_label
from console.kernel.errors import Conflict, ValidationFailed
from strategies.releases.models import ApprovalRequest, ReleaseEvent, Rollout
from strategies.releases.plans import plan_hash
from strategies.releases.selectors.golive import Path
from strategies.releases.selectors.refusals import (
    APPROVAL_REQUIRED,
    CALENDAR_CODES,
    PREVIEW_REQUIRED,
)
from strategies.releases.selectors.rollouts import rollout_go_live_refusals
from strategies.releases.services.move import _release_move
from strategies.releases.services.rollout_move import (
    RolloutChange,
    _rollout_change,
    _rollout_expect,
    _rollout_locked,
    _rollout_refresh,
)
from strategies.releases.services.state import rollout_conflict, rollout_state

# The judgement's refusals a person gets as a conflict (the environment changed under the
# rollout, or a freeze began / the change hours closed), not as the runtime's 400.
CONFLICTS = (APPROVAL_REQUIRED, PREVIEW_REQUIRED, *CALENDAR_CODES)


def _go_live_refused(rollout: Rollout, *, actor, path: Path, moving: str) -> Rollout | None:
    """None when the judgement lets the rollout's version go further now. Else a person's
    move is refused — 409 `approval_required` or `preview_required` (the environment became
    protected or started requiring a preview since the start), 400 `not_publishable` (the
    runtime cannot serve it, or the environment was archived) — and the system's becomes a
    pause saying why (the rollout, paused)."""
    refused = blocking(rollout_go_live_refusals(rollout, path=path, actor=actor))
    if not refused:
        return None
    environment = rollout.environment
    why = (
        f"{rollout.document.key} v{rollout.version.number} cannot go further in "
        f"{environment.key} now: " + " ".join(finding.message for finding in refused)
    )
    if not isinstance(actor, SystemActor):
        conflict = next((f for f in refused if f.code in CONFLICTS), None)
        if conflict is not None:
            raise Conflict(
                f"{why} Not {moving}.",
                code=conflict.code,
                details=[f.as_dict() for f in refused],
                extra={"current": rollout_state(rollout)},
            )
        raise ValidationFailed(f"{why} Not {moving}.", code="not_publishable", details=refused)
    change = _rollout_change(
        rollout,
        actor=actor,
        action="pause",
        reason=why,
        evidence={"message": why, "refused": [finding.code for finding in refused]},
        state=Rollout.State.PAUSED,
        end_reason=f"{why} Paused instead of moving on.",
    )
    return _rollout_refresh(change)


def _rollout_approved(approval: ApprovalRequest, *, actor) -> Rollout:
    """A second person approved the plan (the approval checked the version's content hash
    and the live revision): the rollout starts, at its first step, if its plan is still the
    one asked for and the judgement lets its first share go live now."""
    rollout = _rollout_locked(approval.rollout)
    _rollout_expect(rollout, "approve", words="start")
    if plan_hash(rollout.plan) != rollout.plan_hash:
        raise rollout_conflict(
            rollout,
            "The plan changed since it was requested; it must be requested again.",
            code="content_changed",
        )
    _go_live_refused(rollout, actor=actor, path=Path.ROLLOUT_STEP, moving="started")
    change = _rollout_change(
        rollout,
        actor=actor,
        action="approve",
        reason=approval.decision_note,
        state=Rollout.State.RUNNING,
        step=0,
        step_started_at=timezone.now(),
        step_extended=False,
    )
    return _rollout_refresh(change)


def _next_step(rollout: Rollout, *, actor, reason: str) -> Rollout:
    """The next step (its bake starts now), or after the last the rollout completes."""
    if rollout.is_last_step:
        return _complete(rollout, actor=actor, reason=reason)
    paused = _go_live_refused(rollout, actor=actor, path=Path.ROLLOUT_STEP, moving="moved on")
    if paused is not None:
        return paused
    change: RolloutChange = _rollout_change(
        rollout,
        actor=actor,
        action="step",
        reason=reason,
        state=Rollout.State.RUNNING,
        step=rollout.step + 1,
        step_started_at=timezone.now(),
        step_extended=False,
        guards=[],
        end_reason="",
    )
    return _rollout_refresh(change)


def _complete(rollout: Rollout, *, actor, reason: str) -> Rollout:
    """The new version goes live the one way a release moves (an approved publish where the
    plan was approved), and the rollout is completed, in one transaction — if the judgement
    lets it go live for every unit now."""
    paused = _go_live_refused(rollout, actor=actor, path=Path.ROLLOUT_FINISH, moving="finished")
    if paused is not None:
        return paused
    change = _rollout_change(
        rollout, actor=actor, action="complete", reason=reason, end_reason="", **_watch(rollout)
    )
    approval = (
        rollout.approvals.filter(status=ApprovalRequest.Status.APPROVED).order_by("-id").first()
    )
    _release_move(
        document=rollout.document,
        environment=rollout.environment,
        to_version=rollout.version,
        action=ReleaseEvent.Action.APPROVE if approval else ReleaseEvent.Action.PUBLISH,
        actor=actor,
        actor_label=actor_label(actor),
        reason=f"Staged rollout {rollout.key} completed: {reason}",
        expected_revision=None,
        approval=approval,
        rollout=rollout,
    )
    return _rollout_refresh(change)


def _watch(rollout: Rollout) -> dict:
    """The paired watch a completing rollout enters: the environment's share
    (`watch_share`; 0 turns it off) for ROLLOUTS_WATCH_DAYS (0: off)."""
    share = float(rollout.environment.watch_share or 0)
    days = float(settings.ROLLOUTS_WATCH_DAYS)
    if share <= 0 or days <= 0:
        return {}
    return {"watch_until": timezone.now() + timedelta(days=days), "watch_share": min(share, 1.0)}
