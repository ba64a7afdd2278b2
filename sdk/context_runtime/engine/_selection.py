"""The budget allocator (docs/background.md § The budget allocator): which candidates go into
this call's context, why each one does or does not, and whether the package may be used at
all.

The rules, in the fixed order of docs/background.md § Strategies per task ("check validity, resolve
conflicts and dependencies, select"):

1. **What the providers said.** An item that was not fetched, that the principal has no
   access to, or that does not apply keeps that as its decision.  ``no_access`` is never read
   as allowed, and a required item with ``no_access`` stops the request
   (``missing_required_data``) even when the source has an ``on_missing`` handler: a handler
   stands in for data that could not be read, not for data the principal may not see.
2. **Conflicts.** Two fetched versions of one item (same source and id), or two items a
   provider flags as conflicting, are both ``conflict`` and the status is
   ``source_conflict``: the engine never picks one silently.
3. **Required content.** Every item of a required source is required, and so is what a
   required item cannot be used without: the sources a required source ``depends_on``, the
   items a required item names in its ``depends_on``, and every member of a bundle holding a
   required item.
4. **Bundles.** A bundle is chosen whole or not at all and is never truncated; a bundle with a
   member that was not fetched, is not accessible or is in conflict cannot be chosen whole, so
   its other members are ``dependency_missing``.  Members that do not apply are not part of
   the bundle for this request.  An item that two bundles name (the strategy's by source key
   or id prefix, or its provider's) joins them: each must be whole, so they go together.
5. **Relevance.** An optional item (or optional bundle, by its best score) whose relevance is
   below the threshold is ``irrelevant``.  Required items are never dropped for relevance.
6. **Budget.** The room for context is ``min(strategy max_input_tokens, model context
   window, this call's max_input_tokens) − reserve_output_tokens − fixed_input_tokens``; a
   caller can lower it, never raise it.  Required units come first in the strategy's source
   order, then optional ones by priority (descending), relevance (descending, unscored
   last), id and version.  Each unit is taken if it fits what is left, otherwise it is
   ``over_budget`` and the next one is tried.  A unit waits until what it depends on has been
   decided, and is ``dependency_missing`` if that was not selected.
7. **Missing sources.** A required source with nothing fetched, or a required item that was
   not fetched, switches to the source's ``on_missing`` handler (status ``degraded``) or,
   without one, gives ``missing_required_data``; the same holds for a required item that
   cannot be used because of it.  An optional source that failed (``not_fetched``) with a
   handler also switches to it.  Two missing sources naming different handlers give
   ``missing_required_data``: one request can take one fallback flow, not two.

The status, when several things go wrong, is the first of :data:`STATUS_PRECEDENCE`:

- ``source_conflict`` first: it needs a person or a verification step, and what is missing
  or too big may only be a consequence of it (a conflicting policy version makes its bundle
  unusable); resolving it changes the selection, so any other verdict would be premature.
- ``missing_required_data`` next: no budget or model change helps while data is missing.
- ``budget_exceeded`` next: the data is all there, it does not fit (read step by step,
  change model, or stop).
- ``degraded`` last of the failures: it is a usable answer (a handler takes over), so it
  must never hide a failure that is not.

Only ``ready`` and ``degraded`` packages may be assembled (:attr:`Selection.usable`).  For
the others the decisions still say, item by item, what would have been selected, so an
operator sees the whole picture, but the caller must stop or switch flow.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from operator import itemgetter

import msgspec

import context_runtime.engine._reasons as reasons
from context_runtime import wire
from context_runtime.engine._candidates import (
    FETCHED,
    NO_ACCESS,
    NOT_APPLICABLE,
    NOT_FETCHED,
    CandidateItem,
    CheckedCandidates,
    ItemDecision,
    check_candidates,
)
from context_runtime.engine._errors import EngineInputError
from context_runtime.engine._estimators import DEFAULT_ESTIMATOR, Estimator
from context_runtime.engine._identity import ENGINE
from context_runtime.engine._strategy import DEFAULT_PRIORITY, Strategy
from context_runtime.findings import Finding

READY = "ready"
MISSING_REQUIRED_DATA = "missing_required_data"
BUDGET_EXCEEDED = "budget_exceeded"
SOURCE_CONFLICT = "source_conflict"
DEGRADED = "degraded"
# Not a status select() returns: it raises EngineInputError. A runtime that catches it reports
# this status (EngineInputError.trace_fields) so the request still leaves a trace.
INPUT_REFUSED = wire.INPUT_REFUSED
# Most serious first; the status of a selection is the first that applies (module docstring).
STATUS_PRECEDENCE = (SOURCE_CONFLICT, MISSING_REQUIRED_DATA, BUDGET_EXCEEDED, DEGRADED, READY)
USABLE_STATUSES = frozenset({READY, DEGRADED})

SELECTED = "selected"
# A candidate of a source the strategy does not read (a provider returned it anyway): never
# weighed, recorded as such. The same facts a replay gives a candidate of a source its
# version does not read (context_runtime.replay.NOT_REQUESTED), so a replay reproduces it.
NOT_REQUESTED = "not_requested"
SOURCE_NOT_READ = "source_not_read"
OVER_BUDGET = "over_budget"
DEPENDENCY_MISSING = "dependency_missing"
IRRELEVANT = "irrelevant"
CONFLICT = "conflict"

# An optional item scored below a fifth of the scale is left out.  Retrievers and relevance
# models give 0–1 scores; 0.2 keeps weak-but-related evidence and drops what is off topic.
DEFAULT_RELEVANCE_THRESHOLD = 0.2

_RANK = {status: i for i, status in enumerate(STATUS_PRECEDENCE)}
_PROVIDER_CODES = {
    NOT_FETCHED: "provider_not_fetched",
    NO_ACCESS: "provider_no_access",
    NOT_APPLICABLE: "provider_not_applicable",
}
_ABSENT = "absent"  # a dependency with no candidate at all (a root cause, never a decision)
_NEED_ABSENT, _NEED_UNSELECTED = "dependency_absent", "dependency_unselected"
_BLOCKS_BUNDLE = frozenset({NOT_FETCHED, NO_ACCESS, CONFLICT})


class Selection(msgspec.Struct, frozen=True, kw_only=True):
    """The engine's answer for one call.

    - ``status``: ``ready``, ``degraded`` (then ``degradation`` names the handler that takes
      over), ``missing_required_data``, ``budget_exceeded`` or ``source_conflict``.
    - ``reason``: one sentence on the status; ``problems``: every problem behind it, most
      serious first.
    - ``selected``: the chosen items in order (required first in the strategy's source
      order, then optional by priority, relevance, id).  Assemble them only when
      :attr:`usable`.
    - ``decisions``: exactly one per candidate, in the candidates' order.
    - ``max_input_tokens``, ``reserve_output_tokens``: the effective budget of the call;
      ``available_tokens`` what that left for the candidates after ``fixed_input_tokens``;
      ``used_tokens`` what the selected items take (never more than ``available_tokens``).
    - ``relevance_threshold``, ``context_window``, ``call_max_input_tokens``: the arguments
      the call gave (the last two ``None`` when not given), recorded in the trace's
      ``selection`` block so that the selection can be replayed exactly
      (:mod:`context_runtime.replay`); ``engine``: which engine decided.
    """

    status: str
    degradation: str | None
    reason: str
    problems: tuple[str, ...]
    selected: tuple[CandidateItem, ...]
    decisions: tuple[ItemDecision, ...]
    max_input_tokens: int
    reserve_output_tokens: int
    fixed_input_tokens: int
    available_tokens: int
    used_tokens: int
    estimator: str
    relevance_threshold: float = DEFAULT_RELEVANCE_THRESHOLD
    context_window: int | None = None
    call_max_input_tokens: int | None = None
    candidates: tuple[CandidateItem, ...] = ()  # as given, for the replay fields of the trace
    engine: str = ENGINE
    # What the check of ``candidates`` found (sizes, ids, present sources): a shadow version
    # deciding on the same candidates (``context_runtime.replay.shadow_run``) starts from it
    # instead of checking them again.
    checked: CheckedCandidates | None = None

    @property
    def usable(self) -> bool:
        """Whether the package may be assembled and sent to the model."""
        return self.status in USABLE_STATUSES

    @property
    def input_estimate(self) -> int:
        """Tokens of the model input: the fixed part plus the selected items."""
        return self.fixed_input_tokens + self.used_tokens

    @property
    def selected_ids(self) -> tuple[str, ...]:
        return tuple(item.id for item in self.selected)

    def wire_candidates(self) -> list[wire.Candidate]:
        """The decisions as the trace's ``candidates`` (docs/runtime-contract.md §3), each with
        what the engine needs to replay it without the providers: the provider's outcome,
        the relevance score, the links, the provider's note and its own bundle."""
        return [
            msgspec.structs.replace(
                decision.to_wire(),
                provider_bundle=item.bundle,
                outcome=item.outcome,
                relevance=None if item.relevance is None else float(item.relevance),
                depends_on=tuple(item.depends_on[: wire.MAX_LINKS]),
                conflicts_with=tuple(item.conflicts_with[: wire.MAX_LINKS]),
                note=reasons.short(item.note),
            )
            for decision, item in zip(self.decisions, self.candidates, strict=True)
        ]

    def trace_fields(self) -> dict:
        """The trace fields the selection fills, ready for ``wire.Trace(**fields, ...)``."""
        return {
            "status": self.status,
            "degradation": self.degradation,
            "budget": wire.Budget(
                max_input_tokens=self.max_input_tokens,
                reserve_output_tokens=self.reserve_output_tokens,
            ),
            "input_estimate": wire.Estimate(
                value=float(self.input_estimate), unit="token", estimator=self.estimator
            ),
            **self._candidate_fields(),
            "selection": self.selection_info(),
        }

    def _candidate_fields(self) -> dict:
        """The trace's candidates; beyond ``wire.MAX_CANDIDATES_PER_TRACE``, the ones that
        matter most (``wire.truncate_candidates``), the flag and the counts of them all."""
        candidates = self.wire_candidates()
        kept, truncated = wire.truncate_candidates(candidates)
        if not truncated:
            return {"candidates": candidates}
        return {
            "candidates": kept,
            "candidates_truncated": True,
            "candidate_counts": wire.candidate_counts(candidates),
        }

    def selection_info(self) -> wire.SelectionInfo:
        """The trace's ``selection`` block: the call's arguments and the engine."""
        return wire.SelectionInfo(
            engine=self.engine,
            fixed_input_tokens=self.fixed_input_tokens,
            relevance_threshold=float(self.relevance_threshold),
            context_window=self.context_window,
            max_input_tokens=self.call_max_input_tokens,
        )

    def shadow_result(self, version: int) -> wire.ShadowResult:
        """This selection as the trace's ``shadow`` when it ran a shadow strategy version."""
        return wire.ShadowResult(
            version=version, status=self.status, selected=list(self.selected_ids)
        )


