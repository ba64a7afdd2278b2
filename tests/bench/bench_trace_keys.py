"""What refusing a key twice inside a trace costs the ingest's parse (issue 19, item 7). A script:

    python -m tests.bench.bench_trace_keys [--pairs 30]

The end-to-end ingest (`bench_traces --against`) cannot resolve a few per cent on a shared
machine, so this measures the check itself: `traces.ingest.parse_batch` on one batch of the
ingest benchmark's traces (500 × 50 candidates), with the per-trace check and with it
replaced by nothing, alternating which goes first, in one process with Django loaded (the
heap of a worker). CPU time, median of the pairs; for the batch as the SDK's reporter writes
it and as compact JSON of plain dicts (another client). No database is touched.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime

import msgspec
import orjson
from context_runtime import wire
from context_runtime.reporter import encode_trace

from tests.bench.bench_traces import BATCH, payloads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--candidates", type=int, default=50)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()
    from django.urls import resolve

    from traces import ingest

    resolve("/api/v1/runtime/traces")  # the views and what they import, as in a worker
    print(f"machine: {platform.node()} · {os.cpu_count()} cores · {platform.platform()}")
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC · load average {os.getloadavg()[0]:.1f}")
    traces = payloads(BATCH, args.candidates, "keys", datetime.now(UTC))
    decoder = msgspec.json.Decoder(wire.Trace)
    bodies = {
        "sdk": b'{"traces":['
        + b",".join(encode_trace(decoder.decode(orjson.dumps(t))) for t in traces)
        + b"]}",
        "plain": orjson.dumps({"traces": traces}),
    }
    check = ingest._repeated_in_trace

    def parse(body: bytes, checked: bool) -> float:
        ingest._repeated_in_trace = check if checked else (lambda raw, trace: None)
        started = time.process_time()
        batch = ingest.parse_batch(body)
        spent = time.process_time() - started
        assert len(batch.valid) == BATCH, batch.rejected[:1]
        return spent

    for name, body in bodies.items():
        spent: dict[bool, list[float]] = {True: [], False: []}
        for n in range(args.pairs):
            for checked in (True, False) if n % 2 else (False, True):
                spent[checked].append(parse(body, checked))
        with_check, without = (statistics.median(spent[c]) for c in (True, False))
        print(
            f"{name:>5} wire ({len(body) / 2**20:.1f} MiB): parse_batch {without * 1e3:.2f} ms "
            f"→ {with_check * 1e3:.2f} ms with the check: "
            f"+{(with_check - without) / BATCH * 1e6:.1f} µs per trace"
        )
    ingest._repeated_in_trace = check


if __name__ == "__main__":
    sys.exit(main())
