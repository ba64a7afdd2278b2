"""Benchmark of the runtime config endpoint (docs/runtime-contract.md §1) against a bare Django view.

    python -m tests.bench.bench_config [--seconds 48] [--connections 32] [--workers 2] [--rounds 8]

Three servers, each granian (WSGI) with the same settings (`--workers`, `--blocking-threads`):

- the console, `console.wsgi:application` — Django with the config dispatcher in front;
- the baseline, a separate plain Django project (`tests/bench/bare_project`: startproject's
  settings and default middleware, one JSON view) — not the console's stack;
- the ceiling, a raw WSGI callable (`tests/bench/bench_wsgi.py`), for reference.

Load: wrk (`--connections` keep-alive connections, 2 threads, loopback only, bounded by
`--seconds` per case) when installed, else an asyncio client in this script. Cases run in
interleaved rounds so load from elsewhere hits each alike: bare view; config with a current
If-None-Match (304); config without it (200). Prints requests/s, p50/p99 and the ratios to the
bare view. Target (issue 11): both config paths ≥ 2× the bare view's requests/s, with a p99 no
worse than the bare view's. Uses DATABASE_URL / REDIS_URL from the environment; loads the demo
world there (idempotent).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AGENT = "assistant_professional"
CONFIG_PATH = f"/api/v1/runtime/config/{AGENT}"


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


class Server:
    """granian serving one WSGI application on a free loopback port."""

    def __init__(self, app: str, env: dict, args):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "granian", "--interface", "wsgi",
                "--host", "127.0.0.1", "--port", str(self.port),
                "--workers", str(args.workers), "--blocking-threads", str(args.threads),
                "--no-ws", "--log-level", "warning",
                app,
            ],
            cwd=ROOT,
            env=env,
        )  # fmt: skip

    def wait(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    sys.exit(f"granian did not start on port {self.port}")
                time.sleep(0.2)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def fetch(url: str, headers: dict):
    """(status, headers: case-insensitive, as granian sends them in lower case)."""
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
            return response.status, response.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers


# --- load generators ---------------------------------------------------------------------------
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)([a-z]+)", text).groups()
    return float(number) * _UNITS[unit]


def wrk_phase(url: str, headers: dict, seconds: float, connections: int) -> dict:
    command = ["wrk", "-t2", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency"]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    out = subprocess.run(command + [url], capture_output=True, text=True, check=True).stdout
    if "Non-2xx or 3xx responses" in out:
        sys.exit(f"wrk saw error answers from {url}:\n{out}")
    match = re.search(r"(\d+) requests in ([\d.]+\w+),", out)
    count, duration = int(match.group(1)), _ms(match.group(2)) / 1000
    latency = {
        p: _ms(v) for p, v in re.findall(r"^\s+(50|99)%\s+([\d.]+\w+)$", out, flags=re.MULTILINE)
    }
    return {"n": count, "elapsed": duration, "p50": latency["50"], "p99": latency["99"]}


async def _one_request(reader, writer, request: bytes) -> int:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
    if length:
        await reader.readexactly(length)
    return int(head[9:12])


async def _client(port, request, stop_at, latencies, errors):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            status = await _one_request(reader, writer, request)
            latencies.append(time.perf_counter() - started)
            if status >= 400:
                errors.append(status)
    finally:
        writer.close()


def python_phase(url: str, headers: dict, seconds: float, connections: int) -> dict:
    """The fallback without wrk: asyncio keep-alive clients in this process (slower than wrk:
    the load generator then takes a larger share of the CPUs, for every case alike)."""
    port = int(url.split(":")[2].split("/")[0])
    path = "/" + url.split("/", 3)[3]
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: keep-alive"]
    request = ("\r\n".join(lines + [f"{k}: {v}" for k, v in headers.items()]) + "\r\n\r\n").encode()
    latencies: list[float] = []
    errors: list[int] = []

    async def run():
        stop_at = time.perf_counter() + seconds
        await asyncio.gather(
            *(_client(port, request, stop_at, latencies, errors) for _ in range(connections))
        )

    started = time.perf_counter()
    asyncio.run(run())
    elapsed = time.perf_counter() - started
    if errors:
        sys.exit(f"error answers from {url}: {sorted(set(errors))}")
    latencies.sort()
    return {
        "n": len(latencies),
        "elapsed": elapsed,
        "p50": statistics.median(latencies) * 1000,
        "p99": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


def merge(rounds: list[dict]) -> dict:
    """req/s over all rounds; p50 and p99 as the median of the rounds' (a percentile of
    wrk's cannot be merged exactly; the median is robust to one round hit by other load)."""
    return {
        "rps": sum(r["n"] for r in rounds) / sum(r["elapsed"] for r in rounds),
        "p50": statistics.median(r["p50"] for r in rounds),
        "p99": statistics.median(r["p99"] for r in rounds),
        "p99s": [r["p99"] for r in rounds],
        "n": sum(r["n"] for r in rounds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=48.0, help="per case, all rounds")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2, help="granian workers, every server")
    parser.add_argument("--threads", type=int, default=1, help="granian blocking threads")
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds per case")
    parser.add_argument("--loader", choices=["auto", "wrk", "python"], default="auto")
    args = parser.parse_args()
    loader = args.loader
    if loader == "auto":
        loader = "wrk" if shutil.which("wrk") else "python"
    phase = wrk_phase if loader == "wrk" else python_phase

    env = dict(os.environ, DEBUG="false", LOG_LEVEL="WARNING", CONSOLE_ENV="development")
    manage("migrate", "-v0", env=env)
    manage("load_demo", "--quiet-logins", env=env)
    secret = manage(
        "runtime_token", "create", "--environment", "prod", "--name", "bench", env=env
    ).strip()
    bare_env = {k: v for k, v in env.items() if k != "DJANGO_SETTINGS_MODULE"}
    bare_env["DJANGO_SETTINGS_MODULE"] = "tests.bench.bare_project.settings"
    servers = {
        "console": Server("console.wsgi:application", env, args),
        "bare": Server("tests.bench.bare_project.wsgi:application", bare_env, args),
        "ceiling": Server("tests.bench.bench_wsgi:application", bare_env, args),
    }
    try:
        for server in servers.values():
            server.wait()
        auth = {"Authorization": f"Bearer {secret}"}
        config_url = servers["console"].url(CONFIG_PATH)
        # Warm every worker: Django fills Redis, then each process's mirror.
        phase(config_url, auth, 2.0, args.connections)
        phase(servers["bare"].url("/bare"), {}, 1.0, args.connections)
        status, headers = fetch(config_url, auth)
        if status != 200:
            sys.exit(f"{config_url} answered {status}: {headers}")
        etag = headers["ETag"]
        cases = [
            ("bare Django view (separate project)", servers["bare"].url("/bare"), {}, 200),
            ("config, If-None-Match current (304)", config_url, {**auth, "If-None-Match": etag}, 304),
            ("config, full body (200)", config_url, auth, 200),
            ("raw WSGI callable (ceiling)", servers["ceiling"].url("/"), {}, 200),
        ]  # fmt: skip
        for label, url, case_headers, expected in cases:
            got = fetch(url, case_headers)[0]
            if got != expected:
                sys.exit(f"{label}: {url} answered {got}, expected {expected}")
        rounds: dict[str, list[dict]] = {label: [] for label, *_ in cases}
        for _ in range(args.rounds):
            for label, url, case_headers, _expected in cases:
                seconds = args.seconds / args.rounds
                rounds[label].append(phase(url, case_headers, seconds, args.connections))
        for label, url, case_headers, expected in cases:  # still the same answers after load
            if fetch(url, case_headers)[0] != expected:
                sys.exit(f"{label}: the answer changed during the run")
    finally:
        for server in servers.values():
            server.stop()
        manage("runtime_token", "revoke", secret[:12], env=env)

    results = [(label, merge(parts)) for label, parts in rounds.items()]
    bare = results[0][1]
    load = os.getloadavg()
    print(f"\nconfig endpoint benchmark — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(
        f"machine: {platform.node()} · {os.cpu_count()} CPUs · {platform.machine()} · "
        f"Python {platform.python_version()} · load average {load[0]:.1f} / {load[1]:.1f} · "
        f"granian workers={args.workers} blocking-threads={args.threads} · {loader}, "
        f"{args.connections} connections · {args.seconds:.0f} s per case in {args.rounds} "
        "interleaved rounds"
    )
    print(f"etag {etag}\n")
    print(
        f"{'case':<38} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'× bare':>7} {'requests':>9}"
        "   p99 per round"
    )
    for label, r in results:
        print(
            f"{label:<38} {r['rps']:>9.0f} {r['p50']:>8.2f} {r['p99']:>8.2f} "
            f"{r['rps'] / bare['rps']:>7.2f} {r['n']:>9}   "
            + " ".join(f"{p:.2f}" for p in r["p99s"])
        )
    verdicts = []
    for label, r in results[1:3]:
        ratio = r["rps"] / bare["rps"]
        ok = ratio >= 2.0 and r["p99"] <= bare["p99"]
        verdicts.append(ok)
        print(
            f"{label}: {ratio:.2f}× the bare view (target ≥ 2×), p99 {r['p99']:.2f} ms vs "
            f"{bare['p99']:.2f} ms (target ≤) → {'met' if ok else 'MISSED'}"
        )
    sys.exit(0 if all(verdicts) else 1)


if __name__ == "__main__":
    main()
