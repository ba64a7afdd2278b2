"""Benchmark of the config stream (docs/runtime-contract.md §1a). A script:

    python -m tests.bench.bench_stream [--runtimes 50] [--publishes 10] [--streams 1000]
                                       [--seconds 30] [--keep]

Runs against its own database (bench_stream, created, migrated and dropped here) on the
server of DATABASE_URL, and the Redis of REDIS_URL under its own cache prefix. Starts two
console instances (granian WSGI web server + granian ASGI stream server each, one database
and Redis), then:

1. **Propagation**: `--runtimes` runtime processes (this script with `--runtime`: the SDK's
   ConfigClient with its defaults — stream on, poll every 30 s — and nothing else), half on
   each instance. Publishes after_sales_consultation v3 and v2 to sg-test in turn,
   `--publishes` times, from this process (neither console's); each runtime prints when it
   took the change (`on_change`). Publish → served: p50/p99/max over every runtime and
   publish. Target: p99 ≤ 1 s.
2. **1,000 held streams**: `--streams` server-sent event streams (lightweight asyncio
   clients in a child process, this script with `--holders`) on instance 1's stream server;
   its resident memory (RSS, the granian process tree) and CPU before, while they are held,
   and at a publish (publish → every one of them got the event: p50/p99/max).
3. **Polling meanwhile**: config reads (wrk, the load of bench_config: `--connections`
   keep-alive connections, 304 and 200) against instance 1's web server without the held
   streams, with them, and without again; requests/s and p99 with ÷ without.

Prints the figures with the date, the machine and its load; docs/PERFORMANCE.md keeps them.
The per-token bound is raised for the held streams (STREAM_MAX_PER_TOKEN=5000): one token
stands for many runtimes here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from tests.bench._database import ROOT, BenchDatabase, django_setup

BENCH_DB = "bench_stream"
CACHE_PREFIX = "bench-stream"
AGENT = "assistant_professional"


# ============================================================== child: one runtime process
def run_runtime(console: str, token: str) -> int:
    """The SDK with its defaults; one JSON line per configuration taken."""
    import logging

    sys.path.insert(0, str(ROOT / "sdk"))
    from context_runtime.client import ConfigClient

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    printing = threading.Lock()

    def say(record: dict) -> None:
        # One write per line under a lock: print() from two threads (on_change's and this
        # one) can interleave a line with another and the parent drops the unreadable line.
        with printing:
            sys.stdout.write(json.dumps(record) + "\n")
            sys.stdout.flush()

    def changed(snapshot):
        strategy = snapshot.strategy("after_sales_consultation")
        version = strategy.version if strategy is not None else None
        say({"t": time.time(), "version": version})

    client = ConfigClient(console, token, AGENT, on_change=changed)
    client.start(wait=30)
    while True:  # until killed; report the transport now and then
        say({"t": time.time(), "transport": client.transport})
        time.sleep(2.0)


# ============================================================== child: many held streams
async def _hold(host: str, port: int, token: str, n: int, out) -> None:
    connected = 0
    ready = asyncio.Event()

    async def one(index: int) -> None:
        nonlocal connected
        for _attempt in range(20):
            try:
                reader, writer = await asyncio.open_connection(host, port)
                break
            except OSError:
                await asyncio.sleep(0.2)
        else:
            return
        writer.write(
            f"GET /api/v1/runtime/stream/{AGENT} HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 200 " not in head.split(b"\r\n", 1)[0]:
            out.write(json.dumps({"refused": head[:200].decode("latin-1")}) + "\n")
            return
        first = True
        connected += 1
        if connected == n:
            ready.set()
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            if b"event: config" in chunk:
                if first:  # the current ETag at connect
                    first = False
                    continue
                out.write(json.dumps({"event": time.time()}) + "\n")
                out.flush()

    tasks = []
    for index in range(n):
        tasks.append(asyncio.create_task(one(index)))
        if index % 50 == 49:
            await asyncio.sleep(0.05)  # a ramp, not a flood
    await asyncio.wait_for(ready.wait(), 120)
    out.write(json.dumps({"connected": connected, "t": time.time()}) + "\n")
    out.flush()
    await asyncio.gather(*tasks, return_exceptions=True)


def run_holders(host: str, port: int, token: str, n: int) -> int:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n + 256)), hard))
    asyncio.run(_hold(host, port, token, n, sys.stdout))
    return 0


# ============================================================== parent
class Lines:
    """A child process printing JSON lines, read in a thread."""

    def __init__(self, command: list[str], env: dict, log: Path):
        self._log = open(log, "a")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=self._log, text=True
        )
        self.lines: list[dict] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.lines.append(json.loads(raw))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


def tree_usage(pid: int) -> tuple[float, float]:
    """(RSS in MB, CPU seconds) of a process and its children (granian's workers)."""
    import psutil

    root = psutil.Process(pid)
    rss = cpu = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            rss += proc.memory_info().rss
            times = proc.cpu_times()
            cpu += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return rss / 2**20, cpu


def percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return statistics.median(ordered), p99, ordered[-1]


def wait_for(predicate, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtimes", type=int, default=50)
    parser.add_argument("--publishes", type=int, default=10)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30.0, help="config load per phase")
    parser.add_argument("--connections", type=int, default=32, help="wrk keep-alive connections")
    parser.add_argument("--keep", action="store_true", help="do not drop the bench database")
    parser.add_argument("--runtime", nargs=2, metavar=("CONSOLE", "TOKEN"), help=argparse.SUPPRESS)
    parser.add_argument("--holders", nargs=4, metavar=("HOST", "PORT", "TOKEN", "N"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args()
    if args.runtime:
        sys.exit(run_runtime(*args.runtime))
    if args.holders:
        host, port, token, n = args.holders
        sys.exit(run_holders(host, int(port), token, int(n)))

    database = BenchDatabase(BENCH_DB)
    started_at = datetime.now(UTC)
    database.create()
    django_setup(database.url, CACHE_PREFIX=CACHE_PREFIX, LOG_LEVEL="WARNING")
    from strategies.releases.services import release_publish
    from tests.bench.bench_config import wrk_phase
    from tests.factories import release_setup, runtime_token
    from tests.runtime_sim import ConsoleServer, stream_server

    world = release_setup()
    sg = world.envs["sg-test"]
    release_publish(version=world.profile[1], environment=sg, actor=world.ops)
    release_publish(version=world.strategy[2], environment=sg, actor=world.ops)
    token = runtime_token(sg, capabilities=("config:read", "traces:write"))
    work = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    # Two blocking threads per web server, as bench_config's servers: each thread keeps its
    # own PostgreSQL connection (CONN_MAX_AGE 60 s), and granian's default made ~50 a server
    # under 50 runtimes' heartbeats — on a PostgreSQL other work shares.
    env = {**os.environ, "STREAM_MAX_PER_TOKEN": "5000"}
    web_env = {**env, "GRANIAN_BLOCKING_THREADS": "2"}
    live = [2]

    def publish_next() -> int:
        target = 3 if live[0] == 2 else 2
        release_publish(version=world.strategy[target], environment=sg, actor=world.ops)
        live[0] = target
        return target

    servers = []
    children: list[Lines] = []
    try:
        instances = []
        for n in (1, 2):
            stream = stream_server(env, log_path=work / f"stream{n}.log").start()
            servers.append(stream)
            web = ConsoleServer(
                {**web_env, "STREAM_URL": f":{stream.port}"}, log_path=work / f"web{n}.log"
            ).start()
            servers.append(web)
            instances.append((web, stream))

        # --- 1. propagation to runtime processes with the SDK's defaults ----------------
        for i in range(args.runtimes):
            web = instances[i % 2][0]
            children.append(
                Lines(
                    [sys.executable, "-m", "tests.bench.bench_stream", "--runtime", web.url, token],
                    {k: v for k, v in env.items() if k != "DJANGO_SETTINGS_MODULE"},
                    work / f"runtime{i}.log",
                )
            )

        def all_streaming() -> bool:
            return all(
                any(line.get("transport") == "stream" for line in child.lines[-2:])
                for child in children
            )

        if not wait_for(all_streaming, 120, 0.5):
            sys.exit(f"not every runtime holds the stream (logs in {work})")
        delays: list[float] = []
        for _ in range(args.publishes):
            marks = [len(child.lines) for child in children]
            published = time.time()
            version = publish_next()

            def heard(version=version, marks=marks):
                return all(
                    any(line.get("version") == version for line in child.lines[mark:])
                    for child, mark in zip(children, marks, strict=True)
                )

            if not wait_for(heard, 40, 0.02):
                missed = [
                    (i, [x for x in child.lines[mark:] if "transport" in x][-1:])
                    for i, (child, mark) in enumerate(zip(children, marks, strict=True))
                    if not any(x.get("version") == version for x in child.lines[mark:])
                ]
                sys.exit(f"{len(missed)} runtimes never served v{version}: {missed[:5]} ({work})")
            for child, mark in zip(children, marks, strict=True):
                took = next(x for x in child.lines[mark:] if x.get("version") == version)
                delays.append(took["t"] - published)
            time.sleep(0.5)
        for child in children:
            child.stop()
        children.clear()
        prop = percentiles(delays)
        print(  # at once: a later part failing keeps this figure
            f"propagation, {args.runtimes} runtimes × {args.publishes} publishes: p50 "
            f"{prop[0] * 1000:.0f} ms · p99 {prop[1] * 1000:.0f} ms · max {prop[2] * 1000:.0f} ms",
            flush=True,
        )

        # --- 2. held streams: memory and CPU of the stream server -------------------
        web, stream = instances[0]
        time.sleep(2.0)
        idle_rss, cpu0 = tree_usage(stream.proc.pid)
        t0 = time.monotonic()
        time.sleep(5.0)
        idle_cpu = (tree_usage(stream.proc.pid)[1] - cpu0) / (time.monotonic() - t0)

        def load_phase() -> dict:
            auth = {"Authorization": f"Bearer {token}"}
            url = f"{web.url}/api/v1/runtime/config/{AGENT}"
            import urllib.request

            with urllib.request.urlopen(urllib.request.Request(url, headers=auth)) as resp:
                etag = resp.headers["ETag"]
            half = args.seconds / 2
            result = {
                "304": wrk_phase(url, {**auth, "If-None-Match": etag}, half, args.connections),
                "200": wrk_phase(url, auth, half, args.connections),
            }
            for figures in result.values():
                figures["rps"] = figures["n"] / figures["elapsed"]
            return result

        without_before = load_phase()
        ramp = time.time()
        holders = Lines(
            [sys.executable, "-m", "tests.bench.bench_stream", "--holders", "127.0.0.1",
             str(stream.port), token, str(args.streams)],
            env,
            work / "holders.log",
        )  # fmt: skip
        children.append(holders)
        if not wait_for(lambda: any("connected" in x for x in holders.lines), 180, 0.5):
            sys.exit(f"the {args.streams} streams did not all connect (log {work}/holders.log)")
        connect_s = next(x["t"] for x in holders.lines if "connected" in x)
        time.sleep(3.0)
        held_rss, cpu1 = tree_usage(stream.proc.pid)
        t1 = time.monotonic()
        time.sleep(20.0)  # includes a heartbeat round (15 s)
        held_cpu = (tree_usage(stream.proc.pid)[1] - cpu1) / (time.monotonic() - t1)
        mark = len(holders.lines)
        published = time.time()
        _, cpu2 = tree_usage(stream.proc.pid)
        publish_next()
        if not wait_for(
            lambda: sum(1 for x in holders.lines[mark:] if "event" in x) >= args.streams, 30, 0.05
        ):
            got = sum(1 for x in holders.lines[mark:] if "event" in x)
            sys.exit(f"only {got} of {args.streams} streams heard the publish")
        fan = percentiles([x["event"] - published for x in holders.lines[mark:] if "event" in x])
        fan_cpu = tree_usage(stream.proc.pid)[1] - cpu2
        with_streams = load_phase()
        holders_rss = tree_usage(stream.proc.pid)[0]
        holders.stop()
        children.remove(holders)
        time.sleep(3.0)
        without_after = load_phase()
        after_rss = tree_usage(stream.proc.pid)[0]
    finally:
        for child in children:
            child.stop()
        for server in servers:
            server.stop()
        if not args.keep:
            database.drop()

    load = os.getloadavg()
    print(f"\nconfig stream benchmark — {started_at:%Y-%m-%d %H:%M} UTC")
    print(
        f"machine: {platform.node()} · {os.cpu_count()} CPUs · {platform.machine()} · "
        f"Python {platform.python_version()} · load average {load[0]:.1f} / {load[1]:.1f} · "
        "two console instances (granian WSGI 1 worker + granian ASGI stream server each), "
        "one PostgreSQL and Redis"
    )
    print(
        f"\n1. publish → served by every one of {args.runtimes} runtime processes (SDK "
        f"defaults: stream, poll 30 s), half on each instance, {args.publishes} publishes "
        f"({len(delays)} samples): p50 {prop[0] * 1000:.0f} ms · p99 {prop[1] * 1000:.0f} ms "
        f"· max {prop[2] * 1000:.0f} ms → target p99 ≤ 1 s "
        f"{'met' if prop[1] <= 1.0 else 'MISSED'}"
    )
    print(
        f"\n2. {args.streams} held streams on one stream server (all connected "
        f"{connect_s - ramp:.1f} s after the first, a ramp of 50 every 50 ms):\n"
        f"   RSS idle {idle_rss:.0f} MB → held {held_rss:.0f} MB "
        f"({(held_rss - idle_rss) * 1024 / args.streams:.1f} KB a stream) → after the load "
        f"{holders_rss:.0f} MB → after they closed {after_rss:.0f} MB\n"
        f"   CPU idle {idle_cpu * 100:.1f} % of a core → holding {held_cpu * 100:.1f} % "
        f"(heartbeats every 15 s); one publish to all: {fan_cpu * 1000:.0f} ms CPU, "
        f"publish → every stream got it: p50 {fan[0] * 1000:.0f} ms · p99 "
        f"{fan[1] * 1000:.0f} ms · max {fan[2] * 1000:.0f} ms"
    )
    print(f"\n3. config reads (wrk, {args.connections} connections) on instance 1's web server:")
    print(f"   {'case':<12} {'without':>10} {'with':>10} {'again w/o':>10} {'with ÷ without':>15}")
    for case in ("304", "200"):
        a, b, c = without_before[case], with_streams[case], without_after[case]
        base_rps = (a["rps"] + c["rps"]) / 2
        base_p99 = (a["p99"] + c["p99"]) / 2
        print(
            f"   {case + ' req/s':<12} {a['rps']:>10.0f} {b['rps']:>10.0f} {c['rps']:>10.0f} "
            f"{b['rps'] / base_rps:>15.2f}"
        )
        print(
            f"   {case + ' p99 ms':<12} {a['p99']:>10.2f} {b['p99']:>10.2f} {c['p99']:>10.2f} "
            f"{b['p99'] / base_p99:>15.2f}"
        )


if __name__ == "__main__":
    main()
