"""A simulated agent runtime, and the helpers that start it and a console process.

As a script it is the runtime (plain Python, only ``context_runtime``, never Django)::

    python tests/runtime_sim.py --console http://127.0.0.1:8000 --token cc_rt_... \\
        --agent assistant_professional --poll 1.0 --webhook-port 8765 --webhook-secret whsec_... \\
        (--requests 100 | --forever) --interval 0.05 --cache-dir /tmp/sim

It keeps the agent's live configuration with a :class:`~context_runtime.client.ConfigClient`
(polling every ``--poll`` seconds, refreshed at once by the console's webhook, served on
127.0.0.1:``--webhook-port`` by ``make_wsgi_app`` under wsgiref), and every ``--interval``
seconds simulates one request of task ``after_sales_consultation``: the fixed candidates of the
seed (task_state:T9, order:A1042 r12, the P7-v2 policy bundle, the irrelevant old chat) go
through the selection engine with the strategy body being served, and the trace is reported
(request_id ``sim-<pid>-<n>``) with the snapshot's documents and resolution.

What a request serves is the SDK's decision, :func:`context_runtime.rollouts.serve` (never a
copy of it here): outside a rollout the live version, with the payload's shadow run beside
it; during a staged rollout (the payload's ``rollouts``) the version of the request's arm,
with the other arm's version as the shadow (``replay.shadow_run``, no provider asked again)
and the trace's ``rollout`` block. The unit is the task: request ``n`` belongs to task ``T9``,
or with ``--tasks N`` to task ``T<n mod N>`` (so a rollout splits the traffic).

stdout, one JSON object per line:

- ``{"event": "started", "pid", "webhook_url", "max_queue", "django_loaded", "t"}`` once the
  webhook receiver listens and the first configuration is there (or ``--wait-ready`` passed);
- per request ``{"request_id", "strategy_version", "status", "resolution", "etag", "queued",
  "health", "transport", "task", "arm", "rollout", "shadow_version", "t"}`` (``t`` is
  ``time.time()`` when the request was answered; ``health`` the config client's
  ``health()["state"]``, what a readiness probe reads; ``strategy_version`` the served
  version; ``arm`` ``new``/``old`` and ``rollout`` the rollout's id during a rollout, else
  null; ``shadow_version`` the version run as shadow, or null);
- per webhook delivery ``{"event": "webhook", "status", "outcome", "t"}``;
- after SIGTERM/SIGINT (or ``--requests`` done): the reporter is flushed and closed and
  ``{"event": "stopped", "requests", "flushed", "stats": reporter.stats(), "config": ...}``
  is the last line.

The parent-side helpers (:class:`ConsoleServer` runs granian with ``console.wsgi``,
:class:`RuntimeSim` runs this script and reads its lines) are used by
``tests/integration/test_runtime_loop.py`` and ``tests/bench/bench_propagation.py``; they
import nothing from Django either.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIM_PATH = Path(__file__).resolve()
AGENT = "assistant_professional"
STRATEGY_KEY = "after_sales_consultation"


# ================================================================= the simulated runtime


def _candidates():
    from context_runtime.engine import CandidateItem

    # The seed's request A1042 (docs/background.md § Consultation A1042; RUNTIME_API §3's
    # example trace).
    return (
        CandidateItem(id="task_state:T9", source="task_state", version="4", size=310),
        CandidateItem(id="order:A1042", source="order_delivery", version="r12", size=640),
        CandidateItem(
            id="P7-v2",
            source="applicable_policy",
            version="v2",
            size=2100,
            bundle="policy-P7",
        ),
        CandidateItem(
            id="old-chat",
            source="recent_dialogue",
            version="e-311",
            size=900,
            relevance=0.05,
            note="older product introduction",
        ),
    )


def _parse_args(argv):
    parser = argparse.ArgumentParser(description="A simulated agent runtime.")
    parser.add_argument("--console", required=True, help="the console's base URL")
    parser.add_argument("--token", required=True, help="runtime token (config:read, traces:write)")
    parser.add_argument("--agent", default=AGENT)
    parser.add_argument("--poll", type=float, default=1.0, help="config poll interval, seconds")
    parser.add_argument("--webhook-port", type=int, default=0, help="0: any free port")
    parser.add_argument("--webhook-secret", default=None)
    runs = parser.add_mutually_exclusive_group(required=True)
    runs.add_argument("--requests", type=int, help="simulate this many requests, then stop")
    runs.add_argument("--forever", action="store_true", help="until SIGTERM")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between requests")
    parser.add_argument(
        "--tasks",
        type=int,
        default=0,
        help="request n belongs to task T<n mod TASKS> (0: every request is task T9)",
    )
    parser.add_argument(
        "--fail-source",
        default=None,
        metavar="SOURCE:SHARE",
        help="the provider of SOURCE fails this share of requests (every request n with"
        " n*SHARE crossing a whole number): its items are not_fetched, in both versions",
    )
    parser.add_argument("--cache-dir", default=None, help="where the config client keeps its copy")
    parser.add_argument(
        "--spool-dir", default=None, help="the reporter's on-disk spool (survives restarts)"
    )
    parser.add_argument(
        "--backoff-max",
        type=float,
        default=2.0,
        help="cap of the config client's and the reporter's retry backoff (tests shorten it)",
    )
    parser.add_argument("--flush-interval", type=float, default=0.5, help="reporter batching")
    parser.add_argument("--max-queue", type=int, default=10_000, help="the reporter's bound")
    parser.add_argument("--flush-timeout", type=float, default=30.0, help="at shutdown")
    parser.add_argument("--wait-ready", type=float, default=30.0, help="for a first config")
    return parser.parse_args(argv)


def run_sim(argv=None) -> int:
    import logging
    from datetime import UTC, datetime
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    import msgspec
    from context_runtime import rollouts, wire
    from context_runtime.client import ConfigClient
    from context_runtime.engine import Strategy, select
    from context_runtime.reporter import TraceReporter
    from context_runtime.webhook import make_wsgi_app

    args = _parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    out_lock = threading.Lock()

    def emit(record: dict) -> None:
        line = json.dumps(record, default=str)
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    cache_path = Path(args.cache_dir) / "config.json" if args.cache_dir else None
    client = ConfigClient(
        args.console,
        args.token,
        args.agent,
        poll_interval=args.poll,
        webhook_secret=args.webhook_secret,
        cache_path=cache_path,
        backoff_initial=min(1.0, args.backoff_max),
        backoff_max=args.backoff_max,
    )
    reporter = TraceReporter(
        args.console,
        args.token,
        max_queue=args.max_queue,
        flush_interval=args.flush_interval,
        backoff_initial=min(0.25, args.backoff_max),
        backoff_max=args.backoff_max,
        close_at_exit=False,
        spool_dir=args.spool_dir,
    )

    def on_webhook(headers, body):
        received = time.time()
        result = client.handle_webhook(headers, body)
        emit({"event": "webhook", "status": result.status, "outcome": result.outcome,
              "t": received})  # fmt: skip
        return result

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format, *args):  # noqa: A002 - the base class's name
            logging.getLogger("runtime_sim.webhook").info(format, *args)

    server: WSGIServer = make_server(
        "127.0.0.1", args.webhook_port, make_wsgi_app(on_webhook), handler_class=QuietHandler
    )
    threading.Thread(target=server.serve_forever, name="webhook", daemon=True).start()

    client.start(wait=args.wait_ready)
    client.wait_ready(args.wait_ready)
    emit(
        {
            "event": "started",
            "pid": os.getpid(),
            "webhook_url": f"http://127.0.0.1:{server.server_address[1]}/hooks/console",
            "max_queue": args.max_queue,
            "django_loaded": "django" in sys.modules,
            "t": time.time(),
        }
    )

    candidates = _candidates()
    # (etag, version) → (Strategy, candidates of its sources): read once per configuration.
    strategies: dict = {}

    def read(etag, document):
        key = (etag, document.version)
        if key not in strategies:
            strategy = Strategy.from_body(document.body)
            # A runtime asks only the providers of the strategy's sources.
            fetched = tuple(c for c in candidates if c.source in strategy.sources)
            strategies[key] = (strategy, fetched)
        return strategies[key]

    failing, _, failing_share = (args.fail_source or "").partition(":")
    failing_share = float(failing_share or 0)

    def provider_failed(n: int) -> bool:
        """Spread evenly: request n fails when n*share crosses a whole number."""
        return bool(failing) and int(n * failing_share) != int((n - 1) * failing_share)

    def as_failed(items):
        return tuple(
            msgspec.structs.replace(c, outcome="not_fetched", note="provider timed out")
            if c.source == failing
            else c
            for c in items
        )

    principal = "shop-a/user-417"  # an internal reference, never a name
    model = wire.ModelInfo(name="model-x", adapter="adapter-x", context_window=128_000)
    sources = [
        wire.SourceRef(id="order:A1042", version="r12"),
        wire.SourceRef(id="P7", version="v2"),
    ]
    n = 0
    next_at = time.monotonic()
    while not stop.is_set() and (args.forever or n < args.requests):
        n += 1
        request_id = f"sim-{os.getpid()}-{n}"
        snap = client.snapshot()  # one consistent configuration for the whole request
        resolution = snap.resolution
        task = f"T{n % args.tasks}" if args.tasks > 0 else "T9"
        serving = rollouts.serve(
            snap, STRATEGY_KEY, request_id=request_id, task_id=task, principal=principal
        )
        document = serving.document
        try:
            fields: dict = {}
            if document is not None:
                strategy, fetched = read(snap.etag, document)
                if provider_failed(n):  # the shadow runs on these same candidates
                    fetched = as_failed(fetched)
                selection = select(strategy=strategy, candidates=fetched, context_window=128_000)
                fields = selection.trace_fields()
                try:  # a shadow that cannot run never costs the request
                    fields["shadow"] = serving.run_shadow(
                        selection, strategy_of=lambda key, doc, etag=snap.etag: read(etag, doc)[0]
                    )
                except Exception:
                    logging.getLogger("runtime_sim").exception("shadow of %s failed", request_id)
            else:  # no configuration at all: nothing can be selected
                fields = {"status": "missing_required_data"}
            trace = wire.Trace(
                request_id=request_id,
                agent=args.agent,
                occurred_at=datetime.now(UTC),
                documents=serving.documents(snap),
                strategy=STRATEGY_KEY,
                task=wire.Task(id=task, revision=4),
                rollout=serving.rollout,
                principal=principal,
                model=model,
                sources=sources,
                **fields,
            )
            queued = reporter.report(trace, resolution=resolution, strategy=document)
            emit(
                {
                    "request_id": request_id,
                    "strategy_version": document.version if document is not None else None,
                    "status": fields["status"],
                    "resolution": resolution.reason,
                    "etag": snap.etag,
                    "queued": queued,
                    "health": client.health()["state"],
                    "transport": client.transport,
                    "task": task,
                    "arm": serving.rollout.arm if serving.rollout is not None else None,
                    "rollout": serving.rollout.id if serving.rollout is not None else None,
                    "shadow_version": serving.shadow.version if serving.shadow else None,
                    "t": time.time(),
                }
            )
        except Exception as error:  # a runtime answers every request, whatever happens
            logging.getLogger("runtime_sim").exception("request %s failed", request_id)
            emit({"request_id": request_id, "strategy_version": None, "status": "error",
                  "resolution": resolution.reason, "error": repr(error), "t": time.time()})  # fmt: skip
        next_at += args.interval
        stop.wait(max(0.0, next_at - time.monotonic()))

    flushed = reporter.flush(timeout=args.flush_timeout)
    reporter.close(timeout=5.0)
    client.stop()
    server.shutdown()
    server.server_close()
    emit(
        {
            "event": "stopped",
            "requests": n,
            "flushed": flushed,
            "stats": reporter.stats(),
            "config": client.status(),
            "t": time.time(),
        }
    )
    return 0


# ================================================================= parent-side helpers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(condition: Callable[[], object], timeout: float, interval: float = 0.05):
    """The first truthy value of ``condition()`` within ``timeout`` seconds, else None."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval)


