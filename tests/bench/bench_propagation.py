"""Benchmark of release propagation: how long a publish takes to reach a runtime. A script:

    python -m tests.bench.bench_propagation [--publishes 10] [--poll 1.0] [--keep]

Runs against its own database (bench_propagation, created, migrated and dropped here) on the
server of DATABASE_URL, and the Redis of REDIS_URL under its own cache prefix and Celery
queue. Starts a real console (granian serving console.wsgi), a Celery worker for the
webhooks, and the simulated runtime of tests/runtime_sim.py (the SDK's ConfigClient and
reporter in another process, a request every 20 ms). Then publishes strategy v3 and v2 of
after_sales_consultation to sg-test in turn, --publishes times per phase:

1. polling: the runtime polls every --poll seconds, no webhook. Publish → the first request
   the runtime answers with the new version. Target ≤ poll interval + 1 s.
2. webhook: the runtime polls every 300 s (so only the webhook explains a quick change) and
   the console's webhook points at it. Publish → webhook → the runtime answers with the new
   version. Target ≤ 1 s. The share after the delivery reached the runtime is shown too.

Between publishes it waits a random fraction of the poll interval, so the publishes fall at
every phase of the poll cycle. Prints median and max per phase against the target.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.bench._database import ROOT, BenchDatabase, django_setup, print_machine

BENCH_DB = "bench_propagation"
CACHE_PREFIX = "bench-propagation"
WEBHOOK_POLL = 300.0
INTERVAL = 0.02  # seconds between the runtime's requests: the resolution of the measurement


def start_worker(env: dict, queue: str, log_path: Path) -> subprocess.Popen:
    log = open(log_path, "w")  # noqa: SIM115 - the process keeps it; closed at exit
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "celery", "-A", "console", "worker", "--pool=solo",
            "--concurrency=1", "-Q", queue, "--without-gossip", "--without-mingle",
            "--without-heartbeat", "-l", "INFO",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    from tests.runtime_sim import wait_until

    ready = wait_until(lambda: " ready." in log_path.read_text(errors="replace"), 90, 0.2)
    if not ready or proc.poll() is not None:
        proc.kill()
        sys.exit(f"the Celery worker did not start (log {log_path})")
    return proc


def summary(label: str, delays: list[float], target: float) -> str:
    median, worst = statistics.median(delays), max(delays)
    verdict = "met" if worst <= target else "MISSED"
    return (
        f"{label:<34} {len(delays):>3} {median:>9.3f} {worst:>9.3f} {target:>8.1f}   "
        f"{verdict} (max ≤ target)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publishes", type=int, default=10, help="per phase")
    parser.add_argument("--poll", type=float, default=1.0, help="the runtime's poll interval")
    parser.add_argument("--keep", action="store_true", help="do not drop the bench database")
    args = parser.parse_args()

    database = BenchDatabase(BENCH_DB)
    print_machine(f"database {BENCH_DB}")
    database.create()
    queue = f"bench-propagation-{os.getpid()}"
    os.environ.update(
        CACHE_PREFIX=CACHE_PREFIX,
        CELERY_QUEUE=queue,
        DEBUG="false",
        LOG_LEVEL="WARNING",
        WEBHOOK_ALLOW_PRIVATE_TARGETS="true",  # the simulated runtime listens on 127.0.0.1
    )
    django_setup(database.url)
    from django.db import connection

    from strategies.delivery.webhooks import webhook_create
    from strategies.releases.services import release_publish
    from tests.factories import release_setup, runtime_token
    from tests.runtime_sim import ConsoleServer, RuntimeSim, free_port

    world = release_setup()
    sg = world.envs["sg-test"]
    release_publish(version=world.profile[1], environment=sg, actor=world.ops)
    release_publish(version=world.strategy[2], environment=sg, actor=world.ops)
    token = runtime_token(sg, capabilities=("config:read", "traces:write"))
    work = Path(tempfile.mkdtemp(prefix="bench-propagation-"))
    env = dict(os.environ)

    console = ConsoleServer(env, log_path=work / "console.log")
    worker = None
    sims: list[RuntimeSim] = []
    live = [2]  # the strategy version live in sg-test

    def publish_next():
        target = 3 if live[0] == 2 else 2
        release_publish(version=world.strategy[target], environment=sg, actor=world.ops)
        live[0] = target
        return target

    def run_phase(sim: RuntimeSim, *, with_webhook: bool):
        served, after_delivery = [], []
        rng = random.Random(7)
        for _ in range(args.publishes):
            time.sleep(rng.uniform(0, args.poll))  # any phase of the poll cycle
            lines_mark, events_mark = len(sim.lines), len(sim.events)
            started = time.time()
            version = publish_next()
            line = sim.wait_line(
                lambda line, v=version: line["strategy_version"] == v,
                args.poll + 30,
                start=lines_mark,
            )
            if line is None:
                sys.exit(f"the runtime never served v{version} (logs in {work})")
            served.append(line["t"] - started)
            if with_webhook:
                event = sim.wait_event("webhook", 5, start=events_mark)
                if event is None:
                    sys.exit(f"no webhook reached the runtime for v{version} (logs in {work})")
                after_delivery.append(line["t"] - event["t"])
        return served, after_delivery

    try:
        console.start()
        print(f"console: granian on {console.url}; runtime: tests/runtime_sim.py", flush=True)

        # 1. polling only
        sim = RuntimeSim(
            console_url=console.url,
            token=token,
            poll=args.poll,
            interval=INTERVAL,
            cache_dir=work / "sim-poll",
            log_path=work / "sim-poll.log",
        )
        sims.append(sim)
        sim.start()
        sim.wait_line(lambda line: line["strategy_version"] == 2, 30)
        polled, _ = run_phase(sim, with_webhook=False)
        sim.stop()

        # 2. webhook
        worker = start_worker(env, queue, work / "worker.log")
        port = free_port()
        _, secret = webhook_create(
            environment=sg, url=f"http://127.0.0.1:{port}/hooks/console", actor=world.admin
        )
        sim = RuntimeSim(
            console_url=console.url,
            token=token,
            poll=WEBHOOK_POLL,
            webhook_port=port,
            webhook_secret=secret,
            interval=INTERVAL,
            cache_dir=work / "sim-webhook",
            log_path=work / "sim-webhook.log",
        )
        sims.append(sim)
        sim.start()
        sim.wait_line(lambda line: line["strategy_version"] == live[0], 30)
        phase_started = time.time()
        pushed, after_delivery = run_phase(sim, with_webhook=True)
        if time.time() - phase_started > 0.9 * WEBHOOK_POLL:
            print("warning: the webhook phase outlasted the runtime's poll interval")
        sim.stop()
    finally:
        for sim in sims:
            sim.kill()
        if worker is not None:
            worker.terminate()
            try:
                worker.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.kill()
        console.stop()
        connection.close()
        if not args.keep:
            database.drop()

    print(
        f"\nrelease propagation: {args.publishes} publishes per phase, runtime requests every "
        f"{INTERVAL * 1000:.0f} ms, load average {os.getloadavg()[0]:.1f}\n"
    )
    print(f"{'phase (seconds)':<34} {'n':>3} {'median':>9} {'max':>9} {'target':>8}")
    print(summary(f"publish → polling client ({args.poll:g} s)", polled, args.poll + 1.0))
    print(summary("publish → webhook → client", pushed, 1.0))
    print(summary("  of which delivery → client", after_delivery, 1.0))


if __name__ == "__main__":
    main()
