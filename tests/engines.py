"""How a process the tests start reaches the engines the test process uses.

The test database may be reached over TCP (`postgresql://u@host:port/db`), over a unix socket
named as the URL's host (`postgresql://u@%2Ftmp/db`), or through `?host=` (the embedded
PostgreSQL of scripts/embedded.py: Django's HOST is then empty and the socket directory sits
in OPTIONS). Every child (Celery worker, granian console, psycopg probe as another role) is
given the server, port and test database of this process from here, never a guessed
127.0.0.1:5432; its broker is this process's REDIS_URL, never a guessed 6379.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import quote, urlencode

# OPTIONS keys Django consumes itself; everything else in OPTIONS is a libpq parameter.
_DJANGO_ONLY_OPTIONS = {
    "assume_role",
    "context",
    "cursor_factory",
    "isolation_level",
    "pool",
    "prepare_threshold",
    "server_side_binding",
}


def embedded_mode() -> bool:
    """scripts/test.sh was asked for the embedded engines alone (CONSOLE_TEST_ENGINES)."""
    return os.environ.get("CONSOLE_TEST_ENGINES", "") == "embedded"


def _settings_dict() -> dict:
    from django.db import connection

    return connection.settings_dict


def pg_connect_kwargs(settings_dict: dict | None = None, **overrides) -> dict:
    """psycopg.connect() keywords for the database of `settings_dict` (default: the test
    database, once pytest-django set it up), as this process reaches it. `overrides` win,
    e.g. user=<a probe role>; a None override drops the key (password=None)."""
    db = settings_dict if settings_dict is not None else _settings_dict()
    kwargs = {
        key: value
        for key, value in (db.get("OPTIONS") or {}).items()
        if key not in _DJANGO_ONLY_OPTIONS and isinstance(value, str | int)
    }
    kwargs["dbname"] = db["NAME"]
    # Django's HOST/PORT/USER/PASSWORD win over OPTIONS, as in its get_connection_params().
    for key, param in (("USER", "user"), ("PASSWORD", "password"), ("HOST", "host")):
        if db.get(key):
            kwargs[param] = db[key]
    if db.get("PORT"):
        kwargs["port"] = int(db["PORT"])
    kwargs.update(overrides)
    return {key: value for key, value in kwargs.items() if value is not None}


def database_url(settings_dict: dict | None = None) -> str:
    """A DATABASE_URL naming the same server, port and database as pg_connect_kwargs():
    `postgresql://u@host:port/db` over TCP, `postgresql://u@/db?host=<dir>` for a socket (or
    no host at all: libpq's default socket)."""
    kwargs = pg_connect_kwargs(settings_dict)
    user = quote(str(kwargs.pop("user", "")), safe="")
    if "password" in kwargs:
        user = f"{user}:{quote(str(kwargs.pop('password')), safe='')}"
    name = quote(str(kwargs.pop("dbname")), safe="")
    host = str(kwargs.pop("host", ""))
    auth = f"{user}@" if user else ""
    if host and not host.startswith("/"):
        netloc = f"[{host}]" if ":" in host else host
        if "port" in kwargs:
            netloc = f"{netloc}:{kwargs.pop('port')}"
        query = urlencode(kwargs)
        return f"postgresql://{auth}{netloc}/{name}" + (f"?{query}" if query else "")
    query = urlencode({**({"host": host} if host else {}), **kwargs})
    return f"postgresql://{auth}/{name}" + (f"?{query}" if query else "")


def broker_url() -> str:
    """This process's REDIS_URL (its broker and cache), for a child's REDIS_URL."""
    from django.conf import settings

    return settings.REDIS_URL


def child_env(**extra: str) -> dict[str, str]:
    """os.environ with DATABASE_URL (the test database) and REDIS_URL of this process, plus
    `extra`: the environment of a console, worker or script the test starts."""
    return {**os.environ, "DATABASE_URL": database_url(), "REDIS_URL": broker_url(), **extra}


def console_env(**extra: str) -> dict[str, str]:
    """`child_env` for a console process (web, stream server) the test starts: its cache
    prefix too, DEBUG off and WARNING logs, as production runs it; plus `extra`."""
    from django.conf import settings

    return child_env(
        CACHE_PREFIX=settings.CACHES["default"]["KEY_PREFIX"],
        DEBUG="false",
        LOG_LEVEL="WARNING",
        **extra,
    )


def run_apart(coroutine):
    """asyncio.run(coroutine) on a thread of its own: the browser tests' Playwright (sync API)
    leaves an event loop running on the main thread, where asyncio.run() refuses to start."""
    import asyncio
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def machine_servers_in_use(settings_dict: dict, redis_url: str) -> list[str]:
    """What of the test process's engines is a TCP server rather than a unix socket; in
    embedded mode this must be empty (the embedded engines listen on sockets only)."""
    found = []
    host = str(pg_connect_kwargs(settings_dict).get("host", ""))
    if host and not host.startswith("/"):
        found.append(f"PostgreSQL over TCP ({host}:{settings_dict.get('PORT') or 'default port'})")
    if not redis_url.startswith(("redis+socket://", "unix://")):
        found.append(f"Redis over TCP ({redis_url})")
    return found


def _pg_dump_for(source: dict, *candidates: Path) -> str:
    """A pg_dump of the source server's major version (another major's output may not load:
    16's reads 15's column options wrongly), among `candidates` and the one on PATH."""
    import psycopg

    with psycopg.connect(**source) as conn:
        major = conn.info.server_version // 10000
    on_path = shutil.which("pg_dump")
    for pg_dump in [*(str(c / "pg_dump") for c in candidates), *([on_path] if on_path else [])]:
        version = subprocess.run([pg_dump, "--version"], capture_output=True, text=True)
        if version.returncode == 0 and version.stdout.split()[-1].split(".")[0] == str(major):
            return pg_dump
    raise RuntimeError(f"no pg_dump of PostgreSQL {major} (the test database's)")


@contextlib.contextmanager
def own_postgres(data_dir: Path, *, copy_of: dict | None = None):
    """A PostgreSQL server of the test's own (pgserver's, data in `data_dir`), holding a copy
    of the test database (schema and rows, by pg_dump) as `console`: for fault tests that
    stop it — never the machine's. Yields (server, its DATABASE_URL); `server.cleanup()`
    stops it (again at the end: a no-op)."""
    import pgserver
    from psycopg.conninfo import make_conninfo

    server = pgserver.get_server(data_dir, cleanup_mode="stop")
    try:
        server.psql("CREATE DATABASE console;")
        binaries = Path(pgserver.__file__).parent / "pginstall" / "bin"
        pg_dump = _pg_dump_for(pg_connect_kwargs(copy_of), binaries)
        dump = subprocess.run(
            [
                pg_dump,
                "--no-owner",
                "--no-privileges",
                make_conninfo(**pg_connect_kwargs(copy_of)),
            ],
            capture_output=True,
            check=True,
            timeout=120,
        )
        url = server.get_uri("console")
        loaded = subprocess.run(
            # the psql beside that pg_dump: it reads what its pg_dump writes (\\restrict)
            [Path(pg_dump).with_name("psql"), "-q", "-v", "ON_ERROR_STOP=1", url],
            input=dump.stdout,
            capture_output=True,
            timeout=120,
        )
        if loaded.returncode != 0:
            raise RuntimeError(f"the copy did not load: {loaded.stderr.decode()[-2000:]}")
        yield server, url
    finally:
        server.cleanup()


@contextlib.contextmanager
def own_standby(primary):
    """A hot standby of `primary` (a server of `own_postgres`): a base backup streamed from it
    (`pg_basebackup -R`, so the copy starts in recovery and follows the primary's WAL), started
    on a socket of its own. Yields (its DATABASE_URL, `sql(statement)` on it, `stop()`).

    Its data and socket sit in a short directory of their own under /tmp, not under pytest's
    tmp_path: pytest sets its base directory back to 0700 when another session starts (CI runs
    two), and the server's account (pgserver's, when we are root) must still reach them. The
    backup is taken and the server stopped by this process (root reaches any socket and may
    signal any process), the server runs as that account."""
    import signal
    import tempfile

    import pgserver
    import psycopg

    binaries = Path(pgserver.__file__).parent / "pginstall" / "bin"
    info = primary.get_postmaster_info()
    owner = primary.system_user  # None when we are not root: then we run it ourselves
    home = Path(tempfile.mkdtemp(prefix="sb-"))  # short: a socket path has ~100 bytes
    data_dir = home / "data"
    subprocess.run(
        [binaries / "pg_basebackup", "-D", str(data_dir), "-R", "-X", "stream", "-c", "fast",
         "-h", str(info.socket_dir), "-p", str(info.port), "-U", "postgres"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    data_dir.chmod(0o700)
    home.chmod(0o755)
    if owner is not None:
        for path in [home, *home.rglob("*")]:
            shutil.chown(path, owner, owner)
    subprocess.run(
        [binaries / "pg_ctl", "-D", str(data_dir), "-w", "-l", str(home / "standby.log"),
         "-o", f"-h '' -k {home} -p {info.port}", "start"],
        check=True, capture_output=True, timeout=60,
        **({"user": owner} if owner is not None else {}),
    )  # fmt: skip
    pid = int((data_dir / "postmaster.pid").read_text().split()[0])
    url = f"postgresql://postgres@/console?host={home}&port={info.port}"

    def sql(statement: str):
        with psycopg.connect(host=str(home), port=info.port, user="postgres",
                             dbname="console", autocommit=True) as conn:  # fmt: skip
            return conn.execute(statement).fetchall()

    def stop():
        """Stop it at once (SIGQUIT: PostgreSQL's immediate shutdown) and wait until it is gone."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGQUIT)
            for _ in range(200):
                os.kill(pid, 0)
                time.sleep(0.05)

    try:
        yield url, sql, stop
    finally:
        stop()
        shutil.rmtree(home, ignore_errors=True)
