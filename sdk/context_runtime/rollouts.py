"""Staged rollouts on the runtime's side (docs/runtime-contract.md §1 ``rollouts``, §3
``rollout``): which arm a request is in, which version it is served, and which one runs as
its shadow.

While a rollout of a strategy key runs, the payload's ``strategies[key]`` is the control
version ("old" arm) and ``rollouts[key]`` the new one with the share of units served it. A
request's arm is decided by :func:`assign_arm` — the one place, the contract's stable hash of
the rollout id and the request's unit — so a unit keeps its arm while the share only grows
(0.0 → 0.1 → 0.5 → 1.0) and every runtime process decides alike. The served arm's version
selects the context; the other arm's version runs as the honest shadow
(:func:`context_runtime.replay.shadow_run`: the same candidates, fixed input, window,
threshold and estimator; no provider, model or tool call), so every request carries both
versions' decisions on the same inputs.

After the rollout completed, its entry may come back with ``phase`` ``watch`` (the paired
watch): everyone is served the live, new version; a unit whose :func:`bucket` is below the
entry's ``share`` also runs the entry's (previous) version as shadow and reports the arm
``new`` (served new, shadow old: a rollout's new arm, so the console reads it alike); the
other units run no shadow and report no rollout.

:func:`serve` is what a runtime calls per request (``ContextAssembly`` does; a runtime that
calls the engine itself does the same)::

    serving = rollouts.serve(snapshot, key, task_id=..., principal=..., request_id=...)
    selection = select(strategy=Strategy.from_body(serving.document.body), ...)
    shadow = serving.run_shadow(selection, estimator=estimator)   # None without a shadow
    trace = wire.Trace(..., documents=serving.documents(snapshot), shadow=shadow,
                       rollout=serving.rollout, ...)
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from context_runtime.client import Document

from context_runtime import replay, wire
from context_runtime.engine import DEFAULT_ESTIMATOR, Estimator, Selection, Strategy

__all__ = [
    "Serving",
    "assign_arm",
    "bucket",
    "request_arm",
    "serve",
    "unit_value",
    "watched",
]


def bucket(rollout_id: str, unit: str) -> float:
    """The unit's place in [0, 1) for this rollout: the first 8 bytes of
    SHA-256(``<rollout id> NUL <unit value>``) as a big-endian integer over 2**64. Uniform,
    the same in every process and language, and independent between rollouts (the id is part
    of the hash, so a unit on the new arm of one rollout is not on the new arm of all)."""
    digest = hashlib.sha256(f"{rollout_id}\x00{unit}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def unit_value(unit: str, *, task_id: str | None, principal: str | None, request_id: str) -> str:
    """What a request is assigned by: its task id (``unit`` ``task``) or its principal
    (``principal``) as the trace carries them; the request id when that is missing or empty
    (each such request is then its own unit)."""
    value = task_id if unit == "task" else principal if unit == "principal" else None
    return value or request_id


def assign_arm(rollout_id: str, share: float, unit: str) -> str:
    """``"new"`` when the unit's :func:`bucket` is below ``share``, else ``"old"``. A share of
    0.0 serves everyone the old version (a shadow step), 1.0 everyone the new one (the top
    buckets round to 1.0 as floats, so 1.0 is taken as "all" explicitly). Since a bucket is
    fixed per (rollout, unit), a growing share only moves units from old to new."""
    if share >= 1.0 or bucket(rollout_id, unit) < share:
        return wire.ARM_NEW
    return wire.ARM_OLD


def request_arm(
    rollout_id: str, *, share: float, unit: str, phase: str = wire.PHASE_ROLLOUT
) -> str | None:
    """The arm a unit's request reports under one ``rollouts`` entry — what :func:`serve`
    puts in the trace's ``rollout`` block, and what the console checks every such block
    against (docs/rollout-evidence.md "What a runtime token is trusted to say"). In the
    steps :func:`assign_arm`; in the paired watch ``"new"`` for a :func:`watched` unit and
    ``None`` (no rollout block) for the others."""
    if phase == wire.PHASE_WATCH:
        return wire.ARM_NEW if watched(rollout_id, share, unit) else None
    return assign_arm(rollout_id, share, unit)


def _read(key: str, document) -> Strategy:
    return Strategy.from_body(document.body)


@dataclass(frozen=True, slots=True)
class Serving:
    """What one request of one strategy key serves: ``document`` (the served version; the
    live one outside a rollout; ``None`` when nothing is live), ``shadow`` (the version that
    runs beside it: the rollout's other arm, or the payload's shadow release; ``None`` when
    none) and ``rollout`` (the trace's ``rollout`` block; ``None`` outside a rollout)."""

    key: str
    document: Document | None = None
    shadow: Document | None = None
    rollout: wire.TraceRollout | None = None

    def documents(self, snapshot) -> dict[str, int]:
        """The trace's ``documents``: the snapshot's versions with the served one for
        ``key``."""
        versions = dict(snapshot.documents)
        if self.document is not None:
            versions[self.key] = self.document.version
        return versions

    def run_shadow(
        self,
        live: Selection,
        *,
        estimator: Estimator = DEFAULT_ESTIMATOR,
        strategy_of: Callable[[str, Document], Strategy] = _read,
    ) -> wire.ShadowResult | None:
        """The trace's ``shadow``: the shadow version on ``live``'s candidates with live's
        arguments (:func:`context_runtime.replay.shadow_run`); the sources it reads that the
        served version did not are ``sources_not_fetched``. ``strategy_of(key, document)``
        reads a document's strategy (a runtime caches it per version); ``estimator`` is the
        one live used. Raises what the shadow run raises."""
        if self.shadow is None or self.document is None:
            return None
        return replay.shadow_run(
            live,
            strategy_of(f"shadow:{self.key}", self.shadow),
            version=self.shadow.version,
            live_strategy=strategy_of(self.key, self.document),
            estimator=estimator,
        )


def serve(
    snapshot,
    key: str,
    *,
    request_id: str,
    task_id: str | None = None,
    principal: str | None = None,
) -> Serving:
    """What the request serves of ``key`` under ``snapshot`` (a
    :class:`~context_runtime.client.ConfigSnapshot`, or anything with ``strategy(key)`` and
    optionally ``shadow(key)`` and ``rollout(key)``). ``task_id``, ``principal`` and
    ``request_id`` are the trace's values (:func:`unit_value`)."""
    live = snapshot.strategy(key)
    rollout = _call(snapshot, "rollout", key)
    if rollout is None or live is None:
        return Serving(key, live, _call(snapshot, "shadow", key) if live is not None else None)
    unit = unit_value(rollout.unit, task_id=task_id, principal=principal, request_id=request_id)
    phase = getattr(rollout, "phase", wire.PHASE_ROLLOUT)
    arm = request_arm(rollout.id, share=rollout.share, unit=unit, phase=phase)
    if arm is None:  # a paired watch this unit is not part of: the live version alone
        return Serving(key, live)
    block = wire.TraceRollout(id=rollout.id, arm=arm, step=rollout.step)
    if phase == wire.PHASE_WATCH:  # everyone is served the live (new) version
        return Serving(key, live, rollout.document, block)
    served, other = (rollout.document, live) if arm == wire.ARM_NEW else (live, rollout.document)
    return Serving(key, served, other, block)


def watched(rollout_id: str, share: float, unit: str) -> bool:
    """Whether a unit runs the paired watch's shadow: its :func:`bucket` below ``share`` (the
    same hash as :func:`assign_arm`, so about ``share`` of the units, each always alike)."""
    return share > 0 and bucket(rollout_id, unit) < share


def _call(snapshot, method: str, key: str):
    read = getattr(snapshot, method, None)
    return read(key) if callable(read) else None
