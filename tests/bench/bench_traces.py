"""Trace ingest, and the product's trace storage at scale (issues 6, 11 and 36). A script:

    python -m tests.bench.bench_traces [--traces 20000] [--sizes 100000,1000000]
    python -m tests.bench.bench_traces --scale-only --sizes 1000000,10000000   # issue 36

Runs against a separate database (bench_traces, created and dropped here) on the server of
DATABASE_URL. Phases:

1. ingest N traces × C candidates over HTTP (granian serving console.wsgi, a few concurrent
   clients, batches of 500), vs a bare psycopg COPY of the same rows into a lean one-table
   schema (unpartitioned, primary key only: the floor), vs the same COPY into the console's
   partitioned table, vs Django bulk_create (on a slice; rates are per second). The COPYs
   build the ingest's rows (`traces.services.trace_row`: candidates packed in the trace row
   since issue 36) while timed, as the ingest does. Prints traces/s and the ratios.
2. the product's tables (after migration 0013: candidates packed in the trace row, kinds of
   exclusion numbered, GIN and time indexes) filled to each of `--sizes` in turn, the first
   size the baseline of the others (same run): 50 realistic candidates a trace, from a pool
   of `--pool` distinct traces (ids, sources, reasons, sizes, versions differ) put through
   the ingest's row shape once and reused — encoding 10M × 50 candidates in Python would
   take hours; trace n gets pool row n mod pool with its own id, request_id and time
   (`--per-day` a day, newest a minute ago; ids grow with time), written with binary COPY
   on `--workers` connections with the request keys. The secondary indexes are built after
   the load (`--indexes after`, as migration 0013 builds trace_time_id and trace_kinds on an
   existing installation) or kept during it (`--indexes during`, as the live ingest does).
   At each size: bytes per trace (heap + TOAST + indexes of the trace partitions, the
   request keys, the kind table), the trace page p50/p95 (the whole view, and its selectors
   `trace_find` + `trace_page_context` alone), and the exclusion list p50/p95
   (`traces.selectors.trace_listing` with source + decision + reason in the last day: the
   first page of 50 and the count capped at 1,000) for a common kind (~70 % of traces) and a
   rare one (0.1 %).
3. retention of one day (with three days or more): DETACH + DROP of its partition vs a
   batched DELETE of another.

`--ingest-only` runs phase 1 alone, `--scale-only` phases 2 and 3. The batches are what
the SDK's reporter sends (`--wire sdk`, the default: `encode_trace`, the wire structs' field
order with defaults written) or compact JSON of plain dicts, as another client might write
(`--wire plain`). `--against DIR` also serves another checkout (say the commit before a
change, from `git archive`) on a second port and ingests through both, alternating which goes
first in each round: the cost of a change in the same run. The traces carry the replay
fields of context_runtime 0.2.0 (issue 20: the `selection` block, per candidate outcome,
relevance, provider bundle and reason code); `--old-runtime` leaves them out of phase 1. Set
`BENCH_TRACES_DB` / `BENCH_TRACES_PORT` to run two benches at once on one server.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import math
import os
import random
import statistics
import struct
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import orjson
from context_runtime import wire
from context_runtime.reporter import encode_trace

from tests.bench._database import ROOT, BenchDatabase, django_setup, print_machine

# Overridable, so two checkouts can run the bench at once on one server.
BENCH_DB = os.environ.get("BENCH_TRACES_DB", "bench_traces")
PORT = int(os.environ.get("BENCH_TRACES_PORT", "8691"))
BATCH = 500
CLIENTS = 4
ROUNDS = 4


REASON_CODES = {
    "selected": "required",
    "irrelevant": "below_threshold",
    "over_budget": "over_budget_optional",
    "not_applicable": "provider_not_applicable",
    "not_fetched": "provider_not_fetched",
}
OUTCOMES = {"not_applicable": "not_applicable", "not_fetched": "not_fetched"}


def payloads(
    count: int, candidates: int, prefix: str, start: datetime, *, replay_fields: bool = True
) -> list[dict]:
    """Traces as a runtime sends them: with the replay fields of context_runtime 0.2.0 (the
    `selection` block; per candidate outcome, relevance, provider bundle, reason code), or
    without them as an older runtime (`replay_fields=False`)."""
    rng = random.Random(prefix)
    decisions = ["selected"] * 5 + ["irrelevant", "over_budget", "not_applicable", "not_fetched"]
    sources = ["task_state", "order_delivery", "applicable_policy", "recent_dialogue", "memory"]
    out = []
    for n in range(count):
        out.append(
            {
                "request_id": f"{prefix}-{n:08d}",
                "agent": "assistant_professional",
                "occurred_at": (start + timedelta(seconds=n)).isoformat(),
                "documents": {"profile": 7, "after_sales_consultation": 3},
                "strategy": "after_sales_consultation",
                "task": {"id": f"T{n}", "revision": 4},
                "principal": f"shop-a/user-{n % 1000}",
                "model": {"name": "model-x", "adapter": "adapter-x", "context_window": 128000},
                "status": "ready",
                "budget": {"max_input_tokens": 8000},
                "input_estimate": {"value": 6200, "unit": "token", "estimator": "adapter-x"},
                "sources": [{"id": f"order:A{n}", "version": "r12"}, {"id": "P7", "version": "v2"}],
                "candidates": [
                    {
                        "id": f"item-{n}-{i}",
                        "source": sources[i % 5],
                        "version": f"v{i}",
                        "size": 100 + i,
                        "required": i < 3,
                        "decision": rng.choice(decisions),
                        "reason": "older product introduction",
                    }
                    for i in range(candidates)
                ],
            }
        )
        if replay_fields:
            trace = out[-1]
            trace["selection"] = {
                "engine": "context_runtime 0.2.0 rules 1a2b3c4d5e6f",
                "fixed_input_tokens": 2890,
                "relevance_threshold": 0.2,
                "context_window": 128000,
                "max_input_tokens": None,
            }
            for i, c in enumerate(trace["candidates"]):
                c["outcome"] = OUTCOMES.get(c["decision"], "fetched")
                c["relevance"] = round(rng.random(), 3)
                c["reason_code"] = REASON_CODES[c["decision"]]
                if i % 10 == 2:
                    c["bundle"] = c["provider_bundle"] = "policy-P7"
    return out


# --- phase 1: ingest ---------------------------------------------------------------------------------
def batch_bodies(traces: list[dict], how: str) -> list[bytes]:
    """The batches of 500 as the SDK's reporter writes them, or as plain compact JSON."""
    if how == "plain":
        return [
            orjson.dumps({"traces": traces[i : i + BATCH]}) for i in range(0, len(traces), BATCH)
        ]
    decoder = msgspec.json.Decoder(wire.Trace)
    encoded = [encode_trace(decoder.decode(orjson.dumps(t))) for t in traces]
    return [
        b'{"traces":[' + b",".join(encoded[i : i + BATCH]) + b"]}"
        for i in range(0, len(encoded), BATCH)
    ]


