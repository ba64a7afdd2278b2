"""Replay: the engine run again on what a trace recorded, with the version it used or another.

A trace carries everything the engine decided from (docs/runtime-contract.md §3): per
candidate the provider's outcome, size, relevance, links and its own bundle, and per trace
the ``selection`` block (the call's arguments and the engine). The providers are not asked
again: the candidates are the ones the request had. So

- with the strategy version the trace used, a replay must reproduce the recorded decisions
  (a difference is itself a finding: another engine, or a bad record);
- with another version, it says exactly what that version would have decided for the same
  request — the impact preview of a draft on real traffic, at no model cost.

What a replay cannot know: items of a source the recorded version never asked its providers
for. Such a source is *not previewable* (:func:`sources_never_requested`), never a regression.
Nor a trace that carries only part of its candidates (``candidates_truncated``: the engine
decided on more than a trace holds), nor one whose input the runtime refused
(``input_refused``: the engine decided nothing): :data:`TRUNCATED` and :data:`REFUSED` say
why, and :func:`trace_candidates` / :func:`replay_trace` refuse them.

A shadow run (:func:`shadow_run`) is the same replay made at request time: the shadow strategy
version on live's candidates with live's arguments, never a provider of its own, compared with
live by :func:`shadow_result`.

Django-free; the console builds candidates straight from its rows the way
:func:`trace_candidates` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from context_runtime import engine as _engine
from context_runtime import wire
from context_runtime.engine import (
    DEFAULT_ESTIMATOR,
    CandidateItem,
    EngineInputError,
    Estimator,
    Selection,
    Strategy,
)
from context_runtime.engine._candidates import CheckedCandidates, check_candidates
from context_runtime.engine._selection import Decided, _check_arguments, decide, decide_run

__all__ = [
    "CandidateFacts",
    "Facts",
    "NOT_REQUESTED",
    "NotReplayable",
    "Replay",
    "REFUSED",
    "TRUNCATED",
    "facts",
    "replay",
    "replay_trace",
    "shadow_result",
    "shadow_run",
    "sources_never_requested",
    "trace_candidates",
]


class NotReplayable(Exception):
    """The trace lacks what a replay needs (an older runtime sent no replay fields)."""


TRUNCATED = (
    "the trace carries only part of its candidates (more than a trace holds were decided on), "
    "so the engine cannot re-run the selection"
)
REFUSED = "the runtime refused this request's input: the engine decided nothing to replay"


def trace_candidates(
    candidates: Iterable[wire.Candidate], *, truncated: bool = False
) -> tuple[CandidateItem, ...]:
    """The candidates as the providers returned them, rebuilt from a trace's candidates.

    The bundle is the provider's own (``provider_bundle``), not the group the engine decided:
    another strategy version may group differently. Sizes are the recorded ones (an item sized
    by the estimator keeps that size). Raises :class:`NotReplayable` for a candidate without
    an outcome or a reason code (an older runtime), and for a truncated trace's candidates
    (``truncated``: the trace's ``candidates_truncated``) — a replay on part of them would
    decide differently and look like a regression."""
    if truncated:
        raise NotReplayable(TRUNCATED)
    rebuilt = []
    for c in candidates:
        if c.outcome is None or c.reason_code is None:
            raise NotReplayable(f"candidate {c.id} has no replay fields (outcome, reason_code)")
        rebuilt.append(
            CandidateItem(
                id=c.id,
                source=c.source,
                version=c.version,
                size=c.size,
                relevance=c.relevance,
                bundle=c.provider_bundle,
                depends_on=c.depends_on,
                conflicts_with=c.conflicts_with,
                outcome=c.outcome,
                note=c.note,
            )
        )
    return tuple(rebuilt)


class Replay:
    """One request's candidates, replayed with as many strategy versions as asked: checked
    once per set of sources read (a preview replays every trace with the version it used and
    the draft; the check is a fifth of a selection), decided per version, each decision the
    one :func:`~context_runtime.engine.select` makes."""

    def __init__(
        self,
        candidates: Sequence[CandidateItem],
        selection: wire.SelectionInfo,
        *,
        estimator: Estimator = DEFAULT_ESTIMATOR,
        checked: CheckedCandidates | None = None,
    ):
        """``checked``: what the engine's check found for all of ``candidates`` with
        ``estimator`` and no finding (``Selection.checked``), so a strategy reading all their
        sources is not checked again."""
        self.candidates = candidates if type(candidates) is tuple else tuple(candidates)
        self.selection = selection
        self._arguments = {
            "context_window": selection.context_window,
            "max_input_tokens": selection.max_input_tokens,
            "fixed_input_tokens": selection.fixed_input_tokens,
            "relevance_threshold": selection.relevance_threshold,
            # A trace records sizes, so the default sizes nothing; a shadow run at request
            # time sizes the items that came with a text as live did.
            "estimator": estimator,
        }
        self._refused = _check_arguments(*self._arguments.values())
        self._present = frozenset(c.source for c in self.candidates)
        self._checked: dict[frozenset, tuple] = {}
        if checked is not None:
            self._checked[self._present] = (self.candidates, checked, [])

    def run(self, strategy: Strategy | dict) -> Selection:
        """``select()`` with the recorded arguments. Candidates of a source the strategy does
        not read are left out, as the runtime would not have asked that provider under it
        (``facts(selection, of=candidates)`` marks them ``not_requested``);
        ``selection.candidates`` holds the ones given to the engine."""
        return decide(*self._asked(strategy), **self._arguments)

    def run_facts(self, strategy: Strategy | dict) -> Decided:
        """:meth:`run` without writing the reason texts (``engine._selection.decide_run``):
        the same decisions, reason codes, labels, status and tokens, for what compares
        selections by their facts (``facts(decided, of=candidates)``, :func:`shadow_run`).
        ``decided.items`` holds the candidates given to the engine."""
        return decide_run(*self._asked(strategy), **self._arguments)

    def _asked(self, strategy: Strategy | dict) -> tuple[Strategy, tuple, CheckedCandidates]:
        if not isinstance(strategy, Strategy):
            strategy = Strategy.from_body(strategy)
        if self._refused:
            raise EngineInputError(self._refused)
        read = self._present & strategy.sources
        known = self._checked.get(read)
        if known is None:
            asked = self.candidates
            if read != self._present:
                asked = tuple(c for c in self.candidates if c.source in read)
            findings: list = []
            # Every source of `asked` is in `read`: the check says the same for any strategy
            # that reads them, so it is kept for the next version.
            checked = check_candidates(asked, read, self._arguments["estimator"], findings)
            known = self._checked[read] = (asked, checked, findings)
        asked, checked, findings = known
        if findings:
            raise EngineInputError(findings)
        return strategy, asked, checked


def replay(
    strategy: Strategy | dict,
    candidates: Sequence[CandidateItem],
    selection: wire.SelectionInfo,
) -> Selection:
    """``select()`` with the arguments the trace recorded (:meth:`Replay.run`; with several
    versions of one request, a :class:`Replay` checks the candidates once)."""
    return Replay(candidates, selection).run(strategy)


def replay_trace(strategy: Strategy | dict, trace: wire.Trace) -> Selection:
    """Replay a whole trace; :class:`NotReplayable` when it has no replay fields."""
    if trace.status == wire.INPUT_REFUSED:
        raise NotReplayable(REFUSED)
    if trace.selection is None:
        raise NotReplayable("the trace has no selection block (an older runtime)")
    candidates = trace_candidates(trace.candidates, truncated=trace.candidates_truncated)
    return replay(strategy, candidates, trace.selection)


class CandidateFacts(msgspec.Struct, frozen=True, array_like=True):
    """What a replay must reproduce of one decision: not the wording of the reason (it holds
    numbers and names), its code."""

    decision: str
    reason_code: str
    bundle: str  # the decided group label, "" outside any bundle
    required: bool


class Facts(msgspec.Struct, frozen=True):
    """The comparable part of a selection: equal facts, equal decisions."""

    status: str
    degradation: str  # "" when none
    candidates: tuple[CandidateFacts, ...]

    @classmethod
    def recorded(
        cls, status: str, degradation: str | None, candidates: Iterable[wire.Candidate]
    ) -> Facts:
        """The facts of a recorded trace (its status and candidates)."""
        return cls(
            status,
            degradation or "",
            tuple(
                CandidateFacts(c.decision, c.reason_code or "", c.bundle or "", c.required)
                for c in candidates
            ),
        )

    def differences(self, other: Facts, ids: Sequence[str] = ()) -> list[str]:
        """What differs, in words, for a finding ("order:A1042: selected/required →
        over_budget/over_budget_required"); ``ids`` name the candidates by position."""
        found = []
        if (self.status, self.degradation) != (other.status, other.degradation):
            found.append(
                f"status {self.status}{_with(self.degradation)} → "
                f"{other.status}{_with(other.degradation)}"
            )
        if len(self.candidates) != len(other.candidates):
            found.append(f"{len(self.candidates)} candidates → {len(other.candidates)}")
            return found
        for i, (a, b) in enumerate(zip(self.candidates, other.candidates, strict=True)):
            if a != b:
                name = ids[i] if i < len(ids) else f"candidate {i}"
                found.append(f"{name}: {_fact(a)} → {_fact(b)}")
        return found


def _with(degradation: str) -> str:
    return f" ({degradation})" if degradation else ""


def _fact(c: CandidateFacts) -> str:
    text = f"{c.decision}/{c.reason_code}"
    if c.bundle:
        text += f" in {c.bundle}"
    return text + (" (required)" if c.required else "")


# A candidate of a source the version does not read: the engine's own decision for one
# (select() records a provider's item of such a source so), so a replay reproduces it.
NOT_REQUESTED = CandidateFacts(_engine.NOT_REQUESTED, _engine.SOURCE_NOT_READ, "", False)


def facts(selection: Selection | Decided, of: Sequence[CandidateItem] | None = None) -> Facts:
    """The facts of a selection the engine just made (a :class:`Selection`, or the
    :class:`Decided` of :meth:`Replay.run_facts`, equal facts for equal decisions). With
    ``of`` (the candidates given to :func:`replay`), one per candidate of ``of``: those the
    strategy does not read are :data:`NOT_REQUESTED`."""
    if isinstance(selection, Decided):
        return _decided_facts(selection, of)
    decided = [
        NOT_REQUESTED
        if d is None
        else CandidateFacts(d.decision, d.reason_code, d.bundle or "", d.required)
        for d in _decisions_of(selection, of)
    ]
    return Facts(selection.status, selection.degradation or "", tuple(decided))


def _decided_facts(decided: Decided, of: Sequence[CandidateItem] | None) -> Facts:
    own = [
        CandidateFacts(d, code, name or "", needed)
        for d, code, name, needed in zip(
            decided.decision, decided.reason_code, decided.bundle, decided.required, strict=True
        )
    ]
    return Facts(
        decided.status,
        decided.degradation or "",
        tuple(NOT_REQUESTED if f is None else f for f in _aligned(decided.items, own, of)),
    )


def _aligned(given: Sequence, per_given: Sequence, of: Sequence | None) -> Sequence:
    """``per_given`` (one entry per candidate of ``given``) one per candidate of ``of``:
    ``None`` for a candidate not given (its source not read). ``given`` is ``of`` or the
    candidates of ``of`` whose source was read, in their order (:meth:`Replay.run`)."""
    if of is None or len(of) == len(per_given):
        return per_given
    pairs = iter(zip(given, per_given, strict=True))
    item, entry = next(pairs, (None, None))
    aligned = []
    for c in of:
        if c is item:
            aligned.append(entry)
            item, entry = next(pairs, (None, None))
        else:
            aligned.append(None)
    return aligned


def _decisions_of(selection: Selection, of: Sequence[CandidateItem] | None):
    """The selection's decisions, one per candidate of ``of`` (default: the candidates it
    was given): ``None`` for a candidate the selection was not given — its strategy does not
    read that source (:meth:`Replay.run` left it out), so it is not requested."""
    return _aligned(selection.candidates, selection.decisions, of)


def sources_never_requested(
    recorded: Strategy | dict, candidate: Strategy | dict
) -> tuple[str, ...]:
    """Sources the candidate version reads (required or optional) that the recorded version
    did not: the runtime never asked their providers, so a replay cannot know what they
    would have returned. In the candidate version's order."""
    recorded = recorded if isinstance(recorded, Strategy) else Strategy.from_body(recorded)
    candidate = candidate if isinstance(candidate, Strategy) else Strategy.from_body(candidate)
    asked = recorded.sources
    if candidate.sources <= asked:
        return ()  # the usual case (a shadow run per request): nothing new, no list to build
    reads = dict.fromkeys((*candidate.required, *candidate.optional))
    return tuple(source for source in reads if source not in asked)


def shadow_run(
    live: Selection,
    strategy: Strategy,
    *,
    version: int,
    live_strategy: Strategy,
    estimator: Estimator = DEFAULT_ESTIMATOR,
) -> wire.ShadowResult:
    """The trace's ``shadow``: the shadow strategy version (``strategy``, released as
    ``version``) on the candidates live was given, with live's arguments — the fixed input,
    the context window, the call's cap, the relevance threshold and ``estimator``, live's
    estimator — so an identical version decides identically (the A/A calibration).

    No provider is asked: candidates of sources the shadow does not read are
    :data:`NOT_REQUESTED` by it, and the sources it reads that ``live_strategy`` does not are
    named in ``sources_not_fetched`` (the shadow decided without them). Raises
    :class:`EngineInputError` when the shadow's strategy refuses the candidates."""
    # Live checked these very candidates with this estimator and found nothing: a shadow that
    # reads all their sources would check them again to the same result.
    checked = live.checked if live.estimator == estimator.name else None
    items = live.candidates
    if checked is not None and {c.source for c in items} <= strategy.sources:
        # What Replay.run_facts does with this check, without the Replay: live's arguments
        # passed select()'s check already (the threshold as the trace records it).
        shadow = decide_run(
            strategy,
            items,
            checked,
            context_window=live.context_window,
            max_input_tokens=live.call_max_input_tokens,
            fixed_input_tokens=live.fixed_input_tokens,
            relevance_threshold=float(live.relevance_threshold),
            estimator=estimator,
        )
    else:
        run = Replay(items, live.selection_info(), estimator=estimator, checked=checked)
        shadow = run.run_facts(strategy)
    # The shadow's facts only: a ShadowResult holds no reason text, so none was written.
    return wire.ShadowResult(
        version=version,
        status=shadow.status,
        selected=list(shadow.selected_ids),
        degradation=shadow.degradation,
        used_tokens=shadow.input_estimate,
        **_differences(live, shadow),
        sources_not_fetched=sources_never_requested(live_strategy, strategy),
    )


def _differences(live: Selection, shadow: Decided) -> dict:
    """:func:`shadow_result`'s ``differences`` and ``differences_total`` for a
    :class:`Decided`, the same entries in the same order."""
    decisions = live.decisions
    if len(shadow.items) == len(decisions):  # every candidate given: no alignment
        decision, code, required = shadow.decision, shadow.reason_code, shadow.required
        # A comprehension finds the few that differ (none in the A/A case).
        differ = [
            i
            for i, a in enumerate(decisions)
            if a.decision != decision[i] or a.reason_code != code[i] or a.required != required[i]
        ]
        theirs = [(decision[i], code[i], required[i]) for i in differ]
    else:
        aligned = _aligned(
            shadow.items,
            tuple(zip(shadow.decision, shadow.reason_code, shadow.required, strict=True)),
            live.candidates,
        )
        differ, theirs = [], []
        for i, (a, b) in enumerate(zip(decisions, aligned, strict=True)):
            if b is None:
                b = NOT_REQUESTED.decision, NOT_REQUESTED.reason_code, NOT_REQUESTED.required
            elif a.decision == b[0] and a.reason_code == b[1] and a.required == b[2]:
                continue
            differ.append(i)
            theirs.append(b)
    if not differ:
        return {"differences": (), "differences_total": 0}
    kept = wire.kept_candidates(decisions)
    position = None if kept is None else {i: n for n, i in enumerate(kept)}
    differences = []
    for i, (d, code, needed) in zip(differ, theirs, strict=True):
        index = i if position is None else position.get(i)
        if index is not None and len(differences) < wire.MAX_SHADOW_DIFFERENCES:
            differences.append(
                wire.ShadowDifference(index=index, decision=d, reason_code=code, required=needed)
            )
    return {"differences": tuple(differences), "differences_total": len(differ)}


def shadow_result(
    live: Selection,
    shadow: Selection,
    *,
    version: int,
    sources_not_fetched: Sequence[str] = (),
    limit: int = wire.MAX_SHADOW_DIFFERENCES,
) -> wire.ShadowResult:
    """A shadow selection compared with live's: its status, selection, handler and input
    estimate, and the candidates it decided differently (decision, reason code or whether it
    is required), each by its position in the trace's ``candidates`` as sent. ``shadow`` was
    made on live's candidates or some of them (:meth:`Replay.run`); the others are
    :data:`NOT_REQUESTED`. A candidate the trace does not carry (``wire.kept_candidates``:
    over MAX_CANDIDATES_PER_TRACE) has no position: it is counted in ``differences_total``
    only, as are those beyond ``limit``."""
    kept = wire.kept_candidates(live.decisions)
    position = None if kept is None else {i: n for n, i in enumerate(kept)}
    differences = []
    total = 0
    theirs = _decisions_of(shadow, live.candidates)
    for i, (a, b) in enumerate(zip(live.decisions, theirs, strict=True)):
        if b is None:
            b = NOT_REQUESTED
        elif (
            a.decision == b.decision and a.reason_code == b.reason_code and a.required == b.required
        ):
            continue
        total += 1
        index = i if position is None else position.get(i)
        if index is not None and len(differences) < limit:
            differences.append(
                wire.ShadowDifference(
                    index=index, decision=b.decision, reason_code=b.reason_code, required=b.required
                )
            )
    return wire.ShadowResult(
        version=version,
        status=shadow.status,
        selected=list(shadow.selected_ids),
        degradation=shadow.degradation,
        used_tokens=shadow.input_estimate,
        differences=tuple(differences),
        differences_total=total,
        sources_not_fetched=tuple(sources_not_fetched),
    )
