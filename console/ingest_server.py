"""Runtime ingest (trace batches, outcomes) apart from the config reads (issue 36, item 2).

Two WSGI wrappers around the same Django application:

- `IngestOnly` is the ingest server's application (`console.ingest_wsgi:application`, which
  `make run` serves on INGEST_PORT with INGEST_WORKERS processes of its own): it passes the
  ingest routes and /healthz to Django and answers everything else with a JSON 404 saying
  where it is served, so that a flood of batches there never takes a thread that answers a
  runtime's config read or an operator's page.
- `IngestBound` sits in front of the main web server (`console.wsgi:application`): a runtime
  that still posts its batches there (an SDK without `ingest_url`, an older deployment) gets
  at most INGEST_ON_WEB_CONCURRENCY ingest requests at a time per process; one more is
  answered at once with 503, Retry-After and the API's error shape (`ingest_busy`), which the
  SDK's reporter retries after the delay it says. The config reads keep their threads.

Like Sentry's relay and Langfuse's split of web and ingest workers: the write path scales (and
queues) on its own; the read path's latency does not depend on it (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import contextlib
import os
import threading
import urllib.parse
import urllib.request

import orjson
from django.conf import settings
from django.db.backends.signals import connection_created
from django.urls import reverse

from console.kernel.errors import NotFound, Unavailable, error_headers

# The runtime API's ingest routes (url names): what the ingest server serves.
INGEST_ROUTES = ("runtime-traces-ingest", "runtime-outcomes-report")
# Set in the ingest server's processes (console.ingest_wsgi) before Django is set up: /healthz
# says which server answered.
ROLE_ENV = "CONSOLE_SERVER_ROLE"


# The process's nice value once lower_priority ran (0: not lowered), whether it lowers threads
# at all (a nice value or CPUs), and per thread whether that thread was lowered.
_nice = 0
_lowering = False
_lowered = threading.local()


def ingest_paths() -> frozenset[str]:
    return frozenset(reverse(name) for name in INGEST_ROUTES)


def serves_ingest_only() -> bool:
    return os.environ.get(ROLE_ENV) == "ingest"


def ingest_url_seen_from(base_url: str) -> str:
    """settings.INGEST_URL as a client that reached this console at `base_url` reaches it.
    `:<port>` — this host, that port: what `make run` sets when it listens on every address,
    where no one address is right for every client — takes `base_url`'s scheme and host (as
    the SDK reads `X-Config-Stream`); an absolute URL is itself; "" when there is none."""
    where = settings.INGEST_URL
    if not (where.startswith(":") and where[1:].isdigit()):
        return where
    parts = urllib.parse.urlsplit(base_url)
    host = parts.hostname or "127.0.0.1"
    netloc = f"[{host}]" if ":" in host else host
    return f"{parts.scheme or 'http'}://{netloc}:{where[1:]}"


def _answer(start_response, error, headers: dict[str, str] | None = None) -> list[bytes]:
    body = orjson.dumps(error.as_payload())
    start_response(
        f"{error.status} {'Not Found' if error.status == 404 else 'Service Unavailable'}",
        [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            *error_headers(error).items(),
            *(headers or {}).items(),
        ],
    )
    return [body]


class IngestOnly:
    """The ingest server's application: the ingest routes and /healthz, nothing else."""

    def __init__(self, app):
        self.app = app
        self.paths = ingest_paths() | {reverse("healthz")}

    def __call__(self, environ, start_response):
        if _lowering and not getattr(_lowered, "done", False):
            _lower_thread(0)  # this thread
            _lowered.done = True
        if environ.get("PATH_INFO", "") in self.paths:
            return self.app(environ, start_response)
        refusal = NotFound(
            "This is the console's ingest server: it takes trace batches "
            f"({reverse('runtime-traces-ingest')}) and outcomes "
            f"({reverse('runtime-outcomes-report')}) only; everything else is served by the "
            "console's web server."
        )
        return _answer(start_response, refusal)


