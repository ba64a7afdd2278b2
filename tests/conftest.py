"""Shared fixtures: users with grants, a real Celery worker, and the browser layer.

Browser tests drive the machine's Chromium (Debian package) through Playwright against
pytest-django's live server; Playwright never downloads a browser.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

# Playwright's sync API runs an event loop in the test thread; Django's ORM calls made by
# test code around it are still synchronous and safe.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
# A fast password hasher, as Django's testing docs recommend (the default costs ~0.3 s a user):
# the processes the tests start read it from the environment (console/settings.py); this
# process has loaded its settings already, so `fast_password_hasher` switches it here.
os.environ["CONSOLE_FAST_PASSWORD_HASHER"] = "true"
# The SDK's reporter spools by default in the user's state directory: this run's reporters, and
# those of the runtimes and demo traffic it starts, spool in a directory of its own, never the
# machine's ~/.local/state (where a later run could find them).
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="console-tests-state-")
atexit.register(shutil.rmtree, os.environ["XDG_STATE_HOME"], ignore_errors=True)

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-quic",
    "--no-first-run",
    "--disable-sync",
]


def pytest_sessionstart(session):
    """With CONSOLE_TEST_ENGINES=embedded the suite must run on the embedded engines alone:
    stop at once if it was pointed at a TCP server (the machine's 5432/6379), which would let
    a child that guesses 127.0.0.1:5432 pass by luck."""
    from tests.engines import embedded_mode, machine_servers_in_use

    _forget_earlier_sessions(session)
    if not embedded_mode():
        return
    from django.conf import settings
    from django.db import connections

    found = machine_servers_in_use(connections["default"].settings_dict, settings.REDIS_URL)
    if found:
        pytest.exit(
            "CONSOLE_TEST_ENGINES=embedded, but the tests use "
            + " and ".join(found)
            + "; run them through scripts/test.sh, which starts the embedded engines",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


def _forget_earlier_sessions(session) -> None:
    """Empty the suite's Redis database before the first test: every session builds its test
    database anew, so ids repeat, and an earlier session's cached configuration payload (kept
    when it looks newer) would be served for this session's environment of the same id. Only
    the controller empties it: pytest-xdist's workers start after it and share the database."""
    if hasattr(session.config, "workerinput"):
        return
    import redis
    from django.conf import settings

    redis.Redis.from_url(settings.CACHES["default"]["LOCATION"]).flushdb()


@pytest.fixture(scope="session", autouse=True)
def fast_password_hasher():
    from django.conf import settings
    from django.test import override_settings

    with override_settings(PASSWORD_HASHERS=settings.FAST_PASSWORD_HASHERS):
        yield


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """Empty the database between transactional tests through a path only a superuser has.

    pytest-django empties it with Django's flush (one TRUNCATE of every table), which the
    append-only logs refuse to every session: their triggers have no switch a session can
    set. The tests connect as a superuser, so the flush runs, for its own transaction only,
    with `session_replication_role = replica` — a superuser-only setting under which
    ordinary triggers do not fire. Production's application role is not a superuser (nor
    the tables' owner, who could `ALTER TABLE ... DISABLE TRIGGER`): it has no such path
    (docs/access-and-audit.md, tests/integration/test_database_guards.py).
    """
    from django.db.backends.postgresql.operations import DatabaseOperations

    flush = DatabaseOperations.execute_sql_flush

    def flush_with_triggers_off(self, sql_list):
        # execute_sql_flush runs the statements in one transaction: SET LOCAL ends with it.
        flush(
            self,
            [
                "SET LOCAL session_replication_role = replica",
                *sql_list,
                "SET LOCAL session_replication_role = DEFAULT",
            ],
        )

    DatabaseOperations.execute_sql_flush = flush_with_triggers_off
    yield
    DatabaseOperations.execute_sql_flush = flush


