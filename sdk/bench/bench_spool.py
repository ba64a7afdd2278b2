"""What the reporter's spool costs on the request path, and what it delivers after an outage.

    python sdk/bench/bench_spool.py [--samples 20000] [--outage 60] [--traces 10000]

1. ``report()`` timed one call at a time (timer overhead subtracted), median and p99, with
   the memory queue only and with the spool on (target: median ≤ 20 µs), the fake console of
   ``sdk/tests`` up on loopback and the sender thread delivering meanwhile; and with the spool
   on during an outage (nothing listening: the spool grows).
2. An outage: ``--traces`` traces reported at an even pace over ``--outage`` seconds by two
   runtime processes (``sdk/tests/spool_runtime.py``) one after the other, the first killed
   with SIGKILL half-way through its share; then the console comes up on the port they use
   and the second process delivers everything. Every accepted trace must be stored exactly
   once (none missing, none sent twice).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from context_runtime.reporter import TraceReporter  # noqa: E402
from fake_console import TOKEN, FakeConsole, dead_url  # noqa: E402
from spool_runtime import make_trace  # noqa: E402


def timed_reports(reporter: TraceReporter, samples: int) -> list[float]:
    clock = time.perf_counter_ns
    overhead = min(-(clock() - clock()) for _ in range(1000))
    traces = [make_trace(f"bench-{time.time_ns()}-{i}") for i in range(samples)]
    times = []
    for item in traces:
        start = clock()
        reporter.report(item)
        times.append((clock() - start - overhead) / 1000)
    return times


def row(name: str, times: list[float]) -> str:
    times = sorted(times)
    p99 = times[int(len(times) * 0.99)]
    return f"{name:<42} {statistics.median(times):>9.2f} {p99:>9.2f} {times[-1]:>10.1f}"


def part_one(samples: int) -> None:
    print(f"report(): {samples:,} calls, µs per call")
    print(f"{'':<42} {'median':>9} {'p99':>9} {'max':>10}")
    console = FakeConsole()
    try:
        with tempfile.TemporaryDirectory() as spool:
            cases = [
                ("memory queue, console up", console.url, None),
                ("spool, console up", console.url, spool),
                ("spool, console down (outage)", dead_url(), spool + "/down"),
            ]
            for name, url, spool_dir in cases:
                reporter = TraceReporter(
                    url,
                    TOKEN,
                    max_queue=samples + 10,
                    flush_interval=0.2,
                    close_at_exit=False,
                    spool_dir=spool_dir,
                )
                timed_reports(reporter, 500)  # warm up: thread, first segment
                print(row(name, timed_reports(reporter, samples)))
                reporter.close(timeout=0.5)
    finally:
        console.close()


def start(url: str, spool: str, prefix: str, count: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(TESTS / "spool_runtime.py"), url, spool, prefix, str(count), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # the expected "upload failed" warnings of an outage
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def part_two(outage: float, traces: int) -> bool:
    print(f"\nOutage: {traces:,} traces over {outage:g} s, first runtime SIGKILLed half-way")
    url = dead_url()
    port = int(url.rsplit(":", 1)[1])
    half = traces // 2
    pause = outage / traces
    accepted: list[str] = []
    with tempfile.TemporaryDirectory() as spool:
        began = time.monotonic()
        first = start(url, spool, "first", half * 2, "--pause", f"{pause:.6f}")
        for line in first.stdout:  # killed half-way through its own share
            accepted.append(line[2:].strip())
            if len(accepted) >= half // 2:
                break
        first.send_signal(signal.SIGKILL)
        accepted += [line[2:].strip() for line in first.stdout if line.startswith("R ")]
        first.wait()
        killed_with = len(accepted)
        rest = traces - killed_with
        second = start(url, spool, "second", rest, "--pause", f"{pause:.6f}", "--drain", "300")
        lines = []
        for line in second.stdout:
            if line.startswith("R "):
                lines.append(line[2:].strip())
                if len(lines) >= rest:
                    break
        outage_seconds = time.monotonic() - began
        spooled = sum(p.stat().st_size for p in Path(spool).glob("*.spool"))
        console = FakeConsole(port=port)
        up = time.monotonic()
        try:
            stats_line = ""
            for line in second.stdout:
                if line.startswith("STATS "):
                    stats_line = line
            second.wait(300)
            drained = time.monotonic() - up
            accepted += lines
            stored = set(console.stored)
            posted = [
                rid
                for post in console.trace_posts
                if post["status"] == 200
                for rid in post["request_ids"]
            ]
        finally:
            console.close()
    missing = set(accepted) - stored
    extra = stored - set(accepted)
    twice = len(posted) - len(set(posted))
    stats = json.loads(stats_line[6:]) if stats_line else {}
    print(f"outage lasted {outage_seconds:.1f} s; spool on disk at its end: {spooled:,} bytes")
    print(f"accepted by report(): {len(accepted):,} (first process: {killed_with:,}, killed)")
    print(f"after the console came up: all delivered in {drained:.2f} s")
    print(
        f"stored: {len(stored):,}; missing: {len(missing)}; stored beyond the printed: "
        f"{len(extra)} (spooled just before the kill); sent twice: {twice}"
    )
    print(
        f"second process: recovered {stats.get('recovered')}, delivered "
        f"{stats.get('delivered')}, dropped {stats.get('dropped')}"
    )
    ok = not missing and twice == 0 and len(extra) <= 1
    print("exactly once:", "yes" if ok else "NO")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--outage", type=float, default=60.0)
    parser.add_argument("--traces", type=int, default=10_000)
    parser.add_argument("--skip-outage", action="store_true")
    args = parser.parse_args()
    logging.getLogger("context_runtime").setLevel(logging.CRITICAL)  # outages are on purpose
    print(f"Python {platform.python_version()} on {platform.machine()}, {platform.platform()}")
    print(f"{os.cpu_count()} CPUs; spool in {tempfile.gettempdir()}\n")
    part_one(args.samples)
    if args.skip_outage:
        return 0
    return 0 if part_two(args.outage, args.traces) else 1


if __name__ == "__main__":
    sys.exit(main())
