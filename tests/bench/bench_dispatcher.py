"""Where a config read's time goes inside the process: the dispatcher (`console.wsgi`) called
directly, against the raw callable of `bench_wsgi.py` measured in the same run.

    python -m tests.bench.bench_dispatcher [--calls 20000] [--repeats 40] [--profile]

No server and no network: each case calls the WSGI application `--calls` times with a
prepared environ (a prod token with `config:read`, the mirror warm) and keeps the best of
`--repeats` (the least disturbed by other load). `--profile` prints cProfile's top functions
for 200,000 answers of 200. Uses DATABASE_URL / REDIS_URL; loads the demo world there.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time

from tests.bench.bench_config import AGENT, CONFIG_PATH, manage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    os.environ.update(DEBUG="false", LOG_LEVEL="WARNING", CONSOLE_ENV="development")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    env = dict(os.environ)
    manage("migrate", "-v0", env=env)
    manage("load_demo", "--quiet-logins", env=env)
    secret = manage("runtime_token", "create", "--environment", "prod", "--name", "d", env=env)
    secret = secret.strip()
    try:
        run(secret, args)
    finally:
        manage("runtime_token", "revoke", secret[:12], env=env, check=False)


def run(secret: str, args) -> None:
    from console.wsgi import application
    from strategies.delivery.config import mirror

    mirror.get("warm-up")  # starts the listener
    deadline = time.monotonic() + 10
    while not mirror.healthy and time.monotonic() < deadline:
        time.sleep(0.01)
    environ = {
        "REQUEST_METHOD": "GET", "PATH_INFO": CONFIG_PATH, "SCRIPT_NAME": "",
        "QUERY_STRING": "", "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1", "HTTP_HOST": "127.0.0.1:8000",
        "REMOTE_ADDR": "127.0.0.1", "wsgi.input": io.BytesIO(b""), "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": "http", "HTTP_AUTHORIZATION": f"Bearer {secret}",
    }  # fmt: skip
    seen: dict = {}

    def start_response(status, headers, exc_info=None):
        seen["status"], seen["headers"] = status, headers

    for _ in range(5):  # Django fills Redis, then the mirror
        application(dict(environ), start_response)
    etag = dict(seen["headers"])["ETag"]
    fresh = dict(environ, HTTP_IF_NONE_MATCH=etag)
    # The ceiling, in-process: bench_wsgi's callable on the same token, ETag and body size.
    os.environ.update(BENCH_AUTHORIZATION=f"Bearer {secret}", BENCH_ETAG=etag)
    from tests.bench import bench_wsgi

    bench_wsgi.TOKENS = {f"Bearer {secret}": (etag, b"x" * 1192)}

    def best(app, env) -> float:
        fastest = float("inf")
        for _ in range(args.repeats):
            started = time.perf_counter()
            for _ in range(args.calls):
                app(env, start_response)
            fastest = min(fastest, (time.perf_counter() - started) / args.calls)
        return fastest * 1e6

    cases = [
        ("dispatcher, 200", application, environ),
        ("raw callable, 200", bench_wsgi.application, environ),
        ("dispatcher, 304", application, fresh),
        ("raw callable, 304", bench_wsgi.application, fresh),
    ]
    times = {}
    for label, app, env in cases:
        times[label] = best(app, env)
        assert seen["status"][:3] in ("200", "304"), seen["status"]
    print(f"\nconfig dispatcher in-process — {AGENT}, load average {os.getloadavg()[0]:.1f}")
    for label, _app, _env in cases:
        print(f"{label:<20} {times[label]:6.2f} µs per request")
    for code in ("200", "304"):
        ratio = times[f"dispatcher, {code}"] / times[f"raw callable, {code}"]
        print(f"{code}: the dispatcher costs {ratio:.1f}× the raw callable")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(lambda: [application(environ, start_response) for _ in range(200_000)])
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
