"""`make bench`: every benchmark script, one after the other (figures → docs/PERFORMANCE.md).

python -m tests.bench               # all of them
python -m tests.bench config        # the runtime config endpoint
python -m tests.bench dispatcher    # the config read inside the process (µs per request)
python -m tests.bench traces        # trace ingest; the product's trace storage at 100k and 1M traces (issue 36)
python -m tests.bench ingest_apart  # ingest server vs bc039d9, config p99 under ingest (issue 36)
python -m tests.bench trace_keys    # the ingest's check for a key twice inside a trace
python -m tests.bench replay        # the trace page's replay (50 candidates)
python -m tests.bench engine        # the SDK's selection engine (50 and 500 candidates)
python -m tests.bench shadow        # what a shadow version adds to a request (50 candidates)
python -m tests.bench client        # a config read on the runtime's request path
python -m tests.bench propagation   # publish → polling client / webhook → client
python -m tests.bench preview       # impact preview: replay + report of 10,000 traces × 50
python -m tests.bench rollouts      # staged rollouts: one guard evaluation per rollout at 1M traces/day
python -m tests.bench guards        # one rollout's guard reads: a 10-minute, a 7-day, a 30-day step
python -m tests.bench health        # version health: counters' cost to ingest, the health page
python -m tests.bench stream        # config stream: 50 runtimes, 1,000 held streams, polling meanwhile
python -m tests.bench stream_outage # runtimes back on the stream after a 90 s stream-server outage
python -m tests.bench runtimes      # the releases page's Runtimes card: 10, 2,000, 10,000 runtimes
python -m tests.bench retention     # the purge of 100,000 expired traces: days dropped vs rows deleted
python -m tests.bench redaction     # ingest with the five built-in redaction rules on vs off
python -m tests.bench alerts        # standing alerts: one evaluation tick of 100 rules at 1M traces/day
python -m tests.bench regressions   # a draft checked against a regression set of 1,000 members
python -m tests.bench storage_shapes # compact candidate storage: five table shapes side by side
"""

from __future__ import annotations

import subprocess
import sys

# name → module (run with -m) or script path (the SDK's, which run without Django)
BENCHES = {
    "config": "tests.bench.bench_config",
    "dispatcher": "tests.bench.bench_dispatcher",
    "traces": "tests.bench.bench_traces",
    "ingest_apart": "tests.bench.bench_ingest_apart",
    "redaction": "tests.bench.bench_redaction",
    "trace_keys": "tests.bench.bench_trace_keys",
    "replay": "tests.bench.bench_replay",
    "engine": "sdk/bench/bench_engine.py",
    "shadow": "sdk/bench/bench_shadow.py",
    "client": "sdk/bench/bench_client.py",
    "propagation": "tests.bench.bench_propagation",
    "preview": "tests.bench.bench_preview",
    "stream": "tests.bench.bench_stream",
    "rollouts": "tests.bench.bench_rollouts",
    "guards": "tests.bench.bench_guards",
    "health": "tests.bench.bench_health",
    "stream_outage": "sdk/bench/bench_stream_outage.py",
    "runtimes": "tests.bench.bench_runtimes",
    "retention": "tests.bench.bench_retention",
    "alerts": "tests.bench.bench_alerts",
    "regressions": "tests.bench.bench_regressions",
    "storage_shapes": "tests.bench.bench_storage_shapes",
}


def main() -> int:
    chosen = sys.argv[1:] or list(BENCHES)
    unknown = [name for name in chosen if name not in BENCHES]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHES)}")
        return 2
    status = 0
    for name in chosen:
        print(f"\n=== {name} ===", flush=True)
        target = BENCHES[name]
        command = [target] if target.endswith(".py") else ["-m", target]
        status |= subprocess.call([sys.executable, *command])
    return status


if __name__ == "__main__":
    sys.exit(main())