def publish_and_time(sims, publish: Callable[[], object], version: int, *, timeout=5.0):
    """Call ``publish`` and return, per runtime, the seconds until its first request served
    strategy ``version`` (AssertionError naming the runtime that never did)."""
    marks = [len(sim.lines) for sim in sims]
    published = time.time()
    publish()
    delays = []
    for sim, mark in zip(sims, marks, strict=True):
        line = sim.wait_line(lambda rec: rec["strategy_version"] == version, timeout, start=mark)
        assert line is not None, f"runtime {sim.log_path} never served v{version}"
        delays.append(line["t"] - published)
    return delays


def _stop_process(proc: subprocess.Popen | None, timeout: float = 15.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        # the whole group when it leads one: a granian worker must not outlive its parent
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, signal.SIGKILL)
        proc.kill()
        proc.wait(timeout=5)


def runtime_call(url: str, token: str, method: str = "GET", body: dict | None = None):
    """(status, headers, body bytes) of one runtime request to a console process."""
    request = urllib.request.Request(
        url,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:  # noqa: S310 - loopback
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.headers, refused.read()


class ConsoleServer:
    """A real console process: granian serving ``console.wsgi:application`` on 127.0.0.1.

    ``env`` must carry DATABASE_URL and REDIS_URL (and CACHE_PREFIX when not the default) of
    the database the caller writes to. ``stop()`` and ``start()`` again reuse the port, for an
    outage.
    """

    def __init__(
        self,
        env: dict,
        *,
        port: int | None = None,
        log_path: Path | None = None,
        app: str = "console.wsgi:application",
        interface: str = "wsgi",
    ):
        self.env = env
        self.port = port or free_port()
        self.log_path = log_path
        self.app = app
        self.interface = interface
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as resp:  # noqa: S310
                return resp.status == 200
        except OSError:
            return False

    def start(self, timeout: float = 60.0) -> ConsoleServer:
        if self.log_path is not None:
            self._log = open(self.log_path, "a")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "granian", "--interface", self.interface,
                "--host", "127.0.0.1", "--port", str(self.port),
                "--workers", "1", "--no-ws", "--log-level", "warning",
                *(["--backpressure", "10000"] if self.interface == "asgi" else []),
                self.app,
            ],
            cwd=ROOT,
            env=self.env,
            stdout=self._log or subprocess.DEVNULL,
            stderr=subprocess.STDOUT if self._log else subprocess.DEVNULL,
            process_group=0,  # its workers with it (see _stop_process)
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"granian exited with {self.proc.returncode} (log {self.log_path})"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the console did not answer /healthz in {timeout:.0f} s")
            time.sleep(0.2)
        return self

    def stop(self, timeout: float = 15.0) -> None:
        _stop_process(self.proc, timeout)
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None


