"""The checker: a strategy body against a regression set's members. Pure Python, no Django, no
query per member (unit-tested and benchmarked as it is; the selectors hand it the members'
rows).

A member keeps what a replay needs (`snapshot`): the trace's `selection` block, its candidates
in their wire form with their replay fields (never a body: a trace holds none), the recorded
status, degradation and input tokens, the sources the recorded version read (so the checker
knows which providers were asked), and for "decide exactly as version V decided", V's facts
worked out when the expectation was added. So a member is checked the same way after its trace
was dropped by retention.

Per member and expectation the answer is `passed`, `failed` (with the recorded and the checked
decisions of the items concerned, side by side), or `not_checkable` (with why): a body that
reads a source the request never fetched cannot be judged on it — what that provider would
have returned is unknowable — and that is never counted as passed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import msgspec
from context_runtime import replay as engine_replay
from context_runtime import wire
from context_runtime.engine import SELECTED, EngineInputError, Strategy
from context_runtime.findings import Finding
from context_runtime.replay import CandidateFacts, Facts

ITEM_SELECTED = "item_selected"
SOURCE_NOT_EXCLUDED = "source_not_excluded"
STATUS_IN = "status_in"
INPUT_TOKENS_AT_MOST = "input_tokens_at_most"
SAME_AS_RECORDED = "same_as_recorded"
KINDS = (ITEM_SELECTED, SOURCE_NOT_EXCLUDED, STATUS_IN, INPUT_TOKENS_AT_MOST, SAME_AS_RECORDED)

PASSED, FAILED, NOT_CHECKABLE = "passed", "failed", "not_checkable"
OUTCOMES = (PASSED, FAILED, NOT_CHECKABLE)
# A set's word adds one: `empty`, a set with no member left (all removed, or expired by its
# retention) — it checks nothing, so it is never "passed", and a required one refuses go-live.
EMPTY = "empty"
SET_OUTCOMES = (*OUTCOMES, EMPTY)
# A member's one word: the worst of its expectations'.
_RANK = {PASSED: 0, NOT_CHECKABLE: 1, FAILED: 2}

_candidates = msgspec.convert


def expectation_words(expectation: Mapping) -> str:
    """An expectation as a person reads it (pages, JUnit test names)."""
    kind = expectation.get("kind")
    if kind == ITEM_SELECTED:
        return f"{expectation.get('item')} must be selected"
    if kind == SOURCE_NOT_EXCLUDED:
        reason = expectation.get("reason") or ""
        why = f" as {reason}" if reason else ""
        return f"{expectation.get('source')} must not be excluded{why}"
    if kind == STATUS_IN:
        return "status must be one of " + ", ".join(expectation.get("statuses") or ())
    if kind == INPUT_TOKENS_AT_MOST:
        return f"input tokens at most {expectation.get('tokens'):,}"
    if kind == SAME_AS_RECORDED:
        return f"decides exactly as v{expectation.get('version')} decided"
    return str(kind)


def facts_dump(facts: Facts) -> dict:
    """A Facts as a member keeps it (JSON)."""
    return {
        "status": facts.status,
        "degradation": facts.degradation,
        "candidates": [list(c) for c in msgspec.to_builtins(facts.candidates)],
    }


def facts_load(data: Mapping) -> Facts:
    return Facts(
        data["status"],
        data.get("degradation") or "",
        tuple(CandidateFacts(*row) for row in data["candidates"]),
    )


@dataclass(frozen=True)
class MemberCase:
    """One member as the checker reads it: its snapshot and its expectations.

    `stamp` (the member's added_at) marks a stored member, whose snapshot never changes: its
    decoded form is then kept (`decoded`); a caller holding it (`ready`) need not read the
    snapshot."""

    key: int | str
    request_id: str
    environment: str
    snapshot: Mapping | None
    expectations: Sequence[Mapping]
    stamp: str = ""
    ready: Decoded | None = None  # already decoded (`decoded_known`)


class Decoded:
    """A snapshot decoded into what the engine and the judge take: the recorded wire
    candidates, a `Replay` ready to run (it keeps the engine's check of the candidates per set
    of sources read), the recorded facts, the sources asked, the facts of "decide exactly as
    V". Decoding is most of a check's cost (JSON → wire structs → engine items → the engine's
    check of them), so a stored member is decoded once per process, not once per check."""

    __slots__ = ("recorded", "request", "before", "sources", "status", "tokens", "refs", "why")

    def __init__(self, snapshot: Mapping):
        self.why, self.status, self.sources, self.tokens, self.refs = "", "", frozenset(), None, {}
        try:
            self.status = snapshot.get("status", "")
            self.sources = frozenset(snapshot.get("sources") or ())
            self.tokens = snapshot.get("input_tokens")
            self.refs = {k: facts_load(v) for k, v in (snapshot.get("references") or {}).items()}
            self.recorded = _candidates(snapshot["candidates"], type=list[wire.Candidate])
            self.request = engine_replay.Replay(
                engine_replay.trace_candidates(self.recorded),
                _candidates(snapshot["selection"], type=wire.SelectionInfo),
            )
            self.before = Facts.recorded(self.status, snapshot.get("degradation"), self.recorded)
        except engine_replay.NotReplayable as exc:
            self.why = f"The request cannot be replayed: {exc}."
        except (KeyError, TypeError, AttributeError, msgspec.ValidationError) as exc:
            self.why = f"The member's snapshot is incomplete ({exc})."


# Stored members decoded, by (member id, added_at): a member's snapshot never changes and an id
# is never reused, so an entry never goes stale. Bounded: past the limit it starts again.
DECODED_LIMIT = 50_000
_decoded: dict[tuple, Decoded] = {}
_decoded_lock = threading.Lock()


def decoded_known(keys: Iterable[tuple]) -> dict[tuple, Decoded]:
    """The decoded forms kept for these (member id, added_at) keys; the others' snapshots must
    be read."""
    return {k: found for k in keys if (found := _decoded.get(k)) is not None}


def decoded(member: MemberCase) -> Decoded:
    if member.ready is not None:
        return member.ready
    if not member.stamp:
        return Decoded(member.snapshot)
    key = (member.key, member.stamp)
    found = _decoded.get(key)
    if found is None:
        found = Decoded(member.snapshot)
        with _decoded_lock:
            if len(_decoded) >= DECODED_LIMIT:
                _decoded.clear()
            _decoded[key] = found
    return found


def decoded_forget() -> None:
    """Drop every decoded member (the benchmark's cold figure; tests)."""
    with _decoded_lock:
        _decoded.clear()


@dataclass(frozen=True)
class Decision:
    """One item's decision, recorded and checked ("over_budget · budget_exceeded")."""

    item: str
    source: str
    recorded: str
    checked: str

    def as_dict(self) -> dict:
        return {
            "item": self.item,
            "source": self.source,
            "recorded": self.recorded,
            "checked": self.checked,
        }


@dataclass(frozen=True)
class ExpectationResult:
    expectation: Mapping
    outcome: str
    message: str
    decisions: tuple[Decision, ...] = ()

    @property
    def words(self) -> str:
        return expectation_words(self.expectation)

    def as_dict(self) -> dict:
        return {
            "expectation": dict(self.expectation),
            "words": self.words,
            "outcome": self.outcome,
            "message": self.message,
            "decisions": [d.as_dict() for d in self.decisions],
        }


@dataclass(frozen=True)
class MemberResult:
    key: int | str
    request_id: str
    environment: str
    outcome: str
    results: tuple[ExpectationResult, ...]
    recorded_status: str = ""
    status: str = ""  # the checked body's ("" when not checkable)
    input_tokens: int | None = None
    why_not: str = ""  # not checkable at all: why

    def as_dict(self) -> dict:
        return {
            "member": self.key,
            "request_id": self.request_id,
            "environment": self.environment,
            "outcome": self.outcome,
            "recorded_status": self.recorded_status,
            "status": self.status or None,
            "input_tokens": self.input_tokens,
            "why_not_checkable": self.why_not or None,
            "expectations": [r.as_dict() for r in self.results],
        }


@dataclass
class Totals:
    passed: int = 0
    failed: int = 0
    not_checkable: int = 0

    def as_dict(self) -> dict:
        return {"passed": self.passed, "failed": self.failed, "not_checkable": self.not_checkable}


def totals(results: Iterable[MemberResult]) -> Totals:
    """Counts per member outcome."""
    counted = Totals()
    for result in results:
        setattr(counted, result.outcome, getattr(counted, result.outcome) + 1)
    return counted


def _word(fact: CandidateFacts) -> str:
    text = f"{fact.decision} · {fact.reason_code}" if fact.reason_code else fact.decision
    return text + (" (required)" if fact.required else "")


def _matches(item: str, candidate: wire.Candidate) -> bool:
    """An item named by its id, or by its bundle (the provider's, or the decided group)."""
    return item in (candidate.id, candidate.provider_bundle, candidate.bundle)


def _not_checkable(member: MemberCase, why: str, recorded_status: str = "") -> MemberResult:
    return MemberResult(
        key=member.key,
        request_id=member.request_id,
        environment=member.environment,
        outcome=NOT_CHECKABLE,
        results=tuple(
            ExpectationResult(expectation, NOT_CHECKABLE, why)
            for expectation in member.expectations
        ),
        recorded_status=recorded_status,
        why_not=why,
    )


def check_member(strategy: Strategy, member: MemberCase, *, label: str = "") -> MemberResult:
    """One member's expectations against `strategy` (`label`, e.g. "v4" or "the draft", names
    it in messages)."""
    label = label or "this version"
    snap = decoded(member)
    recorded_status = snap.status
    never = sorted(strategy.sources - snap.sources) if not snap.why else ()
    if never:
        return _not_checkable(
            member,
            f"{label} reads {', '.join(never)}, which this request never fetched (the version "
            "it used does not read it, so its provider was not asked): what it would have "
            "returned is unknowable.",
            recorded_status,
        )
    if snap.why:
        return _not_checkable(member, snap.why, recorded_status)
    try:
        decided = snap.request.run_facts(strategy)
    except EngineInputError as exc:
        shown = "; ".join(f"{f.path}: {f.message}" for f in exc.findings[:3])
        return _not_checkable(
            member, f"The engine refused {label} on this request: {shown}", recorded_status
        )
    checked = engine_replay.facts(decided, of=snap.request.candidates)
    tokens = decided.input_estimate
    judge = _Judge(snap, checked, tokens, label)
    results = tuple(judge.expectation(e) for e in member.expectations)
    worst = max((r.outcome for r in results), key=_RANK.__getitem__, default=PASSED)
    return MemberResult(
        key=member.key,
        request_id=member.request_id,
        environment=member.environment,
        outcome=worst,
        results=results,
        recorded_status=recorded_status,
        status=checked.status,
        input_tokens=tokens,
    )


class _Judge:
    """One member's expectations against one checked selection."""

    def __init__(self, snap: Decoded, after: Facts, tokens: int, label: str):
        self.snap = snap
        self.recorded = snap.recorded
        self.before = snap.before
        self.after = after
        self.tokens = tokens
        self.label = label

    def _decisions(self, positions: Iterable[int], against: Facts | None = None) -> tuple:
        against = against or self.before
        return tuple(
            Decision(
                item=self.recorded[i].id,
                source=self.recorded[i].source,
                recorded=_word(against.candidates[i]),
                checked=_word(self.after.candidates[i]),
            )
            for i in positions
        )

    def _changed(self, against: Facts | None = None) -> list[int]:
        against = against or self.before
        return [
            i
            for i, (a, b) in enumerate(zip(against.candidates, self.after.candidates, strict=True))
            if a != b
        ]

    def _status(self) -> str:
        after = self.after
        return after.status + (f" ({after.degradation})" if after.degradation else "")

    def expectation(self, expectation: Mapping) -> ExpectationResult:
        kind = expectation.get("kind")
        method = getattr(self, f"_{kind}", None) if kind in KINDS else None
        if method is None:
            return ExpectationResult(expectation, NOT_CHECKABLE, f"Unknown expectation {kind!r}.")
        return method(expectation)

    def _item_selected(self, e: Mapping) -> ExpectationResult:
        item = e.get("item", "")
        positions = [i for i, c in enumerate(self.recorded) if _matches(item, c)]
        if not positions:
            return ExpectationResult(e, NOT_CHECKABLE, f"The request has no item {item}.")
        missed = [i for i in positions if self.after.candidates[i].decision != SELECTED]
        if not missed:
            return ExpectationResult(e, PASSED, f"{item} is selected.", self._decisions(positions))
        shown = ", ".join(
            f"{self.recorded[i].id}: {_word(self.after.candidates[i])}" for i in missed
        )
        return ExpectationResult(
            e,
            FAILED,
            f"{item} is not selected by {self.label} ({shown}).",
            self._decisions(positions),
        )

    def _source_not_excluded(self, e: Mapping) -> ExpectationResult:
        source, reason = e.get("source", ""), e.get("reason") or ""
        positions = [i for i, c in enumerate(self.recorded) if c.source == source]
        hit = [
            i
            for i in positions
            if self.after.candidates[i].decision != SELECTED
            and (not reason or self.after.candidates[i].reason_code == reason)
        ]
        if not hit:
            return ExpectationResult(
                e, PASSED, f"No item of {source} is excluded{' as ' + reason if reason else ''}."
            )
        shown = ", ".join(f"{self.recorded[i].id}: {_word(self.after.candidates[i])}" for i in hit)
        return ExpectationResult(e, FAILED, f"{self.label} excludes {shown}.", self._decisions(hit))

    def _status_in(self, e: Mapping) -> ExpectationResult:
        allowed = tuple(e.get("statuses") or ())
        if self.after.status in allowed:
            return ExpectationResult(e, PASSED, f"The status is {self._status()}.")
        return ExpectationResult(
            e,
            FAILED,
            f"{self.label} decides {self._status()} (recorded: {self.before.status}); "
            f"expected one of {', '.join(allowed)}.",
            self._decisions(self._changed()),
        )

    def _input_tokens_at_most(self, e: Mapping) -> ExpectationResult:
        limit = e.get("tokens")
        recorded = self.snap.tokens
        was = f" (recorded: {recorded:,})" if isinstance(recorded, int) else ""
        if isinstance(limit, int) and self.tokens <= limit:
            return ExpectationResult(e, PASSED, f"{self.tokens:,} input tokens{was}.")
        return ExpectationResult(
            e,
            FAILED,
            f"{self.label} uses {self.tokens:,} input tokens{was}, over {limit:,}.",
            self._decisions(self._changed()),
        )

    def _same_as_recorded(self, e: Mapping) -> ExpectationResult:
        version = e.get("version")
        reference = self.snap.refs.get(str(version))
        if reference is None:
            return ExpectationResult(
                e, NOT_CHECKABLE, f"The member keeps no decisions of v{version} to compare with."
            )
        if len(reference.candidates) != len(self.after.candidates):
            return ExpectationResult(e, NOT_CHECKABLE, "The kept decisions do not match.")
        changed = self._changed(reference)
        same_status = (reference.status, reference.degradation) == (
            self.after.status,
            self.after.degradation,
        )
        if same_status and not changed:
            return ExpectationResult(e, PASSED, f"Decides exactly as v{version} decided.")
        words = [] if same_status else [f"status {reference.status} → {self._status()}"]
        words += [
            f"{self.recorded[i].id}: {_word(reference.candidates[i])} → "
            f"{_word(self.after.candidates[i])}"
            for i in changed[:5]
        ]
        more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        return ExpectationResult(
            e,
            FAILED,
            f"{self.label} decides differently from v{version}: {'; '.join(words)}{more}.",
            self._decisions(changed, reference),
        )


def check(strategy: Strategy | dict, members: Iterable[MemberCase], *, label: str = "") -> list:
    """Every member against one strategy body (read once). Raises EngineInputError when the
    body itself is not a valid strategy (the caller answers it as a 400)."""
    if not isinstance(strategy, Strategy):
        strategy = Strategy.from_body(strategy)
    return [check_member(strategy, member, label=label) for member in members]


def reference_facts(strategy: Strategy | dict, snapshot: Mapping) -> Facts:
    """What `strategy` decides on a snapshot's request (kept for "decides exactly as V"):
    raises NotReplayable / EngineInputError as the checker would meet them."""
    if not isinstance(strategy, Strategy):
        strategy = Strategy.from_body(strategy)
    recorded = _candidates(snapshot["candidates"], type=list[wire.Candidate])
    items = engine_replay.trace_candidates(recorded)
    selection = _candidates(snapshot["selection"], type=wire.SelectionInfo)
    return engine_replay.facts(engine_replay.Replay(items, selection).run_facts(strategy), of=items)


# --- what an expectation may say ---------------------------------------------------------------
MAX_EXPECTATIONS = 20
MAX_TOKENS = 10_000_000
_FIELDS = {
    ITEM_SELECTED: ("item",),
    SOURCE_NOT_EXCLUDED: ("source", "reason"),
    STATUS_IN: ("statuses",),
    INPUT_TOKENS_AT_MOST: ("tokens",),
    SAME_AS_RECORDED: ("version",),
}


def expectations_findings(
    expectations,
    *,
    candidates: Sequence[wire.Candidate],
    recorded_sources: frozenset[str],
    current_sources: frozenset[str],
    versions: Iterable[int],
) -> list[Finding]:
    """Every mistake in a member's expectations, at its path: an item the request does not
    hold, a source or an item of a source that the version the request used or the strategy's
    current version does not read, an unknown reason code, status or version. Pure; the one
    validator of expectations (API, pages)."""
    if not isinstance(expectations, list) or not expectations:
        return [Finding("expectations", "required", "Give at least one expectation.")]
    if len(expectations) > MAX_EXPECTATIONS:
        return [
            Finding(
                "expectations", "too_many", f"At most {MAX_EXPECTATIONS} expectations a request."
            )
        ]
    findings: list[Finding] = []
    known = set(versions)
    for index, expectation in enumerate(expectations):
        path = f"expectations[{index}]"
        if not isinstance(expectation, dict) or expectation.get("kind") not in KINDS:
            findings.append(
                Finding(f"{path}.kind", "unknown_kind", "Choose one of: " + ", ".join(KINDS) + ".")
            )
            continue
        kind = expectation["kind"]
        extra = set(expectation) - {"kind", *_FIELDS[kind]}
        for name in sorted(extra, key=str):
            findings.append(Finding(f"{path}.{name}", "unknown_field", f"Unknown field {name!r}."))
        findings += _kind_findings(
            kind, expectation, path, candidates, recorded_sources, current_sources, known
        )
    return findings


def _source_findings(source, where: str, recorded: frozenset, current: frozenset) -> list:
    if source not in recorded:
        return [
            Finding(
                where,
                "unknown_source",
                f"The version this request used does not read {source}: there is no decision "
                "of it to keep.",
            )
        ]
    if source not in current:
        return [
            Finding(
                where,
                "unknown_source",
                f"The strategy's current version does not read {source}.",
            )
        ]
    return []


def _kind_findings(kind, e, path, candidates, recorded, current, versions) -> list[Finding]:
    if kind == ITEM_SELECTED:
        item = e.get("item")
        if not isinstance(item, str) or not item.strip():
            return [Finding(f"{path}.item", "required", "Name the item (its id or its bundle).")]
        matched = [c for c in candidates if _matches(item, c)]
        if not matched:
            ids = ", ".join(c.id for c in candidates[:10])
            return [
                Finding(
                    f"{path}.item",
                    "unknown_item",
                    f"This request has no item or bundle {item} (its items: {ids}).",
                )
            ]
        found = []
        for source in dict.fromkeys(c.source for c in matched):
            found += _source_findings(source, f"{path}.item", recorded, current)
        return found
    if kind == SOURCE_NOT_EXCLUDED:
        source, reason = e.get("source"), e.get("reason", "")
        found = []
        if not isinstance(source, str) or not source.strip():
            found.append(Finding(f"{path}.source", "required", "Name the source."))
        else:
            found += _source_findings(source, f"{path}.source", recorded, current)
        if reason not in ("", None) and reason not in wire.REASON_CODES:
            found.append(
                Finding(
                    f"{path}.reason",
                    "unknown_reason",
                    f"Unknown reason code {reason!r}; leave it empty for any reason.",
                )
            )
        return found
    if kind == STATUS_IN:
        statuses = e.get("statuses")
        if not isinstance(statuses, list) or not statuses:
            return [Finding(f"{path}.statuses", "required", "Name at least one status.")]
        return [
            Finding(f"{path}.statuses[{i}]", "unknown_status", f"Unknown status {s!r}.")
            for i, s in enumerate(statuses)
            if s not in wire.STATUSES or s == wire.INPUT_REFUSED
        ]
    if kind == INPUT_TOKENS_AT_MOST:
        tokens = e.get("tokens")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 < tokens <= MAX_TOKENS:
            return [
                Finding(f"{path}.tokens", "invalid", f"A whole number from 1 to {MAX_TOKENS:,}.")
            ]
        return []
    version = e.get("version")  # SAME_AS_RECORDED
    if isinstance(version, bool) or not isinstance(version, int) or version not in versions:
        return [
            Finding(
                f"{path}.version",
                "unknown_version",
                "Name a version of the strategy: " + ", ".join(f"v{n}" for n in sorted(versions)),
            )
        ]
    return []
