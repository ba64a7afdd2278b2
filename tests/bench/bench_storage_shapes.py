"""Compact candidate storage: shapes measured side by side (issue 36, item 1). A script:

    python -m tests.bench storage_shapes                       # 100,000 traces, every shape
    python -m tests.bench.bench_storage_shapes --traces 1000000 --shapes a,e
    python -m tests.bench.bench_storage_shapes --traces 10000000 --shapes e --per-day 1000000

Runs in its own database (bench_storage_shapes on the server of DATABASE_URL; set
BENCH_SHAPES_DB to rename it), migrated, and builds its tables in a schema of their own,
`shapes`, beside the product's (which it does not change): the same synthetic traces —
50 candidates each, sources, decisions, reasons and the replay fields of context_runtime
0.2.x, as `bench_traces` generates them, day partitions — written into each shape:

  a  the product's shape before issue 36 (migration 0013): traces_trace and
     traces_candidate as they were (frozen copies of their DDL, indexes included)
  b  one row per trace, the candidates as typed arrays (text[] / int2[] / float8[] per
     field; sources and reasons numbered in small lookup tables, the closed lists as int2),
     `kinds int4[]` (the trace's kinds of exclusion, numbered) with a GIN index
  c  one row per trace, the candidates' columns as MessagePack (`traces.compact.pack`) in a
     bytea that PostgreSQL compresses (COMPRESSION lz4, toast_tuple_target 128), + kinds
  d  one row per trace, the candidates as `traces.compact.encode` (MessagePack columns,
     raw DEFLATE with a preset dictionary, compressed in Python), + kinds
  e  d, plus a btree on (occurred_at DESC, id DESC): the exclusion list can walk newest
     first and check each trace's kinds, instead of reading every match off the GIN index

Per shape: bytes per trace (pg_total_relation_size of every partition: heap, TOAST,
indexes; the request-key table, the same for all, counted once and added), COPY rate
(traces/s, the rows built in Python from the same wire structs — what ingest would do),
the trace page (by request_id through the request key, the full candidate list decoded to
`wire.Candidate`s in Python) p50/p95, the exclusion list ("traces in the last day where
source S was excluded as D for reason R", newest first, 50 shown, the count capped at
1,000 as the page does) p50/p95 for a common kind (in ~70 % of traces) and a rare one
(0.1 %), and retention (DETACH … CONCURRENTLY + DROP of the oldest day). Ratios against
shape a. Every shape's decoded candidates are checked equal to what was written.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import get_args

import msgspec
import orjson
import psycopg
from context_runtime import wire

from tests.bench import bench_traces
from tests.bench._database import BenchDatabase, django_setup, print_machine
from traces import compact

BENCH_DB = os.environ.get("BENCH_SHAPES_DB", "bench_storage_shapes")
SHAPES = ("a", "b", "c", "d", "e")
CHUNK = 2_000
BULK = 2_000  # traces per bulk read (an impact preview's batch)
CANDIDATES = 50

DECISIONS = ["selected"] * 5 + ["irrelevant", "over_budget", "not_applicable", "not_fetched"]
SOURCES = ["task_state", "order_delivery", "applicable_policy", "recent_dialogue", "memory"]
REASONS = {
    "selected": "",
    "irrelevant": "older product introduction",
    "over_budget": "over the budget",
    "not_applicable": "not for this task",
    "not_fetched": "provider timed out",
}
REASON_CODES = {**bench_traces.REASON_CODES, "no_access": "provider_no_access"}
OUTCOMES = bench_traces.OUTCOMES
RARE = ("order_delivery", "no_access", "principal lacks the scope")  # 1 trace in 1,000
COMMON = ("memory", "irrelevant", "older product introduction")
ITEM_IDS = {
    "task_state": "task:T{n}-{i}",
    "order_delivery": "order:A{n}-{i}",
    "applicable_policy": "policy-P{i}",
    "recent_dialogue": "turn-{n}-{i}",
    "memory": "mem-{n}-{i}",
}

TRACE_COLUMNS = (
    "id, request_id, agent_id, environment_id, occurred_at, received_at, strategy, "
    "strategy_version, profile_version, documents, config_fallback, config_resolution, "
    "task_id, task_revision, principal, model_name, model_adapter, model_context_window, "
    "status, degradation, budget_max_input_tokens, input_estimate, input_estimate_unit, "
    "input_estimate_estimator, sources, engine, fixed_input_tokens, relevance_threshold, "
    "selection_context_window"
)
CANDIDATE_COLUMNS = (
    "trace_id, position, item_id, source, version, size, required, bundle, decision, reason, "
    "outcome, relevance, depends_on, conflicts_with, note, occurred_at, first_of_kind, "
    "provider_bundle, reason_code"
)
ARRAY_COLUMNS = (
    "c_id text[] NOT NULL, c_source int2[] NOT NULL, c_decision int2[] NOT NULL, "
    "c_version text[], c_size int4[], c_required bool[], c_bundle text[], c_reason int4[], "
    "c_outcome int2[], c_relevance float8[], c_depends_on jsonb, c_conflicts_with jsonb, "
    "c_note text[], c_provider_bundle text[], c_reason_code int2[]"
)


# --- the synthetic traces --------------------------------------------------------------------------
def chunk_traces(first: int, count: int, start: datetime, spacing: float, env_id: int):
    """Traces first … first+count-1 as (trace row, candidates): trace n at start + n·spacing."""
    rng = random.Random(first)
    now = datetime.now(UTC)
    out = []
    for n in range(first, first + count):
        occurred = start + timedelta(seconds=n * spacing)
        candidates = []
        for i in range(CANDIDATES):
            source = SOURCES[i % 5]
            decision = rng.choice(DECISIONS)
            reason = REASONS[decision]
            if n % 1000 == 7 and i == 1:
                source, decision, reason = RARE
            candidates.append(
                wire.Candidate(
                    id=ITEM_IDS[source].format(n=n, i=i),
                    source=source,
                    decision=decision,
                    version=f"v{i}",
                    size=100 + i,
                    required=i < 3,
                    bundle="policy-P7" if i % 10 == 2 else None,
                    reason=reason,
                    outcome=OUTCOMES.get(decision, "fetched"),
                    relevance=round(rng.random(), 3),
                    provider_bundle="policy-P7" if i % 10 == 2 else None,
                    reason_code=REASON_CODES[decision],
                )
            )
        row = (
            n,
            f"gen-{n:08d}",
            1,
            env_id,
            occurred,
            now,
            "after_sales_consultation",
            1 + n % 3,
            7,
            '{"profile": 7, "after_sales_consultation": 3}',
            False,
            "fresh",
            f"T{n}",
            4,
            f"shop-a/user-{n % 1000}",
            "model-x",
            "adapter-x",
            128000,
            ("ready", "ready", "ready", "degraded", "budget_exceeded")[n % 5],
            "",
            8000,
            6200.0,
            "token",
            "adapter-x",
            f'[{{"id": "order:A{n}", "version": "r12"}}, {{"id": "P7", "version": "v2"}}]',
            "context_runtime 0.2.0 rules 1a2b3c4d5e6f",
            2890,
            0.2,
            128000,
        )
        out.append((row, candidates))
    return out


# --- codes: the closed lists as int2, sources / reasons / kinds numbered in small tables --------
DECISION_CODES = get_args(wire.DecisionName)
OUTCOME_CODES = ("fetched", "not_fetched", "no_access", "not_applicable")
REASON_CODE_LIST = wire.REASON_CODES


class Numbering:
    """A small lookup table (value → int), cached in the process; a new value is inserted
    (what ingest would do the first time it meets a source, reason or kind)."""

    def __init__(self, table: str, columns: str):
        self.table, self.columns = table, columns
        self.codes: dict = {}
        self.values: dict = {}

    def code(self, cursor, value) -> int:
        found = self.codes.get(value)
        if found is not None:
            return found
        parts = value if isinstance(value, tuple) else (value,)
        where = " AND ".join(f"{c} = %s" for c in self.columns.split(", "))
        cursor.execute(
            f"INSERT INTO shapes.{self.table} ({self.columns}) VALUES "
            f"({', '.join(['%s'] * len(parts))}) ON CONFLICT DO NOTHING",
            parts,
        )
        cursor.execute(f"SELECT id FROM shapes.{self.table} WHERE {where}", parts)
        found = cursor.fetchone()[0]
        self.codes[value] = found
        self.values[found] = value
        return found


SOURCE_NUMBERS = Numbering("source", "name")
REASON_NUMBERS = Numbering("reason", "text")
KIND_NUMBERS = Numbering("kind", "source, decision, reason")


def _index(codes, value):
    return None if value is None else codes.index(value)


def _links(values) -> str | None:
    return orjson.dumps(values).decode() if any(values) else None


def kind_codes(cursor, candidates) -> list[int]:
    return [KIND_NUMBERS.code(cursor, kind) for kind in compact.kinds(candidates)]


def array_columns(cursor, candidates) -> tuple:
    """Shape b's candidate columns: one array per field, NULL when every one is the default."""

    def column(values, default):
        return None if all(v == default for v in values) else values

    cs = candidates
    return (
        [c.id for c in cs],
        [SOURCE_NUMBERS.code(cursor, c.source) for c in cs],
        [DECISION_CODES.index(c.decision) for c in cs],
        column([c.version for c in cs], ""),
        column([c.size for c in cs], None),
        column([c.required for c in cs], False),
        column([c.bundle for c in cs], None),
        column([REASON_NUMBERS.code(cursor, c.reason) for c in cs], None),
        column([_index(OUTCOME_CODES, c.outcome) for c in cs], None),
        column([c.relevance for c in cs], None),
        _links([c.depends_on for c in cs]),
        _links([c.conflicts_with for c in cs]),
        column([c.note for c in cs], ""),
        column([c.provider_bundle for c in cs], None),
        column([_index(REASON_CODE_LIST, c.reason_code) for c in cs], None),
    )


