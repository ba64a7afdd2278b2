"""Ingest apart from config reads, and faster ingest (issue 36, items 2 and 3). A script:

    python -m tests.bench.bench_ingest_apart [--traces 16000] [--rounds 4] [--seconds 20]

Needs bc039d9 (the commit the issue measured) checked out beside this one:

    git worktree add /work/h-c-old bc039d9      # or BENCH_OLD_CHECKOUT=<dir>

In ONE run, on the server of DATABASE_URL (two databases of its own, each migrated by its
checkout, dropped at the end):

(a) traces/s over HTTP, side by side: bc039d9's web server (`console.wsgi`, granian 2 workers ×
    2 threads, as bench_traces serves it) and this checkout's ingest server
    (`console.ingest_wsgi`, as `make run` starts it: INGEST_WORKERS 2 × INGEST_THREADS 2, but at
    the web server's CPU priority, INGEST_NICE=0, like bc039d9's: the code's speed), each on
    its own database; 4 clients, batches of 500 traces × 50 candidates as the SDK's reporter
    writes them; interleaved rounds, alternating which goes first, so load from elsewhere hits
    both alike. Prints both rates and the ratio (target ≥ 1.5).
(b) config-read latency on this checkout's web server (`console.wsgi`, 2 workers ×
    web_threads(), as `make run`), paced reads from a process of its own (4 threads × 100/s):
    idle, then while 4 clients flood the ingest server (as `make run` starts it, INGEST_NICE
    10) with batches for as long, from a process at nice 10 (in production the runtimes are
    other machines; here they would take the web server's cores). Prints p50/p99
    of each and the p99 ratio (target ≤ 1.5). The load average is printed with both: the
    machine is shared.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import os
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.bench._database import ROOT, BenchDatabase, print_machine
from tests.bench.bench_config import Server as ConfigServer
from tests.bench.bench_config import free_port
from tests.bench.bench_traces import BATCH, CLIENTS, batch_bodies, ingest_over_http, payloads

OLD = Path(os.environ.get("BENCH_OLD_CHECKOUT", "/work/h-c-old"))
AGENT = "assistant_professional"
CONFIG_PATH = f"/api/v1/runtime/config/{AGENT}"
TRACES_PATH = "/api/v1/runtime/traces"
FLOOD_NICE = 10  # the load generator's CPU priority in (b): see flood_forever
# The core `make run` gives the ingest server (INGEST_CPUS); in (b) the load generator runs
# there too, as the runtimes run on other machines in production.
INGEST_CORE = str((os.cpu_count() or 1) - 1)

# Run by each checkout's own code on its own database: the agent, the environment and a token.
SETUP = """
import django; django.setup()
from strategies.catalog.models import Agent, Environment
from strategies.runtime.tokens import runtime_token_create
Agent.objects.create(key="assistant_professional", name="AP")
env = Environment.objects.create(key="sg-test", name="SG test", position=1)
_, secret = runtime_token_create(
    name="bench", environment=env, capabilities=["traces:write", "config:read"], all_agents=True
)
print(secret)
"""


def checkout_env(root: Path, url: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": url,
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "console.settings",
        # that checkout's SDK (the wire structs), whatever the virtualenv installed
        "PYTHONPATH": f"{root / 'sdk'}{os.pathsep}{root}",
    }


def prepare(root: Path, name: str) -> tuple[BenchDatabase, str]:
    """A fresh database migrated by `root`'s checkout, with an agent and a token (secret)."""
    database = BenchDatabase(name)
    database.drop()
    database.admin_sql(f'CREATE DATABASE "{name}"')
    env = checkout_env(root, database.url)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"],
        cwd=root,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    out = subprocess.run(
        [sys.executable, "-c", SETUP], cwd=root, env=env, check=True, capture_output=True, text=True
    )
    return database, out.stdout.strip().splitlines()[-1]


class Server:
    def __init__(self, root: Path, url: str, app: str, workers: int, threads: int, **extra):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "granian", "--interface", "wsgi", "--host", "127.0.0.1",
                "--port", str(self.port), "--workers", str(workers),
                "--blocking-threads", str(threads), "--log-level", "warning", app,
            ],
            cwd=root,
            env={**checkout_env(root, url), **extra},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(300):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/healthz")
                conn.getresponse().read()
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise SystemExit(f"{app} in {root} did not start")

    stop = ConfigServer.stop


