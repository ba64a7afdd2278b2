"""Readiness checks for /healthz: the database and the broker, each with a short timeout;
and whether the background processes run: a worker on the console's queue, and the beat.

A web process is ready without a worker or the beat (it answers, work waits), so those two
do not make /healthz fail: the report says `degraded` and names them in `missing`, and
waiting work says why it waits (`work_waits_because`). The beat runs once per database: it
holds a PostgreSQL advisory lock for its life (`beat_lock_hold`), and a second one exits.

What failed and why (exception text, with hosts and ports) is for signed-in users and the
application log; anonymous callers (load balancers, probes) get the status of each check
only (`health_public`)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time

import redis
from django.conf import settings
from django.db import connection

from console.access.siem import health_summary
from console.ingest_server import health_section as ingest_health
from console.kernel.standby import health_section as standby_health

# The beat's session-level advisory lock: (the console's lock class "CCSB", 1 = beat).
BEAT_LOCK = (0x43435342, 1)
# A worker notes itself every WORKER_HEARTBEAT_SECONDS in a Redis hash per queue it consumes
# (worker name → unix time); one unheard for WORKER_UNHEARD_SECONDS counts as gone.
WORKER_HEARTBEAT_SECONDS = 10.0
WORKER_UNHEARD_SECONDS = 30.0
BEAT_WATCH_SECONDS = 10.0

logger = logging.getLogger(__name__)

_BEAT_LOCK_HOLDER = """
    SELECT l.pid, coalesce(a.client_addr::text, 'local'), a.application_name
    FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objid = %s AND l.objsubid = 2
      AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


def check_database() -> tuple[bool, str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return True, "ok"
    except Exception as exc:  # any failure is a failed check, reported by name
        return False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def check_broker() -> tuple[bool, str]:
    url = settings.CELERY_BROKER_URL.replace("redis+socket://", "unix://")
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        client.ping()
        return True, "ok"
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"


def _broker_client() -> redis.Redis:
    url = settings.CELERY_BROKER_URL.replace("redis+socket://", "unix://")
    return redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)


def _workers_key(queue: str) -> str:
    return f"console:workers:{queue}"


def check_worker() -> tuple[bool, str]:
    """Whether a worker consuming the queue this process sends to was heard lately."""
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    try:
        seen = _broker_client().hgetall(_workers_key(queue))
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"
    recent = time.time() - WORKER_UNHEARD_SECONDS
    alive = sorted(name.decode() for name, at in seen.items() if float(at) >= recent)
    if not alive:
        return False, f"no worker consumes the queue {queue!r}"
    return True, f"{len(alive)} worker(s) on {queue!r}: {', '.join(alive)}"


def check_beat() -> tuple[bool, str]:
    """Whether a beat holds its lock on this database (it does for its whole life)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute(_BEAT_LOCK_HOLDER, list(BEAT_LOCK))
            row = cursor.fetchone()
    except Exception as exc:
        return False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if row is None:
        return False, "no beat runs: periodic tasks are not sent"
    return True, f"beat on database backend {row[0]} ({row[1]})"


def work_waits_because() -> str | None:
    """Why queued work is not picked up, in words for its page and API; None when a worker
    consumes the queue."""
    ok, _ = check_worker()
    if ok:
        return None
    return (
        "No worker is running: queued work waits until one starts "
        f"(`celery -A console worker`, queue {settings.CELERY_TASK_DEFAULT_QUEUE!r})."
    )


def siem_health() -> dict:
    """The SIEM destinations' summary (console.access.siem), or unknown without a database."""
    try:
        return health_summary()
    except Exception as exc:  # noqa: BLE001 — the database check above says why
        return {"ok": None, "detail": f"{type(exc).__name__}"}


def health_report() -> tuple[bool, dict]:
    """`ok` is readiness (database and broker). The worker and the beat are reported too;
    without them the status is `degraded` and `missing` names them."""
    started = time.perf_counter()
    checks = {
        "database": check_database(),
        "broker": check_broker(),
        "worker": check_worker(),
        "beat": check_beat(),
    }
    failed = [name for name in ("database", "broker") if not checks[name][0]]
    missing = [name for name in ("worker", "beat") if not checks[name][0]]
    ok = not failed
    return ok, {
        "status": "unavailable" if failed else "degraded" if missing else "ok",
        "checks": {name: {"ok": good, "detail": detail} for name, (good, detail) in checks.items()},
        "failed": failed,
        "missing": missing,
        # The SIEM destinations (docs/siem.md): a paused one is loud here, not a failure.
        "siem": siem_health(),
        # The streaming standby (docs/scale-out.md): down or behind, its reads go to the
        # primary — reported, never a failure.
        "standby": standby_health(),
        # The ingest server (console.ingest_server): apart from this one, and whether it
        # answers — reported, never a failure (runtimes spool their batches meanwhile).
        "ingest": ingest_health(),
        "duration_ms": round((time.perf_counter() - started) * 1000, 1),
    }