def from_arrays(row) -> list[wire.Candidate]:
    """Shape b's columns back to wire structs (codes through the cached lookup tables)."""
    (ids, sources, decisions, versions, sizes, required, bundles, reasons, outcomes) = row[:9]
    relevances, depends_on, conflicts_with, notes, provider_bundles, reason_codes = row[9:]
    count = len(ids)
    depends_on = orjson.loads(depends_on) if depends_on else None
    conflicts_with = orjson.loads(conflicts_with) if conflicts_with else None
    return [
        wire.Candidate(
            id=ids[k],
            source=SOURCE_NUMBERS.values[sources[k]],
            decision=DECISION_CODES[decisions[k]],
            version=versions[k] if versions else "",
            size=sizes[k] if sizes else None,
            required=required[k] if required else False,
            bundle=bundles[k] if bundles else None,
            reason=REASON_NUMBERS.values[reasons[k]] if reasons else "",
            outcome=OUTCOME_CODES[outcomes[k]] if outcomes and outcomes[k] is not None else None,
            relevance=relevances[k] if relevances else None,
            depends_on=tuple(depends_on[k]) if depends_on else (),
            conflicts_with=tuple(conflicts_with[k]) if conflicts_with else (),
            note=notes[k] if notes else "",
            provider_bundle=provider_bundles[k] if provider_bundles else None,
            reason_code=REASON_CODE_LIST[reason_codes[k]]
            if reason_codes and reason_codes[k] is not None
            else None,
        )
        for k in range(count)
    ]