def stream_server(env: dict, **kwargs) -> ConsoleServer:
    """The config stream server (``console.stream``, ASGI) as a real process."""
    return ConsoleServer(env, app="console.stream:application", interface="asgi", **kwargs)


class ConsoleWithStream:
    """The web server and the config stream server, stopped and started together on their
    ports (the web server sends runtimes to the stream's address)."""

    def __init__(self, env: dict, log_dir: Path):
        self.stream = stream_server(env, log_path=log_dir / "stream.log")
        self.web = ConsoleServer(
            {**env, "STREAM_URL": f":{self.stream.port}"}, log_path=log_dir / "web.log"
        )

    def start(self) -> ConsoleWithStream:
        self.stream.start()
        self.web.start()
        return self

    def stop(self) -> None:
        self.web.stop()
        self.stream.stop()


class RuntimeSim:
    """Runs ``tests/runtime_sim.py`` and collects its JSON lines in a background thread.

    ``lines`` are the request lines, ``events`` the others (started, webhook, stopped); each
    record gets ``_received`` (the parent's ``time.time()`` when read).
    """

    def __init__(
        self,
        *,
        console_url: str,
        token: str,
        agent: str = AGENT,
        poll: float = 1.0,
        webhook_port: int = 0,
        webhook_secret: str | None = None,
        requests: int | None = None,
        interval: float = 0.05,
        cache_dir: Path | None = None,
        log_path: Path | None = None,
        extra_args: tuple[str, ...] = (),
    ):
        self.args = [
            "--console", console_url, "--token", token, "--agent", agent,
            "--poll", str(poll), "--webhook-port", str(webhook_port),
            "--interval", str(interval),
        ]  # fmt: skip
        self.args += ["--requests", str(requests)] if requests else ["--forever"]
        if webhook_secret:
            self.args += ["--webhook-secret", webhook_secret]
        if cache_dir is not None:
            self.args += ["--cache-dir", str(cache_dir)]
        self.args += list(extra_args)
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.lines: list[dict] = []
        self.events: list[dict] = []
        self.noise: list[str] = []
        self._cond = threading.Condition()
        self._reader: threading.Thread | None = None
        self._log = None

    # -------------------------------------------------------------- process

    def start(self, timeout: float = 60.0) -> dict:
        """Start the runtime; returns its ``started`` line."""
        if self.log_path is not None:
            self._log = open(self.log_path, "a")  # noqa: SIM115 - closed in kill()
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        env["PYTHONUNBUFFERED"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, str(SIM_PATH), *self.args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._log or subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self._reader = threading.Thread(target=self._read, name="sim-reader", daemon=True)
        self._reader.start()
        started = self.wait_event("started", timeout)
        if started is None:
            self.kill()
            raise RuntimeError(f"the simulated runtime did not start (log {self.log_path})")
        return started

    @property
    def started(self) -> dict | None:
        return next((e for e in self.events if e.get("event") == "started"), None)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def stop(self, timeout: float = 45.0) -> dict:
        """SIGTERM: the runtime flushes its reporter and prints its stats; returns that line."""
        if self.proc is None:
            raise RuntimeError("not started")
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError("the simulated runtime did not stop in time") from None
        if self._reader is not None:
            self._reader.join(5)
        stopped = next((e for e in self.events if e.get("event") == "stopped"), None)
        if stopped is None:
            raise RuntimeError(f"the simulated runtime printed no stats (log {self.log_path})")
        return stopped

    def kill(self) -> None:
        """Make sure the process is gone (for ``finally``)."""
        _stop_process(self.proc, timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    # -------------------------------------------------------------- lines

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            received = time.time()
            try:
                record = json.loads(raw)
            except ValueError:
                self.noise.append(raw)
                continue
            record["_received"] = received
            with self._cond:
                (self.events if "event" in record else self.lines).append(record)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_line(
        self, predicate: Callable[[dict], bool], timeout: float, *, start: int = 0
    ) -> dict | None:
        """The first request line from index ``start`` on that matches, waiting up to
        ``timeout`` seconds for it; None if none came (or the process ended)."""
        deadline = time.monotonic() + timeout
        index = start
        with self._cond:
            while True:
                while index < len(self.lines):
                    line = self.lines[index]
                    index += 1
                    if predicate(line):
                        return line
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.proc is not None and self.proc.poll() is not None
                                      and not (self._reader and self._reader.is_alive())):  # fmt: skip
                    return None
                self._cond.wait(min(remaining, 0.2))

    def wait_event(self, name: str, timeout: float, *, start: int = 0) -> dict | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for event in self.events[start:]:
                    if event.get("event") == name:
                        return event
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.proc is not None and self.proc.poll() is not None
                                      and not (self._reader and self._reader.is_alive())):  # fmt: skip
                    return None
                self._cond.wait(min(remaining, 0.2))

    def __enter__(self) -> RuntimeSim:
        return self

    def __exit__(self, *exc) -> None:
        with contextlib.suppress(Exception):
            self.kill()


if __name__ == "__main__":
    sys.exit(run_sim())
