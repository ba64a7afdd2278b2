"""Start the console: migrate, load demo data, then web server, worker and beat, and (in demo
mode) the simulated demo traffic once the web server answers.

Stops them all on Ctrl-C. PORT (default 8000) and HOST (default 127.0.0.1) pick the address.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import embedded  # scripts/embedded.py, beside this file

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def manage(*args: str, capture: bool = False) -> str:
    result = subprocess.run(
        [PY, "manage.py", *args], cwd=ROOT, text=True, stdout=subprocess.PIPE if capture else None
    )
    if result.returncode != 0:
        sys.exit(result.returncode)
    return result.stdout or ""


def wait_for_web(url: str, procs: list, timeout: float = 60.0) -> bool:
    """Wait until the web server answers /healthz (False if it did not in time, or a process
    exited meanwhile)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and all(p.poll() is None for p in procs):
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:  # noqa: S310
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


def embedded_services() -> None:
    """Without DATABASE_URL / REDIS_URL, start the embedded engines and pass their URLs on."""
    if os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"):
        return
    try:
        if not os.environ.get("DATABASE_URL"):
            print("Starting the embedded PostgreSQL (data in .data/)…", flush=True)
            os.environ["DATABASE_URL"] = embedded.postgres_url()
        if not os.environ.get("REDIS_URL"):
            os.environ["REDIS_URL"] = embedded.redis_url()
    except embedded.EmbeddedServiceError as exc:
        sys.exit(f"cannot start the embedded services: {exc}")


def main() -> None:
    host = os.environ.get("HOST", "127.0.0.1")
    port = os.environ.get("PORT", "8000")
    (ROOT / ".data").mkdir(exist_ok=True)
    embedded_services()
    print("Preparing the database…", flush=True)
    manage("migrate", "--no-input", "-v", "0")
    demo_output = ""
    demo = os.environ.get("CONSOLE_ENV", "development") != "production"
    if demo:
        demo_output = manage("load_demo", capture=True)
    procs = [
        subprocess.Popen(
            [
                PY,
                "-m",
                "granian",
                "--interface",
                "wsgi",
                "--host",
                host,
                "--port",
                port,
                "--workers",
                os.environ.get("WEB_WORKERS", "2"),
                "console.wsgi:application",
            ],
            cwd=ROOT,
        ),
        subprocess.Popen(
            [
                PY,
                "-m",
                "celery",
                "-A",
                "console",
                "worker",
                "-l",
                "INFO",
                "--concurrency",
                os.environ.get("WORKER_CONCURRENCY", "2"),
            ],
            cwd=ROOT,
        ),
        subprocess.Popen([PY, "-m", "celery", "-A", "console", "beat", "-l", "INFO"], cwd=ROOT),
    ]
    local = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host  # noqa: S104
    console_url = f"http://{local}:{port}"
    # Optional: the console keeps running if the demo traffic stops.
    extras: list[subprocess.Popen] = []
    if wait_for_web(console_url, procs) and demo:
        extras.append(
            subprocess.Popen([PY, "manage.py", "demo_traffic", "--console", console_url], cwd=ROOT)
        )
    print("\n" + "=" * 64)
    print(f"Context Console is running at http://{host}:{port}/")
    if demo_output:
        print(demo_output.rstrip())
    if extras:
        print("Demo traffic: simulated runtimes send requests through the engine to every")
        print("environment (manage.py demo_traffic); publish or roll back to see traces change.")
    print("Press Ctrl-C to stop (web server, worker, beat and demo traffic).")
    print("=" * 64 + "\n", flush=True)

    def stop(*_):
        # The demo traffic first, so that it can flush its traces while the web server is up.
        for group in (extras, procs):
            for proc in group:
                if proc.poll() is None:
                    proc.terminate()
            for proc in group:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        sys.exit(0)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    while all(p.poll() is None for p in procs):
        time.sleep(1)
    print("A console process exited; stopping the others.", file=sys.stderr)
    stop()


if __name__ == "__main__":
    main()
