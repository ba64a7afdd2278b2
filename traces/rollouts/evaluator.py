"""The guard loop of staged rollouts (issue 23): every 30 s, for each running rollout, the
step's evidence (`selectors.step_evidence`) judged by the guards (`guards.evaluate`), then
the rollout services act (strategies.releases.services):

1. the guards' states are recorded for the rollout page;
2. a breach rolls back at once (or pauses where the environment asks a person to approve
   guard rollbacks: the service decides that);
3. a guard that cannot tell — a provider failing both versions (attribution), a split the
   runtime does not apply (sample ratio) — pauses, naming why;
4. once the bake is over: too little data extends the step once, then the environment's
   `on_insufficient_data` (pause, roll back, proceed); every guard ok moves on (the next
   step, or the new version published live after the last).

After completion, each rollout in its paired watch (issue 23 item 4) is judged by the paired
guard alone — there is no control arm, only requests that ran both versions — over the watch's
step since it began (or since the minute after its last warning): a breach warns (`rollout_watch_warn`), never
rolls back; a watch whose time is up ends.

Safe to run twice at once and to be killed anywhere: each action is one transaction on the
rollout's locked row, conditional on the step it judged (a 409 `rollout_moved` otherwise),
so a step or a rollback is never doubled; what was not committed is judged again 30 s later.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.utils import timezone

from console.kernel.errors import Conflict
from strategies.catalog.models import Environment
from strategies.releases.models import Rollout
from strategies.releases.selectors import (
    evidence_request_ids,
    rollouts_running,
    rollouts_watching,
)
from strategies.releases.services import (
    rollout_guard_pause,
    rollout_guard_rollback,
    rollout_record_guards,
    rollout_record_watch_guards,
    rollout_step_done,
    rollout_step_extend,
    rollout_watch_end,
    rollout_watch_warn,
)
from traces.rollouts import guards
from traces.rollouts.selectors import step_evidence

log = logging.getLogger(__name__)

# What the evaluator did with one rollout (the task's summary and the tests read these).
BAKING, MOVED_ON, EXTENDED, PAUSED, ROLLED_BACK, SKIPPED = (
    "baking",
    "moved_on",
    "extended",
    "paused",
    "rolled_back",
    "skipped",
)
WATCHING, WARNED, WATCH_ENDED = "watching", "warned", "watch_ended"
# The watch compares the two versions on the same requests only: no arms to weigh.
WATCH_GUARDS = (guards.PAIRED,)


def _evidence_of(result: guards.GuardResult, rollout: Rollout, *, step=None, share=None) -> dict:
    """A guard's result as the audit row, the page and the webhook keep it: its words, the
    step, its facts (counts, bound) and up to five request ids."""
    return {
        "guard": result.name,
        "label": guards.LABELS.get(result.name, result.name),
        "state": result.state,
        "message": result.message,
        "statistics": result.statistics,
        "step": rollout.step if step is None else step,
        "share": rollout.share if share is None else share,
        "request_ids": evidence_request_ids(result.evidence),
        **result.evidence,
    }


def rollout_evaluate(rollout: Rollout, *, now=None) -> str:
    """Judge one running rollout's step and act; returns what it did."""
    now = now or timezone.now()
    evidence = step_evidence(
        rollout_key=rollout.key, step=rollout.step, since=rollout.step_started_at
    )
    versions = guards.Versions.numbered(rollout.version.number, rollout.control_version.number)
    results = guards.evaluate(evidence, rollout.environment, versions=versions)
    rollout_record_guards(rollout=rollout, guards=[result.as_dict() for result in results])
    by_state: dict[str, list] = {}
    for result in results:
        by_state.setdefault(result.state, []).append(result)
    if guards.BREACH in by_state:
        breach = by_state[guards.BREACH][0]
        ended = rollout_guard_rollback(
            rollout=rollout, guard=breach.name, evidence=_evidence_of(breach, rollout)
        )
        return ROLLED_BACK if ended.state == Rollout.State.ROLLED_BACK else PAUSED
    if guards.PAUSE in by_state:
        # The attribution guard names the provider; prefer its words to the guard it held.
        held = by_state[guards.PAUSE]
        pause = next((r for r in held if r.name == guards.ATTRIBUTION), held[0])
        rollout_guard_pause(
            rollout=rollout,
            guard=pause.name,
            evidence=_evidence_of(pause, rollout),
            reason=pause.message,
        )
        return PAUSED
    if now < rollout.step_started_at + timedelta(seconds=rollout.bake_seconds):
        return BAKING
    if guards.INSUFFICIENT in by_state:
        return _insufficient(rollout, by_state[guards.INSUFFICIENT][0])
    return _moved_on(rollout)