# --- trace day partitions --------------------------------------------------------------------
@pytest.fixture
def day_partitions_restored():
    """After the test, the day partitions the migrations create (back over the longest
    retention + 14, a week ahead) exist again: a test that lets the purge drop expired days
    would otherwise leave later tests, which age traces by up to 44 days, no day to put them."""
    yield
    from datetime import UTC

    from django.db import connection
    from django.utils import timezone

    from traces import partitions

    with connection.cursor() as cursor:
        today = timezone.now().astimezone(UTC).date()
        partitions.ensure_range(cursor, today=today, days_back=44, days_ahead=7)


# --- database roles --------------------------------------------------------------------------
@pytest.fixture
def login_role(transactional_db):
    """login_role(member_of=None) → the name of a new LOGIN role (not a superuser, owning
    nothing) that may connect to the test database and use its schema, as production's
    application role is made; `member_of` makes it a member of that role too. Committed, so
    a child process can sign in as it; dropped afterwards."""
    import uuid

    from django.db import connection

    created: list[str] = []

    def make(member_of: str | None = None) -> str:
        name = f"probe_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        with connection.cursor() as cursor:
            cursor.execute(
                f'CREATE ROLE "{name}" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION'
            )
            cursor.execute(
                f'GRANT CONNECT ON DATABASE "{connection.settings_dict["NAME"]}" TO "{name}"'
            )
            cursor.execute(f'GRANT USAGE ON SCHEMA public TO "{name}"')
            if member_of:
                cursor.execute(f'GRANT "{member_of}" TO "{name}"')
        created.append(name)
        return name

    yield make
    with connection.cursor() as cursor:
        for name in created:
            cursor.execute(f'DROP OWNED BY "{name}"')
            cursor.execute(f'DROP ROLE "{name}"')


# --- the clock of the clock-driven rules (console.kernel.clock) --------------------------------
@pytest.fixture
def clock():
    """The time freeze windows, change hours and schedules see, set by the test:
    `clock.set(at)`, `clock.advance(timedelta)`, `clock.now()`; real time again afterwards."""
    from types import SimpleNamespace

    from console.kernel import clock as kernel_clock

    yield SimpleNamespace(
        set=kernel_clock.clock_set, advance=kernel_clock.clock_advance, now=kernel_clock.now
    )
    kernel_clock.clock_set(None)


# --- users and grants ------------------------------------------------------------------------
@pytest.fixture
def make_user(db):
    """make_user("ops", operator="assistant_professional", admin=None) → a user with grants
    (tests.factories.user_with_grants), signing in with `<username>-pass-1` unless given a
    password. Each keyword is a role name; its value is an agent (object or key) or None for
    all agents."""
    from tests.factories import user_with_grants

    return user_with_grants


@pytest.fixture
def demo_world(db):
    """The whole DEMO.md world, loaded by the same command the run command uses — for the
    browser tests that tell the demo's story and the tests of `load_demo` itself; every other
    test builds what it needs with tests.factories."""
    from django.core.management import call_command

    call_command("load_demo", "--quiet-logins", stdout=open(os.devnull, "w"))  # noqa: SIM115


# --- a real Celery worker process --------------------------------------------------------------
# The running workers' processes by queue, for a test that kills one (tests/integration/test_siem_*).
WORKER_PROCESSES: dict[str, subprocess.Popen] = {}