def from_rows(rows) -> list[wire.Candidate]:
    """Shape a's rows back to wire structs, as traces.replay.wire_candidate did (a frozen
    copy: the product's candidate table and that function went with migration 0013; the old
    table kept "" where the runtime sent none)."""
    return [
        wire.Candidate(
            id=item_id,
            source=source,
            decision=decision,
            version=version,
            size=size,
            required=required,
            bundle=bundle or None,
            reason=reason,
            outcome=outcome or None,
            relevance=relevance,
            depends_on=tuple(depends_on or ()),
            conflicts_with=tuple(conflicts_with or ()),
            note=note,
            provider_bundle=provider_bundle or None,
            reason_code=reason_code or None,
        )
        for (item_id, source, version, size, required, bundle, decision, reason, outcome,
             relevance, depends_on, conflicts_with, note, provider_bundle, reason_code) in rows
    ]  # fmt: skip


def candidate_rows(candidates, trace_id: int, occurred_at) -> list[tuple]:
    """Shape a's candidate rows in CANDIDATE_COLUMNS order: a frozen copy of what
    traces.services.candidate_rows wrote before migration 0013 (one candidate of each
    (source, decision, reason) of a trace marked first_of_kind)."""
    seen: set[tuple[str, str, str]] = set()
    rows = []
    for position, c in enumerate(candidates):
        kind = (c.source, c.decision, c.reason)
        first_of_kind = kind not in seen
        seen.add(kind)
        rows.append(
            (
                trace_id, position, c.id, c.source, c.version, c.size, c.required,
                c.bundle or "", c.decision, c.reason, c.outcome or "", c.relevance,
                _json(c.depends_on) if c.depends_on else "[]",
                _json(c.conflicts_with) if c.conflicts_with else "[]",
                c.note, occurred_at, first_of_kind, c.provider_bundle or "", c.reason_code or "",
            )
        )  # fmt: skip
    return rows