def select(
    *,
    strategy: Strategy | dict,
    candidates: Iterable[CandidateItem],
    context_window: int | None = None,
    max_input_tokens: int | None = None,
    fixed_input_tokens: int = 0,
    relevance_threshold: float = DEFAULT_RELEVANCE_THRESHOLD,
    estimator: Estimator = DEFAULT_ESTIMATOR,
) -> Selection:
    """Choose this call's context from the candidates the providers returned.

    - ``strategy``: a :class:`Strategy` (read once per configuration) or a strategy body.
    - ``candidates``: every item the providers returned, whatever their outcome.
    - ``context_window``: the model's window, chosen by the application (never by the
      client); ``max_input_tokens``: this call's own budget.  Both can only lower the
      strategy's ``budget.max_input_tokens``.
    - ``fixed_input_tokens``: what the request holds besides the candidates (system prompt,
      tool definitions, the question), counted against the budget first.
    - ``relevance_threshold``: optional items scored below it are ``irrelevant``.
    - ``estimator``: sizes items that come with a text and no size.

    Pure and deterministic: the same arguments give an equal :class:`Selection`.  Raises
    :class:`EngineInputError` for malformed input (negative sizes, duplicate ids, dependency
    cycles, a source that is no key, …) naming each bad item. An item of a source the
    strategy does not read is decided :data:`NOT_REQUESTED` (reason code
    :data:`SOURCE_NOT_READ`) without being weighed.
    """
    if not isinstance(strategy, Strategy):
        strategy = Strategy.from_body(strategy)
    items = candidates if type(candidates) is tuple else tuple(candidates)
    findings = _check_arguments(
        context_window, max_input_tokens, fixed_input_tokens, relevance_threshold, estimator
    )
    if findings:
        raise EngineInputError(findings)
    sources = strategy.sources
    not_read = _sources_not_read(items, sources)
    # Checked like every other (a malformed item is refused whatever its source), decided not.
    checked = check_candidates(items, sources | not_read, estimator, findings)
    if findings:
        raise EngineInputError(findings)
    arguments = {
        "context_window": context_window,
        "max_input_tokens": max_input_tokens,
        "fixed_input_tokens": fixed_input_tokens,
        "relevance_threshold": relevance_threshold,
        "estimator": estimator,
    }
    if not_read:
        return _decide_without(strategy, items, checked, not_read, arguments)
    return decide(strategy, items, checked, **arguments)


