"""What the guards do to a rollout (the evaluator, `traces.rollouts.evaluator`, calls these;
the actor is the system, named `guard:<name>`): record their states, pause, extend a step,
move on, or roll back. Each judges the step it saw: a second evaluator (a beat that fired
twice, a worker killed and its task redelivered) never doubles a step, an extension or a
rollback."""

from __future__ import annotations

from django.utils import timezone

from console.kernel.audit import SystemActor
from console.kernel.transactions import service_transaction
from strategies.releases.models import Rollout
from strategies.releases.selectors.golive import (
    APPROVAL_REQUIRED,
    Candidate,
    Path,
    go_live_refusals,
)
from strategies.releases.services.rollout_move import (
    _rollout_change,
    _rollout_expect,
    _rollout_locked,
    _rollout_refresh,
    rollout_conflict,
)
from strategies.releases.services.rollout_steps import _next_step
from strategies.releases.services.state import _current
from strategies.releases.transitions import ROLLOUT_TRANSITIONS

SYSTEM = SystemActor("system")
ROLLOUT_STATE_MOVED = "rollout_moved"  # a guard judged a step the rollout is no longer at


def guard_actor(guard: str) -> SystemActor:
    """A guard acting on a rollout: audited as the system, named `guard:<name>`."""
    return SystemActor(f"guard:{guard}")


def _at_step(rollout: Rollout, seen: Rollout, *, action: str, words: str) -> None:
    """409 unless the locked rollout still runs the step the caller judged: a second
    evaluator (a beat that fired twice, a worker killed and its task redelivered) never
    doubles a step, an extension or a rollback."""
    _rollout_expect(rollout, action, words=words)
    if rollout.step != seen.step or rollout.step_started_at != seen.step_started_at:
        raise rollout_conflict(
            rollout,
            f"{rollout.key} moved on since it was judged (at step {rollout.step + 1} of "
            f"{len(rollout.plan)} now).",
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
    _at_step(locked, rollout, action="rollback", words="roll back")
    message = evidence.get("message") or f"The {guard} guard breached."
    judged = go_live_refusals(
        Path.GUARD_ROLLBACK,
        Candidate.of(locked.control_version),
        environment=locked.environment,
        actor=actor,
        live=_current(locked.document, locked.environment),
    )
    if any(finding.code == APPROVAL_REQUIRED for finding in judged):
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
    _at_step(locked, rollout, action="guard_pause", words="pause")
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
    _at_step(locked, rollout, action="step", words="move on")
    return _next_step(locked, actor=SYSTEM, reason="The step baked with every guard ok.")


@service_transaction(durable=True)
def rollout_step_extend(*, rollout: Rollout) -> Rollout:
    """Too little data at the end of the bake: the step bakes once more (once per step)."""
    locked = _rollout_locked(rollout)
    _at_step(locked, rollout, action="extend", words="extend its step")
    if locked.step_extended:
        raise rollout_conflict(
            locked,
            f"Step {locked.step + 1} of {locked.key} was extended already.",
            code="extended",
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
            pk=rollout.pk, state__in=ROLLOUT_TRANSITIONS["record_guards"], step=rollout.step
        ).update(guards=guards, guards_at=timezone.now())
    )