def _json(value) -> str:
    return msgspec.json.encode(value).decode()


A_SELECT = (
    "item_id, source, version, size, required, bundle, decision, reason, outcome, relevance, "
    "depends_on, conflicts_with, note, provider_bundle, reason_code"
)


# --- the shapes ------------------------------------------------------------------------------------
# Shape a's candidate table as it was before migration 0013 (migrations 0005 and 0006, and
# the model's columns): no key of its own, the trace index, the partial exclusion index.
A_CANDIDATE_DDL = """
CREATE TABLE shapes.a_candidate (
    trace_id bigint NOT NULL, position smallint NOT NULL CHECK (position >= 0),
    item_id varchar(300) NOT NULL, source varchar(100) COLLATE "C" NOT NULL,
    version varchar(100) NOT NULL, size integer CHECK (size >= 0), required boolean NOT NULL,
    bundle varchar(100) NOT NULL, decision varchar(30) COLLATE "C" NOT NULL,
    reason varchar(200) NOT NULL, outcome varchar(20) NOT NULL, relevance double precision,
    depends_on jsonb NOT NULL, conflicts_with jsonb NOT NULL, note varchar(200) NOT NULL,
    provider_bundle varchar(100) NOT NULL DEFAULT '',
    reason_code varchar(30) COLLATE "C" NOT NULL DEFAULT '',
    occurred_at timestamptz NOT NULL, first_of_kind boolean NOT NULL
) PARTITION BY RANGE (occurred_at);
CREATE INDEX a_candidate_trace ON shapes.a_candidate (trace_id);
CREATE INDEX a_candidate_exclusion_time
    ON shapes.a_candidate (source, decision, reason, occurred_at DESC, trace_id DESC)
    WHERE first_of_kind AND NOT (decision = 'selected');
"""


def _old_trace_template(cursor) -> None:
    """shapes.trace_template: traces_trace as it was before migration 0013 (its columns and
    indexes without packed_candidates, kinds and their two indexes), what every shape's
    trace table is made LIKE: the shapes' own columns and indexes are added to it."""
    cursor.execute(
        "CREATE TABLE shapes.trace_template (LIKE public.traces_trace INCLUDING ALL);"
        "ALTER TABLE shapes.trace_template DROP COLUMN packed_candidates, DROP COLUMN kinds"
    )
    cursor.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = 'shapes' AND tablename = "
        "'trace_template' AND indexdef LIKE '%%(occurred_at DESC, id DESC)'"
    )
    for (name,) in cursor.fetchall():  # the copy of trace_time_id
        cursor.execute(f"DROP INDEX shapes.{name}")