def _sources_not_read(items: tuple, sources: frozenset[str]) -> frozenset[str]:
    """The sources of candidates the strategy does not read, among the well-formed keys (any
    other source is malformed: check_candidates says so)."""
    found = {getattr(c, "source", None) for c in items}
    found.difference_update(sources)
    return frozenset(s for s in found if type(s) is str and 0 < len(s) <= wire.MAX_KEY_CHARS)


def _decide_without(
    strategy: Strategy, items: tuple, checked: CheckedCandidates, not_read, arguments
) -> Selection:
    """:func:`decide` on the candidates of the sources the strategy reads; the others are
    recorded :data:`NOT_REQUESTED` in their place, so the trace counts and shows every item
    a provider returned (the strategy never asked for these: they are not weighed, never
    required, never sent to the model)."""
    asked = tuple(c for c in items if c.source not in not_read)
    findings: list[Finding] = []
    own = check_candidates(asked, strategy.sources, arguments["estimator"], findings)
    if findings:  # a subset of candidates that passed: cannot happen, but never decide on it
        raise EngineInputError(findings)
    selection = decide(strategy, asked, own, **arguments)
    decided = iter(selection.decisions)
    decisions = [
        ItemDecision(
            c.id,
            c.source,
            c.version,
            checked.sizes[i],
            False,
            None,
            NOT_REQUESTED,
            reasons.source_not_read(c.source),
            SOURCE_NOT_READ,
        )
        if c.source in not_read
        else next(decided)
        for i, c in enumerate(items)
    ]
    # `checked` describes `asked`, not these candidates: a shadow checks them itself.
    return msgspec.structs.replace(
        selection, decisions=tuple(decisions), candidates=items, checked=None
    )


def decide(
    strategy: Strategy, items: tuple[CandidateItem, ...], checked: CheckedCandidates, **arguments
) -> Selection:
    """:func:`select` after its checks: ``checked`` is what :func:`check_candidates` found for
    exactly these items (every source among the strategy's, no finding), the arguments
    (:func:`decide_run`'s: the context window, the call's cap, the fixed input, the relevance
    threshold, the estimator) passed ``_check_arguments``. A replay with several versions of
    one strategy checks the candidates once (``context_runtime.replay.Replay``)."""
    # texts: the Selection holds every text, so the frequent ones are written at once.
    return decide_run(strategy, items, checked, texts=True, **arguments).selection()