# --- the background processes' side --------------------------------------------------------------
def worker_heartbeat_start(queues: list[str]) -> None:
    """In a worker's main process: note it in each queue's hash now and every
    WORKER_HEARTBEAT_SECONDS (a daemon thread; Redis errors are retried)."""
    name = f"{socket.gethostname()}:{os.getpid()}"

    def beat() -> None:
        while True:
            try:
                client = _broker_client()
                for queue in queues:
                    client.hset(_workers_key(queue), name, time.time())
            except Exception as exc:  # noqa: BLE001 - the broker comes back; keep noting
                logger.warning("worker heartbeat failed: %s", exc)
            time.sleep(WORKER_HEARTBEAT_SECONDS)

    threading.Thread(target=beat, name="worker-heartbeat", daemon=True).start()


def worker_heartbeat_stop(queues: list[str]) -> None:
    name = f"{socket.gethostname()}:{os.getpid()}"
    try:
        client = _broker_client()
        for queue in queues:
            client.hdel(_workers_key(queue), name)
    except Exception as exc:  # noqa: BLE001 - it ages out anyway
        logger.warning("worker heartbeat not removed: %s", exc)


def _beat_lock_take():
    """A new connection holding the beat's lock, or SystemExit naming who holds it."""
    raw = connection.get_new_connection(connection.get_connection_params())
    raw.autocommit = True
    with raw.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", list(BEAT_LOCK))
        (taken,) = cursor.fetchone()
        if taken:
            return raw
        cursor.execute(_BEAT_LOCK_HOLDER, list(BEAT_LOCK))
        holder = cursor.fetchone()
    raw.close()
    who = f"database backend {holder[0]}, client {holder[1]}" if holder else "just released"
    raise SystemExit(
        f"another beat already runs on this database ({who}): a second one would send every "
        "periodic task twice. Run exactly one beat (docs/scale-out.md)."
    )


def _connection_alive(raw) -> bool:
    try:
        with raw.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception as exc:  # noqa: BLE001 - the connection is gone, and the lock with it
        logger.warning("beat lock connection lost: %s", exc)
        return False


_beat_lock_held = False


def beat_lock_hold() -> None:
    """At the beat's start: take its lock for the process's life (a connection of its own),
    or exit. A thread checks the connection every BEAT_WATCH_SECONDS; when it was lost (a
    PostgreSQL restart) it takes the lock again, and if another beat took it meanwhile this
    one stops."""
    global _beat_lock_held
    if _beat_lock_held:
        return  # this process holds it already
    held = [_beat_lock_take()]
    _beat_lock_held = True

    def watch() -> None:
        while True:
            time.sleep(BEAT_WATCH_SECONDS)
            if _connection_alive(held[0]):
                continue
            try:
                held[0] = _beat_lock_take()
            except SystemExit as refused:
                logger.error("beat stopping: %s", refused)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            except Exception as exc:  # noqa: BLE001 - PostgreSQL not back yet: try again
                logger.warning("beat lock not taken again yet: %s", exc)

    threading.Thread(target=watch, name="beat-lock", daemon=True).start()


def health_public(report: dict) -> dict:
    """The report as an anonymous caller sees it: the same shape without any `detail` (the
    exception texts name hosts and ports). The details go to the application log instead."""
    for name, check in report["checks"].items():
        if not check["ok"]:
            # a missing worker or beat is not a failure of this process: noted, not warned
            level = logging.WARNING if name in report["failed"] else logging.INFO
            logger.log(level, "health check %s failed: %s", name, check.get("detail", ""))
    return {
        **report,
        "checks": {
            name: {key: value for key, value in check.items() if key != "detail"}
            for name, check in report["checks"].items()
        },
        # why the standby is not used may name its host: signed-in users only
        "standby": {key: value for key, value in report["standby"].items() if key != "reason"},
        # its address may name an internal host: signed-in users only
        "ingest": {key: value for key, value in report["ingest"].items() if key != "url"},
    }