def create_schema(cursor) -> None:
    cursor.execute("DROP SCHEMA IF EXISTS shapes CASCADE; CREATE SCHEMA shapes")
    _old_trace_template(cursor)
    cursor.execute(A_CANDIDATE_DDL)
    cursor.execute(
        "CREATE TABLE shapes.request_key (LIKE public.traces_request_key INCLUDING ALL);"
        "CREATE TABLE shapes.source (id smallserial PRIMARY KEY, name text UNIQUE NOT NULL);"
        "CREATE TABLE shapes.reason (id serial PRIMARY KEY, text text UNIQUE NOT NULL);"
        "CREATE TABLE shapes.kind (id serial PRIMARY KEY, source text NOT NULL,"
        " decision text NOT NULL, reason text NOT NULL, UNIQUE (source, decision, reason));"
        # a: today's tables, their DDL and indexes
        "CREATE TABLE shapes.a_trace (LIKE shapes.trace_template INCLUDING ALL)"
        " PARTITION BY RANGE (occurred_at);"
        # b: typed arrays
        f"CREATE TABLE shapes.b_trace (LIKE shapes.trace_template INCLUDING ALL, {ARRAY_COLUMNS},"
        " kinds int4[] NOT NULL) PARTITION BY RANGE (occurred_at);"
        "CREATE INDEX b_trace_kinds ON shapes.b_trace USING gin (kinds);"
        # c: MessagePack, lz4 by PostgreSQL
        "CREATE TABLE shapes.c_trace (LIKE shapes.trace_template INCLUDING ALL,"
        " candidates bytea COMPRESSION lz4 NOT NULL, kinds int4[] NOT NULL)"
        " PARTITION BY RANGE (occurred_at);"
        "CREATE INDEX c_trace_kinds ON shapes.c_trace USING gin (kinds);"
        # d, e: traces.compact
        "CREATE TABLE shapes.d_trace (LIKE shapes.trace_template INCLUDING ALL,"
        " candidates bytea NOT NULL, kinds int4[] NOT NULL) PARTITION BY RANGE (occurred_at);"
        "CREATE INDEX d_trace_kinds ON shapes.d_trace USING gin (kinds);"
        "CREATE TABLE shapes.e_trace (LIKE shapes.trace_template INCLUDING ALL,"
        " candidates bytea NOT NULL, kinds int4[] NOT NULL) PARTITION BY RANGE (occurred_at);"
        "CREATE INDEX e_trace_kinds ON shapes.e_trace USING gin (kinds);"
        "CREATE INDEX e_trace_time ON shapes.e_trace (occurred_at DESC, id DESC);"
    )


def parents(shape: str) -> list[str]:
    return ["a_trace", "a_candidate"] if shape == "a" else [f"{shape}_trace"]


def ensure_days(cursor, shapes, first_day, last_day) -> None:
    day = first_day
    while day <= last_day:
        low = datetime(day.year, day.month, day.day, tzinfo=UTC)
        for shape in shapes:
            for parent in parents(shape):
                name = f"shapes.{parent}_p{day:%Y%m%d}"
                cursor.execute(
                    f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF shapes.{parent}"
                    f" FOR VALUES FROM ('{low.isoformat()}') TO"
                    f" ('{(low + timedelta(days=1)).isoformat()}')"
                )
                if shape == "c":  # compress the candidates from 128 bytes of row up
                    cursor.execute(f"ALTER TABLE {name} SET (toast_tuple_target = 128)")
        day += timedelta(days=1)


def write(conn, shape: str, traces) -> float:
    """COPY one chunk into a shape, rows built from the wire structs; seconds taken."""
    started = time.perf_counter()
    with conn.transaction(), conn.cursor() as cursor:
        if shape == "a":
            with cursor.copy(f"COPY shapes.a_trace ({TRACE_COLUMNS}) FROM STDIN") as copy:
                for row, _ in traces:
                    copy.write_row(row)
            with cursor.copy(f"COPY shapes.a_candidate ({CANDIDATE_COLUMNS}) FROM STDIN") as copy:
                for row, candidates in traces:
                    for candidate_row in candidate_rows(candidates, row[0], row[4]):
                        copy.write_row(candidate_row)
        else:
            if shape == "b":
                extra = [(*array_columns(cursor, cs), kind_codes(cursor, cs)) for _, cs in traces]
                columns = ARRAY_COLUMNS_NAMES + ", kinds"
            else:
                encoder = compact.pack if shape == "c" else compact.encode
                extra = [(encoder(cs), kind_codes(cursor, cs)) for _, cs in traces]
                columns = "candidates, kinds"
            with cursor.copy(
                f"COPY shapes.{shape}_trace ({TRACE_COLUMNS}, {columns}) FROM STDIN"
            ) as copy:
                for (row, _), more in zip(traces, extra, strict=True):
                    copy.write_row((*row, *more))
    return time.perf_counter() - started


ARRAY_COLUMNS_NAMES = ", ".join(part.split()[0] for part in ARRAY_COLUMNS.split(", "))


def write_request_keys(conn, traces) -> None:
    with (
        conn.transaction(),
        conn.cursor() as cursor,
        cursor.copy(
            "COPY shapes.request_key (environment_id, request_id, trace_id, occurred_at) FROM STDIN"
        ) as copy,
    ):
        for row, _ in traces:
            copy.write_row((row[3], row[1], row[0], row[4]))