def decide_run(
    strategy: Strategy,
    items: tuple[CandidateItem, ...],
    checked: CheckedCandidates,
    *,
    context_window: int | None,
    max_input_tokens: int | None,
    fixed_input_tokens: int,
    relevance_threshold: float,
    estimator: Estimator,
    texts: bool = False,
) -> Decided:
    """:func:`decide` without writing the reason texts: every decision, reason code, group
    label, the status and the tokens, each the same as the :class:`Selection`'s
    (:meth:`Decided.selection` builds it, texts included). What compares selections by their
    facts — a shadow run, a replay of many traces — reads these and skips the texts (a
    sixth of a selection at 50 candidates, docs/PERFORMANCE.md). ``texts``: write the
    frequent texts as the allocator goes (what :func:`decide` does: deferring a text costs
    more than writing it when it is read anyway)."""
    limit = strategy.max_input_tokens
    if context_window is not None and context_window < limit:
        limit = context_window
    if max_input_tokens is not None and max_input_tokens < limit:
        limit = max_input_tokens
    available = max(0, limit - strategy.reserve_output_tokens - fixed_input_tokens)

    run = _Run(strategy, items, checked, relevance_threshold, texts=texts)
    run.choose(available)
    status, degradation, problems = run.status()
    return Decided(
        run,
        status,
        degradation,
        problems,
        limit=limit,
        available=available,
        reserve_output_tokens=strategy.reserve_output_tokens,
        fixed_input_tokens=fixed_input_tokens,
        relevance_threshold=relevance_threshold,
        context_window=context_window,
        call_max_input_tokens=max_input_tokens,
        estimator=estimator.name,
    )


class Decided:
    """One selection's facts, the reason texts written only when read (:func:`decide_run`).

    ``decision``, ``reason_code``, ``required`` and ``bundle`` hold one entry per candidate
    in the candidates' order (``bundle``: the decided group label or ``None``); ``order`` the
    indexes of the selected candidates in selection order."""

    __slots__ = (
        "_run",
        "status",
        "degradation",
        "problems",
        "items",
        "checked",
        "decision",
        "reason_code",
        "required",
        "bundle",
        "order",
        "used_tokens",
        "available_tokens",
        "max_input_tokens",
        "reserve_output_tokens",
        "fixed_input_tokens",
        "relevance_threshold",
        "context_window",
        "call_max_input_tokens",
        "estimator",
    )

    def __init__(
        self,
        run: _Run,
        status,
        degradation,
        problems,
        *,
        limit,
        available,
        reserve_output_tokens,
        fixed_input_tokens,
        relevance_threshold,
        context_window,
        call_max_input_tokens,
        estimator,
    ):
        self._run = run
        self.status = status
        self.degradation = degradation
        self.problems = problems
        self.items = run.items
        self.checked = run.checked
        self.decision = run.decision
        self.reason_code = run.code
        self.required = run.required
        self.bundle = run.bundle or _NO_BUNDLES * len(run.items)
        self.order = run.order
        self.used_tokens = available - run.remaining
        self.available_tokens = available
        self.max_input_tokens = limit
        self.reserve_output_tokens = reserve_output_tokens
        self.fixed_input_tokens = fixed_input_tokens
        self.relevance_threshold = relevance_threshold
        self.context_window = context_window
        self.call_max_input_tokens = call_max_input_tokens
        self.estimator = estimator

    @property
    def input_estimate(self) -> int:
        return self.fixed_input_tokens + self.used_tokens

    @property
    def selected_ids(self) -> tuple[str, ...]:
        items = self.items
        return tuple([items[i].id for i in self.order])

    def reason(self, i: int) -> str:
        """The reason text of candidate ``i``, as its :class:`ItemDecision` holds it."""
        why = _text(self._run.reason[i])
        return why if len(why) <= wire.MAX_REASON_CHARS else reasons.short(why)

    def selection(self) -> Selection:
        """The :class:`Selection` :func:`decide` returns, reason texts written."""
        items, problems = self.items, self.problems
        return Selection(
            status=self.status,
            degradation=self.degradation,
            reason=problems[0]
            if problems
            else reasons.ready(self.used_tokens, self.available_tokens),
            problems=problems,
            selected=tuple([items[i] for i in self.order]),
            decisions=self._run.decisions(),
            max_input_tokens=self.max_input_tokens,
            reserve_output_tokens=self.reserve_output_tokens,
            fixed_input_tokens=self.fixed_input_tokens,
            available_tokens=self.available_tokens,
            used_tokens=self.used_tokens,
            estimator=self.estimator,
            relevance_threshold=self.relevance_threshold,
            context_window=self.context_window,
            call_max_input_tokens=self.call_max_input_tokens,
            candidates=items,
            checked=self.checked,
        )


def _check_arguments(
    context_window, max_input_tokens, fixed_input_tokens, relevance_threshold, estimator
) -> list[Finding]:
    findings = []
    for name, value in (("context_window", context_window), ("max_input_tokens", max_input_tokens)):
        if value is not None and (type(value) is not int or value < 1):
            findings.append(
                Finding(
                    name,
                    "out_of_range",
                    f"{name} must be a whole number of at least 1, not {value!r}.",
                )
            )
    if type(fixed_input_tokens) is not int or fixed_input_tokens < 0:
        findings.append(
            Finding(
                "fixed_input_tokens",
                "out_of_range",
                f"fixed_input_tokens must be a whole number, 0 or more, not {fixed_input_tokens!r}.",
            )
        )
    if type(relevance_threshold) not in (int, float) or not 0 <= relevance_threshold <= 1:
        findings.append(
            Finding(
                "relevance_threshold",
                "out_of_range",
                f"relevance_threshold must be a number from 0 to 1, not {relevance_threshold!r}.",
            )
        )
    if (
        not callable(getattr(estimator, "estimate", None))
        or type(getattr(estimator, "name", None)) is not str
    ):
        findings.append(
            Finding(
                "estimator",
                "invalid_type",
                "estimator must have a name (text) and an estimate(text) method.",
            )
        )
    return findings


