"""The impact preview's replay and report: pure Python, no Django (unit-tested and benchmarked
as it is; `traces.previews.selectors` feeds it rows read from the database).

For each retained trace of the window (its stored candidates and the arguments its runtime
gave `select()`, docs/runtime-contract.md §3 "selection"):

1. **fidelity** — the recorded version replayed on the trace must reproduce the recorded
   decisions (status, degradation, per candidate: decision, reason code, group label,
   required). Below `FIDELITY_FLOOR` the report withholds its numbers and lists the traces
   that did not reproduce, with both engine ids: a runtime/console engine difference is
   itself the finding.
2. **not previewable**, counted apart and never as regressions: traces without replay fields
   (older runtimes, `engine == ""`), and traces where the live or the candidate version asks
   a source the trace's recorded version did not have (the runtime never asked that provider,
   so what it would have returned is unknowable).
3. **old → new**: the live version and the candidate version replayed on the same candidates;
   the status matrix, per source the required items lost / regained and the optional items
   dropped / added (by reason code), conflicts newly detected / missed, input tokens (fixed +
   used) mean and p95, over-budget counts. Each cell keeps its full count and up to
   `IDS_PER_CELL` request ids.

Rows are plain tuples in the column order of `TRACE_COLUMNS` / `CANDIDATE_COLUMNS` (what the
database cursor returns), so nothing is converted twice. Candidates are rebuilt exactly as
`context_runtime.replay.trace_candidates` maps them: the item's bundle is the provider's own
bundle, size, relevance, outcome, links and note as recorded.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from hashlib import blake2b
from itertools import islice

import msgspec
from context_runtime import replay as engine_replay
from context_runtime import wire
from context_runtime.engine import (
    CONFLICT,
    OVER_BUDGET,
    SELECTED,
    CandidateItem,
    EngineInputError,
    Strategy,
)
from context_runtime.engine import ENGINE as CONSOLE_ENGINE
from context_runtime.replay import CandidateFacts, Facts

FIDELITY_FLOOR = 0.999
# Outcomes worked out once per run for identical inputs (keys are 16-byte digests, outcomes a
# few shared tuples: a few MB at most).
MEMO_ENTRIES = 50_000
_encode = msgspec.msgpack.Encoder().encode
_ERROR, _MISMATCH, _UNASKED, _ERROR_AFTER, _PREVIEWED = (
    "error",
    "mismatch",
    "unasked",
    "error_after",
    "previewed",
)
IDS_PER_CELL = 50
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
MAX_TRACES = 100_000
Z95 = 1.959963984540054

# The columns the selectors read, in this order.
TRACE_COLUMNS = (
    "id",
    "request_id",
    "strategy_version",
    "status",
    "degradation",
    "engine",
    "fixed_input_tokens",
    "relevance_threshold",
    "selection_context_window",
    "selection_max_input_tokens",
    "candidates_truncated",
)
(
    T_ID,
    T_REQUEST_ID,
    T_VERSION,
    T_STATUS,
    T_DEGRADATION,
    T_ENGINE,
    T_FIXED,
    T_THRESHOLD,
    T_WINDOW,
    T_MAX,
    T_TRUNCATED,
) = range(len(TRACE_COLUMNS))
INPUT_REFUSED = "input_refused"  # the runtime refused its own input: nothing was decided

# The traces counted apart, never as regressions, each for its own reason (the report's
# "not_previewable" keys besides the per-source entries).
NOT_PREVIEWABLE_KINDS = (
    "no_replay_fields",  # an older runtime: no selection block
    "truncated",  # only part of its candidates were kept (over the wire's limit)
    "input_refused",  # the runtime refused its input: the engine decided nothing
    "unknown_version",
    "replay_errors",
    # a version compared asks a source the recorded one never asked: each such trace once,
    # however many sources it lacks (the per-source entries overlap and never add up)
    "unasked_sources",
)


def not_previewable_count(report_data: Mapping) -> int:
    """How many distinct traces the report counted apart, whatever the reason (the kinds
    exclude each other: a trace is counted apart for its first reason only)."""
    missing = report_data.get("not_previewable") or {}
    apart = sum((missing.get(kind) or {}).get("count", 0) for kind in NOT_PREVIEWABLE_KINDS)
    if "unasked_sources" not in missing:
        # A report stored before the distinct count: its per-source counts overlap, so the
        # largest is the most it can claim.
        apart += max((e["traces"] for e in (missing.get("sources") or {}).values()), default=0)
    return apart


CANDIDATE_COLUMNS = (
    "trace_id",
    "item_id",
    "source",
    "version",
    "size",
    "required",
    "bundle",
    "provider_bundle",
    "decision",
    "reason_code",
    "outcome",
    "relevance",
    "depends_on",
    "conflicts_with",
    "note",
)
(
    C_TRACE,
    C_ITEM,
    C_SOURCE,
    C_VERSION,
    C_SIZE,
    C_REQUIRED,
    C_BUNDLE,
    C_PROVIDER_BUNDLE,
    C_DECISION,
    C_REASON_CODE,
    C_OUTCOME,
    C_RELEVANCE,
    C_DEPENDS,
    C_CONFLICTS,
    C_NOTE,
) = range(len(CANDIDATE_COLUMNS))


# --- rebuilding a trace's selection -------------------------------------------------------------
def _ids(value) -> tuple[str, ...]:
    """A candidate's links: Django's database cursor hands JSON columns over as their text
    (JSONField decodes them itself), so "[]" — nearly every row — is the cheap case."""
    if not value or value == "[]":
        return ()
    if isinstance(value, str):
        return tuple(msgspec.json.decode(value))
    return tuple(value)


def candidate_item(row: Sequence) -> CandidateItem:
    """A stored candidate as the item its provider returned (`trace_candidates`' mapping)."""
    return CandidateItem(
        id=row[C_ITEM],
        source=row[C_SOURCE],
        version=row[C_VERSION] or "",
        size=row[C_SIZE],
        relevance=row[C_RELEVANCE],
        bundle=row[C_PROVIDER_BUNDLE] or None,
        depends_on=_ids(row[C_DEPENDS]),
        conflicts_with=_ids(row[C_CONFLICTS]),
        outcome=row[C_OUTCOME] or "fetched",
        note=row[C_NOTE] or "",
    )


def rebuild(rows: Sequence[Sequence]) -> tuple[CandidateItem, ...]:
    """`candidate_item` of every row, in one comprehension: no call and no global look-up per
    row (500,000 rows a 10,000-trace preview; the indexes are the C_* columns)."""
    item, ids = CandidateItem, _ids
    return tuple(
        [
            item(
                id=r[1],
                source=r[2],
                version=r[3] or "",
                size=r[4],
                relevance=r[11],
                bundle=r[7] or None,
                depends_on=ids(r[12]) if r[12] else (),
                conflicts_with=ids(r[13]) if r[13] else (),
                outcome=r[10] or "fetched",
                note=r[14] or "",
            )
            for r in rows
        ]
    )


def rebuild_facts(rows: Sequence[Sequence]) -> tuple[CandidateFacts, ...]:
    """The recorded facts of every row, as `Facts.recorded` maps wire candidates."""
    facts = CandidateFacts
    return tuple([facts(r[8], r[9] or "", r[6] or "", r[5]) for r in rows])


# `rebuild` and `rebuild_facts` index the rows by number.
assert (C_ITEM, C_SOURCE, C_VERSION, C_SIZE, C_REQUIRED, C_BUNDLE, C_PROVIDER_BUNDLE) == (
    1,
    2,
    3,
    4,
    5,
    6,
    7,
)
assert (C_DECISION, C_REASON_CODE, C_OUTCOME, C_RELEVANCE, C_DEPENDS, C_CONFLICTS, C_NOTE) == (
    8,
    9,
    10,
    11,
    12,
    13,
    14,
)


def selection_info(trace: Sequence) -> wire.SelectionInfo:
    """The trace's `selection` block (what the runtime gave `select()` besides the strategy
    and the candidates), as `traces.replay.selection_info` reads it from a Trace."""
    return wire.SelectionInfo(
        engine=trace[T_ENGINE],
        fixed_input_tokens=trace[T_FIXED] or 0,
        relevance_threshold=trace[T_THRESHOLD] if trace[T_THRESHOLD] is not None else 0.0,
        context_window=trace[T_WINDOW],
        max_input_tokens=trace[T_MAX],
    )


def replay(strategy: Strategy, request: engine_replay.Replay, *, facts_only: bool = False):
    """`context_runtime.replay.Replay.run` (the candidates of sources the strategy does not
    read are left out, as its runtime would not have asked them): the selection, and the
    position among the request's candidates of each of its decisions. `facts_only`: the
    engine's `Decided` instead (`Replay.run_facts`: the same decisions and codes, no reason
    texts written) — what the report compares, a third cheaper than a full selection."""
    items = request.candidates
    if facts_only:
        selection = request.run_facts(strategy)
        decided = len(selection.decision)
    else:
        selection = request.run(strategy)
        decided = len(selection.decisions)
    if decided == len(items):
        return selection, range(len(items))
    sources = strategy.sources
    return selection, [i for i, item in enumerate(items) if item.source in sources]


# --- cells ------------------------------------------------------------------------------------------
@dataclass(slots=True)
class Cell:
    """A count and up to `IDS_PER_CELL` of the request ids behind it, the first in trace
    order: each id keeps its trace's order key, so shards merge into the same first ids."""

    count: int = 0
    ids: list = field(default_factory=list)
    keys: list = field(default_factory=list)  # (occurred_at in µs, trace id) per id

    def add(self, request_id: str, key: tuple = (0, 0)) -> None:
        self.count += 1
        if len(self.ids) < IDS_PER_CELL:
            self.ids.append(request_id)
            self.keys.append(key)

    def as_dict(self) -> dict:
        return {"count": self.count, "ids": self.ids}

    def merge(self, other: Cell) -> None:
        self.count += other.count
        pairs = heapq.merge(
            zip(self.keys, self.ids, strict=True),
            zip(other.keys, other.ids, strict=True),
            key=lambda pair: pair[0],
        )
        first = list(islice(pairs, IDS_PER_CELL))
        self.keys = [key for key, _ in first]
        self.ids = [request_id for _, request_id in first]

    def dump(self) -> list:
        return [self.count, self.ids, self.keys]

    @classmethod
    def load(cls, data: list) -> Cell:
        count, ids, keys = data
        return cls(count, list(ids), [tuple(key) for key in keys])


def _cells() -> dict:
    return {}


def _cell(table: dict, *keys) -> Cell:
    for key in keys[:-1]:
        table = table.setdefault(key, {})
    cell = table.get(keys[-1])
    if cell is None:
        cell = table[keys[-1]] = Cell()
    return cell


def _merge_tables(mine: dict, theirs: dict) -> None:
    for key, value in theirs.items():
        if isinstance(value, Cell):
            _cell(mine, key).merge(value)
        else:
            _merge_tables(mine.setdefault(key, {}), value)


def _dump(table):
    if isinstance(table, Cell):
        return table.as_dict()
    return {key: _dump(value) for key, value in sorted(table.items())}


def _dump_table(table: dict) -> dict:
    """A table of cells as JSON (for a shard's `state()`)."""
    return {
        key: value.dump() if isinstance(value, Cell) else _dump_table(value)
        for key, value in table.items()
    }


def _load_table(data: dict) -> dict:
    return {
        key: Cell.load(value) if isinstance(value, list) else _load_table(value)
        for key, value in data.items()
    }


# --- statistics -------------------------------------------------------------------------------------
def wilson(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95 % by default)."""
    if n <= 0:
        return (0.0, 1.0)
    p = min(1.0, max(0.0, successes / n))
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def percentile(values: list[int], q: float) -> float | None:
    """The q-th percentile (nearest rank) of the values, None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])