def shape_bytes(cursor, shape: str) -> tuple[int, int, int]:
    """(total, tables with their TOAST, indexes) over every partition of the shape."""
    sums = [0, 0, 0]
    for parent in parents(shape):
        cursor.execute(
            "SELECT coalesce(sum(pg_total_relation_size(relid)), 0),"
            " coalesce(sum(pg_table_size(relid)), 0), coalesce(sum(pg_indexes_size(relid)), 0)"
            " FROM pg_partition_tree(%s::regclass)",
            [f"shapes.{parent}"],
        )
        sums = [a + int(b) for a, b in zip(sums, cursor.fetchone(), strict=True)]
    return tuple(sums)


# --- reads ------------------------------------------------------------------------------------------
def trace_page(cursor, shape: str, request_id: str, env_id: int) -> list[wire.Candidate]:
    """The trace page's reads: the request key, the trace, its candidates decoded."""
    cursor.execute(
        "SELECT trace_id, occurred_at FROM shapes.request_key"
        " WHERE environment_id = %s AND request_id = %s",
        [env_id, request_id],
    )
    trace_id, occurred_at = cursor.fetchone()
    if shape == "a":
        cursor.execute(
            "SELECT * FROM shapes.a_trace WHERE id = %s AND occurred_at = %s",
            [trace_id, occurred_at],
        )
        cursor.fetchone()
        cursor.execute(
            f"SELECT {A_SELECT} FROM shapes.a_candidate WHERE trace_id = %s"
            " AND occurred_at = %s ORDER BY position",
            [trace_id, occurred_at],
        )
        return from_rows(cursor.fetchall())
    cursor.execute(
        f"SELECT * FROM shapes.{shape}_trace WHERE id = %s AND occurred_at = %s",
        [trace_id, occurred_at],
    )
    row = cursor.fetchone()
    names = [d.name for d in cursor.description]
    if shape == "b":
        first = names.index("c_id")
        return from_arrays(row[first : first + 15])
    value = row[names.index("candidates")]
    return compact.unpack(value) if shape == "c" else compact.decode(value)


def exclusion_list(cursor, shape: str, kind, since, until) -> int:
    """The exclusion list's reads: its first 50 traces, newest first, and the capped count.
    Returns how many the page shows."""
    source, decision, reason = kind
    if shape == "a":
        where = (
            "source = %s AND decision = %s AND reason = %s AND first_of_kind"
            " AND decision <> 'selected' AND occurred_at >= %s AND occurred_at <= %s"
        )
        arguments = [source, decision, reason, since, until]
        cursor.execute(
            f"SELECT trace_id, occurred_at FROM shapes.a_candidate WHERE {where}"
            " ORDER BY occurred_at DESC, trace_id DESC LIMIT 50",
            arguments,
        )
        keys = cursor.fetchall()
        cursor.execute(
            "SELECT id, request_id, occurred_at, status, strategy, strategy_version"
            " FROM shapes.a_trace WHERE id = ANY(%s) AND occurred_at = ANY(%s)"
            " AND agent_id = ANY(%s) ORDER BY occurred_at DESC, id DESC",
            [[k[0] for k in keys], [k[1] for k in keys], [1]],
        )
        shown = cursor.fetchall()
        cursor.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM shapes.a_candidate WHERE {where}"
            " LIMIT 1001) AS capped",
            arguments,
        )
        cursor.fetchone()
        return len(shown)
    code = KIND_NUMBERS.codes.get(kind)
    if code is None:
        cursor.execute(
            "SELECT id FROM shapes.kind WHERE source = %s AND decision = %s AND reason = %s",
            kind,
        )
        code = cursor.fetchone()[0]
    where = (
        "kinds @> ARRAY[%s]::int4[] AND occurred_at >= %s AND occurred_at <= %s"
        " AND agent_id = ANY(%s)"
    )
    arguments = [code, since, until, [1]]
    cursor.execute(
        f"SELECT id, request_id, occurred_at, status, strategy, strategy_version"
        f" FROM shapes.{shape}_trace WHERE {where} ORDER BY occurred_at DESC, id DESC LIMIT 50",
        arguments,
    )
    shown = cursor.fetchall()
    cursor.execute(
        f"SELECT count(*) FROM (SELECT 1 FROM shapes.{shape}_trace WHERE {where}"
        " LIMIT 1001) AS capped",
        arguments,
    )
    cursor.fetchone()
    return len(shown)


