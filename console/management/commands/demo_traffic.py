"""Live demo traffic: simulated runtimes in every environment, talking to a running console.

Each runtime has its own runtime token (config:read, traces:write, created by the system as
"demo traffic (<env>)"), kept across restarts: its secret is stored beside the demo token file
(``console.demo.releases.demo_traffic_token_file``), so a start reuses it and revokes nothing;
without that file (a bare ``manage.py demo_traffic``) a new token replaces the older ones.
Archived environments have no runtime: they are skipped, said once. It keeps the agent's live
configuration with a ``ConfigClient`` and reports with a ``TraceReporter``, exactly as a real
runtime does over HTTP; sg-test runs ``REPLICAS`` runtime processes (one config client each,
heartbeating as its own instance, taking the requests in turn), as a deployment with several
pods does, so its Runtimes card counts them ("3 of 3 runtimes serve …"). Every ``--interval``
seconds each environment runs a weighted-random seed scenario through the selection engine
with the configuration it holds at that moment (``console.demo.traffic``), so publishing or
rolling back a version changes the traces that follow within a poll interval. One line per
minute per environment; SIGTERM or SIGINT stops it after flushing the reporters.
``scripts/run.py`` starts it once the web server answers.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import socket
import threading
import time
from collections import Counter
from datetime import UTC, datetime

from context_runtime import wire
from context_runtime.client import ConfigClient, ConfigSnapshot
from context_runtime.reporter import TraceReporter
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from console.demo import traffic
from console.demo.releases import demo_traffic_token_file, kept_token
from console.kernel.wording import counted
from strategies.catalog.models import Environment

logger = logging.getLogger("console.demo_traffic")
CAPABILITIES = ("config:read", "traces:write")
REPORT_EVERY_SECONDS = 60.0
# Runtime processes per environment (1 unless named): the README's tour publishes to sg-test
# and reads "3 of 3 runtimes serve v4" on its Runtimes card.
REPLICAS = {"sg-test": 3}


def token_name(environment_key: str) -> str:
    return f"demo traffic ({environment_key})"


def default_console() -> str:
    host = os.environ.get("HOST", "127.0.0.1")
    if host in ("", "0.0.0.0", "::"):  # noqa: S104 - listening everywhere: talk to it locally
        host = "127.0.0.1"
    return f"http://{host}:{os.environ.get('PORT', '8000')}"


def simulate_request(
    snapshot: ConfigSnapshot,
    *,
    environment: str,
    n: int,
    rng: random.Random,
    now=None,
    order_service_down: bool = False,
) -> wire.Trace | None:
    """Request ``n`` of the demo runtime in ``environment``: a weighted-random seed scenario
    through the engine with the configuration the runtime holds now (``snapshot``) — the
    order service's timeout every time with ``order_service_down`` (to see an alert fire).
    ``None`` while it holds no configuration of the strategy."""
    if snapshot.strategy(traffic.STRATEGY) is None:
        return None
    now = now or datetime.now(UTC)
    scenario, request = traffic.pick(rng, n)
    if order_service_down:
        scenario = traffic.ORDER_TIMEOUT
    return traffic.run(
        scenario,
        config=snapshot,
        request_id=f"live-{environment}-{now:%Y%m%dT%H%M%S}-{n}",
        occurred_at=now,
        request=request,
        resolution=snapshot.resolution,
    )


def instance_id(environment: str, replica: int, replicas: int) -> str | None:
    """How replica `replica` of `environment` names itself to the console (None: the SDK's
    default, host:pid, for an environment with one runtime)."""
    if replicas == 1:
        return None
    return f"{socket.gethostname()}:{os.getpid()}/{environment}-{replica + 1}"


class DemoRuntime:
    """One environment's simulated runtime processes: a config client per replica (each its
    own instance to the console, taking the requests in turn), a reporter and counters."""

    def __init__(
        self,
        environment: str,
        secret: str,
        console: str,
        *,
        poll: float,
        seed,
        replicas: int = 1,
        order_service_down: bool = False,
    ):
        self.environment = environment
        self.order_service_down = order_service_down
        self.clients = [
            ConfigClient(
                console,
                secret,
                traffic.AGENT,
                environment=environment,
                poll_interval=poll,
                instance_id=instance_id(environment, replica, replicas),
            )
            for replica in range(replicas)
        ]
        # Durable, as the SDK's default, but in the console's data directory beside the token
        # file (the token's restart-stable, so is its spool); memory only without one.
        token_file = demo_traffic_token_file(environment)
        spool_dir = (
            token_file.with_name(f"demo-traffic-spool-{environment}") if token_file else None
        )
        self.reporter = TraceReporter(console, secret, close_at_exit=False, spool_dir=spool_dir)
        self.rng = random.Random(None if seed is None else f"{seed}-{environment}")
        self.total = 0
        self.minute: Counter = Counter()
        self.versions: set[int] = set()

    def request(self, n: int) -> None:
        client = self.clients[n % len(self.clients)]
        snapshot = client.snapshot()  # one consistent configuration for the request
        try:
            trace = simulate_request(
                snapshot,
                environment=self.environment,
                n=n,
                rng=self.rng,
                order_service_down=self.order_service_down,
            )
        except Exception:  # a runtime answers every request, whatever happens
            logger.exception("demo request %s in %s failed", n, self.environment)
            self.minute["error"] += 1
            return
        if trace is None:
            self.minute["no configuration"] += 1
            return
        self.reporter.report(
            trace, resolution=snapshot, strategy=snapshot.strategy(traffic.STRATEGY)
        )
        # The demo's application reports how some requests ended (a traces:write token may).
        for kind, value in traffic.outcomes_of(trace.request_id, trace.status):
            self.reporter.report_outcome(trace.request_id, kind, value, agent=trace.agent)
        self.total += 1
        self.minute[trace.status] += 1
        self.versions.add(trace.documents[traffic.STRATEGY])

    def summary(self) -> str:
        counts = ", ".join(f"{status} {count}" for status, count in self.minute.most_common())
        versions = "/".join(f"v{v}" for v in sorted(self.versions)) or "no version"
        requests = sum(self.minute.values())
        line = (
            f"demo traffic {self.environment}: {counted(requests, 'request')} on {versions} "
            f"({counts})"
        )
        self.minute.clear()
        self.versions.clear()
        return line

    def stop(self, timeout: float) -> dict:
        self.reporter.flush(timeout=timeout)
        self.reporter.close(timeout=5.0)
        for client in self.clients:
            client.stop()
        return self.reporter.stats()


class Command(BaseCommand):
    help = (
        "Simulated runtimes for the demo: every --interval seconds, one request per environment "
        "through the selection engine with that environment's live configuration, reported to "
        "the console. Runs until SIGTERM/SIGINT, or --once N requests per environment."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--console",
            default=default_console(),
            help="the console's base URL (default from HOST and PORT: %(default)s)",
        )
        parser.add_argument(
            "--interval", type=float, default=2.0, help="seconds between requests (default 2)"
        )
        parser.add_argument(
            "--once", type=int, metavar="N", help="run N requests per environment, then exit"
        )
        parser.add_argument(
            "--poll", type=float, default=2.0, help="config poll interval, seconds (default 2)"
        )
        parser.add_argument("--seed", type=int, help="seed the scenario choice (repeatable runs)")
        parser.add_argument(
            "--order-service-down",
            action="store_true",
            help="every request meets the order service's timeout (see an alert fire: docs/alerts.md)",
        )
        parser.add_argument(
            "--wait-ready", type=float, default=30.0, help="seconds to wait for a first config"
        )

    def handle(self, *args, **options):
        if settings.PRODUCTION or not settings.DEMO_MODE:
            raise CommandError(
                "demo_traffic refuses to run with production settings (CONSOLE_ENV=production)."
            )
        if options["once"] is not None and options["once"] < 1:
            raise CommandError("--once needs a number of requests of at least 1.")
        stop = threading.Event()
        previous = {
            signum: signal.signal(signum, lambda *_: stop.set())
            for signum in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            self._run(options, stop)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _run(self, options, stop: threading.Event) -> None:
        environments = list(Environment.objects.order_by("position"))
        archived = [env.key for env in environments if env.archived_at is not None]
        if archived:  # no runtime token can be made there, and no runtime asks there
            self._say(f"Demo traffic skips archived environments: {', '.join(archived)}.")
        runtimes = [
            DemoRuntime(
                env.key,
                self._token_secret(env),
                options["console"],
                poll=options["poll"],
                seed=options["seed"],
                replicas=REPLICAS.get(env.key, 1),
                order_service_down=options.get("order_service_down", False),
            )
            for env in environments
            if env.archived_at is None
        ]
        connection.close()  # from here on only HTTP, as a runtime: hold no database connection
        if not runtimes:
            raise CommandError("No active environments: run load_demo first.")
        clients = [client for runtime in runtimes for client in runtime.clients]
        for client in clients:
            client.start()
        deadline = time.monotonic() + options["wait_ready"]
        for client in clients:
            client.wait_ready(max(0.0, deadline - time.monotonic()))
        self._say(
            f"Demo traffic: {len(clients)} simulated runtimes in {len(runtimes)} environments "
            f"against {options['console']}, one request per environment every "
            f"{options['interval']:g} s."
        )
        try:
            self._loop(runtimes, stop, options["interval"], options["once"])
        finally:
            undelivered = 0
            for runtime in runtimes:
                stats = runtime.stop(timeout=10.0 if options["once"] else 3.0)
                undelivered += stats["queued"] - stats["delivered"]
                self._say(
                    f"demo traffic {runtime.environment}: stopped after "
                    f"{counted(runtime.total, 'request')} "
                    f"({stats['delivered']} delivered, {stats['rejected']} rejected, "
                    f"{stats['dropped']} dropped)"
                )
        if options["once"] is not None and undelivered:
            raise CommandError(f"{undelivered} demo traces were not delivered to the console.")

    def _loop(self, runtimes, stop: threading.Event, interval: float, once: int | None) -> None:
        n = 0
        next_at = last_report = time.monotonic()
        while not stop.is_set():
            n += 1
            for runtime in runtimes:
                runtime.request(n)
            if once is not None and n >= once:
                return
            if time.monotonic() - last_report >= REPORT_EVERY_SECONDS:
                last_report = time.monotonic()
                for runtime in runtimes:
                    self._say(runtime.summary())
            next_at += interval
            stop.wait(max(0.0, next_at - time.monotonic()))

    def _token_secret(self, environment) -> str:
        """The secret of this environment's demo runtime token: the one kept from the last
        start while it is active, else a new one (older ones of that name are revoked)."""
        _, secret, _ = kept_token(
            token_name(environment.key),
            environment,
            capabilities=CAPABILITIES,
            token_file=demo_traffic_token_file(environment.key),
            keep_without_file=False,
        )
        return secret

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()
