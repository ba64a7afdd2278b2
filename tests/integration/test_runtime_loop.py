"""The whole loop with real processes: the console (granian serving console.wsgi against the
test database), a simulated runtime in another process (tests/runtime_sim.py: the SDK's
ConfigClient, selection engine and TraceReporter, no Django), and for webhooks a real Celery
worker.

- a publish and a rollback change the runtime's selection within one poll interval (+1 s), and
  the stored traces carry the versions the runtime used;
- with the webhook and a long poll interval, the runtime switches within 1 s of the delivery;
- the console stopped and started again: every request is still answered (from the last good
  copy, "stale"), the traces buffered meanwhile are all stored, exactly once.

Measured delays are printed (`pytest -s` shows them).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from strategies.delivery.models import WebhookDelivery
from strategies.delivery.webhooks import webhook_create
from strategies.releases.models import Release
from strategies.releases.services import release_publish, release_rollback
from tests.engines import console_env as console_process_env
from tests.factories import release_setup, runtime_token
from tests.runtime_sim import ROOT, ConsoleServer, RuntimeSim, free_port, wait_until
from traces.models import Trace

pytestmark = pytest.mark.django_db(transaction=True)

POLL = 1.0  # the runtime's poll interval in the polling and outage tests
SWITCH_LIMIT = POLL + 1.0  # "within one poll interval" + 1 s for the busy machine
WEBHOOK_POLL = 60.0  # so long that only the webhook can explain a quick change
WEBHOOK_LIMIT = 1.0  # the runtime serves the new version within 1 s of the delivery
# The outage lasts minutes; seconds show the same behaviour (the reporter keeps the
# traces in its bounded queue, the config client serves its last good copy) in a test.
OUTAGE_SECONDS = 6.0


@pytest.fixture
def loopback_targets(monkeypatch, settings):
    """The simulated runtime's webhook listens on 127.0.0.1: allow private targets in this
    process, in the worker (its environment is copied from os.environ) and in the console."""
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE_TARGETS", "true")
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True


@pytest.fixture
def console_env(transactional_db, settings, loopback_targets):
    """What a console process needs to serve the test's committed rows: the test database,
    the test settings' Redis and cache prefix (so it reads the payloads this process writes
    and hears its invalidations)."""
    return console_process_env(WEBHOOK_ALLOW_PRIVATE_TARGETS="true")


@pytest.fixture
def world(transactional_db):
    """tests.factories.release_setup with profile v1 and strategy v2 live in sg-test, and a
    runtime token."""
    world = release_setup()
    sg = world.envs["sg-test"]
    release_publish(version=world.profile[1], environment=sg, actor=world.ops)
    release_publish(version=world.strategy[2], environment=sg, actor=world.ops)
    world.sg = sg
    world.token = runtime_token(sg, capabilities=("config:read", "traces:write"))
    return world


@pytest.fixture
def console(world, console_env, tmp_path):
    server = ConsoleServer(console_env, log_path=tmp_path / "console.log")
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
def worker(loopback_targets, celery_worker_process, settings):
    """The real worker, with this process's tasks sent to its queue; waits until it is ready
    (publishing earlier only queues the task, but the timings would include its start)."""
    settings.CELERY_TASK_DEFAULT_QUEUE = celery_worker_process
    log = ROOT / ".data" / f"worker-{celery_worker_process}.log"
    wait_until(lambda: log.exists() and " ready." in log.read_text(errors="replace"), 60, 0.2)
    return celery_worker_process


def start_sim(sims: list, console: ConsoleServer, world, tmp_path: Path, **kwargs) -> RuntimeSim:
    sim = RuntimeSim(
        console_url=console.url,
        token=world.token,
        cache_dir=tmp_path / f"sim-{len(sims)}",
        log_path=tmp_path / f"sim-{len(sims)}.log",
        **kwargs,
    )
    sims.append(sim)
    started = sim.start()
    assert started["django_loaded"] is False  # the runtime side is Django-free
    return sim


def serving(version: int, resolution: str | None = None):
    def matches(line: dict) -> bool:
        return line["strategy_version"] == version and (
            resolution is None or line["resolution"] == resolution
        )

    return matches


def runs(values: list) -> list:
    """[2, 2, 3, 3, 2] → [2, 3, 2]"""
    return [v for i, v in enumerate(values) if i == 0 or values[i - 1] != v]


def request_number(request_id: str) -> int:
    return int(request_id.rsplit("-", 1)[1])


def change_and_measure(sim: RuntimeSim, change, version: int, limit: float, what: str) -> float:
    """Make the change; return the seconds until the runtime's first request at `version`."""
    mark = len(sim.lines)
    started = time.time()
    change()
    committed = time.time()
    line = sim.wait_line(serving(version), limit + 15, start=mark)
    assert line is not None, f"{what}: the runtime never served v{version}"
    delay = line["t"] - started
    print(
        f"\n{what}: runtime serves v{version} {delay:.3f} s after the change started "
        f"({line['t'] - committed:.3f} s after its commit; limit {limit:.1f} s)"
    )
    assert delay <= limit, f"{what}: {delay:.3f} s > {limit:.1f} s"
    return delay