class IngestBound:
    """The main web server's bound on ingest requests: at most `limit` at a time in this
    process; one more gets 503 + Retry-After at once (never queued behind the others)."""

    def __init__(self, app, limit: int | None = None):
        self.app = app
        self.paths = ingest_paths()
        self.limit = settings.INGEST_ON_WEB_CONCURRENCY if limit is None else limit
        self.slots = threading.BoundedSemaphore(self.limit) if self.limit else None

    def __call__(self, environ, start_response):
        if (
            self.limit is None  # no ingest server apart: this server takes every batch
            or environ.get("REQUEST_METHOD") != "POST"
            or environ.get("PATH_INFO") not in self.paths
        ):
            return self.app(environ, start_response)
        if self.slots is None or not self.slots.acquire(blocking=False):
            return _answer(start_response, self.busy(_base_url(environ)))
        try:
            # Django's answers here are whole (JsonResponse): the slot is free once it returns.
            return self.app(environ, start_response)
        finally:
            self.slots.release()

    def busy(self, base_url: str = "") -> Unavailable:
        where = ingest_url_seen_from(base_url)
        refusal = Unavailable(
            f"This web server takes at most {self.limit} ingest request(s) at a time per "
            "process and is at that bound; retry after Retry-After"
            + (
                f", or send trace batches and outcomes to the ingest server at {where}"
                if where
                else ""
            )
            + " (docs/runtime-contract.md §3).",
            code="ingest_busy",
            extra={"ingest_url": where} if where else None,
        )
        refusal.retry_after_seconds = settings.INGEST_RETRY_AFTER_SECONDS
        return refusal


def health_section() -> dict:
    """/healthz's `ingest`: which server answered, where the ingest server is, whether it
    answers (its own /healthz, one second at most) and this web server's bound. Reported,
    never a failure: batches wait in the runtimes' spools while it is down."""
    if serves_ingest_only():
        return {"server": "ingest"}
    where = settings.INGEST_URL
    section = {
        "server": "web",
        "apart": bool(where),
        "url": where or None,
        "bound_on_web": settings.INGEST_ON_WEB_CONCURRENCY,
    }
    if where:
        section["answers"] = _answers(f"{ingest_url_seen_from(_this_machine())}/healthz")
    return section


def _this_machine() -> str:
    """Where a `:<port>` ingest server listens: on this machine, at the address `make run`
    gave its servers (HOST), loopback when that is every address."""
    host = os.environ.get("HOST", "").strip()
    if host in ("", "0.0.0.0", "::"):  # noqa: S104 - the wildcard named, not bound
        host = "127.0.0.1"
    return f"http://[{host}]" if ":" in host else f"http://{host}"


def _base_url(environ) -> str:
    """The scheme and host the client used (WSGI)."""
    host = environ.get("HTTP_HOST") or environ.get("SERVER_NAME", "")
    return f"{environ.get('wsgi.url_scheme', 'http')}://{host}"


def _answers(url: str) -> bool:

    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:  # noqa: S310 - configured URL
            return response.status == 200
    except OSError:
        return False


def _lower_thread(tid: int) -> None:
    """Run thread `tid` (0: the caller) at nice `_nice`, on INGEST_CPUS when set. Lowering
    one's own threads needs no privilege. Not SCHED_IDLE: it gained nothing measurable, and
    on busy cores a starved server was still exiting, its port held, when `make run` started
    again (docs/PERFORMANCE.md, issue 36)."""
    if _nice:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, tid, _nice)
    _pin(tid)


def _pin(pid: int) -> None:
    """Keep a thread (or a PostgreSQL backend) on INGEST_CPUS, when set."""
    if settings.INGEST_CPUS and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError, ValueError):
            os.sched_setaffinity(pid, settings.INGEST_CPUS)


def lower_priority() -> None:
    """In an ingest server's process: run at CPU priority INGEST_NICE (default 10), and on
    INGEST_CPUS when set, and ask the same of each PostgreSQL backend it opens, so that when a
    flood of batches saturates the cores, the web server's config reads (and PostgreSQL's
    backends serving them) are scheduled first (docs/PERFORMANCE.md, issue 36). Lowering
    one's own threads needs no privilege; a backend's works when the console runs as
    PostgreSQL's user, as root or with CAP_SYS_NICE (make run's embedded PostgreSQL; a shared
    server on the same machine), and is skipped otherwise — on another machine it does not
    matter."""
    global _nice, _lowering
    _nice = max(settings.INGEST_NICE, 0)
    _lowering = bool(_nice or settings.INGEST_CPUS)
    if not _lowering:
        return
    # Linux keeps a nice value and CPUs per thread: every thread there is now (granian's own
    # among them), and `IngestOnly` lowers each thread that serves a request later on its first.
    for task in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["0"]:
        _lower_thread(int(task))

    def lower_backend(sender, connection, **kwargs) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_backend_pid(), inet_server_addr() IS NULL OR "
                    "inet_server_addr() = inet_client_addr()"
                )
                pid, local = cursor.fetchone()
            if local:
                if _nice:
                    os.setpriority(os.PRIO_PROCESS, pid, _nice)
                _pin(pid)
        except Exception:  # noqa: BLE001 - a priority is a nicety, never a failure
            return

    connection_created.connect(lower_backend, weak=False)
