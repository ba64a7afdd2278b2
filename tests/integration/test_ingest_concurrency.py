"""Issue 31 item 4, "Done when": trace batches and outcome batches of a running rollout, posted
from 4 runtimes over real HTTP to a real ingest server process for 60 s, beside the task that counts
the outcomes which came before their trace (in a thread with its own connection): every
writer takes the counter rows (health minute and hour, rollout minute and hour, samples) in
one order, so 0 deadlocks, 0 5xx, and every trace and every outcome counted exactly once.

The retention purge, which deletes counter rows, takes them in that order too (the last test).

Each runtime posts a batch of traces, then the outcomes of that batch (counted at once by
the outcome store) together with the outcomes of its next batch (stored before their trace:
counted later by the task) — all on the same few minute and hour rows, so the writers meet.
"""

from __future__ import annotations

import itertools
import threading
import time
import urllib.error
import urllib.request
from datetime import timedelta

import orjson
import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from strategies.releases.models import Rollout
from tests.engines import console_env
from tests.factories import ReleaseFactory, runtime_token, task_in_arm, trace_payload, world
from tests.factories.documents import DocumentFactory, FrozenVersionFactory
from tests.factories.outcomes import OUTCOMES_URL, outcome_kinds
from tests.factories.traces import INGEST_URL
from tests.runtime_sim import ConsoleServer, wait_until
from traces.health.counters import HEALTH_MINUTES, counters_write_tables
from traces.health.models import Arm, HealthCounter, HealthCounterHour
from traces.health.services import counters_purge_expired
from traces.outcomes.models import Outcome
from traces.outcomes.services import outcomes_count_pending
from traces.rollouts.models import RolloutCounter, RolloutCounterHour

pytestmark = pytest.mark.django_db(transaction=True)

STRATEGY = "after_sales_consultation"
AGENT = "assistant_professional"
RUNTIMES = 4
SECONDS = 60.0
TRACES_PER_BATCH = 20


@pytest.fixture
def rollout_world():
    """sg-test with v3 live, v4 rolling out (its first step, half the units), the standard outcome kinds, and one
    token per runtime."""
    data = world()
    sg_test = data["environments"]["sg-test"]
    document = DocumentFactory(agent=data["agents"][AGENT], key=STRATEGY)
    versions = {n: FrozenVersionFactory(document=document, number=n) for n in (3, 4)}
    ReleaseFactory(version=versions[3], environment=sg_test)
    Rollout.objects.create(
        key="ro-31",
        document=document,
        environment=sg_test,
        version=versions[4],
        control_version=versions[3],
        plan=[{"share": 0.5, "bake_seconds": 3600}, {"share": 1.0, "bake_seconds": 3600}],
        plan_hash="test",
        state=Rollout.State.RUNNING,
        step=0,
        step_started_at=timezone.now() - timedelta(minutes=10),
        started_by="test",
    )
    outcome_kinds(sg_test)
    return [runtime_token(sg_test) for _ in range(RUNTIMES)]


@pytest.fixture
def web(rollout_world, settings, tmp_path):
    """The console's ingest server (where runtimes send batches, issue 36) as a real process,
    serving requests on several threads; the web server bounds ingest to one at a time."""
    env = console_env(
        GRANIAN_BLOCKING_THREADS="8",
    )
    server = ConsoleServer(
        env, app="console.ingest_wsgi:application", log_path=tmp_path / "ingest.log"
    ).start()
    yield server
    server.stop()


def rollout_trace(request_id: str, arm: str, minute) -> dict:
    """A trace of rollout ro-31: arm new served v4 with v3 as its shadow, arm old the reverse."""
    served, other = (4, 3) if arm == "new" else (3, 4)
    return trace_payload(
        request_id,
        occurred_at=minute.isoformat(),
        documents={"profile": 7, STRATEGY: served},
        rollout={"id": "ro-31", "arm": arm, "step": 0},
        task=task_in_arm(arm, rollout_id="ro-31", share=0.5),  # the unit the console puts there
        shadow={"version": other, "status": "ready", "selected": ["task_state:T9", "P7-v2"]},
    )