def start_granian(bench_url: str, root: Path = ROOT, port: int = PORT) -> subprocess.Popen:
    env = {
        **os.environ,
        "DATABASE_URL": bench_url,
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
        # that checkout's SDK (the wire structs), whatever the virtualenv installed
        "PYTHONPATH": f"{root / 'sdk'}{os.pathsep}{root}",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "granian",
            "--interface",
            "wsgi",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "2",
            "--blocking-threads",
            "2",
            "console.wsgi:application",
        ],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("granian did not start")


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of a process and its live descendants: granian's workers."""
    ticks = os.sysconf("SC_CLK_TCK")
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = [
            int(child)
            for task in Path(f"/proc/{pid}/task").iterdir()
            for child in (task / "children").read_text().split()
        ]
    except OSError:  # gone meanwhile
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / ticks
    return own + sum(cpu_seconds(child) for child in children)


def ingest_over_http(bodies: list[bytes], secret: str, port: int = PORT) -> tuple[float, int]:
    queue = list(bodies)
    lock = threading.Lock()
    accepted = [0]
    errors: list[str] = []

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            with lock:
                if not queue:
                    return
                body = queue.pop()
            conn.request(
                "POST",
                "/api/v1/runtime/traces",
                body=body,
                headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
            )
            response = conn.getresponse()
            data = response.read()
            if response.status != 200:
                errors.append(f"{response.status} {data[:200]!r}")
                return
            with lock:
                accepted[0] += orjson.loads(data)["accepted"]

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise SystemExit(f"ingest failed: {errors[0]}")
    return elapsed, accepted[0]


def rows_for(traces: list[dict], agent_id: int, environment_id: int):
    """`wire_rows` of these traces, parsed as the ingest parses a batch."""
    from traces import ingest

    valid = []
    for i in range(0, len(traces), wire.MAX_TRACES_PER_BATCH):
        chunk = traces[i : i + wire.MAX_TRACES_PER_BATCH]
        valid += [t for _, t in ingest.parse_batch(orjson.dumps({"traces": chunk})).valid]
    return wire_rows(valid, agent_id, environment_id)


def wire_rows(traces: list, agent_id: int, environment_id: int):
    """(trace, builder) of each wire trace, the builder giving the ingest's row
    (`traces.services.trace_row`: candidates packed, kinds numbered by
    `traces.stored.kind_numbers` as `trace_batch_store` does), for `bare_copy` to call while
    timed, as the ingest does (packing is most of the write's Python work)."""
    from django.db import connection, transaction

    from traces import compact, services, stored

    with transaction.atomic(), connection.cursor() as cursor:
        numbers = stored.kind_numbers(
            cursor, {k for t in traces for k in compact.kinds(t.candidates)}
        )
    now = datetime.now(UTC)

    def row(trace):
        return services.trace_row(
            trace,
            agent_id=agent_id,
            environment_id=environment_id,
            received_at=now,
            snapshot_expires_at=None,
            kind_numbers=numbers,
        )

    return [(trace, row) for trace in traces]


LEAN_SCHEMA = """
CREATE TABLE lean_trace (LIKE traces_trace INCLUDING DEFAULTS);
ALTER TABLE lean_trace ADD PRIMARY KEY (id);
CREATE SEQUENCE lean_trace_id_seq;
"""