# A unit is what the allocator takes or leaves as one: a bundle, or an item outside any bundle.
# It is a tuple, cheap to make and to sort:
#     (order key, member indexes, bundle name or None, size, required, priority, relevance)
# The order key is unique within its group, so sorting never compares past it: required units
# have (source rank, first index); optional ones (-score, first id), the score ranking by
# priority, then relevance with unscored items last (see _score).  The first ids of live units
# are distinct: two versions of one id are in conflict, or all but one do not apply.  A float
# first in the key lets the sort compare most pairs without looking further.
_KEY, _MEMBERS, _BUNDLE, _SIZE, _REQUIRED, _PRIORITY, _RELEVANCE = range(7)
_order_key = itemgetter(_KEY)  # sorting by the key alone keeps the sort's fast paths


def _text(reason) -> str:
    """A reason as text. The allocator keeps most reasons as (wording function, its arguments)
    and writes them only when read: a selection compared by its facts never reads them, and
    formatting numbers was a sixth of a selection (docs/PERFORMANCE.md)."""
    return reason if reason.__class__ is str else reason[0](*reason[1:])


def _score(priority: int, relevance: float | None) -> float:
    """Higher first: a priority step (3) outweighs any relevance (1 to 2; unscored 0)."""
    return priority * 3.0 + (0.0 if relevance is None else relevance + 1.0)