@contextlib.contextmanager
def celery_worker(
    *,
    level: str = "INFO",
    beat_schedule: Path | None = None,
    queue: str | None = None,
    **env_extra: str,
):
    """A `celery -A console worker` process against the test database and the real broker, on
    a queue private to it (or `queue`); with `beat_schedule` (a file) it runs the beat too
    (`-B`), sending the periodic tasks to that queue. Yields the queue name; the worker's
    output is in .data/worker-<queue>.log."""
    from tests.engines import child_env

    queue = queue or f"test-{os.getpid()}-{time.monotonic_ns()}"
    env = child_env(**env_extra)
    env["CELERY_QUEUE"] = queue
    (ROOT / ".data").mkdir(exist_ok=True)
    beat = ["-B", "-s", str(beat_schedule)] if beat_schedule is not None else []
    with open(ROOT / ".data" / f"worker-{queue}.log", "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "celery", "-A", "console", "worker", "--pool=solo",
                "--concurrency=1", "-Q", queue, "--without-gossip", "--without-mingle",
                "--without-heartbeat", "-l", level, *beat,
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        WORKER_PROCESSES[queue] = proc
        try:
            yield queue
        finally:
            WORKER_PROCESSES.pop(queue, None)
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


@contextlib.contextmanager
def beat_worker(settings, beat_schedule: Path, *, seconds: float, ready_within: float = 60.0):
    """A `celery_worker` running the beat, the rollouts' guards judged every `seconds`, on
    this test's cache prefix; yielded once it consumes its queue (a task sent before that
    could be lost), with the services' own tasks (a bake's end) pointed at that queue."""
    with celery_worker(
        level="INFO",
        beat_schedule=beat_schedule,
        CACHE_PREFIX=settings.CACHES["default"]["KEY_PREFIX"],
        ROLLOUTS_EVALUATE_SECONDS=str(int(seconds)),
    ) as queue:
        settings.CELERY_TASK_DEFAULT_QUEUE = queue
        log = ROOT / ".data" / f"worker-{queue}.log"
        deadline = time.monotonic() + ready_within
        while "ready." not in log.read_text():
            assert time.monotonic() < deadline, f"the worker did not start: {log}"
            time.sleep(0.2)
        yield queue


@pytest.fixture
def celery_worker_process(request, transactional_db):
    """A real Celery worker process (`celery_worker`), logging at INFO or the level an
    indirect parametrization gives (e.g. production's WARNING). Yields the queue name."""
    with celery_worker(level=getattr(request, "param", "INFO")) as queue:
        yield queue


# --- the console and runtimes as real processes (tests/runtime_sim.py) --------------------------
@pytest.fixture
def console_with_stream(transactional_db, settings, tmp_path):
    """The console's web server and config stream server as real processes on this test's
    database and Redis (its cache prefix too), logs in tmp_path; stopped after the test."""
    from tests.engines import console_env
    from tests.runtime_sim import ConsoleWithStream

    env = console_env()
    started = ConsoleWithStream(env, tmp_path).start()
    yield started
    started.stop()


@pytest.fixture
def sims():
    """Every simulated runtime (tests.runtime_sim.RuntimeSim) a test appends is killed at the
    end, whatever happened."""
    started: list = []
    yield started
    for sim in started:
        sim.kill()


# --- browser -------------------------------------------------------------------------------------
def chromium_path() -> str:
    path = shutil.which("chromium")
    if not path:
        pytest.fail(
            "Debian's chromium is not installed; `make test` installs it (apt-get install chromium)"
        )
    return path


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        yield instance
        instance.close()


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=live_server.url)
    context.set_default_timeout(15_000)
    pg = context.new_page()
    yield pg
    context.close()


@pytest.fixture
def login(page, live_server):
    """login("ops", "ops-demo") in the browser; returns the page on the dashboard."""

    def _login(username: str, password: str):
        page.goto(f"{live_server.url}/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        return page

    return _login


@pytest.fixture
def oidc_provider():
    """A real OpenID Connect provider (npm oidc-provider under Node.js) on a free loopback
    port, not yet started: the test adds its clients and users, then calls start()."""
    from tests.idp.oidc import LocalOIDCProvider

    provider = LocalOIDCProvider()
    yield provider
    provider.close()


@pytest.fixture
def saml_idp():
    """A real SAML 2.0 identity provider (pysaml2's IdP under wsgiref, tests/idp/saml_idp.py)
    on a free loopback port, its signing key made now in a temporary directory; not yet
    started: the test adds its users, then calls start()."""
    from tests.idp.saml_idp import LocalSamlIdP

    idp = LocalSamlIdP(host="localhost")  # the live server's site (see LocalSamlIdP)
    yield idp
    idp.close()