def lean_schema() -> None:
    """The baseline's table: the same columns, no partitions, no other index (the candidates
    are in the row since issue 36: one table)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(LEAN_SCHEMA)


def lean_copy(rows) -> float:
    """The floor of the target: COPY into the lean one-table schema (the candidates packed
    in Python meanwhile, as everywhere)."""
    return bare_copy(rows, trace_table="lean_trace")


def bare_copy(rows, *, trace_table="traces_trace") -> float:
    """COPY straight into the table, ids taken from the sequence up front."""
    from django.db import connection, transaction

    from traces import services

    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"SELECT nextval('{trace_table}_id_seq') FROM generate_series(1, %s)", [len(rows)]
        )
        ids = [row[0] for row in cursor.fetchall()]
        raw = cursor.cursor
        with raw.copy(f"COPY {trace_table} (id, {services.TRACE_COLUMNS}) FROM STDIN") as copy:
            for trace_id, (trace, row_of) in zip(ids, rows, strict=True):
                copy.write_row((trace_id, *row_of(trace)))
    return time.perf_counter() - started


def django_bulk_create(rows) -> float:
    from django.db import transaction

    from traces import services
    from traces.models import Trace

    columns = [c.strip() for c in services.TRACE_COLUMNS.split(",")]
    json_columns = {
        "documents", "sources", "shadow", "candidate_counts", "input_errors", "sections",
        "redactions",
    }  # fmt: skip
    started = time.perf_counter()
    with transaction.atomic():
        objects = [
            Trace(
                **{
                    c: (orjson.loads(v) if c in json_columns and v is not None else v)
                    for c, v in zip(columns, row_of(trace), strict=True)
                }
            )
            for trace, row_of in rows
        ]
        Trace.objects.bulk_create(objects, batch_size=1000)
    return time.perf_counter() - started


# --- phase 2: the product's tables at scale (issue 36's "Done when") --------------------------------
# Realistic candidates: sources, reasons, ids, sizes and versions differ from trace to trace.
SOURCES = [
    "task_state", "order_delivery", "applicable_policy", "recent_dialogue", "memory",
    "product_catalog", "customer_profile", "ticket_history", "knowledge_base", "promotions",
    "returns_policy", "shipping_status",
]  # fmt: skip
REASONS = {
    "irrelevant": [
        "below the relevance threshold", "older product introduction",
        "not about the customer's order", "superseded by a newer revision",
    ],
    "over_budget": ["over the budget", "optional and over the budget", "bundle over the budget"],
    "not_fetched": ["provider returned nothing", "not needed for this task"],
    "not_applicable": ["not applicable to this channel", "region not covered"],
}  # fmt: skip
COMMON_KIND = ("recent_dialogue", "irrelevant", "below the relevance threshold")
RARE_KIND = ("order_delivery", "not_fetched", "provider timed out after 800 ms")
RARE_EVERY = 1_000  # a pool trace in this many has the rare kind: 0.1 % of traces
DECISION_WEIGHTS = [("selected", 28), ("irrelevant", 12), ("over_budget", 5),
                    ("not_fetched", 3), ("not_applicable", 2)]  # fmt: skip


def pool_payloads(count: int, candidates: int) -> list[dict]:
    """`count` distinct traces as a runtime sends them, with the replay fields; the common
    kind in about 70 % of them, the rare kind in one of RARE_EVERY."""
    rng = random.Random("pool")
    decisions = [d for d, weight in DECISION_WEIGHTS for _ in range(weight)]
    out = []
    for n in range(count):
        order = f"A{rng.randrange(10**6):06d}"
        items = []
        for i in range(candidates):
            source = SOURCES[rng.randrange(len(SOURCES))] if i >= 3 else SOURCES[i]
            decision = "selected" if i < 3 else rng.choice(decisions)
            reason = "required" if i < 3 else rng.choice(REASONS.get(decision, ["fits"]))
            items.append(
                {
                    "id": f"{source}:{order}:{rng.randrange(10**5)}",
                    "source": source,
                    "version": f"r{rng.randrange(1, 40)}",
                    "size": rng.randrange(20, 1500),
                    "required": i < 3,
                    "decision": decision,
                    "reason": reason,
                    "outcome": OUTCOMES.get(decision, "fetched"),
                    "relevance": round(rng.random(), 3),
                    "reason_code": REASON_CODES[decision],
                }
            )
            if i % 10 == 2:
                items[-1]["bundle"] = items[-1]["provider_bundle"] = f"policy-P{rng.randrange(9)}"
            if i % 17 == 5:
                items[-1]["depends_on"] = [items[0]["id"]]
        if rng.random() < 0.7:  # the common kind
            c = items[3 + rng.randrange(candidates - 3)]
            c["source"], c["decision"], c["reason"] = COMMON_KIND
            c["outcome"], c["reason_code"] = "fetched", REASON_CODES["irrelevant"]
        if n % RARE_EVERY == 0:
            c = items[-1]
            c["source"], c["decision"], c["reason"] = RARE_KIND
            c["outcome"], c["reason_code"] = OUTCOMES["not_fetched"], REASON_CODES["not_fetched"]
        status = ["ready", "ready", "ready", "degraded", "budget_exceeded"][n % 5]
        out.append(
            {
                "request_id": f"pool-{n}",
                "agent": "assistant_professional",
                "occurred_at": datetime.now(UTC).isoformat(),
                "documents": {"profile": 7, "after_sales_consultation": 1 + n % 3},
                "strategy": "after_sales_consultation",
                "task": {"id": f"T{rng.randrange(10**6)}", "revision": rng.randrange(1, 9)},
                "principal": f"shop-{n % 7}/user-{rng.randrange(10**5)}",
                "model": {"name": "model-x", "adapter": "adapter-x", "context_window": 128000},
                "status": status,
                **({"degradation": "static_order_summary"} if status == "degraded" else {}),
                "budget": {"max_input_tokens": 8000},
                "input_estimate": {
                    "value": 5000 + rng.randrange(3000),
                    "unit": "token",
                    "estimator": "adapter-x",
                },  # fmt: skip
                "sources": [
                    {"id": f"order:{order}", "version": "r12"},
                    {"id": f"P{rng.randrange(9)}", "version": "v2"},
                ],  # fmt: skip
                "selection": {
                    "engine": "context_runtime 0.2.0 rules 1a2b3c4d5e6f",
                    "fixed_input_tokens": 2890,
                    "relevance_threshold": 0.2,
                    "context_window": 128000,
                    "max_input_tokens": None,
                },
                "candidates": items,
            }
        )
    return out


# Binary COPY: the fixed header, a row's field count, its trailer; timestamps in µs from 2000.
COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
COPY_TRAILER = struct.pack(">h", -1)
PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
# The columns the bench writes per trace; the others come from a pool trace's row.
OWN_COLUMNS = ("id", "request_id", "occurred_at")


def pool_columns() -> list[str]:
    from traces import services

    own = set(OWN_COLUMNS)
    return [c.strip() for c in services.TRACE_COLUMNS.split(",") if c.strip() not in own]


def pool_rows(payloads_: list[dict], agent_id: int, env_id: int) -> list[bytes]:
    """The pool's traces in the ingest's row shape (`traces.services.trace_row`, with the
    kinds numbered by `traces.stored.kind_numbers` as the ingest does), each as the binary
    COPY fields of the columns the pool gives (PostgreSQL's own encoding: the rows go into
    a temporary table like traces_trace and come back out with COPY … TO (FORMAT binary))."""
    from django.db import connection, transaction

    from traces import compact, ingest, services, stored

    traces = []
    for i in range(0, len(payloads_), wire.MAX_TRACES_PER_BATCH):
        chunk = payloads_[i : i + wire.MAX_TRACES_PER_BATCH]
        parsed = ingest.parse_batch(orjson.dumps({"traces": chunk}))
        assert not parsed.rejected, parsed.rejected[:1]
        traces += [t for _, t in parsed.valid]
    columns = [c.strip() for c in services.TRACE_COLUMNS.split(",")]
    wanted = pool_columns()
    now = datetime.now(UTC)
    with transaction.atomic(), connection.cursor() as cursor:
        numbers = stored.kind_numbers(
            cursor, {k for t in traces for k in compact.kinds(t.candidates)}
        )
        cursor.execute(
            "CREATE TEMP TABLE bench_pool (LIKE traces_trace INCLUDING DEFAULTS) ON COMMIT DROP"
        )
        with cursor.cursor.copy(
            f"COPY bench_pool (id, {services.TRACE_COLUMNS}) FROM STDIN"
        ) as copy:
            for slot, trace in enumerate(traces):
                row = services.trace_row(
                    trace,
                    agent_id=agent_id,
                    environment_id=env_id,
                    received_at=now,
                    snapshot_expires_at=None,
                    kind_numbers=numbers,
                )
                assert len(row) == len(columns)
                copy.write_row((slot, *row))
        data = bytearray()
        with cursor.cursor.copy(
            f"COPY (SELECT {', '.join(wanted)} FROM bench_pool ORDER BY id) TO STDOUT "
            "(FORMAT binary)"
        ) as copy:
            for block in copy:
                data += block
    return split_binary_rows(bytes(data), len(wanted))


def split_binary_rows(data: bytes, fields: int) -> list[bytes]:
    """The rows of a binary COPY stream, each as its fields' bytes (without the count)."""
    assert data.startswith(COPY_HEADER[:11]), data[:11]
    (extension,) = struct.unpack_from(">i", data, 15)
    at = 19 + extension
    rows = []
    while True:
        (count,) = struct.unpack_from(">h", data, at)
        if count == -1:
            return rows
        assert count == fields, (count, fields)
        start = at = at + 2
        for _ in range(count):
            (size,) = struct.unpack_from(">i", data, at)
            at += 4 + max(size, 0)
        rows.append(data[start:at])


