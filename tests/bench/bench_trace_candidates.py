"""What one trace with many candidates costs the console (issue 21.4). A script, not a test:

    python -m tests.bench.bench_trace_candidates [--sizes 50,500,5000] [--traces 20]

The engine takes 5,000 candidates; the wire carries at most MAX_CANDIDATES_PER_TRACE (500)
per trace. To decide between raising that limit and truncating, this measures, per trace of
N candidates (with the replay fields, as the SDK sends them): its bytes on the wire, the
time to parse it (`traces.ingest.parse_batch`, with the limit lifted for the run), the time
to store a batch of them (`traces.services.trace_batch_store`: COPY into the partitioned
table), the bytes it takes in PostgreSQL (the trace row with its packed candidates, TOAST
and indexes, per trace), and the trace page's server time (Django test client, the whole
view). Runs in its own database
(bench_trace_candidates on the server of DATABASE_URL), dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import msgspec
import orjson
from context_runtime import wire

os.environ.setdefault("BENCH_TRACES_DB", "bench_trace_candidates")

from tests.bench._database import BenchDatabase, django_setup, print_machine  # noqa: E402
from tests.bench.bench_traces import (  # noqa: E402  (the database name is read at import)
    BENCH_DB,
    payloads,
)


class Unbounded(wire.Trace):
    """The limit lifted for the run: what would a 5,000-candidate trace cost if sent?"""

    candidates: list[wire.Candidate] = []


def candidate_bytes(cursor) -> int:
    """Bytes of the trace partitions (heap, TOAST, indexes): since issue 36 a trace's
    candidates are packed in its row (migration 0013 dropped the candidate table)."""
    cursor.execute(
        "SELECT coalesce(sum(pg_total_relation_size(relid)), 0) "
        "FROM pg_partition_tree('traces_trace') WHERE isleaf"
    )
    return cursor.fetchone()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,500,5000")
    parser.add_argument("--traces", type=int, default=20, help="traces per batch and size")
    parser.add_argument("--pages", type=int, default=10, help="trace page views per size")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    database = BenchDatabase(BENCH_DB)
    print_machine(f"database {BENCH_DB}")
    database.create()
    django_setup(database.url)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from console.access.services import standard_roles_ensure
    from console.kernel.models import Grant, Role
    from strategies.catalog.models import Agent, Environment
    from traces import ingest, services

    ingest._trace_decoder = msgspec.json.Decoder(Unbounded)

    agent = Agent.objects.create(key="assistant_professional", name="AP")
    env = Environment.objects.create(key="sg-test", name="SG test", position=1)
    identity = SimpleNamespace(
        environment_id=env.pk, environment_key=env.key, covers_agent=lambda key: True
    )
    standard_roles_ensure()
    user = get_user_model().objects.create_user("bench-support", password="x-bench-pass-1")
    Grant.objects.create(user=user, role=Role.objects.get(name="support"), agent=agent)
    client = Client()
    client.force_login(user)

    start = datetime.now(UTC) - timedelta(hours=1)
    print(
        f"\n{'candidates':>10} {'wire/trace':>11} {'parse/trace':>12} {'store/trace':>12} "
        f"{'stored/trace':>13} {'page median':>12} {'page max':>9}"
    )
    for size in sizes:
        traces = payloads(args.traces, size, f"c{size}", start)
        # The SDK's encoding (encode_trace would truncate beyond the limit: not here).
        decoder = msgspec.json.Decoder(Unbounded)
        body = (
            b'{"traces":['
            + b",".join(msgspec.json.encode(decoder.decode(orjson.dumps(t))) for t in traces)
            + b"]}"
        )
        wire_bytes = len(body) / len(traces)
        parsed_at = time.perf_counter()
        batch = ingest.parse_batch(body)
        parse_ms = (time.perf_counter() - parsed_at) * 1000 / len(traces)
        assert len(batch.valid) == len(traces), batch.rejected[:1]
        with connection.cursor() as cursor:
            before = candidate_bytes(cursor)
        stored_at = time.perf_counter()
        result = services.trace_batch_store(identity=identity, batch=batch)
        store_ms = (time.perf_counter() - stored_at) * 1000 / len(traces)
        assert result.accepted == len(traces), result.as_dict()
        with connection.cursor() as cursor:
            stored = (candidate_bytes(cursor) - before) / len(traces)
        times = []
        for n in range(args.pages):
            request_id = traces[n % len(traces)]["request_id"]
            began = time.perf_counter()
            response = client.get(f"/traces/{request_id}/")
            times.append((time.perf_counter() - began) * 1000)
            assert response.status_code == 200, response.status_code
        print(
            f"{size:>10,} {wire_bytes / 1024:>9.0f} KB {parse_ms:>9.2f} ms {store_ms:>9.1f} ms "
            f"{stored / 1024:>10.0f} KB {statistics.median(times):>9.0f} ms "
            f"{max(times):>6.0f} ms"
        )
    database.drop()


if __name__ == "__main__":
    main()