def post(base: str, path: str, secret: str, body: dict) -> tuple[int, dict | str]:
    request = urllib.request.Request(  # noqa: S310 (loopback)
        base + path,
        data=orjson.dumps(body),
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")[:300]


def deadlocks_so_far() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


def test_ingest__traces_outcomes_and_counting_task_of_a_rollout_for_60s__no_deadlock_no_5xx_each_counted_once(  # noqa: E501
    rollout_world, web
):
    # Given a running rollout, 4 runtimes and the counting task
    deadlocks_before = deadlocks_so_far()
    now = timezone.now().replace(second=0, microsecond=0)
    minutes = [now - timedelta(minutes=n) for n in (1, 2, 3)]  # few rows: the writers meet
    deadline = time.monotonic() + SECONDS
    failures: list = []
    posted = {"requests": 0, "traces": 0, "outcomes": 0}
    lock = threading.Lock()

    def runtime(number: int, secret: str) -> None:
        def batch_ids(n: int) -> list[str]:
            return [f"rt{number}-b{n}-{i}" for i in range(TRACES_PER_BATCH)]

        def outcomes_of(ids: list[str]) -> list[dict]:
            return [
                {"request_id": r, "kind": "escalated", "value": i % 3 == 0, "agent": AGENT}
                for i, r in enumerate(ids)
            ]

        half = TRACES_PER_BATCH // 2
        for n in itertools.count():
            last = time.monotonic() >= deadline
            ids = batch_ids(n)
            traces = [
                rollout_trace(r, ("new", "old")[i % 2], minutes[(i + number) % len(minutes)])
                for i, r in enumerate(ids)
            ]
            status, answer = post(web.url, INGEST_URL, secret, {"traces": traces})
            if status != 200 or answer["accepted"] != len(traces):
                failures.append(("traces", status, answer))
                return
            # Outcomes of half this batch (their traces are stored: counted at once) and of
            # the other half of the next batch (stored before their traces: the task's).
            outcomes = outcomes_of(ids[:half]) + (
                [] if last else outcomes_of(batch_ids(n + 1)[half:])
            )
            status, answer = post(web.url, OUTCOMES_URL, secret, {"outcomes": outcomes})
            if status != 200 or answer["rejected"]:
                failures.append(("outcomes", status, answer))
                return
            with lock:
                posted["requests"] += 2
                posted["traces"] += len(traces)
                posted["outcomes"] += answer["accepted"]
            if last:
                return

    def counting_task() -> None:
        try:
            while time.monotonic() < deadline:
                outcomes_count_pending()
                time.sleep(0.2)  # the beat's 30 s, compressed: it meets every batch
        except Exception as error:  # noqa: BLE001 - a deadlock is what this test looks for
            failures.append(("count_pending_outcomes", repr(error)))
        finally:
            connections.close_all()

    # When they all run at once for 60 s
    threads = [
        threading.Thread(target=runtime, args=(number, secret))
        for number, secret in enumerate(rollout_world)
    ]
    threads.append(threading.Thread(target=counting_task))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(SECONDS + 60)
    web.stop()  # its connections closed: their statistics are flushed
    while outcomes_count_pending():  # the last outcomes that came first
        pass

    print(
        f"\n{RUNTIMES} runtimes, {SECONDS:.0f} s: {posted['requests']} requests, "
        f"{posted['traces']} traces, {posted['outcomes']} outcomes, failures {len(failures)}"
    )
    # Then no request failed, PostgreSQL saw no deadlock, and every trace and outcome counts once
    assert failures == []
    assert posted["traces"] > RUNTIMES * TRACES_PER_BATCH * 10  # it really ran
    assert deadlocks_so_far() == deadlocks_before
    assert Outcome.objects.filter(counted_at__isnull=True).count() == 0
    assert Outcome.objects.count() == posted["outcomes"]
    health = {"document": STRATEGY, "arm": Arm.LIVE}
    for table in (HealthCounter, HealthCounterHour):
        rows = list(table.objects.filter(**health).values_list("traces", "outcomes"))
        assert sum(traces for traces, _ in rows) == posted["traces"]
        assert sum(sum(outcomes.values()) for _, outcomes in rows) == posted["outcomes"]
    for table in (RolloutCounter, RolloutCounterHour):
        rows = list(table.objects.filter(rollout_key="ro-31").values_list("traces", "outcomes"))
        assert sum(traces for traces, _ in rows) == posted["traces"]
        assert sum(sum(outcomes.values()) for _, outcomes in rows) == posted["outcomes"]


def test_purge__expired_rows_a_writer_is_adding_to__taken_in_the_one_order_no_deadlock():
    # Given two expired minute rows, the one with the higher key stored first (a lower ctid)
    old = (timezone.now() - timedelta(days=40)).replace(second=0, microsecond=0)
    keys = {}
    for document in ("doc-b", "doc-a"):
        HealthCounter.objects.create(
            agent_id=1, environment_id=1, document=document, version=1, arm="live", minute=old
        )
        keys[document] = (1, 1, document, 1, Arm.LIVE, old)
    errors: list = []
    first_held = threading.Event()

    def one_trace() -> dict:
        counts = HEALTH_MINUTES.counts()
        counts.add("traces")
        return counts

    def late_writer() -> None:
        """A late trace counted on both rows, in the one order (doc-a, then doc-b): what one
        statement does row by row, here a statement per row so the purge can come between."""
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                counters_write_tables(cursor, [(HEALTH_MINUTES, {keys["doc-a"]: one_trace()})])
                first_held.set()
                wait_until(purge_waits, timeout=10)
                counters_write_tables(cursor, [(HEALTH_MINUTES, {keys["doc-b"]: one_trace()})])
        except Exception as error:  # noqa: BLE001 - a deadlock is what this test looks for
            errors.append(("writer", repr(error)))
        finally:
            connection.close()

    def purge() -> None:
        try:
            counters_purge_expired()
        except Exception as error:  # noqa: BLE001
            errors.append(("purge", repr(error)))
        finally:
            connection.close()

    def purge_waits() -> bool:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")  # else one per transaction
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database() AND query LIKE 'DELETE FROM health_counter%%'"
            )
            return cursor.fetchone()[0] > 0

    # When the purge runs while the writer holds the first row
    writer = threading.Thread(target=late_writer)
    writer.start()
    assert first_held.wait(10)
    purger = threading.Thread(target=purge)
    purger.start()
    writer.join(30)
    purger.join(30)

    # Then neither fails; the late trace is counted, and the rows go at the next purge
    assert errors == []
    assert HealthCounter.objects.count() in (0, 2)  # purged after the writer, or not yet
    counters_purge_expired()
    assert HealthCounter.objects.count() == 0
