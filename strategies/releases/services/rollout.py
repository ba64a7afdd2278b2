"""Staged rollouts (issue 23, docs/rollouts.md): a new version of a strategy replaces the live
one step by step — a growing share of units served the new version, the other arm running as
shadow on the same request — while the guards watch (the evaluator,
`traces.rollouts.tasks.evaluate_rollouts`). Operators start, pause, resume, advance, finish
and stop; the guards record their states, pause, extend a step, move on, or roll back.

Every change is one transaction on the rollout's locked row (`rollout_move`): of two actors
at once one wins, the other gets 409 with the rollout as it now stands. An action on a
completed, rolled back or stopped rollout is 409 `rollout_finished`. Each change grows the
rollout's revision, re-renders the runtime payload (its `rollouts` map, a new ETag, the
config stream's NOTIFY), writes its audit row and queues `release.changed`.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from context_runtime.findings import blocking
from django.conf import settings
from django.utils import timezone

from console.kernel.audit import SystemActor, actor_label
from console.kernel.errors import Conflict, ValidationFailed
from console.kernel.policy import (
    check_user_can_request_rollback,
    check_user_can_rollout,
    refuse_publish,
    rollout_refusal,
)
from console.kernel.reasons import reason_clean
from console.kernel.transactions import service_transaction
from console.kernel.writes import create_or_refuse
from strategies.catalog.models import Environment
from strategies.documents.models import Version
from strategies.releases.models import ApprovalRequest, ReleaseEvent, Rollout
from strategies.releases.plans import ALL_AT_ONCE, STAGED, plan_hash, plan_resolve
from strategies.releases.selectors import (
    ALREADY_LIVE,
    APPROVAL_PENDING,
    APPROVAL_REQUIRED,
    INVALID_PLAN,
    INVALID_UNIT,
    NOT_A_STRATEGY,
    NOT_ALLOWED,
    NOT_FOUND,
    NOT_FROZEN,
    NOTHING_LIVE,
    ROLLOUT_ACTIVE,
    active_rollout,
    is_runtime_finding,
    pending_for,
    rollout_refusals,
    rollout_runtime_refusals,
)
from strategies.releases.services.approvals import _approval_create
from strategies.releases.services.checks import _refuse_target
from strategies.releases.services.move import _release_move
from strategies.releases.services.publish import PublishOutcome
from strategies.releases.services.rollback import _release_rollback
from strategies.releases.services.rollout_move import (
    RolloutChange,
    _rollout_change,
    _rollout_expect,
    _rollout_locked,
    _rollout_refresh,
    _rollout_void_request,
    _rollout_watch_ended,
    rollout_conflict,
)
from strategies.releases.services.state import _current, approval_state, rollout_state

SYSTEM = SystemActor("system")
SPLIT_UNSUPPORTED = "split_unsupported"
ROLLOUT_STATE_MOVED = "rollout_moved"  # a guard judged a step the rollout is no longer at
WATCH_ENDED = "watch_ended"  # the paired watch is over (on time, or by a move)
WATCH_NO_WARNING = "watch_no_warning"  # nothing warned: no one-click rollback to offer
RELEASE_CHANGED = "release_changed"  # the release is no longer the version the watch watched


def guard_actor(guard: str) -> SystemActor:
    """A guard acting on a rollout: audited as the system, named `guard:<name>`."""
    return SystemActor(f"guard:{guard}")


def default_plan(environment: Environment) -> str:
    """The staged template where the environment is protected, all at once elsewhere."""
    return STAGED if environment.protected else ALL_AT_ONCE


# --- start --------------------------------------------------------------------------------------
def rollout_refuse(refusals, *, version: Version, environment: Environment, actor) -> None:
    """Raise the first of the judgement's refusals: who may (404/403), the version, plan or
    unit (400), nothing live or already live (409), a rollout already active or a request
    already waiting (409 with `current`), then what the runtime cannot serve (400
    `not_publishable`, or `split_unsupported` when its manifest does not declare `split`,
    every reason in `details`). Passes when nothing refuses."""
    refused = blocking(refusals)
    if not refused:
        return
    document = version.document
    codes = {finding.code: finding for finding in refused}
    if NOT_FOUND in codes or NOT_ALLOWED in codes:
        refuse_publish(
            rollout_refusal(actor, environment, document.agent),
            user=actor,
            environment=environment,
            agent=document.agent,
            target=document,
        )
    own = [f for f in refused if f.code in (NOT_A_STRATEGY, NOT_FROZEN, INVALID_PLAN, INVALID_UNIT)]
    if own:
        raise ValidationFailed(own[0].message, code=own[0].code, details=own)
    for code in (NOTHING_LIVE, ALREADY_LIVE):
        if code in codes:
            raise Conflict(codes[code].message, code=code, extra={"current": None})
    if ROLLOUT_ACTIVE in codes:
        active = active_rollout(document=document, environment=environment)
        raise rollout_conflict(active, codes[ROLLOUT_ACTIVE].message, code=ROLLOUT_ACTIVE)
    if APPROVAL_PENDING in codes:
        pending = pending_for(document=document, environment=environment)
        raise Conflict(
            codes[APPROVAL_PENDING].message,
            code=APPROVAL_PENDING,
            extra={"current": approval_state(pending) if pending else None},
        )
    runtime = [f for f in refused if is_runtime_finding(f)]
    if any(f.code == SPLIT_UNSUPPORTED for f in runtime):
        raise ValidationFailed(
            f"{document.key} v{version.number} cannot roll out in steps in {environment.key}: "
            + " ".join(f.message for f in runtime),
            code=SPLIT_UNSUPPORTED,
            details=runtime,
        )
    _refuse_target(refused, version=version, environment=environment, actor=actor, verb="roll out")


@service_transaction(durable=True)
def rollout_start(
    *,
    version: Version,
    environment: Environment,
    actor,
    plan: str | list = "staged",
    unit: str = "task",
    reason: str = "",
) -> Rollout:
    """Roll `version` out in `environment` by the steps of `plan` (a template's name —
    `staged`, `all_at_once` — or a list of steps), assigning by `unit` (`task` or
    `principal`). Judged like a publish against the runtime, which must declare `split`. In
    a protected environment the whole plan waits for a second person's approval, once
    (bound to the version's content hash and the plan); elsewhere it runs at once."""
    document = version.document
    refusals = rollout_refusals(
        version=version, environment=environment, actor=actor, plan=plan, unit=unit
    )
    rollout_refuse(refusals, version=version, environment=environment, actor=actor)
    plan_name, steps = plan_resolve(plan)
    live = _current(document, environment)
    needs_approval = any(f.code == APPROVAL_REQUIRED for f in refusals)
    now = timezone.now()
    label = actor_label(actor)
    rollout = create_or_refuse(
        Rollout,
        lambda: rollout_conflict(
            active_rollout(document=document, environment=environment),
            f"A rollout of {document.key} in {environment.key} started at the same moment.",
            code=ROLLOUT_ACTIVE,
        ),
        key=f"new-{uuid.uuid4().hex}",
        document=document,
        environment=environment,
        version=version,
        control_version=live.version,
        plan_name=plan_name,
        plan=steps,
        plan_hash=plan_hash(steps),
        unit=unit,
        state=Rollout.State.AWAITING_APPROVAL if needs_approval else Rollout.State.RUNNING,
        step_started_at=None if needs_approval else now,
        reason=reason.strip(),
        started_by=label,
        revision=0,  # the change below makes it 1
    )
    Rollout.objects.filter(pk=rollout.pk).update(key=f"ro-{rollout.pk}")
    # The new rollout's own shadow replaces the watch of the one before (same document here).
    watched = _rollout_watch_ended(
        document=document,
        environment=environment,
        actor=actor,
        reason=f"Watch ended: ro-{rollout.pk} rolls out v{version.number} here.",
    )
    rollout = _rollout_locked(rollout)
    if needs_approval:
        _approval_create(
            version=version,
            environment=environment,
            live=live,
            actor=actor,
            reason=reason.strip() or f"Staged rollout {rollout.key} ({plan_name})",
            kind=ApprovalRequest.Kind.ROLLOUT,
            rollout=rollout,
        )
    change = _rollout_change(rollout, actor=actor, action="start", reason=reason.strip())
    return _rollout_refresh(change, watched)


# --- operators ----------------------------------------------------------------------------------
def _operator(rollout: Rollout, actor, action: str) -> Rollout:
    """Who may (the policy), then the rollout locked: what it is now."""
    check_user_can_rollout(
        actor, rollout.environment, rollout.document.agent, action, target=rollout
    )
    return _rollout_locked(rollout)


@service_transaction(durable=True)
def rollout_pause(*, rollout: Rollout, actor, reason: str = "") -> Rollout:
    """Hold the rollout at its step: runtimes keep its share, the guards stop moving it on."""
    rollout = _operator(rollout, actor, "pause")
    _rollout_expect(rollout, [Rollout.State.RUNNING], action="pause")
    change = _rollout_change(
        rollout,
        actor=actor,
        action="pause",
        reason=reason.strip(),
        state=Rollout.State.PAUSED,
        end_reason=reason.strip() or f"Paused by {actor_label(actor)}.",
    )
    return _rollout_refresh(change)


@service_transaction(durable=True)
def rollout_resume(*, rollout: Rollout, actor, reason: str = "") -> Rollout:
    """Run on from the step it is at; its bake starts again (the evidence is the step's)."""
    rollout = _operator(rollout, actor, "resume")
    _rollout_expect(rollout, [Rollout.State.PAUSED], action="resume")
    change = _rollout_change(
        rollout,
        actor=actor,
        action="resume",
        reason=reason.strip(),
        state=Rollout.State.RUNNING,
        step_started_at=timezone.now(),
        step_extended=False,
        end_reason="",
    )
    return _rollout_refresh(change)


@service_transaction(durable=True)
def rollout_advance(*, rollout: Rollout, actor, reason: str = "") -> Rollout:
    """Move to the next step now, without waiting for the bake (after the last: complete)."""
    rollout = _operator(rollout, actor, "advance")
    _rollout_expect(rollout, Rollout.SERVED_STATES, action="advance")
    return _next_step(rollout, actor=actor, reason=reason.strip() or "Advanced by hand.")


@service_transaction(durable=True)
def rollout_finish(*, rollout: Rollout, actor, reason: str = "") -> Rollout:
    """Skip the remaining steps: the new version goes live now (the plan's approval holds)."""
    rollout = _operator(rollout, actor, "finish")
    _rollout_expect(rollout, Rollout.SERVED_STATES, action="finish")
    paused = _runtime_still_serves(rollout, actor=actor, moving="finished")
    if paused is not None:
        return paused
    return _complete(rollout, actor=actor, reason=reason.strip() or "Finished by hand.")


@service_transaction(durable=True)
def rollout_stop(*, rollout: Rollout, actor, reason: str) -> Rollout:
    """End it: runtimes serve the live (control) version alone again, at once. Saying why
    is required (recorded in the timeline and the audit log)."""
    reason = reason_clean(reason, ask="Say why you stop the rollout (recorded in the audit log).")
    rollout = _operator(rollout, actor, "stop")
    _rollout_expect(rollout, Rollout.ACTIVE_STATES, action="stop")
    _rollout_void_request(rollout, note=f"Void: the rollout was stopped ({reason}).")
    change = _rollout_change(rollout, actor=actor, action="stop", reason=reason, end_reason=reason)
    return _rollout_refresh(change)


# What an operator may do to a rollout, by the word the pages and the API use.
ROLLOUT_OPERATOR_ACTIONS = {
    "pause": rollout_pause,
    "resume": rollout_resume,
    "advance": rollout_advance,
    "finish": rollout_finish,
    "stop": rollout_stop,
}


# --- the guards (the evaluator calls these; the actor is the system) -------------------------------
def _at_step(rollout: Rollout, seen: Rollout, *, action: str) -> None:
    """409 unless the locked rollout still runs the step the caller judged: a second
    evaluator (a beat that fired twice, a worker killed and its task redelivered) never
    doubles a step, an extension or a rollback."""
    _rollout_expect(rollout, [Rollout.State.RUNNING], action=action)
    if rollout.step != seen.step or rollout.step_started_at != seen.step_started_at:
        raise rollout_conflict(
            rollout,
            f"{rollout.key} moved on since it was judged (step {rollout.step} now).",
            code=ROLLOUT_STATE_MOVED,
        )


@service_transaction(durable=True)
def rollout_guard_rollback(*, rollout: Rollout, guard: str, evidence: dict) -> Rollout:
    """A guard saw the new version do worse: the rollout ends rolled back, runtimes serve
    the control version alone at once; the guard is the actor, its evidence (counts, bound,
    request ids) in the audit row, on the page and in the webhook. Where the environment
    asks approval of guard rollbacks, it pauses instead and says so."""
    actor = guard_actor(guard)
    locked = _rollout_locked(rollout)
    _at_step(locked, rollout, action="roll back")
    message = evidence.get("message") or f"The {guard} guard breached."
    if locked.environment.guard_rollbacks_need_approval:
        change = _rollout_change(
            locked,
            actor=actor,
            action="pause",
            reason=f"{message} {locked.environment.key} asks a person to approve guard "
            "rollbacks: stop it to roll back, or resume.",
            evidence=evidence,
            state=Rollout.State.PAUSED,
            end_reason=f"{message} Waiting for a person: roll back (stop) or resume.",
        )
        return _rollout_refresh(change)
    change = _rollout_change(
        locked,
        actor=actor,
        action="rollback",
        reason=message,
        evidence=evidence,
        end_reason=message,
    )
    return _rollout_refresh(change)


@service_transaction(durable=True)
def rollout_guard_pause(*, rollout: Rollout, guard: str, evidence: dict, reason: str) -> Rollout:
    """A guard cannot tell (too little data, a split the runtime does not apply, a provider
    failing both versions alike): hold the rollout and say why."""
    locked = _rollout_locked(rollout)
    _at_step(locked, rollout, action="pause")
    change = _rollout_change(
        locked,
        actor=guard_actor(guard),
        action="pause",
        reason=reason,
        evidence=evidence,
        state=Rollout.State.PAUSED,
        end_reason=reason,
    )
    return _rollout_refresh(change)


@service_transaction(durable=True)
def rollout_step_done(*, rollout: Rollout) -> Rollout:
    """The step baked with every guard ok: the next step (its bake starts now), or after the
    last the new version goes live and the rollout is completed."""
    locked = _rollout_locked(rollout)
    _at_step(locked, rollout, action="move on")
    return _next_step(locked, actor=SYSTEM, reason="The step baked with every guard ok.")


@service_transaction(durable=True)
def rollout_step_extend(*, rollout: Rollout) -> Rollout:
    """Too little data at the end of the bake: the step bakes once more (once per step)."""
    locked = _rollout_locked(rollout)
    _at_step(locked, rollout, action="extend its step")
    if locked.step_extended:
        raise rollout_conflict(
            locked, f"Step {locked.step} of {locked.key} was extended already.", code="extended"
        )
    change = _rollout_change(
        locked,
        actor=SYSTEM,
        action="extend",
        reason="Too little data at the end of the bake: the step bakes once more.",
        step_extended=True,
    )
    return _rollout_refresh(change)


def rollout_record_guards(*, rollout: Rollout, guards: list[dict]) -> bool:
    """The guards' states for the page (no audit row, no revision: nothing runtimes see
    changed). Only while it runs or is paused at the step judged; False otherwise."""
    return bool(
        Rollout.objects.filter(
            pk=rollout.pk, state__in=Rollout.SERVED_STATES, step=rollout.step
        ).update(guards=guards, guards_at=timezone.now())
    )


# --- moving on ------------------------------------------------------------------------------------
def _runtime_still_serves(rollout: Rollout, *, actor, moving: str) -> Rollout | None:
    """None when the runtime can still serve the new version; else the guards' move becomes a
    pause saying why (the rollout, paused), and a person's is refused (400 not_publishable)."""
    refused = rollout_runtime_refusals(rollout)
    if not refused:
        return None
    why = (
        f"The runtime in {rollout.environment.key} cannot serve "
        f"{rollout.document.key} v{rollout.version.number} now: "
        + " ".join(finding.message for finding in refused)
    )
    if not isinstance(actor, SystemActor):
        raise ValidationFailed(f"{why} Not {moving}.", code="not_publishable", details=refused)
    change = _rollout_change(
        rollout,
        actor=actor,
        action="pause",
        reason=why,
        state=Rollout.State.PAUSED,
        end_reason=f"{why} Paused instead of moving on.",
    )
    return _rollout_refresh(change)


def _next_step(rollout: Rollout, *, actor, reason: str) -> Rollout:
    paused = _runtime_still_serves(rollout, actor=actor, moving="moved on")
    if paused is not None:
        return paused
    if rollout.is_last_step:
        return _complete(rollout, actor=actor, reason=reason)
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
    plan was approved), and the rollout is completed, in one transaction."""
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


# --- the paired watch after completion (issue 23 item 4) -----------------------------------------
def _watching(rollout: Rollout, *, action: str) -> Rollout:
    """The rollout locked, 409 `watch_ended` unless its watch still runs."""
    locked = _rollout_locked(rollout)
    if not locked.watching:
        raise rollout_conflict(
            locked,
            f"The paired watch of {locked.key} is over: nothing to {action}.",
            code=WATCH_ENDED,
        )
    return locked


def rollout_record_watch_guards(*, rollout: Rollout, guards: list[dict]) -> bool:
    """The watch's paired guard state for the page (no audit row, no revision)."""
    return bool(
        Rollout.objects.watching()
        .filter(pk=rollout.pk)
        .update(guards=guards, guards_at=timezone.now())
    )