def bulk_read(cursor, shape: str, first: int, count: int) -> int:
    """What an impact preview reads: `count` consecutive traces' candidates in one query
    (binary rows), each trace's as a list — today's rows as tuples, the others decoded."""
    cursor.execute(
        "SELECT trace_id, occurred_at FROM shapes.request_key WHERE environment_id = %s"
        " AND request_id >= %s AND request_id < %s",
        [1, f"gen-{first:08d}", f"gen-{first + count:08d}"],
    )
    keys = cursor.fetchall()
    ids, low, high = [k[0] for k in keys], min(k[1] for k in keys), max(k[1] for k in keys)
    if shape == "a":
        cursor.execute(
            f"SELECT trace_id, {A_SELECT} FROM shapes.a_candidate WHERE trace_id = ANY(%s)"
            " AND occurred_at >= %s AND occurred_at <= %s ORDER BY trace_id, position",
            [ids, low, high],
            binary=True,
        )
        by_trace: dict[int, list] = {}
        for row in cursor.fetchall():
            by_trace.setdefault(row[0], []).append(row)
        return len(by_trace)
    column = ARRAY_COLUMNS_NAMES if shape == "b" else "candidates"
    cursor.execute(
        f"SELECT id, {column} FROM shapes.{shape}_trace WHERE id = ANY(%s)"
        " AND occurred_at >= %s AND occurred_at <= %s ORDER BY id",
        [ids, low, high],
        binary=True,
    )
    rows = cursor.fetchall()
    if shape == "b":
        decoded = [from_arrays(row[1:]) for row in rows]
    else:
        decode = compact.unpack if shape == "c" else compact.decode
        decoded = [decode(row[1]) for row in rows]
    return len(decoded)


def percentiles(times: list[float]) -> tuple[float, float]:
    times = sorted(times)
    return statistics.median(times), times[max(0, int(len(times) * 0.95) - 1)]


def timed(function, *args) -> tuple[float, object]:
    started = time.perf_counter()
    result = function(*args)
    return (time.perf_counter() - started) * 1000, result


def retention(conn, shape: str, day) -> float:
    """DETACH … CONCURRENTLY + DROP of a day's partitions (autocommit, as the purge)."""
    started = time.perf_counter()
    for parent in parents(shape):
        name = f"shapes.{parent}_p{day:%Y%m%d}"
        conn.execute(f"ALTER TABLE shapes.{parent} DETACH PARTITION {name} CONCURRENTLY")
        conn.execute(f"DROP TABLE {name}")
    return (time.perf_counter() - started) * 1000