class _Run:
    """The state of one selection: a decision, a reason and a required flag per candidate."""

    def __init__(
        self, strategy: Strategy, items: tuple, checked: CheckedCandidates, threshold, texts=True
    ):
        n = len(items)
        # False: the frequent reasons are kept as (wording, arguments) until read (_text); the
        # rare ones always are.
        self.texts = texts
        self.strategy = strategy
        self.items = items
        self.checked = checked
        self.sizes = checked.sizes
        self.threshold = threshold
        self.decision: list = [None] * n
        self.reason: list = [""] * n
        self.code: list = [""] * n  # the reason as a code of wire.REASON_CODES
        self.root: list = [None] * n  # (decision, source) behind a dependency_missing
        self.why: list = [None] * n  # why an item outside the required sources is required
        self.order: list[int] = []  # selected, in selection order
        self.remaining = 0
        self.unit_of: list[int] = []  # candidate -> its unit, when dependencies are in play
        # Who belongs with whom depends on the candidates and strategy.grouping_key only: a
        # second version on the same candidates with an equal key (the A/A shadow, a preview's
        # draft that kept the bundles) reuses the first one's, a fifth of a selection. None of
        # these lists is changed after it is made.
        cache = checked.__dict__.setdefault("grouping", {})
        known = cache.get(strategy.grouping_key)
        if known is not None:
            self.bundle, self.members, self.by_source, self.required, self.why = known
            return
        self.bundle = self._bundles()
        self.members = self._members() if self.bundle is not None else {}
        self.by_source = self._by_source() if strategy.depends_on else {}
        self.required = self._required()
        cache[strategy.grouping_key] = (
            self.bundle,
            self.members,
            self.by_source,
            self.required,
            self.why,
        )

    # ------------------------------------------------------------ who belongs with whom

    def _bundles(self) -> list | None:
        """The bundle of each candidate (``None`` for the whole list when there are none).

        An item is in every bundle that names it, the strategy's and its provider's; bundles
        that share an item are one indivisible group (each must be whole, so they go together),
        named by their names joined with ``+``."""
        strategy = self.strategy
        if not strategy.bundles:
            if not self.checked.has_item_bundles:
                return None
            return [c.bundle for c in self.items]
        entries, rules = strategy.bundle_entries, strategy.bundles_for
        items = self.items
        result: list = [c.bundle for c in items]
        shared = False
        # Most items match no entry: two C-level checks in a comprehension find the others.
        for i in [
            i for i, c in enumerate(items) if c.source in entries or c.id.startswith(entries)
        ]:
            c = items[i]
            names = rules(c.id, c.source)
            if c.bundle is not None and c.bundle not in names:
                names = (*names, c.bundle)
            if len(names) == 1:
                result[i] = names[0]
            else:
                result[i] = names
                shared = True
        return _merge_shared_bundles(result) if shared else result

    def _members(self) -> dict[str, list[int]]:
        members: dict[str, list[int]] = {}
        for i, name in enumerate(self.bundle):
            if name is not None and self.items[i].outcome != NOT_APPLICABLE:
                members.setdefault(name, []).append(i)
        return members

    def _by_source(self) -> dict[str, list[int]]:
        by_source: dict[str, list[int]] = {}
        for i, c in enumerate(self.items):
            by_source.setdefault(c.source, []).append(i)
        return by_source

    def _required(self) -> list[bool]:
        required_set = self.strategy.required_set
        items = self.items
        required = [c.source in required_set and c.outcome != NOT_APPLICABLE for c in items]
        if self.bundle is None and not self.checked.has_dependencies:
            return required
        # What a required item cannot do without is required too (module docstring, rule 3).
        why = self.why
        indexes = self.checked.indexes
        depends_on = self.strategy.depends_on
        work = [i for i, r in enumerate(required) if r]

        def promote(j: int, because: str) -> None:
            if not required[j] and items[j].outcome != NOT_APPLICABLE:
                required[j] = True
                why[j] = because
                work.append(j)

        while work:
            i = work.pop()
            c = items[i]
            name = self.bundle[i] if self.bundle is not None else None
            if name is not None:
                for j in self.members.get(name, ()):
                    promote(j, (reasons.required_with_bundle, name))
            for need in c.depends_on:
                for j in indexes(need):
                    promote(j, (reasons.required_by, c.id))
            if c.source not in required_set:
                for source in depends_on.get(c.source, ()):
                    for j in self.by_source.get(source, ()):
                        promote(j, (reasons.required_by, c.id))
        return required

    # ------------------------------------------------------------ the allocator

    def choose(self, available: int) -> None:
        self._conflicts()
        required_units, optional_units = self._units()
        self.remaining = available
        required_units.sort(key=_order_key)
        optional_units.sort(key=_order_key)
        if self.checked.has_dependencies or self.strategy.depends_on:
            self._in_dependency_order(required_units + optional_units)
        else:
            self._allocate(required_units)
            self._allocate(optional_units)

    def _conflicts(self) -> None:
        items, decision, reason, code = self.items, self.decision, self.reason, self.code
        for item_id, indexes in self.checked.versions.items():
            fetched = [j for j in indexes if items[j].outcome == FETCHED]
            if len(fetched) > 1:
                text = reasons.versions_conflict(item_id, [items[j].version for j in fetched])
                for j in fetched:
                    decision[j] = CONFLICT
                    reason[j] = text
                    code[j] = "versions_conflict"
        if not self.checked.has_conflict_flags:
            return
        for i, c in enumerate(items):
            if not c.conflicts_with or c.outcome != FETCHED:
                continue
            for target in c.conflicts_with:
                for j in self.checked.indexes(target):
                    other = items[j]
                    if other.outcome != FETCHED:
                        continue  # only two valid items can contradict each other
                    text = reasons.flagged_conflict(
                        c.source, c.id, c.version, other.id, other.version
                    )
                    for k in (i, j):
                        if decision[k] is None:
                            decision[k] = CONFLICT
                            reason[k] = text
                            code[k] = "flagged_conflict"

    def _units(self) -> tuple[list[tuple], list[tuple]]:
        """The live units, required and optional: fetched, not in conflict, not in an
        incomplete bundle, relevant enough."""
        # Locals for everything read per candidate: this loop is a quarter of a selection.
        items, decision, sizes, required = self.items, self.decision, self.sizes, self.required
        reason, code, texts = self.reason, self.code, self.texts
        priority, rank = self.strategy.priority, self.strategy.rank
        last_rank = len(rank)
        threshold = self.threshold
        bundle = self.bundle
        required_units: list[tuple] = []
        optional_units: list[tuple] = []
        add_required, add_optional = required_units.append, optional_units.append
        blocked = self._blocked_bundles() if bundle is not None else {}
        grouped: dict[str, list[int]] = {}
        for i, c in enumerate(items):
            outcome = c.outcome
            if outcome != FETCHED:  # what the provider said stands (rule 1)
                decision[i] = outcome
                code[i] = _PROVIDER_CODES[outcome]
                if outcome == NOT_FETCHED:
                    reason[i] = (
                        reasons.not_fetched(c.source, c.note)
                        if texts
                        else (reasons.not_fetched, c.source, c.note)
                    )
                elif outcome == NO_ACCESS:
                    reason[i] = (reasons.no_access, c.note, required[i])
                else:
                    reason[i] = (reasons.not_applicable, c.source, c.note)
                continue
            if decision[i] is not None:  # in conflict
                continue
            name = bundle[i] if bundle is not None else None
            if name is not None:
                if name in blocked:
                    j, why = blocked[name]
                    decision[i] = DEPENDENCY_MISSING
                    reason[i] = (reasons.bundle_incomplete, name, items[j].id, why)
                    code[i] = "bundle_incomplete"
                    self.root[i] = (why, items[j].source)
                elif name in grouped:
                    grouped[name].append(i)
                else:
                    grouped[name] = [i]
            elif required[i]:
                key = (rank.get(c.source, last_rank), i)
                add_required((key, (i,), None, sizes[i], True, 0, c.relevance))
            else:
                relevance = c.relevance
                if relevance is not None and relevance < threshold:
                    decision[i] = IRRELEVANT
                    reason[i] = (
                        reasons.irrelevant(relevance, threshold, c.note)
                        if texts
                        else (reasons.irrelevant, relevance, threshold, c.note)
                    )
                    code[i] = "below_threshold"
                    continue
                level = priority.get(c.source, DEFAULT_PRIORITY)
                score = level * 3.0 if relevance is None else level * 3.0 + relevance + 1.0
                key = (-score, c.id)  # _score, inlined: this line runs once per candidate
                add_optional((key, (i,), None, sizes[i], False, level, relevance))
        for name, members in grouped.items():
            self._bundle_unit(name, members, required_units, optional_units)
        return required_units, optional_units

    def _blocked_bundles(self) -> dict[str, tuple[int, str]]:
        """Bundles that cannot be chosen whole, each with the member that prevents it and
        why (its outcome, or ``conflict``)."""
        decision, items = self.decision, self.items
        blocked = {}
        for name, members in self.members.items():
            for j in members:
                why = decision[j] or items[j].outcome
                if why in _BLOCKS_BUNDLE:
                    blocked[name] = (j, why)
                    break
        return blocked

    def _bundle_unit(self, name: str, members: list[int], required_units, optional_units):
        items, strategy = self.items, self.strategy
        size = sum(self.sizes[i] for i in members)
        scores = [items[i].relevance for i in members if items[i].relevance is not None]
        relevance = max(scores) if scores else None
        if any(self.required[i] for i in members):
            last_rank = len(strategy.rank)
            rank = min(strategy.rank.get(items[i].source, last_rank) for i in members)
            unit = ((rank, members[0]), tuple(members), name, size, True, 0, relevance)
            required_units.append(unit)
            return
        if relevance is not None and relevance < self.threshold:
            text = (reasons.bundle_irrelevant, name, relevance, self.threshold)
            for i in members:
                self.decision[i] = IRRELEVANT
                self.reason[i] = text
                self.code[i] = "below_threshold"
            return
        level = max(strategy.priority_of(items[i].source) for i in members)
        key = (-_score(level, relevance), items[members[0]].id)
        optional_units.append((key, tuple(members), name, size, False, level, relevance))

    def _allocate(self, units) -> None:
        """Take each unit, in order, if it fits what is left; otherwise leave it over budget."""
        decision, reason, code = self.decision, self.reason, self.code
        why, order, texts = self.why, self.order, self.texts
        remaining = self.remaining
        for _, members, bundle, size, required, priority, relevance in units:
            if size <= remaining:
                remaining -= size
                if required:
                    for i in members:
                        decision[i] = SELECTED
                        reason[i] = why[i] or reasons.REQUIRED
                        code[i] = "required"
                        order.append(i)
                    continue
                if bundle is None:
                    text = (
                        reasons.selected_optional(priority, relevance)
                        if texts
                        else (reasons.selected_optional, priority, relevance)
                    )
                else:
                    text = (reasons.selected_optional_bundle, bundle, size, priority, relevance)
                for i in members:
                    decision[i] = SELECTED
                    reason[i] = text
                    code[i] = "optional_fits"
                    order.append(i)
                continue
            if bundle is not None:
                text = (reasons.over_budget_bundle, bundle, size, remaining)
                why_code = "over_budget_bundle"
            elif required:
                text = (reasons.over_budget_required, size, remaining)
                why_code = "over_budget_required"
            else:
                text = (
                    reasons.over_budget_optional(priority, size, remaining)
                    if texts
                    else (reasons.over_budget_optional, priority, size, remaining)
                )
                why_code = "over_budget_optional"
            for i in members:
                decision[i] = OVER_BUDGET
                reason[i] = text
                code[i] = why_code
        self.remaining = remaining

    def _in_dependency_order(self, units: list) -> None:
        """Kahn's algorithm with the allocator's order as the tie-break: a unit is decided
        once everything it depends on has been.  ``units`` come sorted in that order (required
        first: what they depend on is required as well), so a unit's position is its
        priority and the heap holds plain integers."""
        items, indexes = self.items, self.checked.indexes
        depends_on, by_source = self.strategy.depends_on, self.by_source
        unit_of = [-1] * len(items)
        for k, unit in enumerate(units):
            for i in unit[_MEMBERS]:
                unit_of[i] = k
        self.unit_of = unit_of
        waiting = [0] * len(units)
        dependents: list[list[int]] = [[] for _ in units]
        dependent = [False] * len(units)  # has a dependency to check when its turn comes
        for k, unit in enumerate(units):
            needs: set[int] = set()
            for i in unit[_MEMBERS]:
                c = items[i]
                if c.depends_on:
                    dependent[k] = True
                    for need in c.depends_on:
                        needs.update([unit_of[j] for j in indexes(need)])
                if c.source in depends_on:
                    dependent[k] = True
                    for source in depends_on[c.source]:
                        needs.update([unit_of[j] for j in by_source.get(source, ())])
            if needs:
                needs.discard(k)
                needs.discard(-1)  # decided already (not fetched, in conflict, irrelevant...)
                waiting[k] = len(needs)
                for other in needs:
                    dependents[other].append(k)
        ready = [k for k in range(len(units)) if not waiting[k]]  # sorted: already a heap
        decided = 0
        while ready:
            k = heapq.heappop(ready)
            unit = units[k]
            unmet = self._unmet(unit[_MEMBERS], k) if dependent[k] else None
            if unmet is None:
                self._allocate((unit,))
            else:
                text, root, why_code = unmet
                for i in unit[_MEMBERS]:
                    self.decision[i] = DEPENDENCY_MISSING
                    self.reason[i] = text
                    self.code[i] = why_code
                    self.root[i] = root
            decided += 1
            for other in dependents[k]:
                waiting[other] -= 1
                if not waiting[other]:
                    heapq.heappush(ready, other)
        if decided < len(units):
            stuck = [i for k, unit in enumerate(units) if waiting[k] for i in unit[_MEMBERS]]
            raise EngineInputError([_circle(items, stuck)])

    def _unmet(self, members, k: int):
        """The first dependency of the unit that was not selected: (reason, root cause, reason
        code)."""
        items, decision, unit_of = self.items, self.decision, self.unit_of
        for i in members:
            c = items[i]
            for need in c.depends_on:
                found = self.checked.indexes(need)
                if not found:
                    return (reasons.needs_absent_item, need), (_ABSENT, None), _NEED_ABSENT
                if not any(decision[j] == SELECTED or unit_of[j] == k for j in found):
                    root = self._root_of(found[0])
                    return (reasons.needs, need, decision[found[0]]), root, _NEED_UNSELECTED
            for source in self.strategy.depends_on.get(c.source, ()):
                found = self.by_source.get(source, ())
                if not found:
                    return (reasons.needs_empty_source, source), (_ABSENT, source), _NEED_ABSENT
                if not any(decision[j] == SELECTED or unit_of[j] == k for j in found):
                    root = self._root_of(found[0])
                    return (reasons.needs, source, decision[found[0]]), root, _NEED_UNSELECTED
        return None

    def _root_of(self, j: int) -> tuple[str, str | None]:
        if self.decision[j] == DEPENDENCY_MISSING:
            return self.root[j]
        return self.decision[j], self.items[j].source

    # ------------------------------------------------------------ the verdict

    def status(self) -> tuple[str, str | None, tuple[str, ...]]:
        """(status, degradation, problems most serious first) — rule 7 and the precedence."""
        items, decision, reason, required = self.items, self.decision, self.reason, self.required
        on_missing = self.strategy.on_missing
        causes: list[tuple[int, str]] = []
        handlers: dict[str, str] = {}  # handler -> the first source that named it

        def missing(source: str | None, text: str) -> None:
            handler = on_missing.get(source) if source is not None else None
            if handler is None:
                causes.append((_RANK[MISSING_REQUIRED_DATA], text))
            else:
                handlers.setdefault(handler, source)
                causes.append((_RANK[DEGRADED], reasons.with_handler(text, handler)))

        for i, (c, d, needed) in enumerate(zip(items, decision, required, strict=True)):
            if d == SELECTED or d == OVER_BUDGET and not needed:
                continue
            if d == CONFLICT:
                causes.append((_RANK[SOURCE_CONFLICT], f"{c.id}: {_text(reason[i])}"))
            elif needed:
                text = f"{c.id}: {_text(reason[i])}"
                if d == NOT_FETCHED:
                    missing(c.source, text)
                elif d == NO_ACCESS:
                    causes.append((_RANK[MISSING_REQUIRED_DATA], text))
                elif d == OVER_BUDGET:
                    causes.append((_RANK[BUDGET_EXCEEDED], text))
                elif d == DEPENDENCY_MISSING:
                    root, source = self.root[i]
                    if root == CONFLICT:
                        causes.append((_RANK[SOURCE_CONFLICT], text))
                    elif root == OVER_BUDGET:
                        causes.append((_RANK[BUDGET_EXCEEDED], text))
                    elif root in (NOT_FETCHED, NOT_APPLICABLE, _ABSENT):
                        missing(source, text)
                    else:
                        causes.append((_RANK[MISSING_REQUIRED_DATA], text))
            elif d == NOT_FETCHED and c.source in on_missing:
                missing(c.source, f"{c.id}: {_text(reason[i])}")
        present = self.checked.present_sources
        for source in self.strategy.required_sources:
            if source not in present:
                missing(source, reasons.source_returned_nothing(source))
        if len(handlers) > 1:
            pairs = [(source, handler) for handler, source in handlers.items()]
            causes.append((_RANK[MISSING_REQUIRED_DATA], reasons.several_handlers(pairs)))
        if not causes:
            return READY, None, ()
        causes.sort(key=lambda cause: cause[0])  # stable: items keep their order within a rank
        status = STATUS_PRECEDENCE[causes[0][0]]
        degradation = None
        if status == DEGRADED:
            (degradation,) = handlers
            for i, c in enumerate(items):
                if decision[i] == NOT_FETCHED and on_missing.get(c.source) == degradation:
                    reason[i] = reasons.handler_takes_over(_text(reason[i]), degradation)
        return status, degradation, tuple(text for _, text in causes)

    def decisions(self) -> tuple[ItemDecision, ...]:
        decision, reason, required, sizes = self.decision, self.reason, self.required, self.sizes
        bundle = self.bundle or _NO_BUNDLES * len(self.items)
        short, limit = reasons.short, wire.MAX_REASON_CHARS
        # The reasons still kept as (wording, arguments) are written now (_text), in place.
        deferred = [i for i, r in enumerate(reason) if r.__class__ is not str]
        for i in deferred:
            reason[i] = _text(reason[i])
        return tuple(
            [
                ItemDecision(  # by position: the fields' order, id to reason code
                    c.id,
                    c.source,
                    c.version,
                    size,
                    needed,
                    name,
                    d,
                    why if len(why) <= limit else short(why),
                    code,
                )
                for c, size, needed, name, d, why, code in zip(
                    self.items, sizes, required, bundle, decision, reason, self.code, strict=True
                )
            ]
        )


