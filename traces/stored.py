"""A trace's candidates as stored: one compact value per trace, and its kinds of candidate.

Issue 36 (docs/capacity.md): the candidates of a trace live in its row, `packed_candidates`
(`traces.compact.encode` of the wire structs), beside `kinds`, the numbers in
`traces_candidate_kind` of its distinct (source, decision, reason). This module
is the one place that reads and writes them: everything that shows, replays, counts or
searches candidates goes through it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from context_runtime import wire
from django.db.models import Q

from traces import compact

Kind = tuple[str, str, str]  # (source, decision, reason)


@dataclass(frozen=True, slots=True)
class StoredCandidate:
    """One stored candidate as pages, the API and counters read it: the wire struct under the
    names the product has always used (`item_id`, `position`; words the runtime left out as
    "", never None). `wire` is the candidate exactly as the runtime sent it (replays)."""

    position: int
    wire: wire.Candidate

    @property
    def item_id(self) -> str:
        return self.wire.id

    @property
    def source(self) -> str:
        return self.wire.source

    @property
    def version(self) -> str:
        return self.wire.version

    @property
    def size(self) -> int | None:
        return self.wire.size

    @property
    def required(self) -> bool:
        return self.wire.required

    @property
    def bundle(self) -> str:
        return self.wire.bundle or ""

    @property
    def decision(self) -> str:
        return self.wire.decision

    @property
    def reason(self) -> str:
        return self.wire.reason

    @property
    def outcome(self) -> str:
        return self.wire.outcome or ""

    @property
    def relevance(self) -> float | None:
        return self.wire.relevance

    @property
    def depends_on(self) -> list[str]:
        return list(self.wire.depends_on)

    @property
    def conflicts_with(self) -> list[str]:
        return list(self.wire.conflicts_with)

    @property
    def note(self) -> str:
        return self.wire.note

    @property
    def provider_bundle(self) -> str:
        return self.wire.provider_bundle or ""

    @property
    def reason_code(self) -> str:
        return self.wire.reason_code or ""


def wire_candidates(packed) -> list[wire.Candidate]:
    """The candidates of a stored value, as the runtime sent them (b"": none)."""
    return compact.decode(packed) if packed else []


def stored_candidates(packed) -> list[StoredCandidate]:
    """The candidates of a stored value, in order, under the product's names."""
    return [StoredCandidate(i, c) for i, c in enumerate(wire_candidates(packed))]


def trace_candidates(trace) -> list[StoredCandidate]:
    """A trace's candidates in order (decoded once per trace object)."""
    cached = getattr(trace, "_stored_candidates", None)
    if cached is None:
        cached = stored_candidates(trace.packed_candidates)
        trace._stored_candidates = cached
    return cached


# --- reading candidates across traces --------------------------------------------------------
def candidates_match(**lookups):
    """A check of one trace's stored candidates: has one with all these attribute values
    (`source`, `decision`, `reason`, `reason_code` …)."""
    wanted = [(name, value) for name, value in lookups.items() if value]

    def matches(packed) -> bool:
        return any(
            all(getattr(c, name) == value for name, value in wanted)
            for c in stored_candidates(packed)
        )

    return matches


WALK_CHUNK = 1_000
WALK_LIMIT = 100_000  # traces read at most by one walk


def traces_walk(queryset, matches):
    """The (id, occurred_at) of `queryset`'s traces, newest first, whose candidates `matches`,
    read in chunks by keyset (a trace stored meanwhile neither shifts nor repeats one): for a
    check `kinds` cannot answer, e.g. reason codes. Stops after WALK_LIMIT traces."""
    ordered = queryset.order_by("-occurred_at", "-id").values_list(
        "pk", "occurred_at", "packed_candidates"
    )
    read, chunk = 0, ordered[:WALK_CHUNK]
    while read < WALK_LIMIT:
        rows = list(chunk)
        read += len(rows)
        for pk, when, packed in rows:
            if matches(packed):
                yield pk, when
        if len(rows) < WALK_CHUNK:
            return
        last_pk, last_when = rows[-1][0], rows[-1][1]
        chunk = ordered.filter(
            Q(occurred_at__lt=last_when) | Q(occurred_at=last_when, pk__lt=last_pk)
        )[:WALK_CHUNK]