def _text_field(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">i", len(raw)) + raw


def secondary_indexes() -> list[tuple[str, str, str]]:
    """(table, name, CREATE INDEX …) of the indexes of traces_trace and traces_request_key
    other than their primary keys."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes "
            "WHERE tablename IN ('traces_trace', 'traces_request_key') AND indexname NOT IN "
            "(SELECT conname FROM pg_constraint WHERE contype = 'p') ORDER BY indexname"
        )
        # pg_indexes shows a partitioned table's index as "ON ONLY": that would build it
        # on the parent alone, not on its partitions.
        return [(t, n, d.replace(" ON ONLY ", " ON ")) for t, n, d in cursor.fetchall()]


class Loader:
    """Writes traces `first` … `last` (trace n at `newest` − (n − 1) × `step`, id = total + 1 − n,
    so ids grow with time as the ingest gives them) into traces_trace and traces_request_key
    with binary COPY, a pool trace's row each (trace n: pool row n mod pool size), on
    `workers` connections at once, a chunk of traces per COPY: oldest first (chunks and the
    rows in each), as the ingest receives them, which decides how full the indexes
    maintained during a load end up (a new row is the newest in the time indexes)."""

    CHUNK = 20_000

    def __init__(self, rows: list[bytes], *, total: int, newest: datetime, step: float,
                 env_id: int, workers: int = 2):  # fmt: skip
        self.rows, self.total, self.newest, self.step = rows, total, newest, step
        self.env_id, self.workers = env_id, workers
        self.columns = ", ".join((*OWN_COLUMNS, *pool_columns()))
        self.field_count = struct.pack(">h", len(OWN_COLUMNS) + len(pool_columns()))

    def when(self, n: int) -> datetime:
        return self.newest - timedelta(seconds=(n - 1) * self.step)

    def days(self, first: int, last: int) -> list:
        low, high = self.when(last).date(), self.when(first).date()
        return [low + timedelta(days=d) for d in range((high - low).days + 1)]

    def chunk(self, first: int, last: int) -> tuple[bytes, bytes]:
        traces, keys = [COPY_HEADER], [COPY_HEADER]
        key_fields = struct.pack(">h", 4)
        env = struct.pack(">iq", 8, self.env_id)
        newest_us = round((self.newest - PG_EPOCH).total_seconds() * 1e6)
        step_us = self.step * 1e6
        pool = self.rows
        for n in range(last, first - 1, -1):  # oldest first
            trace_id = struct.pack(">iq", 8, self.total + 1 - n)
            request_id = _text_field(f"gen-{n:08d}")
            when = struct.pack(">iq", 8, newest_us - round((n - 1) * step_us))
            traces.append(self.field_count + trace_id + request_id + when + pool[n % len(pool)])
            keys.append(key_fields + env + request_id + trace_id + when)
        traces.append(COPY_TRAILER)
        keys.append(COPY_TRAILER)
        return b"".join(traces), b"".join(keys)

    def load(self, first: int, last: int) -> None:
        import psycopg
        from django.db import connection

        from traces import partitions

        with connection.cursor() as cursor:
            partitions.ensure_days(cursor, self.days(first, last))
        # Popped from the end: the oldest chunk first.
        ranges = [(lo, min(lo + self.CHUNK - 1, last)) for lo in range(first, last + 1, self.CHUNK)]
        lock = threading.Lock()
        failures: list[BaseException] = []

        def work():
            try:
                with psycopg.connect(_url(), autocommit=True) as conn:
                    # A bench load, not the product's durability: the commit need not wait
                    # for the WAL flush (the rows and indexes are the same).
                    conn.execute("SET synchronous_commit = off")
                    while True:
                        with lock:
                            if not ranges or failures:
                                return
                            lo, hi = ranges.pop()
                        traces, keys = self.chunk(lo, hi)
                        with conn.transaction(), conn.cursor() as cur:
                            with cur.copy(
                                f"COPY traces_trace ({self.columns}) FROM STDIN (FORMAT binary)"
                            ) as copy:
                                copy.write(traces)
                            with cur.copy(
                                "COPY traces_request_key (environment_id, request_id, trace_id, "
                                "occurred_at) FROM STDIN (FORMAT binary)"
                            ) as copy:
                                copy.write(keys)
            except BaseException as exc:  # reported by the caller
                failures.append(exc)

        threads = [threading.Thread(target=work) for _ in range(self.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failures:
            raise failures[0]


def _url() -> str:
    return os.environ["DATABASE_URL"]


def storage_bytes() -> dict[str, int]:
    """Bytes on disk (heap + TOAST + indexes) of the trace partitions, the request keys and
    the kind table."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(pg_table_size(relid)), 0), "
            "coalesce(sum(pg_indexes_size(relid)), 0) "
            "FROM pg_partition_tree('traces_trace') WHERE isleaf"
        )
        trace_table, trace_indexes = cursor.fetchone()
        sizes = {"traces_trace heap+TOAST": trace_table, "traces_trace indexes": trace_indexes}
        for table in ("traces_request_key", "traces_candidate_kind"):
            cursor.execute("SELECT pg_total_relation_size(%s)", [table])
            sizes[table] = cursor.fetchone()[0]
    return sizes