# --- the run ----------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=100_000)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument(
        "--per-day", type=int, default=43_200, help="traces per day (default: 2 s apart)"
    )
    parser.add_argument("--samples", type=int, default=300, help="trace pages per shape")
    parser.add_argument("--lists", type=int, default=60, help="exclusion lists per shape")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    if unknown := set(shapes) - set(SHAPES):
        raise SystemExit(f"unknown shape(s) {sorted(unknown)}; choose from {SHAPES}")

    database = BenchDatabase(BENCH_DB)
    print_machine(f"database {BENCH_DB}, {args.traces:,} traces × {CANDIDATES} candidates")
    database.create()
    django_setup(database.url)  # as every bench with a database (the product's DDL is copied)
    # Never prepared: each query planned with its values, as Django's client-side binding
    # does in the product (a generic plan for a time window over day partitions ANDs the
    # whole GIN and time bitmaps: 3 → 10–70 ms for a common kind, measured).
    conn = psycopg.connect(database.url, autocommit=True, prepare_threshold=None)
    env_id = 1
    spacing = 86_400 / args.per_day
    now = datetime.now(UTC)
    start = now - timedelta(seconds=args.traces * spacing)
    with conn.cursor() as cursor:
        create_schema(cursor)
        ensure_days(cursor, shapes, start.date(), now.date())

    print(f"writing: chunks of {CHUNK:,} traces, each into every shape in turn", flush=True)
    spent = dict.fromkeys(shapes, 0.0)
    for number, first in enumerate(range(0, args.traces, CHUNK)):
        traces = chunk_traces(first, min(CHUNK, args.traces - first), start, spacing, env_id)
        write_request_keys(conn, traces)
        turn = number % len(shapes)
        for shape in shapes[turn:] + shapes[:turn]:
            spent[shape] += write(conn, shape, traces)
        if number and number % 50 == 0:
            print(f"  {first + len(traces):,} traces", flush=True)

    with conn.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE shapes.request_key")
        for shape in shapes:
            for parent in parents(shape):
                cursor.execute(f"VACUUM ANALYZE shapes.{parent}")
        cursor.execute("SELECT pg_total_relation_size('shapes.request_key')")
        key_bytes = cursor.fetchone()[0]
        parts = {shape: shape_bytes(cursor, shape) for shape in shapes}
        stored = {shape: parts[shape][0] for shape in shapes}

    # Reads, the shapes interleaved per sample (a burst elsewhere hits them all alike).
    rng = random.Random(args.traces)
    sample_ids = [rng.randrange(args.traces) for _ in range(args.samples)]
    pages = {shape: [] for shape in shapes}
    with conn.cursor() as cursor:
        first = sample_ids[0] // CHUNK * CHUNK
        written = chunk_traces(first, min(CHUNK, args.traces - first), start, spacing, env_id)
        for row, candidates in written[:: max(1, len(written) // 20)]:
            for shape in shapes:  # exact: what was written comes back
                got = trace_page(cursor, shape, row[1], env_id)
                assert got == candidates, f"shape {shape}: the candidates of {row[1]} differ"
        for n in sample_ids:
            for shape in shapes:
                elapsed, got = timed(trace_page, cursor, shape, f"gen-{n:08d}", env_id)
                assert len(got) == CANDIDATES
                pages[shape].append(elapsed)

    bulk = dict.fromkeys(shapes, 0.0)
    with conn.cursor() as cursor:
        for first in range(0, min(args.traces, 10 * BULK), BULK):
            for shape in shapes:
                elapsed, read = timed(bulk_read, cursor, shape, first, BULK)
                assert read == min(BULK, args.traces - first), (shape, read)
                bulk[shape] += elapsed / 1000 / read

    until = now
    since = until - timedelta(days=1)
    lists = {(shape, which): [] for shape in shapes for which in ("common", "rare")}
    with conn.cursor() as cursor:
        for _ in range(args.lists):
            for which, kind in (("common", COMMON), ("rare", RARE)):
                for shape in shapes:
                    elapsed, shown = timed(exclusion_list, cursor, shape, kind, since, until)
                    assert shown == 50 or which == "rare", (shape, which, shown)
                    lists[(shape, which)].append(elapsed)

    oldest = start.date()
    dropped = {shape: retention(conn, shape, oldest) for shape in shapes}

    print(f"\nrequest key table (every shape has it): {key_bytes / args.traces:,.0f} B/trace")
    header = (
        f"{'shape':<6}{'B/trace':>9}{'+key':>8}{'vs a':>7}{'COPY tr/s':>11}{'vs a':>7}"
        f"{'page p50':>10}{'p95':>7}{'common p50':>12}{'p95':>7}{'rare p50':>10}{'p95':>7}"
        f"{'drop day':>10}{'bulk tr/s':>11}"
    )
    print(header)
    bulk_batches = len(range(0, min(args.traces, 10 * BULK), BULK))
    for shape in shapes:
        per_trace = stored[shape] / args.traces
        rate = args.traces / spent[shape]
        page = percentiles(pages[shape])
        common = percentiles(lists[(shape, "common")])
        rare = percentiles(lists[(shape, "rare")])
        ratio = f"{stored[shape] / stored['a']:>7.2f}" if "a" in stored else f"{'':>7}"
        rate_ratio = f"{rate / (args.traces / spent['a']):>7.2f}" if "a" in spent else f"{'':>7}"
        print(
            f"{shape:<6}{per_trace:>9,.0f}{per_trace + key_bytes / args.traces:>8,.0f}{ratio}"
            f"{rate:>11,.0f}{rate_ratio}{page[0]:>8.2f}ms{page[1]:>7.2f}"
            f"{common[0]:>10.2f}ms{common[1]:>7.2f}{rare[0]:>8.2f}ms{rare[1]:>7.2f}"
            f"{dropped[shape]:>8.0f}ms{bulk_batches / bulk[shape]:>11,.0f}"
        )
    print("\nper trace, tables (heap + TOAST) / indexes:")
    for shape in shapes:
        _, tables, indexes = parts[shape]
        print(f"  {shape}: {tables / args.traces:,.0f} B / {indexes / args.traces:,.0f} B")
    conn.close()
    if not args.keep:
        database.drop()


if __name__ == "__main__":
    main()
