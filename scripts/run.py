"""Start the console: migrate, load demo data, then web server, worker and beat, and (in demo
mode) the simulated demo traffic; print the banner once every one of them answers.

PORT (default 8000) and HOST (default 127.0.0.1) pick the address (the config stream server
on STREAM_PORT, default PORT + 1; the ingest server on INGEST_PORT, default PORT + 2, with
INGEST_WORKERS processes, default 2); VERBOSE=1 shows the start-up
logs of the web server, worker and beat (warnings only otherwise). Without DATABASE_URL /
REDIS_URL the embedded PostgreSQL and Redis start (scripts/embedded.py), with data in `.data/`
or `$CONSOLE_DATA_DIR`.

Stopping (Ctrl-C, SIGTERM) stops everything this command started, always:

- the children (granian and its workers, the Celery worker and beat, the demo traffic) share one
  process group of their own, so the terminal's Ctrl-C reaches only this launcher, which stops
  them in order — demo traffic first (it flushes its traces while the web server is up), then
  the others — with SIGTERM, waits up to STOP_SECONDS, then SIGKILLs the whole group;
- that group is led by a watchdog (`run.py _watchdog`) reading a pipe from this launcher: if the
  launcher dies without stopping them (kill -9, the OOM killer), the pipe closes and the
  watchdog stops the group and releases the embedded engines itself;
- the embedded engines are stopped when their last user (this launcher) releases them.

A start refuses with one line when the port is taken, before it starts anything.
"""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import embedded  # scripts/embedded.py, beside this file
import psutil  # a dependency of pgserver, like in embedded.py

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
STOP_SECONDS = 10.0
READY_SECONDS = float(os.environ.get("READY_TIMEOUT", "180"))


# The start of the warning Celery's worker gives when it runs as root (celery.platforms).
CELERY_ROOT_WARNING = "You're running the worker with superuser privileges"


def web_threads() -> int:
    """The web server's threads per worker unless WEB_THREADS says: 8 (measured best with 2
    workers, docs/PERFORMANCE.md), but no more than granian's own bound for the cores there
    are (2 × cores + 1; above it granian warns at every start that the threads outnumber what
    the cores can run: on a 2-core machine, 5)."""
    return min(8, 2 * (os.cpu_count() or 1) + 1)


class Stop(Exception):  # noqa: N818 - a signal, not an error
    """Raised by the SIGINT/SIGTERM/SIGHUP handler to unwind into the stop sequence."""


