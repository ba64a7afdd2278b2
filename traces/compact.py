"""A trace's candidates in one compact value, and back, exactly (issue 36, item 1).

The shape chosen in docs/capacity.md: one row per trace, its candidates in one `bytea` —
this module's `encode` — beside a small `int4[]` of the trace's kinds of candidate
(`kinds`), indexed with GIN for the search "traces where source S was excluded as D for
reason R". Pure: no database, no Django; the wire struct `context_runtime.wire.Candidate`
in, the same out (`decode(encode(c)) == c`, field for field, None and "" kept apart), so a
stored trace replays exactly as the runtime sent it.

The value: one format byte, then raw DEFLATE (zlib, no header) of a MessagePack array of
columns — all ids, all sources, … — with a preset dictionary of the wire's closed words.
A column of repeated words (source, decision, reason, …) is a per-trace string table plus
small indexes; a column where every candidate has the default is nil; relevances that are
exact in thousandths (as runtimes round them) are integers. Columns compress better than
candidates one after the other: alike values sit together.

`kinds` gives the trace's distinct (source, decision, reason) of its candidates; the database numbers them in a small kind table (reasons are free text, so a
hash of them would collide once there are thousands) and keeps the numbers in the array.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Sequence

import msgspec
from context_runtime import wire
from msgspec.structs import astuple

FORMAT = 1
# Words of the wire's closed lists (decisions, outcomes, reason codes) and the commonest
# sources: DEFLATE finds them here from the first candidate on. Part of FORMAT 1: a new
# dictionary is a new format byte (an old value must still decode with its own).
_ZDICT_1 = (
    b"selectednot_fetchedno_accessnot_applicableover_budgetdependency_missingirrelevant"
    b"conflictnot_requestedfetchedrequiredoptional_fitsbelow_thresholdover_budget_required"
    b"over_budget_optionalover_budget_bundlebundle_incompletedependency_unselected"
    b"dependency_absentversions_conflictflagged_conflictprovider_not_fetched"
    b"provider_no_accessprovider_not_applicablesource_not_read"
    b"task_stateorder_deliveryapplicable_policyrecent_dialoguememory"
)
_DICTIONARIES = {FORMAT: _ZDICT_1}
_RELEVANCE_SCALE = 1000

# The columns, in the value's order: (wire field, how stored). "words": a per-trace string
# table and indexes (None kept as nil); "plain": the values as they are.
_COLUMNS = (
    ("id", "plain"),
    ("source", "words"),
    ("decision", "words"),
    ("version", "words"),
    ("size", "plain"),
    ("required", "plain"),
    ("bundle", "words"),
    ("reason", "words"),
    ("outcome", "words"),
    ("relevance", "relevance"),
    ("depends_on", "plain"),
    ("conflicts_with", "plain"),
    ("note", "words"),
    ("provider_bundle", "words"),
    ("reason_code", "words"),
)
_DEFAULTS = {
    name: field.default
    for name, field in zip(
        wire.Candidate.__struct_fields__, msgspec.structs.fields(wire.Candidate), strict=True
    )
}
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


class CompactError(ValueError):
    """A value this module did not write (or a format it does not know)."""


_NAMES = tuple(name for name, _ in _COLUMNS)
# The columns are the wire struct's fields in its order, so a row builds it positionally (a
# third of the cost of keywords); a field added to the wire must be added here too.
if wire.Candidate.__struct_fields__ != _NAMES:
    raise ImportError("traces.compact: its columns are not wire.Candidate's fields")


def _words(values) -> list:
    table: dict = {}
    indexes = [None if v is None else table.setdefault(v, len(table)) for v in values]
    return [list(table), indexes]


def _relevances(values) -> list:
    """[scale, integers] when every relevance is exact in thousandths, else [0, floats]."""
    scaled = []
    for v in values:
        if v is None:
            scaled.append(None)
            continue
        n = round(v * _RELEVANCE_SCALE)
        if n / _RELEVANCE_SCALE != v or math.copysign(1.0, v) < 0:  # -0.0 kept as it is
            return [0, list(values)]
        scaled.append(n)
    return [_RELEVANCE_SCALE, scaled]


def pack(candidates: Sequence[wire.Candidate]) -> bytes:
    """The candidates' columns as MessagePack, not compressed (what `encode` deflates; a
    shape that leaves compression to PostgreSQL stores this)."""
    columns: list = [len(candidates)]
    rows = [astuple(c) for c in candidates]
    by_field = zip(*rows, strict=True) if rows else [()] * len(_COLUMNS)
    for (name, how), values in zip(_COLUMNS, by_field, strict=True):
        default = _DEFAULTS[name]
        if name != "id" and all(v == default and type(v) is type(default) for v in values):
            columns.append(None)  # every candidate has the default
        elif how == "words":
            columns.append(_words(values))
        elif how == "relevance":
            columns.append(_relevances(values))
        else:
            columns.append(values)
    return _encoder.encode(columns)


def unpack(packed: bytes) -> list[wire.Candidate]:
    """The candidates of `pack`'s value."""
    return _candidates(_decoder.decode(packed))


def encode(candidates: Sequence[wire.Candidate]) -> bytes:
    """The candidates as one compact value (empty list included)."""
    packer = zlib.compressobj(6, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, _ZDICT_1)
    return bytes([FORMAT]) + packer.compress(pack(candidates)) + packer.flush()


def _column(name: str, how: str, stored, count: int) -> list:
    if stored is None:
        return [_DEFAULTS[name]] * count
    if how == "words":
        table, indexes = stored
        return [None if i is None else table[i] for i in indexes]
    if how == "relevance":
        scale, values = stored
        return [v if v is None or not scale else v / scale for v in values]
    if name in ("depends_on", "conflicts_with"):
        return [tuple(v) for v in stored]
    return stored


def _candidates(columns: list) -> list[wire.Candidate]:
    count, stored = columns[0], columns[1:]
    if not count:
        return []
    fields = [
        _column(name, how, column, count)
        for (name, how), column in zip(_COLUMNS, stored, strict=True)
    ]
    return [wire.Candidate(*row) for row in zip(*fields, strict=True)]


def decode(value: bytes) -> list[wire.Candidate]:
    """The candidates `encode` stored, in order, as the wire structs they were."""
    value = bytes(value)
    if not value or value[0] not in _DICTIONARIES:
        raise CompactError(f"not a compact candidate value (format {value[:1].hex() or '?'})")
    try:
        unpacker = zlib.decompressobj(-15, zdict=_DICTIONARIES[value[0]])
        return _candidates(_decoder.decode(unpacker.decompress(value[1:]) + unpacker.flush()))
    except (zlib.error, msgspec.DecodeError, ValueError, TypeError, IndexError) as error:
        raise CompactError(f"damaged compact candidate value: {error}") from error


def kinds(candidates: Iterable[wire.Candidate]) -> list[tuple[str, str, str]]:
    """The trace's kinds of candidate — (source, decision, reason), selected ones included —
    each once, in first appearance: what the search's array holds, as codes of the kind table
    (the database's side, not this module's). Twenty old dialogue turns left out for the same
    reason are one kind."""
    return list(dict.fromkeys((c.source, c.decision, c.reason) for c in candidates))