@service_transaction(durable=True)
def rollout_watch_warn(*, rollout: Rollout, guard: str, evidence: dict) -> Rollout:
    """The paired guard breached during the watch: warn — the evidence (counts, bound, request
    ids) kept on the rollout for the release row, the dashboard and its page, audited with
    the guard as the actor, and `release.changed` (`rollout_watch_warn`). Never rolls back:
    a person decides, with one click (`rollout_watch_rollback`)."""
    locked = _watching(rollout, action="warn of")
    warning = {**evidence, "at": timezone.now().isoformat(), "guard": guard}
    message = evidence.get("message") or f"The {guard} guard breached during the watch."
    change = _rollout_change(
        locked,
        actor=guard_actor(guard),
        action="watch_warn",
        reason=message,
        evidence=warning,
        evidence_field="watch_warning",  # the rollout's own `evidence` stays what ended it
    )
    return _rollout_refresh(change)


@service_transaction(durable=True)
def rollout_watch_end(*, rollout: Rollout, actor=SYSTEM, reason: str = "") -> Rollout:
    """End the watch (the beat, when its time is up): runtimes stop its shadow."""
    locked = _watching(rollout, action="end")
    change = _rollout_change(
        locked,
        actor=actor,
        action="watch_end",
        reason=reason or "The paired watch is over.",
        watch_ended_at=timezone.now(),
    )
    return _rollout_refresh(change)


