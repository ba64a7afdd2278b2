"""Archiving an environment stops what runs beside its live versions there: active rollouts
(stopped, their waiting plan requests void), paired watches (ended) and shadows (stopped),
each audited with the reason, and the runtime payload rendered again at once so runtimes drop
them. What is live stays live. The catalog calls this through `dependents.environment_archived`
inside its archive transaction (the catalog cannot import releases)."""

from __future__ import annotations

from strategies.releases.models import Rollout, ShadowRelease
from strategies.releases.services.rollout_move import (
    _rollout_change,
    _rollout_locked,
    _rollout_refresh,
    _rollout_void_request,
    _rollout_watch_ended,
)
from strategies.releases.services.shadow import _changed
from strategies.releases.services.shadow_move import _shadow_move
from strategies.releases.services.state import _current


def environment_archived_stop(environment, *, actor, reason: str = "") -> None:
    """Stop every rollout, watch and shadow running in `environment`, which was just archived
    in the caller's transaction, saying why."""
    why = f"{environment.key} was archived" + (f" ({reason.strip()})." if reason.strip() else ".")
    for active in Rollout.objects.active().filter(environment=environment):
        rollout = _rollout_locked(active)
        if not rollout.active:
            continue  # ended meanwhile
        _rollout_void_request(rollout, note=f"Void: {why}")
        stopped = _rollout_change(
            rollout, actor=actor, action="stop", reason=f"Stopped: {why}", end_reason=why
        )
        _rollout_refresh(stopped)
    for watching in Rollout.objects.watching().filter(environment=environment):
        ended = _rollout_watch_ended(
            document=watching.document,
            environment=environment,
            actor=actor,
            reason=f"Watch ended: {why}",
        )
        if ended is not None:
            _rollout_refresh(ended)
    running = ShadowRelease.objects.filter(environment=environment, version__isnull=False)
    for shadow in running.select_related("document__agent"):
        change = _shadow_move(
            document=shadow.document,
            environment=environment,
            live=_current(shadow.document, environment),
            to_version=None,
            actor=actor,
            reason=f"Stopped: {why}",
            expected_revision=shadow.revision,
        )
        _changed(change, actor=actor)