def _headers(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}


# --- (b): config reads, in a process of their own ----------------------------------------------
def read_config(port: int, secret: str, seconds: float, out, threads: int = 4, rate: float = 100):
    """Paced config reads (`threads` × `rate` per second) for `seconds`; latencies (s) to `out`.
    Off the ingest server's core, like the load generator on it: the runtimes reading are
    other machines in production, and a reader the flood delays would time itself."""
    others = set(range(os.cpu_count() or 1)) - {int(INGEST_CORE)}
    if others:
        os.sched_setaffinity(0, others)
    latencies: list[float] = []
    failures = [0]

    def reader() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Authorization": f"Bearer {secret}"}
        interval = 1 / rate
        deadline = time.monotonic() + seconds
        due = time.monotonic()
        while (now := time.monotonic()) < deadline:
            if now < due:
                time.sleep(due - now)
            due += interval
            started = time.perf_counter()
            conn.request("GET", CONFIG_PATH, headers=headers)
            response = conn.getresponse()
            response.read()
            latencies.append(time.perf_counter() - started)
            if response.status != 200:
                failures[0] += 1

    workers = [threading.Thread(target=reader) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    out.put((latencies, failures[0]))


def config_phase(port: int, secret: str, seconds: float, flood=None) -> dict:
    """Config-read latencies for `seconds`, with `flood()` running meanwhile when given."""
    out = multiprocessing.get_context("fork").Queue()
    sampler = multiprocessing.get_context("fork").Process(
        target=read_config, args=(port, secret, seconds, out)
    )
    stop = multiprocessing.get_context("fork").Event()
    flooding = None
    if flood is not None:
        flooding = multiprocessing.get_context("fork").Process(target=flood, args=(stop,))
        flooding.start()
        time.sleep(2)  # the flood at full speed first
    load = os.getloadavg()[0]
    sampler.start()
    latencies, failures = out.get()
    sampler.join()
    stop.set()
    if flooding is not None:
        flooding.join()
    latencies.sort()
    if failures:
        raise SystemExit(f"{failures} config reads failed")
    return {
        "n": len(latencies),
        "p50": statistics.median(latencies) * 1000,
        "p99": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "load": load,
    }


def flood_forever(port: int, secret: str, template: list[bytes]):
    """A flood of batches: the template's bodies again and again, each time with new request
    ids (the prefix `r000` renamed), by 4 clients until stopped, in a process of its own at a
    low CPU priority and on the ingest server's core (the runtimes sending batches are other
    machines in production; here they would take the cores the web server answers on);
    counts traces sent."""
    sent = multiprocessing.get_context("fork").Value("q", 0)

    def flood(stop) -> None:
        os.nice(FLOOD_NICE)
        os.sched_setaffinity(0, {int(INGEST_CORE)})
        generation = [0]
        lock = threading.Lock()

        def client() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            while not stop.is_set():
                with lock:
                    generation[0] += 1
                    number = generation[0]
                body = template[number % len(template)].replace(
                    b'"request_id":"r000-', b'"request_id":"' + _prefix(number) + b"-"
                )
                conn.request("POST", TRACES_PATH, body=body, headers=_headers(secret))
                response = conn.getresponse()
                response.read()
                if response.status == 200:
                    with sent.get_lock():
                        sent.value += BATCH

        clients = [threading.Thread(target=client) for _ in range(CLIENTS)]
        for t in clients:
            t.start()
        for t in clients:
            t.join()

    return flood, sent


def _prefix(number: int) -> bytes:
    """Four characters, unique per flood batch (base 36, up to 1.6M batches)."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    for _ in range(4):
        number, rest = divmod(number, 36)
        out = digits[rest] + out
    return out.encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=16_000, help="per server, for (a)")
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0, help="per config phase, (b)")
    args = parser.parse_args()
    if not (OLD / "console" / "wsgi.py").exists():
        raise SystemExit(
            f"no checkout of bc039d9 at {OLD}: git worktree add {OLD} bc039d9 "
            "(or set BENCH_OLD_CHECKOUT)"
        )
    old_commit = subprocess.run(
        ["git", "-C", str(OLD), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print_machine(f"load average {os.getloadavg()[0]:.2f} at the start")
    print("   shared 2-core VM when run by the helpers: other benchmarks and tests may be running")
    # Overridable, so two checkouts can run the bench at once on one server.
    new_db, new_secret = prepare(ROOT, os.environ.get("BENCH_INGEST_NEW_DB", "bench_ingest_new"))
    old_db, old_secret = prepare(OLD, os.environ.get("BENCH_INGEST_OLD_DB", "bench_ingest_old"))
    servers: list[Server] = []
    try:
        start = (datetime.now(UTC) - timedelta(days=2)).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        new_bodies = batch_bodies(payloads(args.traces, args.candidates, "new", start), "sdk")
        old_bodies = batch_bodies(payloads(args.traces, args.candidates, "old", start), "sdk")
        # (a) measures the code's speed: the ingest server at the web server's CPU priority,
        # like bc039d9's (its INGEST_NICE matters only when something else wants the cores)
        ingest = Server(ROOT, new_db.url, "console.ingest_wsgi:application", 2, 2, INGEST_NICE="0")
        old = Server(OLD, old_db.url, "console.wsgi:application", 2, 2)
        servers += [ingest, old]
        print(
            f"\n(a) ingest over HTTP: {args.traces:,} traces × {args.candidates} candidates per "
            f"server, {CLIENTS} clients, batches of {BATCH}, {args.rounds} interleaved rounds"
        )
        spent = {"new": 0.0, "old": 0.0}
        for r in range(args.rounds):
            part = slice(
                r * len(new_bodies) // args.rounds, (r + 1) * len(new_bodies) // args.rounds
            )
            order = [("new", ingest, new_secret, new_bodies), ("old", old, old_secret, old_bodies)]
            if r % 2:
                order.reverse()
            for name, server, secret, bodies in order:
                elapsed, count = ingest_over_http(bodies[part], secret, server.port)
                spent[name] += elapsed
                print(
                    f"   round {r + 1} {name}: {count / elapsed:,.0f} traces/s "
                    f"(load {os.getloadavg()[0]:.2f})"
                )
        old.stop()
        servers.remove(old)
        old_rate, new_rate = args.traces / spent["old"], args.traces / spent["new"]
        print(f"   bc039d9 ({old_commit}) web server:  {old_rate:>7,.0f} traces/s")
        print(f"   this checkout's ingest server: {new_rate:>7,.0f} traces/s")
        print(f"   ratio: {new_rate / old_rate:.2f}× (target ≥ 1.5)")

        ingest.stop()
        servers.remove(ingest)
        # make run's: nice 10 and the last core (INGEST_CPUS)
        ingest = Server(
            ROOT, new_db.url, "console.ingest_wsgi:application", 2, 2, INGEST_CPUS=INGEST_CORE
        )
        servers.append(ingest)
        web = Server(
            ROOT, new_db.url, "console.wsgi:application", 2, min(8, 2 * (os.cpu_count() or 1) + 1)
        )
        servers.append(web)
        print(
            f"\n(b) config reads on the web server (4 threads × 100/s, {args.seconds:.0f} s), "
            "idle, then with 4 clients flooding the ingest server"
        )
        template = batch_bodies(payloads(8 * BATCH, args.candidates, "r000", start), "sdk")
        # warm both paths (the mirror, the connections) before measuring
        config_phase(web.port, new_secret, 2)
        idle = config_phase(web.port, new_secret, args.seconds)
        flood, sent = flood_forever(ingest.port, new_secret, template)
        started = time.perf_counter()
        busy = config_phase(web.port, new_secret, args.seconds, flood)
        flood_rate = sent.value / (time.perf_counter() - started)
        for label, r in (("idle", idle), ("under ingest", busy)):
            print(
                f"   {label:<13} p50 {r['p50']:6.2f} ms · p99 {r['p99']:6.2f} ms · "
                f"{r['n']:,} reads · load {r['load']:.2f}"
            )
        print(f"   ingest meanwhile: {flood_rate:,.0f} traces/s into the ingest server")
        print(f"   p99 under ingest ÷ idle: {busy['p99'] / idle['p99']:.2f}× (target ≤ 1.5)")
    finally:
        for server in servers:
            server.stop()
        new_db.drop()
        old_db.drop()


if __name__ == "__main__":
    main()
