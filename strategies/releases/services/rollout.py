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

from context_runtime.findings import blocking
from django.utils import timezone

from console.kernel.audit import actor_label
from console.kernel.errors import Conflict, ValidationFailed
from console.kernel.policy import check_user_can_rollout, refuse_publish, rollout_refusal
from console.kernel.reasons import reason_clean
from console.kernel.transactions import service_transaction
from console.kernel.writes import create_or_refuse
from strategies.catalog.models import Environment
from strategies.documents.models import Version
from strategies.releases.models import ApprovalRequest, Rollout
from strategies.releases.plans import ALL_AT_ONCE, STAGED, plan_hash, plan_resolve
from strategies.releases.selectors import (
    ALREADY_LIVE,
    APPROVAL_PENDING,
    APPROVAL_REQUIRED,
    CHANGE_RECORD_REQUIRED,
    INVALID_PLAN,
    INVALID_UNIT,
    NOT_A_STRATEGY,
    NOT_ALLOWED,
    NOT_FOUND,
    NOT_FROZEN,
    NOTHING_LIVE,
    PREVIEW_REQUIRED,
    ROLLOUT_ACTIVE,
    active_rollout,
    is_runtime_finding,
    pending_for,
    rollout_refusals,
)
from strategies.releases.selectors.golive import UNREVIEWED
from strategies.releases.services.approvals import _approval_create
from strategies.releases.services.checks import _refuse_target, calendar_refuse
from strategies.releases.services.rollout_move import (
    _rollout_change,
    _rollout_expect,
    _rollout_locked,
    _rollout_refresh,
    _rollout_void_request,
    _rollout_watch_ended,
    rollout_conflict,
)
from strategies.releases.services.rollout_steps import _complete, _next_step
from strategies.releases.services.state import _current, approval_state
from strategies.releases.transitions import ROLLOUT_OPERATOR_ACTIONS as OPERATOR_ACTION_NAMES

SPLIT_UNSUPPORTED = "split_unsupported"


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
    if not runtime:
        calendar_refuse(refused)
    if PREVIEW_REQUIRED in codes and not runtime:
        raise Conflict(
            codes[PREVIEW_REQUIRED].message,
            code=PREVIEW_REQUIRED,
            details=[codes[PREVIEW_REQUIRED].as_dict()],
        )
    if any(f.code == SPLIT_UNSUPPORTED for f in runtime):
        raise ValidationFailed(
            f"{document.key} v{version.number} cannot roll out in steps in {environment.key}: "
            + " ".join(f.message for f in runtime),
            code=SPLIT_UNSUPPORTED,
            details=runtime,
        )
    _refuse_target(refused, version=version, environment=environment, actor=actor, verb="roll out")
    if CHANGE_RECORD_REQUIRED in codes:
        # Raised last: everything else allows the start; the caller asks the change system.
        raise Conflict(codes[CHANGE_RECORD_REQUIRED].message, code=CHANGE_RECORD_REQUIRED)


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
    # During a break-glass the judgement flags that it goes live unreviewed: the start says so.
    unreviewed = any(f.code == UNREVIEWED for f in refusals)
    change = _rollout_change(
        rollout,
        actor=actor,
        action="start",
        reason=reason.strip(),
        audit_extra={"unreviewed": True} if unreviewed else None,
    )
    return _rollout_refresh(change, watched)


# --- operators ----------------------------------------------------------------------------------
def _operator(rollout: Rollout, actor, action: str) -> Rollout:
    """Who may (the policy), then the rollout locked: what it is now."""
    check_user_can_rollout(
        actor, rollout.environment, rollout.document.agent, action, target=rollout
    )
    return _rollout_locked(rollout)


# A scheduled start runs inside the schedule's own transaction (services.schedules): the
# start and the schedule's end commit together, so a schedule never starts a rollout twice.
rollout_start_nested = service_transaction(rollout_start.__wrapped__)


@service_transaction(durable=True)
def rollout_pause(*, rollout: Rollout, actor, reason: str = "") -> Rollout:
    """Hold the rollout at its step: runtimes keep its share, the guards stop moving it on."""
    rollout = _operator(rollout, actor, "pause")
    _rollout_expect(rollout, "pause")
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
    _rollout_expect(rollout, "resume")
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
    _rollout_expect(rollout, "advance")
    return _next_step(rollout, actor=actor, reason=reason.strip() or "Advanced by hand.")


@service_transaction(durable=True)
def rollout_finish(*, rollout: Rollout, actor, reason: str = "") -> Rollout:
    """Skip the remaining steps: the new version goes live now (the plan's approval holds)."""
    rollout = _operator(rollout, actor, "finish")
    _rollout_expect(rollout, "finish")
    return _complete(rollout, actor=actor, reason=reason.strip() or "Finished by hand.")


@service_transaction(durable=True)
def rollout_stop(*, rollout: Rollout, actor, reason: str) -> Rollout:
    """End it: runtimes serve the live (control) version alone again, at once. Saying why
    is required (recorded in the timeline and the audit log)."""
    reason = reason_clean(reason, ask="Say why you stop the rollout (recorded in the audit log).")
    rollout = _operator(rollout, actor, "stop")
    _rollout_expect(rollout, "stop")
    _rollout_void_request(rollout, note=f"Void: the rollout was stopped ({reason}).")
    change = _rollout_change(rollout, actor=actor, action="stop", reason=reason, end_reason=reason)
    return _rollout_refresh(change)


# What an operator may do to a rollout, by the word the pages and the API use (the state
# table names them; each word's service here).
ROLLOUT_OPERATOR_ACTIONS = {
    name: {
        "pause": rollout_pause,
        "resume": rollout_resume,
        "advance": rollout_advance,
        "finish": rollout_finish,
        "stop": rollout_stop,
    }[name]
    for name in OPERATOR_ACTION_NAMES
}


__all__ = [
    "ROLLOUT_OPERATOR_ACTIONS",
    "default_plan",
    "rollout_advance",
    "rollout_finish",
    "rollout_pause",
    "rollout_refuse",
    "rollout_resume",
    "rollout_start",
    "rollout_stop",
]
