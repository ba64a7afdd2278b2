"""The one table of what a staged rollout or a shadow allows in each state.

The services refuse an action its state does not allow (409 `rollout_state`, or
`rollout_finished` once it ended), the rollout page shows only the buttons its state allows
(and the policy does), and the API lists the same actions: all three read this table, so a
state never allows on a page what the service refuses.
"""

from __future__ import annotations

from strategies.releases.models import Rollout, ShadowRelease

State = Rollout.State

# Action → the rollout states it applies to. The operators' actions first (the pages' and the
# API's words), then what the approval and the guards do, then the paired watch's.
ROLLOUT_TRANSITIONS: dict[str, tuple[str, ...]] = {
    # operators
    "pause": (State.RUNNING,),
    "resume": (State.PAUSED,),
    "advance": (State.RUNNING, State.PAUSED),  # the next step, or after the last: complete
    "finish": (State.RUNNING, State.PAUSED),  # skip the remaining steps: live now
    "stop": (State.AWAITING_APPROVAL, State.RUNNING, State.PAUSED),
    # the plan's approval starts it
    "approve": (State.AWAITING_APPROVAL,),
    # the guards judge a running step only: a paused rollout waits for a person
    "step": (State.RUNNING,),
    "extend": (State.RUNNING,),
    "guard_pause": (State.RUNNING,),
    "rollback": (State.RUNNING,),
    "record_guards": (State.RUNNING, State.PAUSED),  # the page's guard states, no revision
    # the paired watch runs on a completed rollout (`Rollout.watching`)
    "watch_warn": (State.COMPLETED,),
    "watch_end": (State.COMPLETED,),
    "watch_rollback": (State.COMPLETED,),
}
# The actions a person takes on the rollout page and through the API, in the pages' order.
ROLLOUT_OPERATOR_ACTIONS = ("pause", "resume", "advance", "finish", "stop")
# The paired watch's actions need the watch itself running, not only the completed state.
WATCH_ACTIONS = frozenset({"watch_warn", "watch_end", "watch_rollback"})


def rollout_allows(rollout: Rollout, action: str) -> bool:
    """Whether `rollout`'s state allows `action` now (the policy is asked separately)."""
    if rollout.state not in ROLLOUT_TRANSITIONS[action]:
        return False
    return rollout.watching if action in WATCH_ACTIONS else True


def rollout_operator_actions(rollout: Rollout) -> list[str]:
    """The operators' actions its state allows, in the pages' order."""
    return [action for action in ROLLOUT_OPERATOR_ACTIONS if rollout_allows(rollout, action)]


# Action → whether a shadow must be running (True) or not (False) for it.
SHADOW_TRANSITIONS: dict[str, bool] = {
    "start": False,  # one shadow at a time per document × environment
    "stop": True,
    "promote": True,
}


def shadow_allows(shadow: ShadowRelease | None, action: str) -> bool:
    """Whether the shadow row (None: never started there) allows `action` now."""
    running = shadow is not None and shadow.running
    return running == SHADOW_TRANSITIONS[action]


def shadow_actions(shadow: ShadowRelease | None) -> list[str]:
    """The actions the shadow row's state allows now, in the pages' order."""
    return [action for action in SHADOW_TRANSITIONS if shadow_allows(shadow, action)]