def percentiles(times: list[float]) -> tuple[float, float]:
    times = sorted(times)
    return statistics.median(times), times[max(0, math.ceil(len(times) * 0.95) - 1)]


def best_of(rounds: int, run) -> tuple[float, float]:
    """The round with the lowest p95: other processes on a shared machine add bursts; the
    best round is the closest to the read's own cost."""
    return min((percentiles(run(r)) for r in range(rounds)), key=lambda pair: pair[1])


def page_times(client, total: int, samples: int, rounds: int):
    """The trace page (`/traces/<request_id>/`, the whole view through Django's test client:
    middleware, request-key lookup, access-log write, `trace_page_context`, replay card,
    template) for random request ids."""

    def run(round_number):
        rng = random.Random(total * 10 + round_number)
        times = []
        for _ in range(samples):
            request_id = f"gen-{rng.randrange(1, total + 1):08d}"
            started = time.perf_counter()
            response = client.get(f"/traces/{request_id}/")
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (request_id, response.status_code)
        return times

    return best_of(rounds, run)


def page_selector_times(user, total: int, samples: int, rounds: int):
    """The page's selectors alone: `trace_find` (request key, then the trace by its key)
    and `trace_page_context` (candidates decoded, grouped, hints)."""
    from traces import selectors

    def run(round_number):
        rng = random.Random(total * 20 + round_number)
        times = []
        for _ in range(samples):
            request_id = f"gen-{rng.randrange(1, total + 1):08d}"
            started = time.perf_counter()
            (trace,) = selectors.trace_find(user=user, text=request_id)
            context = selectors.trace_page_context(user=user, trace=trace)
            times.append((time.perf_counter() - started) * 1000)
            assert context["candidate_count"] > 0
        return times

    return best_of(rounds, run)


def listing_times(user, kind, *, since: datetime, samples: int, rounds: int):
    """`trace_listing` filtered to "source S excluded as D for reason R since `since`": the
    first page of 50 read and the count (capped at 1,000) taken, as the trace list shows.
    Returns (p50, p95, traces on the page, count)."""
    from traces import selectors
    from traces.filters import TraceFilters

    source, decision, reason = kind
    seen = {}

    def run(_):
        times = []
        for _ in range(samples):
            filters = TraceFilters(source=source, decision=decision, reason=reason, since=since)
            started = time.perf_counter()
            paginator = selectors.trace_listing(user=user, filters=filters)
            page = paginator.get_page(1)
            shown = len(page.object_list)
            count = paginator.count
            times.append((time.perf_counter() - started) * 1000)
            seen["shown"], seen["count"] = shown, count
        return times

    p50, p95 = best_of(rounds, run)
    return p50, p95, seen["shown"], seen["count"]