def _moved_on(rollout: Rollout) -> str:
    """The next step, or a pause when the runtime can no longer serve the new version."""
    moved = rollout_step_done(rollout=rollout)
    return PAUSED if moved.state == Rollout.State.PAUSED else MOVED_ON


def _insufficient(rollout: Rollout, short: guards.GuardResult) -> str:
    """Too little data at the end of the bake: extend once, then the environment decides."""
    if not rollout.step_extended:
        rollout_step_extend(rollout=rollout)
        return EXTENDED
    choice = rollout.environment.on_insufficient_data
    evidence = _evidence_of(short, rollout)
    if choice == Environment.OnInsufficientData.PROCEED:
        return _moved_on(rollout)
    if choice == Environment.OnInsufficientData.ROLLBACK:
        evidence["message"] = f"{short.message} Still too little data after the extension."
        ended = rollout_guard_rollback(rollout=rollout, guard=short.name, evidence=evidence)
        return ROLLED_BACK if ended.state == Rollout.State.ROLLED_BACK else PAUSED
    rollout_guard_pause(
        rollout=rollout,
        guard=short.name,
        evidence=evidence,
        reason=f"{short.message} Still too little data after the extension: a person decides "
        "(resume, advance or stop).",
    )
    return PAUSED


def watch_evaluate(rollout: Rollout, *, now=None) -> str:
    """Judge one paired watch: over when its time is up; else the paired guard over the
    watch's step since it began or last warned, a breach a warning."""
    now = now or timezone.now()
    if now >= rollout.watch_until:
        rollout_watch_end(rollout=rollout, reason="The paired watch is over (its time is up).")
        return WATCH_ENDED
    warned = rollout.watch_warning.get("at")
    # Counters are per minute: after a warning, from the next whole minute (never the same
    # requests twice; at most a minute's requests unjudged).
    since = datetime.fromisoformat(warned) + timedelta(minutes=1) if warned else rollout.ended_at
    evidence = step_evidence(
        rollout_key=rollout.key, step=rollout.watch_step, since=since, baseline=False
    )
    results = guards.evaluate(
        evidence,
        rollout.environment,
        active_guards=WATCH_GUARDS,
        versions=guards.Versions.watched(rollout.version.number, rollout.control_version.number),
    )
    rollout_record_watch_guards(rollout=rollout, guards=[r.as_dict() for r in results])
    breach = next((r for r in results if r.state == guards.BREACH), None)
    if breach is None:
        return WATCHING
    rollout_watch_warn(
        rollout=rollout,
        guard=breach.name,
        evidence=_evidence_of(breach, rollout, step=rollout.watch_step, share=rollout.watch_share),
    )
    return WARNED


def rollouts_evaluate() -> dict[str, str]:
    """Every running rollout and every paired watch judged once: {rollout key: what was
    done}. One failing rollout never keeps the others from being judged."""
    done = {}
    judged = [(r, rollout_evaluate) for r in rollouts_running()]
    judged += [(r, watch_evaluate) for r in rollouts_watching()]
    for rollout, evaluate in judged:
        try:
            done[rollout.key] = evaluate(rollout)
        except Conflict as exc:
            # Someone (a person, another evaluator) changed it since it was read: next round.
            done[rollout.key] = SKIPPED
            log.info("rollout %s changed while judged: %s", rollout.key, exc.message)
        except Exception:  # noqa: BLE001 - logged; the other rollouts are still judged
            done[rollout.key] = SKIPPED
            log.exception("rollout %s could not be judged", rollout.key)
    return done
