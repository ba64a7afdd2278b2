"""Benchmark of the runtime config endpoint (docs/runtime-contract.md §1) against its ceiling.

    python -m tests.bench.bench_config [--seconds 48] [--connections 32] [--workers 2] [--rounds 8]

Servers, each granian (WSGI) with the same settings (`--workers`, `--blocking-threads`,
`--backpressure`):

- the console, `console.wsgi:application` — Django with the config dispatcher in front;
- the ceiling, a raw WSGI callable (`tests/bench/bench_wsgi.py`) doing the least a config read
  must do: a dict lookup of the token, a strong ETag/304 and the console's pre-rendered body;
- the same callable also sending the console's other headers (`--no-same-headers` skips it):
  the same bytes on the wire, so the gap to it is Python's work alone;
- the baseline of issue 11, a separate plain Django project (`tests/bench/bare_project`:
  startproject's settings and default middleware, one JSON view) — not the console's stack.

Load: wrk (`--connections` keep-alive connections, 2 threads, loopback only, bounded by
`--seconds` per case) when installed, else an asyncio client in this script. Cases run in
interleaved rounds so load from elsewhere hits each alike, each console case right after its
ceiling. Prints requests/s, p50/p99 and the ratios. Targets: issue 21 — both config paths
≥ 0.8× the ceiling's requests/s with a p99 ≤ 1.5× the ceiling's; issue 11 — ≥ 2× the bare
view's requests/s with a p99 no worse than the bare view's. Uses DATABASE_URL / REDIS_URL from
the environment; loads the demo world there (idempotent).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
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


def manage(*args: str, env, check: bool = True) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if result.returncode:
        message = f"manage.py {' '.join(args)} failed:\n{result.stderr}"
        if check:
            sys.exit(message)
        print(message, file=sys.stderr)
    return result.stdout


class Server:
    """granian serving one WSGI application on a free loopback port."""

    def __init__(self, app: str, env: dict, args, cwd: Path = ROOT):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "granian", "--interface", "wsgi",
                "--host", "127.0.0.1", "--port", str(self.port),
                "--workers", str(args.workers),
                *(["--blocking-threads", str(args.threads)] if args.threads else []),
                "--no-ws", "--log-level", "warning",
                *(["--backpressure", str(args.backpressure)] if args.backpressure else []),
                *args.granian,
                app,
            ],
            cwd=cwd,
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
    """(status, headers: case-insensitive, as granian sends them in lower case, body)."""
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


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
        "rpss": [r["n"] / r["elapsed"] for r in rounds],
        "n": sum(r["n"] for r in rounds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=48.0, help="per case, all rounds")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2, help="granian workers, every server")
    parser.add_argument(
        "--threads", type=int, default=1, help="granian blocking threads (0: its default)"
    )
    parser.add_argument("--backpressure", type=int, default=0, help="granian's (0: its default)")
    parser.add_argument(
        "--granian", action="append", default=[], help="one more granian option, every server"
    )
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds per case")
    parser.add_argument("--loader", choices=["auto", "wrk", "python"], default="auto")
    parser.add_argument("--no-bare", action="store_true", help="skip the bare Django view")
    parser.add_argument(
        "--compare-with",
        type=Path,
        help="a checkout of another commit (git archive C | tar -x -C DIR): its console is "
        "measured too, in the same rounds",
    )
    parser.add_argument(
        "--no-same-headers", action="store_true", help="skip the ceiling with the same headers"
    )
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
    servers = {"console": Server("console.wsgi:application", env, args)}
    if args.compare_with:
        servers["other"] = Server("console.wsgi:application", env, args, cwd=args.compare_with)
    if not args.no_bare:
        servers["bare"] = Server("tests.bench.bare_project.wsgi:application", bare_env, args)
    body_file = tempfile.NamedTemporaryFile(suffix=".json", delete=False)  # noqa: SIM115
    try:
        servers["console"].wait()
        auth = {"Authorization": f"Bearer {secret}"}
        config_url = servers["console"].url(CONFIG_PATH)
        # Warm every worker: Django fills Redis, then each process's mirror.
        phase(config_url, auth, 2.0, args.connections)
        if args.compare_with:
            servers["other"].wait()
            other_url = servers["other"].url(CONFIG_PATH)
            phase(other_url, auth, 2.0, args.connections)
        status, headers, body = fetch(config_url, auth)
        if status != 200:
            sys.exit(f"{config_url} answered {status}: {headers}")
        etag = headers["ETag"]
        # The ceiling serves the console's token, ETag and body (and, in the second one, the
        # console's other headers, as Django names them).
        body_file.write(body)
        body_file.close()
        extra = _console_headers(headers)
        ceiling_env = dict(
            bare_env,
            BENCH_AUTHORIZATION=auth["Authorization"],
            BENCH_ETAG=etag,
            BENCH_BODY_FILE=body_file.name,
            BENCH_EXTRA_HEADERS=json.dumps(extra),
        )
        servers["ceiling"] = Server("tests.bench.bench_wsgi:application", ceiling_env, args)
        if not args.no_same_headers:
            servers["same"] = Server(
                "tests.bench.bench_wsgi:application",
                dict(ceiling_env, BENCH_HEADERS="console"),
                args,
            )
        for server in servers.values():
            server.wait()
        if not args.no_bare:
            phase(servers["bare"].url("/bare"), {}, 1.0, args.connections)
        ceiling_url = servers["ceiling"].url(CONFIG_PATH)
        fresh = {**auth, "If-None-Match": etag}
        cases = [
            ("raw WSGI ceiling, 304", ceiling_url, fresh, 304, None),
            ("config, If-None-Match current (304)", config_url, fresh, 304, "raw WSGI ceiling, 304"),
            ("raw WSGI ceiling, 200", ceiling_url, auth, 200, None),
            ("config, full body (200)", config_url, auth, 200, "raw WSGI ceiling, 200"),
        ]  # fmt: skip
        if args.compare_with:
            cases[2:2] = [(f"{args.compare_with.name}, 304", other_url, fresh, 304, cases[0][0])]
            cases += [(f"{args.compare_with.name}, 200", other_url, auth, 200, cases[3][0])]
        if not args.no_same_headers:
            same_url = servers["same"].url(CONFIG_PATH)
            cases += [
                ("ceiling + console's headers, 304", same_url, fresh, 304, None),
                ("ceiling + console's headers, 200", same_url, auth, 200, None),
            ]
        if not args.no_bare:
            cases.insert(
                0,
                (
                    "bare Django view (separate project)",
                    servers["bare"].url("/bare"),
                    {},
                    200,
                    None,
                ),
            )
        for label, url, case_headers, expected, _ in cases:
            got = fetch(url, case_headers)[0]
            if got != expected:
                sys.exit(f"{label}: {url} answered {got}, expected {expected}")
        if fetch(ceiling_url, auth)[2] != body:
            sys.exit("the ceiling does not serve the console's body")
        rounds: dict[str, list[dict]] = {label: [] for label, *_ in cases}
        for _ in range(args.rounds):
            for label, url, case_headers, _expected, _ in cases:
                seconds = args.seconds / args.rounds
                rounds[label].append(phase(url, case_headers, seconds, args.connections))
        for label, url, case_headers, expected, _ in cases:  # still the same answers after load
            if fetch(url, case_headers)[0] != expected:
                sys.exit(f"{label}: the answer changed during the run")
    finally:
        for server in servers.values():
            server.stop()
        os.unlink(body_file.name)
        manage("runtime_token", "revoke", secret[:12], env=env, check=False)  # results first

    results = {label: merge(parts) for label, parts in rounds.items()}
    load = os.getloadavg()
    print(f"\nconfig endpoint benchmark — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(
        f"machine: {platform.node()} · {os.cpu_count()} CPUs · {platform.machine()} · "
        f"Python {platform.python_version()} · load average {load[0]:.1f} / {load[1]:.1f} · "
        f"granian workers={args.workers} blocking-threads={args.threads or 'default'}"
        f"{f' backpressure={args.backpressure}' if args.backpressure else ''}"
        f"{' ' + ' '.join(args.granian) if args.granian else ''} · {loader}, "
        f"{args.connections} connections · {args.seconds:.0f} s per case in {args.rounds} "
        f"interleaved rounds · body {len(body)} bytes"
    )
    print(f"etag {etag}\n")
    bare = results.get("bare Django view (separate project)")
    print(
        f"{'case':<38} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'× ceil':>7} {'p99 × ceil':>10}"
        f" {'× bare':>7} {'requests':>9}   p99 per round"
    )
    for label, _url, _h, _e, ceiling in cases:
        r = results[label]
        c = results[ceiling] if ceiling else None
        to_ceiling = f"{r['rps'] / c['rps']:.2f}" if c else ""
        p99_to_ceiling = f"{r['p99'] / c['p99']:.2f}" if c else ""
        to_bare = f"{r['rps'] / bare['rps']:.2f}" if bare else ""
        print(
            f"{label:<38} {r['rps']:>9.0f} {r['p50']:>8.2f} {r['p99']:>8.2f} {to_ceiling:>7} "
            f"{p99_to_ceiling:>10} {to_bare:>7} {r['n']:>9}   "
            + " ".join(f"{p:.2f}" for p in r["p99s"])
        )
    verdicts = []
    for label, _url, _h, _e, ceiling in cases:
        if ceiling is None:
            continue
        r, c = results[label], results[ceiling]
        ratio, p99_ratio = r["rps"] / c["rps"], r["p99"] / c["p99"]
        ok = ratio >= 0.8 and p99_ratio <= 1.5
        verdicts.append(ok)
        line = (
            f"{label}: {ratio:.2f}× the ceiling (target ≥ 0.8×), p99 {p99_ratio:.2f}× the "
            f"ceiling's (target ≤ 1.5×) → {'met' if ok else 'MISSED'}"
        )
        # Each round's phase against its ceiling's, run just before: load from elsewhere comes
        # in bursts, and a burst hits a pair alike more often than a whole run's rounds.
        paired_rps = statistics.median(a / b for a, b in zip(r["rpss"], c["rpss"], strict=True))
        paired_p99 = statistics.median(a / b for a, b in zip(r["p99s"], c["p99s"], strict=True))
        line += f" (round by round, median: {paired_rps:.2f}×, p99 {paired_p99:.2f}×)"
        if bare:
            bare_ok = r["rps"] >= 2 * bare["rps"] and r["p99"] <= bare["p99"]
            line += f"; {r['rps'] / bare['rps']:.2f}× the bare view (≥ 2×, p99 ≤ bare: {'met' if bare_ok else 'MISSED'})"
        print(line)
    sys.exit(0 if all(verdicts) else 1)


def _console_headers(headers) -> list[tuple[str, str]]:
    """The console's response headers other than the ceiling's own and X-Request-ID (the
    ceiling makes its own), in Django's spelling (granian sends them in lower case); not the
    server's (Server, Date, Connection: close — urllib's request asked for it)."""
    spelled = {
        "cache-control": "Cache-Control",
        "x-frame-options": "X-Frame-Options",
        "vary": "Vary",
        "x-content-type-options": "X-Content-Type-Options",
        "referrer-policy": "Referrer-Policy",
        "cross-origin-opener-policy": "Cross-Origin-Opener-Policy",
        "strict-transport-security": "Strict-Transport-Security",
        "x-config-stream": "X-Config-Stream",
    }
    return [
        (spelled[name.lower()], value) for name, value in headers.items() if name.lower() in spelled
    ]


if __name__ == "__main__":
    main()