def stratified_quotas(counts: Mapping[str, int], limit: int = MAX_TRACES) -> dict[str, int]:
    """How many traces of each status to read when there are more than `limit`: every trace
    of a rare status up to an equal share, the rest of the budget to the common ones (water
    filling, the rarest first)."""
    total = sum(counts.values())
    if total <= limit:
        return dict(counts)
    quotas: dict[str, int] = {}
    left, remaining = limit, sorted(counts.items(), key=lambda kv: (kv[1], kv[0]))
    while remaining:
        share = left // len(remaining)
        status, count = remaining.pop(0)
        quotas[status] = min(count, share)
        left -= quotas[status]
    return quotas


# --- the run ----------------------------------------------------------------------------------------
@dataclass
class Versions:
    """The strategy versions a preview compares: every recorded version by number (bodies
    read once), the live one (old) and the candidate (new)."""

    recorded: Mapping[int, Strategy]
    live_number: int
    live: Strategy
    candidate: Strategy
    candidate_number: int | None = None  # None: a draft not frozen yet

    def label(self, number: int | None) -> str:
        return f"v{number}" if number is not None else "the draft"


class Replay:
    """Feed it traces (`add`), then ask for the report (`report`). Memory: the cells (each
    at most `IDS_PER_CELL` ids) and two ints per trace for the token percentiles."""

    def __init__(self, versions: Versions, *, weights: Mapping[str, float] | None = None):
        self.versions = versions
        # status -> 1 / sampling fraction of that stratum (sampled windows only)
        self.weights = dict(weights or {})
        self.read = 0
        self.by_status: dict[str, int] = {}
        self.no_fields = Cell()
        self.truncated = Cell()
        self.refused = Cell()
        self.unknown_version = Cell()
        self.replay_errors = Cell()
        self.unasked: dict[str, dict] = {}  # source -> {traces, with_candidates, versions}
        self.unasked_traces = Cell()  # each trace lacking any source, once
        self.checked = 0
        self.reproduced = 0
        self.mismatches: list[dict] = []
        self.mismatch_keys: list[tuple] = []
        self.mismatch_count = 0
        self.previewed = 0
        self.matrix: dict = _cells()
        self.sources: dict = _cells()
        self.conflicts_new = Cell()
        self.conflicts_missed = Cell()
        self.changed = Cell()
        self.over_old = Cell()
        self.over_new = Cell()
        self.tokens_old: list[int] = []
        self.tokens_new: list[int] = []
        live, new = versions.live, versions.candidate
        self._needed = live.sources | new.sources
        self._missing_cache: dict[int, frozenset[str]] = {}
        self._memo: dict[tuple, tuple] = {}
        self.memo_hits = 0

    # ------------------------------------------------------------------ per trace
    def add(
        self, trace: Sequence, candidates: Sequence[Sequence], at: datetime | None = None
    ) -> None:
        """One trace; `at` (its time) orders the ids kept when shards merge."""
        request_id = trace[T_REQUEST_ID]
        order = (0 if at is None else (at - _EPOCH) // _MICROSECOND, trace[T_ID])
        self.read += 1
        self.by_status[trace[T_STATUS]] = self.by_status.get(trace[T_STATUS], 0) + 1
        if trace[T_STATUS] == INPUT_REFUSED:
            self.refused.add(request_id, order)
            return
        if not trace[T_ENGINE]:
            self.no_fields.add(request_id, order)
            return
        if trace[T_TRUNCATED]:  # a replay on part of the candidates would decide otherwise
            self.truncated.add(request_id, order)
            return
        recorded = self.versions.recorded.get(trace[T_VERSION])
        if recorded is None:
            self.unknown_version.add(request_id, order)
            return
        # Real traffic repeats (the same order, policy and dialogue): identical inputs and
        # recorded facts give the same outcome, so it is worked out once per run. The key is a
        # 128-bit digest of everything the outcome depends on: the recorded version, the
        # selection block, the recorded status and every candidate column but the trace id.
        head = _encode(
            (
                trace[T_VERSION],
                trace[T_STATUS],
                trace[T_DEGRADATION],
                trace[T_FIXED],
                trace[T_THRESHOLD],
                trace[T_WINDOW],
                trace[T_MAX],
            )
        )
        key = blake2b(head + _encode([row[1:] for row in candidates]), digest_size=16).digest()
        outcome = self._memo.get(key)
        if outcome is None:
            items, have = rebuild(candidates), rebuild_facts(candidates)
            outcome = self._outcome(trace, items, have, recorded)
            if len(self._memo) < MEMO_ENTRIES:
                self._memo[key] = outcome
        else:
            self.memo_hits += 1
        self._apply(outcome, request_id, order, trace[T_VERSION], trace[T_ENGINE])

    def _outcome(
        self,
        trace: Sequence,
        items: tuple[CandidateItem, ...],
        recorded_candidates: tuple[CandidateFacts, ...],
        recorded: Strategy,
    ):
        """What one trace contributes, without its request id: ("error",), ("mismatch",
        difference), ("unasked", sources, present) or ("previewed", cell paths, tokens)."""
        # One Replay: the candidates are checked once for the two or three versions.
        request = engine_replay.Replay(items, selection_info(trace))
        try:
            again, again_at = replay(recorded, request, facts_only=True)
        except EngineInputError:
            return (_ERROR,)
        have = Facts(trace[T_STATUS], trace[T_DEGRADATION] or "", recorded_candidates)
        got = engine_replay.facts(again, of=items)
        if have != got:
            found = have.differences(got, ids=[item.id for item in items])
            return (
                _MISMATCH,
                "; ".join(found[:3]) + (f" (+{len(found) - 3} more)" if len(found) > 3 else ""),
            )
        missing = self._unasked_sources(trace[T_VERSION], recorded)
        if missing:
            return (_UNASKED, missing, frozenset(item.source for item in items))
        try:
            if self.versions.live is recorded:
                old, old_at = again, again_at  # the live replay IS the recorded one
            else:
                old, old_at = replay(self.versions.live, request, facts_only=True)
            new, new_at = replay(self.versions.candidate, request, facts_only=True)
        except EngineInputError:
            return (_ERROR_AFTER,)
        return (
            _PREVIEWED,
            _compare(items, old, old_at, new, new_at),
            old.fixed_input_tokens + old.used_tokens,
            new.fixed_input_tokens + new.used_tokens,
        )

    def _apply(
        self, outcome: tuple, request_id: str, order: tuple, version: int, engine: str
    ) -> None:
        kind = outcome[0]
        if kind is _ERROR:
            self.replay_errors.add(request_id, order)
            return
        self.checked += 1
        if kind is _MISMATCH:
            self.mismatch_count += 1
            if len(self.mismatches) < IDS_PER_CELL:
                self.mismatch_keys.append(order)
                self.mismatches.append(
                    {
                        "request_id": request_id,
                        "trace_engine": engine,
                        "console_engine": CONSOLE_ENGINE,
                        "difference": outcome[1],
                    }
                )
            return
        self.reproduced += 1
        if kind is _UNASKED:
            self.unasked_traces.add(request_id, order)
            for source in outcome[1]:
                entry = self.unasked.setdefault(
                    source, {"traces": 0, "with_candidates": 0, "versions": set(), "ids": Cell()}
                )
                entry["traces"] += 1
                entry["with_candidates"] += source in outcome[2]
                entry["versions"].add(version)
                entry["ids"].add(request_id, order)
            return
        if kind is _ERROR_AFTER:
            self.replay_errors.add(request_id, order)
            return
        self.previewed += 1
        for path in outcome[1]:
            name = path[0]
            if name == "matrix":
                _cell(self.matrix, *path[1:]).add(request_id, order)
            elif name == "sources":
                _cell(self.sources, *path[1:]).add(request_id, order)
            else:
                getattr(self, name).add(request_id, order)
        self.tokens_old.append(outcome[2])
        self.tokens_new.append(outcome[3])

    def _unasked_sources(self, number: int, recorded: Strategy) -> frozenset[str]:
        missing = self._missing_cache.get(number)
        if missing is None:
            missing = self._missing_cache[number] = frozenset(self._needed - recorded.sources)
        return missing

    # ------------------------------------------------------------------ shards
    _CELLS = (
        "no_fields",
        "truncated",
        "refused",
        "unknown_version",
        "replay_errors",
        "unasked_traces",
        "conflicts_new",
        "conflicts_missed",
        "changed",
        "over_old",
        "over_new",
    )
    _COUNTS = ("read", "checked", "reproduced", "mismatch_count", "previewed", "memo_hits")

    def state(self) -> dict:
        """What this run counted, without its versions and memo, as JSON (a shard's part,
        stored until the last shard merges it with `merge`)."""
        return {
            **{name: getattr(self, name).dump() for name in self._CELLS},
            **{name: getattr(self, name) for name in self._COUNTS},
            "by_status": self.by_status,
            "unasked": {
                source: {**entry, "versions": sorted(entry["versions"]), "ids": entry["ids"].dump()}
                for source, entry in self.unasked.items()
            },
            "mismatches": [
                [list(key), entry]
                for key, entry in zip(self.mismatch_keys, self.mismatches, strict=True)
            ],
            "matrix": _dump_table(self.matrix),
            "sources": _dump_table(self.sources),
            "tokens_old": self.tokens_old,
            "tokens_new": self.tokens_new,
        }

    def merge(self, state: dict) -> None:
        """Add another shard's counts (`state()`): counts add up, id lists keep the first
        `IDS_PER_CELL` in trace order, token values are kept whole (p95 stays exact): the
        report equals one run over all the traces."""
        for name in self._COUNTS:
            setattr(self, name, getattr(self, name) + state[name])
        for name in self._CELLS:
            if name in state:  # a shard counted by the code before a deploy may lack a cell
                getattr(self, name).merge(Cell.load(state[name]))
        for status, count in state["by_status"].items():
            self.by_status[status] = self.by_status.get(status, 0) + count
        for source, entry in state["unasked"].items():
            mine = self.unasked.setdefault(
                source, {"traces": 0, "with_candidates": 0, "versions": set(), "ids": Cell()}
            )
            mine["traces"] += entry["traces"]
            mine["with_candidates"] += entry["with_candidates"]
            mine["versions"] |= set(entry["versions"])
            mine["ids"].merge(Cell.load(entry["ids"]))
        theirs = [(tuple(key), entry) for key, entry in state["mismatches"]]
        first = list(
            islice(
                heapq.merge(
                    zip(self.mismatch_keys, self.mismatches, strict=True),
                    theirs,
                    key=lambda pair: pair[0],
                ),
                IDS_PER_CELL,
            )
        )
        self.mismatch_keys = [key for key, _ in first]
        self.mismatches = [entry for _, entry in first]
        _merge_tables(self.matrix, _load_table(state["matrix"]))
        _merge_tables(self.sources, _load_table(state["sources"]))
        self.tokens_old += state["tokens_old"]
        self.tokens_new += state["tokens_new"]

    # ------------------------------------------------------------------ the report
    def report(self) -> dict:
        share = self.reproduced / self.checked if self.checked else None
        fidelity_ok = share is None or share >= FIDELITY_FLOOR
        versions = self.versions
        report = {
            "engine": CONSOLE_ENGINE,
            "live_version": versions.live_number,
            "candidate_version": versions.candidate_number,
            "traces_read": self.read,
            "by_status": dict(sorted(self.by_status.items())),
            "sampled": bool(self.weights),
            "fidelity": {
                "checked": self.checked,
                "reproduced": self.reproduced,
                "share": share,
                "floor": FIDELITY_FLOOR,
                "ok": fidelity_ok,
                "mismatch_count": self.mismatch_count,
                "mismatches": self.mismatches,
            },
            "not_previewable": {
                "no_replay_fields": self.no_fields.as_dict(),
                "truncated": self.truncated.as_dict(),
                "input_refused": self.refused.as_dict(),
                "unknown_version": self.unknown_version.as_dict(),
                "replay_errors": self.replay_errors.as_dict(),
                "unasked_sources": self.unasked_traces.as_dict(),
                "sources": {
                    source: {
                        "traces": entry["traces"],
                        "with_candidates": entry["with_candidates"],
                        "recorded_versions": sorted(entry["versions"]),
                        "ids": entry["ids"].ids,
                    }
                    for source, entry in sorted(self.unasked.items())
                },
            },
            "previewed": self.previewed,
            "withheld": not fidelity_ok,
        }
        if not fidelity_ok:
            return report  # numbers from an engine that does not reproduce are no numbers
        report.update(
            {
                "status_matrix": _dump(self.matrix),
                "sources": _dump(self.sources),
                "changed": self.changed.as_dict(),
                "conflicts": {
                    "newly_detected": self.conflicts_new.as_dict(),
                    "missed": self.conflicts_missed.as_dict(),
                },
                "over_budget": {"old": self.over_old.as_dict(), "new": self.over_new.as_dict()},
                "tokens": {
                    "old": _token_figures(self.tokens_old),
                    "new": _token_figures(self.tokens_new),
                },
            }
        )
        if self.weights:
            report["intervals"] = self._intervals()
        return report

    def _intervals(self) -> dict:
        """Rates over the previewed traces with 95 % Wilson intervals (sampled windows)."""
        n = self.previewed
        rates = {}
        for old, row in self.matrix.items():
            for new, cell in row.items():
                low, high = wilson(cell.count, n)
                rates[f"{old}->{new}"] = {
                    "rate": cell.count / n if n else 0.0,
                    "low": low,
                    "high": high,
                }
        for name, cell in (("changed", self.changed), ("over_budget_new", self.over_new)):
            low, high = wilson(cell.count, n)
            rates[name] = {"rate": cell.count / n if n else 0.0, "low": low, "high": high}
        return rates


def _compare(items, old, old_at, new, new_at) -> tuple:
    """The cells one trace counts in (paths: ("matrix", old, new), ("sources", source, kind,
    code), or the name of a single cell), old → new. `old`/`new`: the engine's `Decided`
    (`replay(..., facts_only=True)`); ``old_at``/``new_at``: the position of each decision
    among ``items`` (`replay`)."""
    paths = [("matrix", old.status, new.status)]
    changed = old.status != new.status or old.degradation != new.degradation
    conflict_new = conflict_missed = over_old = over_new = False
    n = len(items)
    old_decision, old_code, old_required = _aligned(old, old_at, n)
    new_decision, new_code, new_required = _aligned(new, new_at, n)
    for i, item in enumerate(items):
        b, a = old_decision[i], new_decision[i]
        if b is None or a is None:  # a version that does not read the item's source
            if b == OVER_BUDGET:
                over_old = True
            if a == OVER_BUDGET:
                over_new = True
            changed = changed or b is not a
            continue
        if b == a:
            if b == OVER_BUDGET:
                over_old = over_new = True
            if old_code[i] == new_code[i]:
                continue
        else:
            if b == OVER_BUDGET:
                over_old = True
            if a == OVER_BUDGET:
                over_new = True
        changed = True
        was, now = b == SELECTED, a == SELECTED
        if a == CONFLICT and b != CONFLICT:
            conflict_new = True
        elif b == CONFLICT and a != CONFLICT:
            conflict_missed = True
        if was == now:
            continue
        if old_required[i] or new_required[i]:
            kind, code = ("required_lost", new_code[i]) if was else ("required_kept", old_code[i])
        else:
            kind, code = (
                ("optional_dropped", new_code[i]) if was else ("optional_added", old_code[i])
            )
        paths.append(("sources", item.source, kind, code or a))
    for flag, name in (
        (changed, "changed"),
        (conflict_new, "conflicts_new"),
        (conflict_missed, "conflicts_missed"),
        (over_old, "over_old"),
        (over_new, "over_new"),
    ):
        if flag:
            paths.append((name,))
    return tuple(dict.fromkeys(paths))  # one count per trace and cell


def _aligned(decided, positions, n: int) -> tuple[Sequence, Sequence, Sequence]:
    """A `Decided`'s decision, reason code and required columns, one entry per candidate
    position (None where the version did not read the candidate's source)."""
    columns = (decided.decision, decided.reason_code, decided.required)
    if type(positions) is range:
        return columns
    aligned = ([None] * n, [None] * n, [None] * n)
    for column, values in zip(aligned, columns, strict=True):
        for position, value in zip(positions, values, strict=True):
            column[position] = value
    return aligned


def _by_position(selection, positions) -> dict[int, object]:
    """The decisions of a selection by the position of their candidate among all of the
    trace's candidates (a version may leave a source's items out)."""
    return dict(zip(positions, selection.decisions, strict=True))


def _token_figures(values: list[int]) -> dict:
    if not values:
        return {"mean": None, "p95": None}
    return {"mean": sum(values) / len(values), "p95": percentile(values, 95)}


def run(
    versions: Versions,
    traces: Iterable[tuple[Sequence, Sequence[Sequence]]],
    *,
    weights: Mapping[str, float] | None = None,
) -> dict:
    """Replay every (trace, candidates) and return the report."""
    replay_run = Replay(versions, weights=weights)
    for trace, candidates in traces:
        replay_run.add(trace, candidates)
    return replay_run.report()


# --- one trace, side by side --------------------------------------------------------------------------
def side_by_side(
    trace: Sequence, candidates: Sequence[Sequence], live: Strategy, candidate: Strategy
):
    """Both selections of one trace, candidate by candidate: [(item, old decision or None,
    new decision or None)], with both selections (None when the engine refused the input)."""
    request = engine_replay.Replay(
        [candidate_item(row) for row in candidates], selection_info(trace)
    )
    items = request.candidates
    old, old_at = replay(live, request)
    new, new_at = replay(candidate, request)
    before, after = _by_position(old, old_at), _by_position(new, new_at)
    rows = [(item, before.get(i), after.get(i)) for i, item in enumerate(items)]
    return old, new, rows
