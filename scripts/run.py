"""Start the console: migrate, load demo data, then web server, worker and beat.

Stops all three on Ctrl-C. PORT (default 8000) and HOST (default 127.0.0.1) pick the address.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
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
    if os.environ.get("CONSOLE_ENV", "development") != "production":
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
    time.sleep(2)
    print("\n" + "=" * 64)
    print(f"Context Console is running at http://{host}:{port}/")
    if demo_output:
        print(demo_output.rstrip())
    print("Press Ctrl-C to stop (web server, worker and beat).")
    print("=" * 64 + "\n", flush=True)

    def stop(*_):
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
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