# --- kinds of candidate ----------------------------------------------------------------------
# Only the kinds not yet numbered are inserted (a sequence value is spent per attempted row,
# conflict or not), in one order (two batches adding the same kinds never deadlock). The
# statement's snapshot cannot see a kind a concurrent batch committed while this one waited
# on it, so those few are read again by a second statement.
_NUMBER_KINDS = """
WITH wanted (source, decision, reason) AS (
    SELECT * FROM unnest(%s::text[], %s::text[], %s::text[])
), added AS (
    INSERT INTO traces_candidate_kind (source, decision, reason)
    SELECT w.source, w.decision, w.reason FROM wanted w
    WHERE NOT EXISTS (
        SELECT 1 FROM traces_candidate_kind k
        WHERE k.source = w.source AND k.decision = w.decision AND k.reason = w.reason
    )
    ORDER BY 1, 2, 3
    ON CONFLICT (source, decision, reason) DO NOTHING
    RETURNING id, source, decision, reason
)
SELECT id, source, decision, reason FROM added
UNION ALL
SELECT k.id, k.source, k.decision, k.reason FROM traces_candidate_kind k
JOIN wanted w ON k.source = w.source AND k.decision = w.decision AND k.reason = w.reason
"""
_READ_KINDS = """
SELECT k.id, k.source, k.decision, k.reason FROM traces_candidate_kind k
JOIN unnest(%s::text[], %s::text[], %s::text[]) AS w (source, decision, reason)
  ON k.source = w.source AND k.decision = w.decision AND k.reason = w.reason
"""


def _columns(kinds: Iterable[Kind]) -> list[list[str]]:
    kinds = list(kinds)
    return [[k[i] for k in kinds] for i in range(3)]


# Held until the batch commits: a kind no stored trace names is forgotten (`kinds_forget`: its
# reason may be personal data an erasure or the retention must not leave behind), never while
# a batch is storing traces that name it.
_HOLD_KINDS = (
    "SELECT id, source, decision, reason FROM traces_candidate_kind WHERE id = ANY(%s) "
    "ORDER BY id FOR KEY SHARE"
)


def kind_numbers(cursor, kinds: Iterable[Kind]) -> dict[Kind, int]:
    """The numbers of these kinds, numbering the new ones, held until the caller's
    transaction ends (a batch rolled back takes its new kinds with it). A kind forgotten
    between its read and its hold is numbered again."""
    wanted = set(kinds)
    numbers: dict[Kind, int] = {}
    for _ in range(3):
        missing = wanted - numbers.keys()
        if not missing:
            return numbers
        cursor.execute(_NUMBER_KINDS, _columns(missing))
        found = {(s, d, r): number for number, s, d, r in cursor.fetchall()}
        if missing - found.keys():
            cursor.execute(_READ_KINDS, _columns(missing - found.keys()))
            found.update({(s, d, r): number for number, s, d, r in cursor.fetchall()})
        cursor.execute(_HOLD_KINDS, [sorted(found.values())])
        numbers.update({(s, d, r): number for number, s, d, r in cursor.fetchall()})
    if wanted - numbers.keys():
        raise RuntimeError("kinds of candidate were forgotten three times while being numbered")
    return numbers


_UNNAMED_KINDS = """
SELECT k.id FROM traces_candidate_kind k
WHERE (%(all)s OR k.id = ANY(%(ids)s))
  AND NOT EXISTS (SELECT 1 FROM traces_trace t WHERE t.kinds @> ARRAY[k.id])
"""
_FORGET_KINDS = """
DELETE FROM traces_candidate_kind k
WHERE k.id = ANY(%s) AND NOT EXISTS (SELECT 1 FROM traces_trace t WHERE t.kinds @> ARRAY[k.id])
"""


def kinds_forget(cursor, ids: Iterable[int] | None = None) -> int:
    """Delete the kinds (these `ids`, or all) that no stored trace names any more: after an
    erasure (its traces' reasons may have named the person) and after the retention dropped
    days. Inside the caller's transaction. The few found unnamed are locked (waiting for any
    batch holding them: `kind_numbers`) and checked again before they go. Returns how many."""
    ids = None if ids is None else sorted(set(ids))
    if ids == []:
        return 0
    cursor.execute(_UNNAMED_KINDS, {"all": ids is None, "ids": ids or []})
    unnamed = [number for (number,) in cursor.fetchall()]
    if not unnamed:
        return 0
    cursor.execute(
        "SELECT id FROM traces_candidate_kind WHERE id = ANY(%s) ORDER BY id FOR UPDATE", [unnamed]
    )
    cursor.execute(_FORGET_KINDS, [unnamed])  # a new snapshot: sees batches committed meanwhile
    return cursor.rowcount


def packed(candidates: list[wire.Candidate], numbers: Mapping[Kind, int]) -> tuple[bytes, list]:
    """(packed_candidates, kinds) of a trace's candidates; `numbers` covers their kinds."""
    return compact.encode(candidates), [numbers[k] for k in compact.kinds(candidates)]


def kinds_matching(cursor, *, source="", decision="", reason="") -> list[int]:
    """The numbers of the kinds a candidate filter matches (any of the three may be blank)."""
    lookups = [("source", source), ("decision", decision), ("reason", reason)]
    given = [(column, value) for column, value in lookups if value]
    where = " AND ".join(f"{column} = %s" for column, _ in given) or "true"
    cursor.execute(
        f"SELECT id FROM traces_candidate_kind WHERE {where} ORDER BY id",
        [value for _, value in given],
    )
    return [number for (number,) in cursor.fetchall()]