def scale_run(args, *, agent, env, client, user) -> datetime:
    """Phase 2: the product's tables filled to each size in `args.sizes`, bytes per trace
    and the reads at each: the first size is the baseline of the others (same run)."""
    from django.db import connection

    from traces import compact

    sizes = sorted(args.sizes)
    total = sizes[-1]
    started = time.perf_counter()
    payloads_ = pool_payloads(args.pool, args.candidates)
    rows = pool_rows(payloads_, agent.pk, env.pk)
    sample = [orjson.loads(orjson.dumps(p))["candidates"] for p in payloads_[:200]]
    del payloads_
    packed_sizes = statistics.mean(
        len(compact.encode([msgspec.convert(c, wire.Candidate) for c in cands])) for cands in sample
    )
    print(
        f"\n2. the product's tables at {', '.join(f'{s:,}' for s in sizes)} traces × "
        f"{args.candidates} candidates: a pool of {args.pool:,} distinct traces (ids, sources, "
        f"reasons, sizes, versions differ; common kind in ~70 %, rare kind in "
        f"{1 / RARE_EVERY:.1%}) through the ingest's row shape (trace_row + kind_numbers), "
        f"packed once ({packed_sizes:.0f} B of candidates a trace on average) and reused: "
        f"trace n gets pool row n mod {args.pool:,} with its own id, request_id and time; "
        f"{args.per_day:,} traces a day, newest a minute ago; binary COPY on "
        f"{args.workers} connections; pool built in {time.perf_counter() - started:.0f} s"
    )
    step = 86_400 / args.per_day
    newest = datetime.now(UTC) - timedelta(minutes=1)
    loader = Loader(rows, total=total, newest=newest, step=step, env_id=env.pk,
                    workers=args.workers)  # fmt: skip
    indexes = secondary_indexes()
    print(
        "   indexes: "
        + (
            "maintained row by row during the load (as the live ingest does)"
            if args.indexes == "during"
            else f"the {len(indexes)} secondary indexes of traces_trace and traces_request_key "
            "dropped before each size's load and built after it (what migration 0013 gives "
            "trace_time_id and trace_kinds on an existing installation; the primary keys "
            "stay, maintained during the load)"
        )
    )
    user_since = newest - timedelta(days=1)
    done = 0
    results = {}
    for size in sizes:
        if args.indexes == "after":
            with connection.cursor() as cursor:
                for _, name, _ in indexes:
                    cursor.execute(f"DROP INDEX IF EXISTS {name}")
        started = time.perf_counter()
        loader.load(done + 1, size)
        copy_s = time.perf_counter() - started
        index_s = 0.0
        with connection.cursor() as cursor:
            if args.indexes == "after":
                started = time.perf_counter()
                cursor.execute("SET maintenance_work_mem = '512MB'")
                for _, _, ddl in indexes:
                    cursor.execute(ddl)
                index_s = time.perf_counter() - started
            started = time.perf_counter()
            cursor.execute(f"SELECT setval('traces_trace_id_seq', {total})")
            # A steady-state table, not one autovacuum is still chewing on (it takes a core).
            cursor.execute("VACUUM ANALYZE traces_trace")
            cursor.execute("VACUUM ANALYZE traces_request_key")
            vacuum_s = time.perf_counter() - started
        days = len(loader.days(1, size))
        print(
            f"   {size:,} traces ({days} day partitions): loaded {size - done:,} in "
            f"{copy_s:.0f} s ({(size - done) / copy_s:,.0f} traces/s)"
            + (f", indexes built in {index_s:.0f} s" if index_s else "")
            + f", VACUUM ANALYZE {vacuum_s:.0f} s · load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        done = size
        sizes_now = storage_bytes()
        per_trace = sum(sizes_now.values()) / size
        for n in range(1, 21):  # warm up caches and the connection
            client.get(f"/traces/gen-{n:08d}/")
        gc.collect()
        result = {
            "bytes": per_trace,
            "parts": {name: b / size for name, b in sizes_now.items()},
            "page": page_times(client, size, args.samples, args.rounds),
            "page_selectors": page_selector_times(user, size, args.samples, args.rounds),
            "common": listing_times(
                user, COMMON_KIND, since=user_since, samples=args.list_samples, rounds=args.rounds
            ),  # fmt: skip
            "rare": listing_times(
                user, RARE_KIND, since=user_since, samples=args.list_samples, rounds=args.rounds
            ),  # fmt: skip
            "load": os.getloadavg()[0],
        }
        results[size] = result
        parts = " · ".join(f"{name} {b:,.0f}" for name, b in result["parts"].items())
        print(f"   bytes per trace {per_trace:,.0f} (target ≤ 2,700): {parts}")
        print(
            f"   trace page (view) p50 {result['page'][0]:.2f} ms · p95 {result['page'][1]:.2f}"
            f" ms (target ≤ 20 ms at 10M) · its selectors p50 {result['page_selectors'][0]:.2f}"
            f" · p95 {result['page_selectors'][1]:.2f} ms"
        )
        for label, key in (("common", "common"), ("rare", "rare")):
            p50, p95, shown, count = result[key]
            print(
                f"   exclusion list, {label} kind (page of {shown}, count {count:,}"
                f"{'+' if count > 1000 else ''}): p50 {p50:.2f} ms · p95 {p95:.2f} ms"
                + (" (target ≤ 100 ms at 10M)" if key == "common" else ""),
                flush=True,
            )
    if len(sizes) > 1:
        base, top = results[sizes[0]], results[sizes[-1]]
        print(
            f"   ratios {sizes[-1]:,} ÷ {sizes[0]:,} (same run): bytes per trace "
            f"{top['bytes'] / base['bytes']:.2f} · page p95 {top['page'][1] / base['page'][1]:.2f}"
            f" · exclusion list p95 common {top['common'][1] / base['common'][1]:.2f}, rare "
            f"{top['rare'][1] / base['rare'][1]:.2f}"
        )
    return newest


# --- phase 3: partitions ---------------------------------------------------------------------------------
def partition_demo(newest: datetime) -> tuple[int, float, float]:
    """A whole day of traces two days back: DETACH … CONCURRENTLY + DROP of its partition
    (what `traces.partitions_maintain` does) vs a batched DELETE of the day before (what
    `traces_purge_expired` does for a shorter retention). The candidates go with their
    rows: there is no candidate table any more."""
    from django.db import connection

    from traces import partitions
    from traces.services import _delete_in_batches

    day = (newest - timedelta(days=2)).date()
    low = datetime(day.year, day.month, day.day, tzinfo=UTC)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM traces_trace WHERE occurred_at >= %s AND occurred_at < %s",
            [low, low + timedelta(days=1)],
        )
        (rows,) = cursor.fetchone()
        started = time.perf_counter()
        name = partitions.partition_name("traces_trace", day)
        cursor.execute(f"ALTER TABLE traces_trace DETACH PARTITION {name} CONCURRENTLY")
        cursor.execute(f"DROP TABLE {name}")
        drop_ms = (time.perf_counter() - started) * 1000
    high, low = low, low - timedelta(days=1)
    started = time.perf_counter()
    _delete_in_batches(
        "SELECT id FROM traces_trace WHERE occurred_at >= %s AND occurred_at < %s",
        [low, high],
        [
            (
                "DELETE FROM traces_trace WHERE id = ANY(%s) AND occurred_at >= %s "
                "AND occurred_at < %s",
                [low, high],
            ),
        ],
        5000,
    )
    delete_ms = (time.perf_counter() - started) * 1000
    return rows, drop_ms, delete_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=20_000)
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--bulk-slice", type=int, default=4_000, help="traces for bulk_create")
    parser.add_argument(
        "--sizes",
        type=lambda text: [int(n.replace("_", "")) for n in text.split(",")],
        default=[100_000, 1_000_000],
        help="phase 2: trace counts to fill the product's tables to, in one run (the first "
        "is the baseline of the others), e.g. 1000000,10000000",
    )
    parser.add_argument("--pool", type=int, default=4_000, help="phase 2: distinct traces")
    parser.add_argument("--per-day", type=int, default=1_000_000, help="phase 2: traces a day")
    parser.add_argument("--workers", type=int, default=2, help="phase 2: COPY connections")
    parser.add_argument(
        "--indexes",
        choices=["after", "during"],
        default="after",
        help="phase 2: build the secondary indexes after the load, or keep them during it",
    )
    parser.add_argument("--samples", type=int, default=200, help="phase 2: pages a round")
    parser.add_argument("--list-samples", type=int, default=60, help="phase 2: lists a round")
    parser.add_argument("--keep", action="store_true", help="do not drop the bench database")
    parser.add_argument("--ingest-only", action="store_true", help="phase 1 only")
    parser.add_argument("--scale-only", action="store_true", help="phases 2 and 3 only")
    parser.add_argument("--wire", choices=["sdk", "plain"], default="sdk", help="batch bytes")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved rounds")
    parser.add_argument("--against", type=Path, help="another checkout to ingest through too")
    parser.add_argument(
        "--old-runtime", action="store_true", help="traces without the replay fields (issue 20)"
    )
    args = parser.parse_args()
    replay = not args.old_runtime

    database = BenchDatabase(BENCH_DB)
    print_machine(f"database {BENCH_DB}")
    database.create()
    django_setup(database.url)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from console.access.services import standard_roles_ensure
    from strategies.catalog.models import Agent, Environment
    from strategies.runtime.tokens import runtime_token_create

    agent = Agent.objects.create(key="assistant_professional", name="AP")
    env = Environment.objects.create(key="sg-test", name="SG test", position=1)
    _, secret = runtime_token_create(
        name="bench", environment=env, capabilities=["traces:write"], all_agents=True
    )
    granian = other = None
    try:
        if not args.scale_only:
            start = (datetime.now(UTC) - timedelta(days=3)).replace(
                hour=0, minute=0, second=0, microsecond=0
            )
            http_traces = payloads(
                args.traces, args.candidates, "http", start, replay_fields=replay
            )
            bodies = batch_bodies(http_traces, args.wire)
            counts = [len(http_traces[i : i + BATCH]) for i in range(0, len(http_traces), BATCH)]
            other_bodies = (
                batch_bodies(
                    payloads(args.traces, args.candidates, "other", start, replay_fields=replay),
                    args.wire,
                )
                if args.against
                else []
            )
            copy_rows = rows_for(
                payloads(args.traces, args.candidates, "copy", start, replay_fields=replay),
                agent.pk,
                env.pk,
            )
            lean_rows = rows_for(
                payloads(args.traces, args.candidates, "lean", start, replay_fields=replay),
                agent.pk,
                env.pk,
            )
            lean_schema()
            bulk_rows = rows_for(
                payloads(args.bulk_slice, args.candidates, "bulk", start, replay_fields=replay),
                agent.pk,
                env.pk,
            )
            print(
                f"\n1. ingest {args.traces:,} traces × {args.candidates} candidates "
                f"({len(bodies)} batches of {BATCH}, {sum(map(len, bodies)) / 2**20:.0f} MiB, "
                f"{args.wire} wire); bulk_create on {args.bulk_slice:,}; interleaved in "
                f"{args.rounds} rounds so a change in the machine's load hits all of them"
            )
            granian = start_granian(database.url)
            other = start_granian(database.url, args.against, PORT + 1) if args.against else None
            spent = {"http": 0.0, "other": 0.0, "lean": 0.0, "copy": 0.0, "bulk": 0.0}
            cpu = {"http": 0.0, "other": 0.0}  # the server's, whatever else the machine runs
            rounds = args.rounds
            for r in range(rounds):
                part = slice(r * len(bodies) // rounds, (r + 1) * len(bodies) // rounds)
                servers = [("http", bodies, PORT, granian)]
                if other is not None:  # alternate which goes first: load drifts hit both alike
                    servers.insert(r % 2, ("other", other_bodies, PORT + 1, other))
                for name, sent, port, server in servers:
                    before = cpu_seconds(server.pid)
                    elapsed, accepted = ingest_over_http(sent[part], secret, port)
                    cpu[name] += cpu_seconds(server.pid) - before
                    assert accepted == sum(counts[part]), (name, accepted, sum(counts[part]))
                    spent[name] += elapsed
                    if other is not None:
                        print(
                            f"   round {r + 1} {name}: {sum(counts[part]) / elapsed:,.0f} traces/s"
                        )
                rows = slice(r * len(copy_rows) // rounds, (r + 1) * len(copy_rows) // rounds)
                spent["copy"] += bare_copy(copy_rows[rows])
                spent["lean"] += lean_copy(lean_rows[rows])
                rows = slice(r * len(bulk_rows) // rounds, (r + 1) * len(bulk_rows) // rounds)
                spent["bulk"] += django_bulk_create(bulk_rows[rows])
            granian.terminate()
            granian.wait()
            granian = None
            if other is not None:
                other.terminate()
                other.wait()
                other = None
                other_rate = args.traces / spent["other"]
                print(
                    f"   HTTP through {args.against}: {other_rate:>9,.0f} traces/s · this checkout "
                    f"÷ that one = {args.traces / spent['http'] / other_rate:.3f}"
                )
                print(
                    f"   server CPU per trace: this checkout {cpu['http'] / args.traces * 1e6:,.0f} µs"
                    f" · that one {cpu['other'] / args.traces * 1e6:,.0f} µs · this ÷ that = "
                    f"{cpu['http'] / cpu['other']:.3f}"
                )
                # With DIR the commit before a change, what the change costs the ingest (issue
                # 22: the health counters' target is ≤ 5%), by throughput and by server CPU.
                print(
                    f"   cost of this checkout over that one: "
                    f"{1 - args.traces / spent['http'] / other_rate:+.1%} of throughput, "
                    f"{cpu['http'] / cpu['other'] - 1:+.1%} server CPU per trace (target ≤ 5%)"
                )
            http_rate = args.traces / spent["http"]
            lean_rate = args.traces / spent["lean"]
            copy_rate = args.traces / spent["copy"]
            bulk_rate = args.bulk_slice / spent["bulk"]
            print(f"   HTTP (granian, {CLIENTS} clients):      {http_rate:>9,.0f} traces/s")
            print(f"   bare COPY, lean one-table schema: {lean_rate:>9,.0f} traces/s")
            print(f"   bare COPY, the console's tables:  {copy_rate:>9,.0f} traces/s")
            print(f"   Django bulk_create:               {bulk_rate:>9,.0f} traces/s")
            print(
                f"   ratios: HTTP/lean COPY = {http_rate / lean_rate:.2f} (target ≥ 0.5) · "
                f"HTTP/COPY into the same tables = {http_rate / copy_rate:.2f} · "
                f"HTTP/bulk_create = {http_rate / bulk_rate:.1f} (target ≥ 5)"
            )

        if args.ingest_only:
            return
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE traces_snapshot, traces_trace, traces_request_key")
            cursor.execute("DROP TABLE IF EXISTS lean_trace")
            cursor.execute("DROP SEQUENCE IF EXISTS lean_trace_id_seq")
        # Free phase 1's objects: a full GC pass over them would land in the timings below.
        gc.collect()
        gc.freeze()
        standard_roles_ensure()
        from console.kernel.models import Grant, Role

        user = get_user_model().objects.create_user("bench-support", password="x-bench-pass-1")
        Grant.objects.create(user=user, role=Role.objects.get(name="support"), agent=agent)
        client = Client()
        client.force_login(user)
        newest = scale_run(args, agent=agent, env=env, client=client, user=user)

        print("\n3. retention: one day of traces, partition drop vs batched DELETE")
        if (args.sizes[-1] // args.per_day) < 3:
            print("   skipped: fewer than three days of traces")
        else:
            rows, drop_ms, delete_ms = partition_demo(newest)
            print(
                f"   {rows:,} traces in the day: DETACH + DROP partition {drop_ms:.0f} ms · "
                f"batched DELETE of the day before {delete_ms:,.0f} ms"
            )
    finally:
        for server in (granian, other):
            if server is not None:
                server.terminate()
        connection.close()
        if not args.keep:
            database.drop()


if __name__ == "__main__":
    main()
