"""Benchmark of the runtime config endpoint (docs/runtime-contract.md §1) against a bare Django JSON view.

    python -m tests.bench.bench_config [--seconds 10] [--clients 32] [--workers 1] [--threads 1]

Starts granian (WSGI) once with tests.bench.bench_wsgi, which serves the console and a bare
JSON view `/bench/bare` through the same middleware. Then, at N concurrent keep-alive
clients on loopback, runs three bounded phases: bare, config with a current If-None-Match
(304), config without it (200). Prints requests/s, p50/p99 and the ratios to bare.
Uses DATABASE_URL / REDIS_URL from the environment; loads the demo world there (idempotent).
Targets: 304 ≥ 0.8× bare, 200 ≥ 0.6× bare.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AGENT = "assistant_professional"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manage(*args: str, env) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if result.returncode:
        sys.exit(f"manage.py {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout


async def one_request(reader, writer, request: bytes) -> tuple[int, bytes]:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
    body = await reader.readexactly(length) if length else b""
    return status, head + body


async def client(port, request, expected, stop_at, latencies, errors):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            status, _ = await one_request(reader, writer, request)
            latencies.append(time.perf_counter() - started)
            if status != expected:
                errors.append(status)
    finally:
        writer.close()


async def phase(port, request, expected, seconds, clients):
    latencies: list[float] = []
    errors: list[int] = []
    started = time.perf_counter()
    stop_at = started + seconds
    await asyncio.gather(
        *(client(port, request, expected, stop_at, latencies, errors) for _ in range(clients))
    )
    elapsed = time.perf_counter() - started
    if errors:
        sys.exit(f"unexpected statuses: {sorted(set(errors))} (expected {expected})")
    return {"latencies": latencies, "elapsed": elapsed}


def merge(parts: list[dict]) -> dict:
    latencies = sorted(x for p in parts for x in p["latencies"])
    return {
        "rps": len(latencies) / sum(p["elapsed"] for p in parts),
        "p50": statistics.median(latencies) * 1000,
        "p99": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "n": len(latencies),
    }


def http_get(path: str, headers: dict[str, str]) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: keep-alive"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="per case, all rounds")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="granian blocking threads")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per case")
    args = parser.parse_args()

    env = dict(os.environ, DEBUG="false", LOG_LEVEL="WARNING", CONSOLE_ENV="development")
    manage("migrate", "-v0", env=env)
    manage("load_demo", "--quiet-logins", env=env)
    secret = manage(
        "runtime_token", "create", "--environment", "prod", "--name", "bench", env=env
    ).strip()

    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable, "-m", "granian", "--interface", "wsgi",
            "--host", "127.0.0.1", "--port", str(port),
            "--workers", str(args.workers), "--blocking-threads", str(args.threads),
            "--no-ws", "--log-level", "warning",
            "tests.bench.bench_wsgi:application",
        ],
        cwd=ROOT,
        env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    sys.exit("granian did not start")
                time.sleep(0.2)

        auth = {"Authorization": f"Bearer {secret}"}
        config_path = f"/api/v1/runtime/config/{AGENT}"

        async def run_all():
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for path in ("/bench/bare", config_path):  # warm caches and the worker
                for _ in range(50):
                    await one_request(reader, writer, http_get(path, auth))
            _, response = await one_request(reader, writer, http_get(config_path, auth))
            writer.close()
            etag = next(
                line.split(b":", 1)[1].strip().decode()
                for line in response.split(b"\r\n")
                if line.lower().startswith(b"etag:")
            )
            cases = [
                ("bare Django JSON view", http_get("/bench/bare", {}), 200),
                ("config, If-None-Match current (304)", http_get(config_path, {**auth, "If-None-Match": etag}), 304),
                ("config, full body (200)", http_get(config_path, auth), 200),
            ]  # fmt: skip
            # Interleaved rounds, so load from elsewhere on the machine hits every case alike.
            totals: dict[str, list[dict]] = {label: [] for label, _, _ in cases}
            for _ in range(args.rounds):
                for label, request, expected in cases:
                    totals[label].append(
                        await phase(
                            port, request, expected, args.seconds / args.rounds, args.clients
                        )
                    )
            return [(label, merge(parts)) for label, parts in totals.items()], etag

        results, etag = asyncio.run(run_all())
    finally:
        server.terminate()
        server.wait(timeout=15)
        manage("runtime_token", "revoke", secret[:12], env=env)

    bare = results[0][1]["rps"]
    print(f"\nconfig endpoint benchmark — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(
        f"machine: {platform.node()} · {os.cpu_count()} CPUs · {platform.processor() or platform.machine()}"
        f" · Python {platform.python_version()} · granian workers={args.workers} "
        f"blocking-threads={args.threads} · {args.clients} clients · {args.seconds:.0f}s per case "
        f"in {args.rounds} interleaved rounds"
    )
    print(f"etag {etag}\n")
    print(f"{'case':<40} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'× bare':>7} {'requests':>9}")
    for label, r in results:
        print(
            f"{label:<40} {r['rps']:>9.0f} {r['p50']:>8.2f} {r['p99']:>8.2f} "
            f"{r['rps'] / bare:>7.2f} {r['n']:>9}"
        )
    ratio_304 = results[1][1]["rps"] / bare
    ratio_200 = results[2][1]["rps"] / bare
    print(
        f"\ntargets: 304 ≥ 0.80× bare → {ratio_304:.2f} {'met' if ratio_304 >= 0.8 else 'MISSED'}; "
        f"200 ≥ 0.60× bare → {ratio_200:.2f} {'met' if ratio_200 >= 0.6 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