@service_transaction(durable=True)
def rollout_watch_rollback(*, rollout: Rollout, actor, reason: str = "") -> PublishOutcome:
    """One click from a watch warning: the ordinary rollback to the version the rollout
    replaced (the same permission, revert policy and approval rules as a rollback by hand),
    its audit row carrying the warning's evidence — nothing is analysed again. 409
    `watch_ended` once the watch is over, `watch_no_warning` without a warning,
    `release_changed` when the release no longer serves the rollout's version."""
    check_user_can_request_rollback(actor, rollout.document.agent, target=rollout)
    locked = _watching(rollout, action="roll back from")
    warning = locked.watch_warning
    if not warning:
        raise rollout_conflict(
            locked,
            f"{locked.key}'s watch has not warned: roll back by hand.",
            code=WATCH_NO_WARNING,
        )
    live = _current(locked.document, locked.environment)
    if live is None or live.version_id != locked.version_id:
        raise rollout_conflict(
            locked,
            f"{locked.document.key} in {locked.environment.key} no longer serves "
            f"v{locked.version.number}: the warning is about a release that changed.",
            code=RELEASE_CHANGED,
        )
    why = reason.strip() or warning.get("message", "")
    return _release_rollback(
        release=live,
        to_version=locked.control_version,
        actor=actor,
        reason=f"Rolled back from the paired watch of {locked.key}: {why}",
        expected_revision=live.revision,
        evidence=warning,
    )


__all__ = [
    "ROLLOUT_OPERATOR_ACTIONS",
    "default_plan",
    "guard_actor",
    "rollout_advance",
    "rollout_finish",
    "rollout_guard_pause",
    "rollout_guard_rollback",
    "rollout_pause",
    "rollout_record_guards",
    "rollout_refuse",
    "rollout_resume",
    "rollout_start",
    "rollout_state",
    "rollout_step_done",
    "rollout_step_extend",
    "rollout_stop",
    "rollout_record_watch_guards",
    "rollout_watch_end",
    "rollout_watch_rollback",
    "rollout_watch_warn",
]