def stored_traces(request_ids) -> dict[str, Trace]:
    return {t.request_id: t for t in Trace.objects.filter(request_id__in=list(request_ids))}


def assert_delivered_once(sim: RuntimeSim, stopped: dict) -> dict[str, Trace]:
    """Every request the runtime printed is stored exactly once, nothing dropped."""
    printed = [line["request_id"] for line in sim.lines]
    assert printed and len(set(printed)) == len(printed)
    stats = stopped["stats"]
    assert stopped["flushed"] is True, stats
    assert (stats["dropped"], stats["rejected"], stats["pending"]) == (0, 0, 0), stats
    assert stats["queued"] == stats["delivered"] == len(printed), stats
    prefix = f"sim-{sim.pid}-"
    ids = Counter(
        Trace.objects.filter(request_id__startswith=prefix).values_list("request_id", flat=True)
    )
    assert [rid for rid, count in ids.items() if count > 1] == []
    assert set(ids) == set(printed), (
        f"missing {sorted(set(printed) - set(ids), key=request_number)[:10]}, "
        f"unexpected {sorted(set(ids) - set(printed))[:10]}"
    )
    return stored_traces(printed)


# --- 1. polling: publish and rollback ----------------------------------------------------------
def test_polling__publish_then_rollback__runtime_follows_within_poll_interval(
    world, console, sims, tmp_path
):
    sim = start_sim(sims, console, world, tmp_path, poll=POLL)
    assert sim.wait_line(serving(2, "fresh"), 30) is not None

    change_and_measure(
        sim,
        lambda: release_publish(version=world.strategy[3], environment=world.sg, actor=world.ops),
        3,
        SWITCH_LIMIT,
        "poll, publish v3",
    )
    assert sim.wait_line(serving(3), 5, start=len(sim.lines)) is not None
    release = Release.objects.get(document=world.strategy[3].document, environment=world.sg)
    change_and_measure(
        sim,
        lambda: release_rollback(
            release=release, to_version=world.strategy[2], actor=world.admin, reason="loop test"
        ),
        2,
        SWITCH_LIMIT,
        "poll, rollback to v2",
    )
    mark = len(sim.lines)
    assert wait_until(lambda: len(sim.lines) >= mark + 5, 10)
    stopped = sim.stop()

    lines = sorted(sim.lines, key=lambda line: request_number(line["request_id"]))
    assert {line["status"] for line in lines} == {"ready"}
    printed_versions = [line["strategy_version"] for line in lines]
    assert runs(printed_versions) == [2, 3, 2]  # no flapping between versions
    traces = assert_delivered_once(sim, stopped)
    stored_versions = [traces[line["request_id"]].strategy_version for line in lines]
    assert stored_versions == printed_versions  # each trace carries what its request used
    for line in lines:
        trace = traces[line["request_id"]]
        assert trace.documents == {
            "profile": 1,
            "after_sales_consultation": line["strategy_version"],
        }
        assert trace.config_resolution == line["resolution"]


