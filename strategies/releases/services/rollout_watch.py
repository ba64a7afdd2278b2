"""The paired watch after a rollout completed (issue 23 item 4): a share of units runs the
previous version as shadow beside the new, live one; the paired guard's breach warns (never
rolls back by itself) and offers a one-click rollback, which is the ordinary rollback."""

from __future__ import annotations

from django.utils import timezone

from console.kernel.policy import check_user_can_request_rollback
from console.kernel.transactions import service_transaction
from strategies.releases.models import Rollout
from strategies.releases.services.publish import PublishOutcome
from strategies.releases.services.rollback import _release_rollback
from strategies.releases.services.rollout_guards import SYSTEM, guard_actor
from strategies.releases.services.rollout_move import (
    _rollout_change,
    _rollout_locked,
    _rollout_refresh,
    rollout_conflict,
)
from strategies.releases.services.state import _current
from strategies.releases.transitions import rollout_allows

WATCH_ENDED = "watch_ended"  # the paired watch is over (on time, or by a move)
WATCH_NO_WARNING = "watch_no_warning"  # nothing warned: no one-click rollback to offer
RELEASE_CHANGED = "release_changed"  # the release is no longer the version the watch watched


def _watching(rollout: Rollout, *, action: str, words: str) -> Rollout:
    """The rollout locked, 409 `watch_ended` unless its watch still runs (the state table's
    watch actions)."""
    locked = _rollout_locked(rollout)
    if not rollout_allows(locked, action):
        raise rollout_conflict(
            locked,
            f"The paired watch of {locked.key} is over: nothing to {words}.",
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
    locked = _watching(rollout, action="watch_warn", words="warn of")
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
    locked = _watching(rollout, action="watch_end", words="end")
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
    locked = _watching(rollout, action="watch_rollback", words="roll back from")
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