class Launcher:
    def __init__(self) -> None:
        self.host = os.environ.get("HOST", "").strip() or "127.0.0.1"
        self.port = os.environ.get("PORT", "").strip() or "8000"
        # The config stream server (console.stream, ASGI): runtimes hold their event streams
        # there, never in the web server's worker threads.
        self.stream_port = os.environ.get("STREAM_PORT", "").strip() or str(int(self.port) + 1)
        # The ingest server (console.ingest_wsgi): runtimes' trace batches and outcomes, in
        # processes of their own, so that they never take the threads answering config reads.
        self.ingest_port = os.environ.get("INGEST_PORT", "").strip() or str(int(self.port) + 2)
        self.verbose = os.environ.get("VERBOSE", "").strip().lower() in {"1", "true", "yes"}
        self.demo = os.environ.get("CONSOLE_ENV", "development") != "production"
        self.embedded = False  # registered as a user of the embedded engines
        self.watchdog: subprocess.Popen | None = None
        self.procs: dict[str, subprocess.Popen] = {}  # web, worker, beat
        self.extras: dict[str, subprocess.Popen] = {}  # demo traffic
        self.stopping = False
        self.pump: threading.Thread | None = None  # passes the demo traffic's lines on
        self.hurry = False  # a second Ctrl-C: skip the graceful waits

    # --- signals ------------------------------------------------------------------------------

    def on_signal(self, signum, _frame) -> None:
        if self.stopping:  # a second Ctrl-C while stopping: no more waiting
            self.hurry = True
            if self.watchdog is not None:
                kill_group(self.watchdog.pid, signal.SIGKILL)
            return
        self.stopping = True
        raise Stop(signal.Signals(signum).name)

    # --- the address --------------------------------------------------------------------------

    @property
    def local_url(self) -> str:
        """How a client on this machine reaches the web server."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host  # noqa: S104
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    @property
    def local_stream_url(self) -> str:
        return self.local_url.rsplit(":", 1)[0] + f":{self.stream_port}"

    @property
    def local_ingest_url(self) -> str:
        return self.local_url.rsplit(":", 1)[0] + f":{self.ingest_port}"

    def port_problem(self) -> str | None:
        return (
            self._port_problem(self.port, "PORT=8003")
            or self._port_problem(self.stream_port, "STREAM_PORT=8004")
            or self._port_problem(self.ingest_port, "INGEST_PORT=8005")
        )

    def _port_problem(self, port_text: str, hint: str) -> str | None:
        """None when HOST:port can be listened on; else one line saying why not. Binds without
        SO_REUSEPORT, so a server already listening there (granian uses SO_REUSEPORT, which
        would let a second one bind beside it) is found."""
        try:
            port = int(port_text)
            infos = socket.getaddrinfo(self.host, port, type=socket.SOCK_STREAM)
        except (ValueError, OSError) as exc:
            return f"cannot listen on {self.host}:{port_text}: {exc}"
        family, _, _, _, address = infos[0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
                probe.listen(1)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return (
                        f"cannot start: {self.host}:{port_text} is already in use (another "
                        f"`make run`?); stop it first or choose another port, e.g. {hint} make run"
                    )
                return f"cannot listen on {self.host}:{port_text}: {exc.strerror}"
        return None

    # --- starting -----------------------------------------------------------------------------

    def child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            HOST=self.host,
            PORT=self.port,
            STREAM_PORT=self.stream_port,
            INGEST_PORT=self.ingest_port,
        )
        # Where the web server says the ingest server is (the "Connect a runtime" snippet,
        # /healthz, its `ingest_busy` answers): the host each client reached it by, this port
        # — with HOST=0.0.0.0 no one address is right for every client. This machine's
        # runtimes (the demo traffic) send their batches to the local address.
        env.setdefault("INGEST_URL", f":{self.ingest_port}")
        env.setdefault("CONTEXT_CONSOLE_INGEST_URL", self.local_ingest_url)
        # Advertised to runtimes in the config answers (X-Config-Stream): same host, this port.
        env.setdefault("STREAM_URL", f":{self.stream_port}")
        env.setdefault("CONSOLE_DEMO_TOKEN_FILE", str(embedded.DATA_DIR / "demo-runtime-token"))
        if not self.verbose:
            env.setdefault("LOG_LEVEL", "WARNING")
            # A local `make run` as root (a container, a VM's only user) is not the production
            # deployment Celery's advice is for: its start-up SecurityWarning is left to VERBOSE.
            quiet = f"ignore:{CELERY_ROOT_WARNING}"
            env["PYTHONWARNINGS"] = ",".join(filter(None, (env.get("PYTHONWARNINGS"), quiet)))
            if self.demo:  # the anchors' lines are for production's log: two per quarter here
                env.setdefault("AUDIT_CHECKPOINT_MINUTES", "15")
        return env

    def manage(self, *args: str, capture: bool = False) -> str:
        result = subprocess.run(
            [PY, "manage.py", *args],
            cwd=ROOT,
            env=self.child_env(),
            text=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if capture else None,
        )
        if result.returncode != 0:
            raise SystemExit(
                f"cannot start: `manage.py {args[0]}` failed (exit {result.returncode})"
            )
        return result.stdout or ""

    def start_embedded(self) -> None:
        """Without DATABASE_URL / REDIS_URL, start (or reuse) the embedded engines."""
        if os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"):
            return
        print(
            f"Starting the embedded PostgreSQL and Redis (data in {embedded.DATA_DIR})…", flush=True
        )
        self.embedded = True  # a Ctrl-C in the middle still releases them
        try:
            urls = embedded.acquire(os.getpid())
        except embedded.EmbeddedServiceError as exc:
            self.embedded = False  # a failed start already stopped what it started
            raise SystemExit(f"cannot start the embedded services: {exc}") from None
        for name, url in urls.items():
            os.environ.setdefault(name, url)

    def spawn(self, *args: str, **kwargs) -> subprocess.Popen:
        """A child in the watchdog's process group, reading nothing from the terminal."""
        assert self.watchdog is not None
        return subprocess.Popen(
            [PY, *args],
            cwd=ROOT,
            env=self.child_env(),
            stdin=subprocess.DEVNULL,
            process_group=self.watchdog.pid,
            **kwargs,
        )

    def start_demo_traffic(self) -> str:
        """Start the demo traffic and wait for its first line (its runtimes hold their first
        configuration), so that the banner comes after it; its later lines are passed on."""
        proc = self.spawn(
            "-u",
            "manage.py",
            "demo_traffic",
            "--console",
            self.local_url,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.extras["demo traffic"] = proc
        first: queue.Queue[str] = queue.Queue()

        def pump() -> None:
            assert proc.stdout is not None
            for number, line in enumerate(proc.stdout):
                if number == 0:
                    first.put(line.rstrip())
                else:
                    print(line, end="", flush=True)
            first.put("")

        self.pump = threading.Thread(target=pump, name="demo-traffic-output", daemon=True)
        self.pump.start()
        try:
            return first.get(timeout=45)
        except queue.Empty:  # optional: the console runs without it
            return ""

    def granian(
        self, interface: str, port: str, workers: str, options: list[str], app: str
    ) -> subprocess.Popen:
        """One of the servers: granian serving `app` on HOST:port."""
        level = "info" if self.verbose else "warning"
        return self.spawn(
            "-m", "granian", "--interface", interface, "--host", self.host, "--port", port,
            "--workers", workers, *options, "--log-level", level, app,
        )  # fmt: skip

    def start_children(self) -> None:
        level = "INFO" if self.verbose else "WARNING"
        celery = ["-m", "celery", "-A", "console"] + ([] if self.verbose else ["--quiet"])
        self.watchdog = subprocess.Popen(
            [PY, __file__, "_watchdog", str(os.getpid()), "1" if self.embedded else "0"],
            cwd=ROOT,
            env=self.child_env(),
            stdin=subprocess.PIPE,  # its only end of the pipe: EOF when this launcher is gone
            process_group=0,  # leads the children's group
        )
        self.procs["web server"] = self.granian(
            "wsgi",
            self.port,
            os.environ.get("WEB_WORKERS", "2"),
            # granian's default is backlog/workers/2 threads per worker (256 here): under
            # polling load they fight over the GIL and triple the config read's p99; 1
            # serialises a slow page and the reads behind it (docs/PERFORMANCE.md). See
            # web_threads() for the default.
            ["--blocking-threads", os.environ.get("WEB_THREADS", str(web_threads()))],
            "console.wsgi:application",
        )
        self.procs["stream server"] = self.granian(
            "asgi",
            self.stream_port,
            os.environ.get("STREAM_WORKERS", "1"),
            # held connections, not requests: granian's default bound would refuse the 1001st
            ["--backpressure", os.environ.get("STREAM_BACKPRESSURE", "10000")],
            "console.stream:application",
        )
        # The ingest server keeps off the other cores (INGEST_CPUS: the last of two or more):
        # a flood of batches never takes the cores config reads are answered on.
        cores = os.cpu_count() or 1
        if cores > 1:
            os.environ.setdefault("INGEST_CPUS", str(cores - 1))
        self.procs["ingest server"] = self.granian(
            "wsgi",
            self.ingest_port,
            os.environ.get("INGEST_WORKERS", "2"),
            # a batch is CPU and COPY: a second thread per worker parses while the first
            # waits on PostgreSQL (docs/PERFORMANCE.md, issue 36)
            ["--blocking-threads", os.environ.get("INGEST_THREADS", "2")],
            "console.ingest_wsgi:application",
        )
        self.procs["worker"] = self.spawn(
            *celery,
            "worker",
            "-l",
            level,
            "-n",
            f"console-worker-{self.port}@%h",
            "--concurrency",
            os.environ.get("WORKER_CONCURRENCY", "2"),
        )
        self.procs["beat"] = self.spawn(
            *celery,
            "beat",
            "-l",
            level,
            "-s",
            str(embedded.DATA_DIR / "celerybeat-schedule"),
            "--enable-remote-control",
            "-n",
            f"console-beat-{self.port}@%h",
        )

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise SystemExit(f"the {name} exited (code {proc.returncode}); stopping the others")

    def wait_until(self, what: str, ready, deadline: float) -> None:
        while not ready():
            self.check_alive()
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"cannot start: the {what} did not answer in {READY_SECONDS:.0f} s"
                )
            time.sleep(0.5)

    @staticmethod
    def answers(url: str) -> bool:
        """The server at `url` answers its /healthz (the stream server's: it LISTENs to
        PostgreSQL's notifications)."""
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=3) as response:  # noqa: S310
                return response.status == 200
        except OSError:
            return False

    def celery_answers(self) -> bool:
        """The worker and beat answer a remote-control ping."""
        from celery import Celery

        names = [f"console-worker-{self.port}@{socket.gethostname()}"]
        names.append(f"console-beat-{self.port}@{socket.gethostname()}")
        app = Celery("ping", broker=os.environ["REDIS_URL"], set_as_current=False)
        try:
            replies = app.control.ping(destination=names, timeout=1.0)
        except Exception:  # the broker is not there yet: not ready
            return False
        finally:
            app.close()
        answered = {name for reply in replies for name in reply}
        return set(names) <= answered

    # --- stopping -----------------------------------------------------------------------------

    def _wait(self, procs, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()) if not self.hurry else 0)

    def stop_children(self) -> None:
        # The demo traffic first, so that it flushes its traces while the web server is up.
        for group in (self.extras.values(), self.procs.values()):
            running = [p for p in group if p.poll() is None]
            for proc in running:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
            self._wait(running, STOP_SECONDS)
        if self.watchdog is not None:
            # Whatever is left of the group (a granian worker that outlived its parent, a
            # child that ignored SIGTERM, the watchdog itself) goes now.
            kill_group(self.watchdog.pid, signal.SIGKILL)
            for proc in (self.watchdog, *self.procs.values(), *self.extras.values()):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
            wait_group_empty(self.watchdog.pid, 5)
        if self.pump is not None:
            self.pump.join(timeout=2)  # the demo traffic's last lines

    # --- the whole run ------------------------------------------------------------------------

    def run(self) -> int:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self.on_signal)
        problem = self.port_problem()
        if problem:
            print(problem, file=sys.stderr)
            return 1
        failure, code = "", 0
        try:
            self._run()
        except Stop:
            print("\nStopping…", flush=True)
        except SystemExit as exc:
            failure, code = (exc.code, 1) if isinstance(exc.code, str) else ("", exc.code or 0)
        finally:
            self.stopping = True
            started = self.watchdog is not None
            self.stop_children()
            if self.embedded:
                released = embedded.release(os.getpid())
                if started:
                    print(released, flush=True)
            if started:
                print("Context Console stopped.", flush=True)
        if failure:  # last, so that it is the line the operator reads
            print(failure, file=sys.stderr, flush=True)
        return code

    def _run(self) -> None:
        embedded.DATA_DIR.mkdir(parents=True, exist_ok=True)
        self.start_embedded()
        print("Preparing the database…", flush=True)
        self.manage("migrate", "--no-input", "-v", "0")
        demo_output = self.manage("load_demo", capture=True) if self.demo else ""
        problem = self.port_problem()  # again: the migrations took a while
        if problem:
            raise SystemExit(problem)
        print("Starting the web server, stream server, ingest server, worker and beat…", flush=True)
        self.start_children()
        deadline = time.monotonic() + READY_SECONDS
        for what, url in (
            ("web server", self.local_url),
            ("stream server", self.local_stream_url),
            ("ingest server", self.local_ingest_url),
        ):
            self.wait_until(what, lambda url=url: self.answers(url), deadline)
        self.wait_until("Celery worker and beat", self.celery_answers, deadline)
        traffic_line = self.start_demo_traffic() if self.demo else ""
        self.banner(demo_output, traffic_line)
        while True:
            self.check_alive()
            time.sleep(1)

    def banner(self, demo_output: str, traffic_line: str) -> None:
        lines = [t for t in demo_output.rstrip().splitlines() if t.strip() != "Demo data loaded."]
        cut = next((n for n, t in enumerate(lines) if t.startswith("Demo logins")), len(lines))
        rule = "=" * 72
        out = ["", rule, f"Context Console is running at {self.local_url}/"]
        out.append(
            f"Config stream for runtimes at {self.local_stream_url}/api/v1/runtime/stream/<agent>"
        )
        out.append(
            f"Ingest server for runtimes' traces and outcomes at {self.local_ingest_url}/ "
            "(CONTEXT_CONSOLE_INGEST_URL)"
        )
        if self.host in ("0.0.0.0", "::"):  # noqa: S104
            out.append(f"  (listening on every address of this machine, port {self.port})")
        out += lines[cut:] + lines[:cut]  # the logins first, then the token and the rest
        if traffic_line:
            out += [
                traffic_line,
                "  (manage.py demo_traffic; publish or roll back to see traces change)",
            ]
        if self.embedded:
            out.append(f"Data: embedded PostgreSQL and Redis in {embedded.DATA_DIR}")
        stops = "web server, stream server, ingest server, worker, beat, demo traffic"
        if self.embedded:
            stops += ", embedded PostgreSQL and Redis"
        out += [f"Press Ctrl-C to stop everything ({stops}).", rule, ""]
        print("\n".join(out), flush=True)


# --- the process group -----------------------------------------------------------------------


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group `pgid`."""
    members = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
    return members


def kill_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def wait_group_empty(pgid: int, timeout: float, *, ignore: int | None = None) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := [p for p in group_members(pgid) if p != ignore]) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def watchdog(launcher_pid: int, release_embedded: bool) -> int:
    """Lead the children's process group; when the launcher is gone without stopping them
    (its end of our stdin closes), stop the group: SIGTERM, STOP_SECONDS, SIGKILL."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        while sys.stdin.buffer.read(4096):
            pass
    group = os.getpgrp()
    kill_group(group, signal.SIGTERM)  # we ignore it
    for pid in wait_group_empty(group, STOP_SECONDS, ignore=os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_group_empty(group, 5, ignore=os.getpid())
    if release_embedded:
        with contextlib.suppress(Exception):
            embedded.release(launcher_pid)
    return 0


def main(argv: list[str]) -> int:
    if argv[1:2] == ["_watchdog"]:
        return watchdog(int(argv[2]), argv[3] == "1")
    return Launcher().run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