# --- 2. webhook: the change arrives at once --------------------------------------------------------
@pytest.mark.worker
def test_webhook__publish_and_rollback__runtime_switches_within_1s_of_delivery(
    world, console, worker, sims, tmp_path
):
    # A loopback webhook URL: allowed by `loopback_targets` (WEBHOOK_ALLOW_PRIVATE_TARGETS).
    port = free_port()
    hook, secret = webhook_create(
        environment=world.sg, url=f"http://127.0.0.1:{port}/hooks/console", actor=world.admin
    )
    sim = start_sim(
        sims, console, world, tmp_path, poll=WEBHOOK_POLL, webhook_port=port, webhook_secret=secret
    )
    started_at = sim.started["t"]
    assert sim.wait_line(serving(2, "fresh"), 30) is not None

    def rollback():
        release = Release.objects.get(document=world.strategy[2].document, environment=world.sg)
        release_rollback(
            release=release, to_version=world.strategy[2], actor=world.admin, reason="loop test"
        )

    changes = [
        ("webhook, publish v3", 3, lambda: release_publish(
            version=world.strategy[3], environment=world.sg, actor=world.ops)),
        ("webhook, rollback to v2", 2, rollback),
    ]  # fmt: skip
    for what, version, change in changes:
        lines_mark, events_mark = len(sim.lines), len(sim.events)
        published = time.time()
        change()
        event = sim.wait_event("webhook", 60, start=events_mark)
        assert event is not None, f"{what}: no webhook delivery reached the runtime"
        assert (event["status"], event["outcome"]) == (202, "refresh_scheduled")
        line = sim.wait_line(serving(version), WEBHOOK_LIMIT + 10, start=lines_mark)
        assert line is not None, f"{what}: the runtime never served v{version}"
        after_delivery = line["t"] - event["t"]
        print(
            f"\n{what}: delivery reached the runtime {event['t'] - published:.3f} s after the "
            f"change (Celery worker), runtime serves v{version} {after_delivery:.3f} s after "
            f"the delivery (limit {WEBHOOK_LIMIT:.1f} s)"
        )
        assert after_delivery <= WEBHOOK_LIMIT
        # Well before the next poll (0.9 × the interval at the earliest): the webhook did it.
        assert line["t"] - started_at < 0.9 * WEBHOOK_POLL

    stopped = sim.stop()
    assert stopped["config"]["polls"] <= 1 + 2 * (1 + 3)  # start + per delivery ≤ 1 + 3 rechecks
    assert runs([line["strategy_version"] for line in sim.lines]) == [2, 3, 2]
    deliveries = WebhookDelivery.objects.filter(webhook=hook)
    assert [d.status for d in deliveries] == [WebhookDelivery.Status.DELIVERED] * 2
    assert_delivered_once(sim, stopped)


# --- 3. the console down for a while -------------------------------------------------------------------
def test_outage__console_stopped_and_restarted__requests_answered_traces_stored_once(
    world, console, sims, tmp_path
):
    sim = start_sim(sims, console, world, tmp_path, poll=POLL, extra_args=("--backoff-max", "1.0"))
    assert sim.wait_line(serving(2, "fresh"), 30) is not None
    assert wait_until(lambda: Trace.objects.filter(request_id__startswith="sim-").exists(), 15)

    console.stop()
    down = time.time()
    time.sleep(OUTAGE_SECONDS)
    # While down: the runtime answers from its last good copy, and says so.
    assert wait_until(lambda: any(line["t"] > down + 2 for line in sim.lines), 5)
    during = [line for line in sim.lines if down + 2 < line["t"] <= down + OUTAGE_SECONDS]
    # What the runtime holds now: answered, not stored (the console is down).
    buffered = len(sim.lines) - Trace.objects.filter(request_id__startswith="sim-").count()

    console.start()
    up = time.time()
    print(f"\noutage: console down {up - down:.1f} s; {len(during)} requests in its last "
          f"{OUTAGE_SECONDS - 2:.0f} s; about {buffered} traces buffered")  # fmt: skip
    back = sim.wait_line(lambda line: line["t"] > up and line["resolution"] == "fresh", 20)
    assert back is not None, "the runtime never confirmed its copy with the console again"
    print(f"outage: runtime fresh again {back['t'] - up:.3f} s after the restart")
    # The runtime delivers what it buffered by itself, while it keeps running.
    before_restart = {line["request_id"] for line in sim.lines if line["t"] <= up}
    drained = wait_until(
        lambda: Trace.objects.filter(request_id__in=before_restart).count() == len(before_restart),
        30,
        0.2,
    )
    assert drained, "the buffered traces were not delivered after the restart"
    print(f"outage: every trace of the outage stored {time.time() - up:.3f} s after the restart")
    stopped = sim.stop()
    print(f"outage: reporter stats {stopped['stats']}")

    # Every request was answered while the console was down: lines kept coming.
    assert len(during) >= 0.5 * (OUTAGE_SECONDS - 2) / 0.05
    assert {(line["status"], line["strategy_version"], line["resolution"]) for line in during} == {
        ("ready", 2, "stale")
    }
    times = [line["t"] for line in sorted(sim.lines, key=lambda x: request_number(x["request_id"]))]
    assert max(b - a for a, b in zip(times, times[1:], strict=False)) < 2.0  # never stuck
    # Buffered within the bound, delivered afterwards, each stored exactly once.
    assert 0 < buffered < sim.started["max_queue"]
    assert stopped["stats"]["retries"] >= 1
    traces = assert_delivered_once(sim, stopped)
    assert {traces[line["request_id"]].config_resolution for line in during} == {"stale"}
    assert all(traces[line["request_id"]].config_fallback for line in during)