_NO_BUNDLES = [None]


def _merge_shared_bundles(assigned: list) -> list:
    """Replace each item's bundle name (or tuple of names) by the name of its group: the
    bundles linked by items they share, joined with ``+`` in name order."""
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent.get(name, name) != name:
            name = parent[name]
        return name

    for names in assigned:
        if isinstance(names, tuple):
            roots = sorted({root(name) for name in names})
            for other in roots[1:]:
                parent[other] = roots[0]
    groups: dict[str, list[str]] = {}
    for names in assigned:
        for name in names if isinstance(names, tuple) else (names,) if names else ():
            group = groups.setdefault(root(name), [])
            if name not in group:
                group.append(name)
    label = {}
    for top, names in groups.items():
        joined = "+".join(sorted(names))
        label[top] = joined if len(joined) <= 100 else joined[:99] + "…"
    return [
        None if names is None else label[root(names[0] if isinstance(names, tuple) else names)]
        for names in assigned
    ]


def _circle(items: tuple, stuck: list[int]) -> Finding:
    names = [items[i].id for i in stuck[:5]]
    shown = ", ".join(names) + (f" and {len(stuck) - 5} more" if len(stuck) > 5 else "")
    return Finding(
        f"candidates[{stuck[0]}].depends_on",
        "dependency_cycle",
        f"{shown} wait on each other through their own depends_on and the strategy's, so none "
        "of them could be selected.",
    )
