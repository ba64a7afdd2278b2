"""The audit chains' lock is the last lock a transaction takes, held only while it commits.

A service's audit and access rows are appended when its outermost transaction is about to
commit (console.kernel.audit), so a long import neither deadlocks against a publish of the
same release (it used to take the chain lock first and the release row later, a publish the
reverse) nor holds back every other audited write in the console while it runs; and imports,
publishes, rollbacks, promotions, approvals, grants and tokens written together for 30 s
meet no deadlock and no 500, and leave both chains intact. Real PostgreSQL, each request on
its own thread and connection through the operator API; the first two tests hold a lock to
stop the other transactions exactly where the race used to bite, and watch pg_locks to know
they wait."""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import logging
import random
import threading
import time
from collections import Counter

import pytest
from django.db import connection, transaction
from django.test import Client

from console.access.services import chain_checkpoints_write
from console.kernel.audit import (
    CHAIN_LOGS,
    AccessAction,
    AuditAction,
    access_record,
    audit_record,
    chain_verify,
)
from console.kernel.errors import Conflict
from console.kernel.models import AccessLogEntry, AuditRecord
from console.kernel.transactions import service_transaction
from strategies.releases.models import Release
from tests.factories import SAMPLE_AGENT, STRATEGY_KEY, publish, release_setup, user_with_grants

pytestmark = pytest.mark.django_db(transaction=True)
AGENT_API = f"/api/v1/agents/{SAMPLE_AGENT}/"
CONFIG_API = AGENT_API + "config"
SG_TEST_RELEASE = AGENT_API + f"documents/{STRATEGY_KEY}/releases/sg-test/"
AUDIT_CHAIN_KEY = 7_201_001  # console.kernel.audit's lock of the audit log


class Request(threading.Thread):
    """One HTTP request on a thread of its own (its own database connection): `pid` is its
    backend once connected, `response` the answer, `seconds` how long it took."""

    def __init__(self, user, method: str, path: str, data=None):
        super().__init__(daemon=True)
        self.user, self.method, self.path, self.data = user, method, path, data
        self.connected = threading.Event()
        self.pid = None
        self.response = None
        self.seconds = None

    def run(self):
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.pid = cursor.fetchone()[0]
            self.connected.set()
            client = Client(raise_request_exception=False)
            client.force_login(self.user)
            started = time.monotonic()
            self.response = getattr(client, self.method)(
                self.path, self.data, content_type="application/json"
            )
            self.seconds = time.monotonic() - started
        finally:
            self.connected.set()
            connection.close()

    def go(self) -> Request:
        self.start()
        self.connected.wait(10)
        return self


def waiting_for_a_lock(pid) -> bool:
    with connection.cursor() as cursor:  # pg_locks is live, even inside a transaction
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted)", [pid]
        )
        return cursor.fetchone()[0]


def wait_until_stuck_or_done(request: Request, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not request.is_alive() or waiting_for_a_lock(request.pid):
            return
        time.sleep(0.02)
    pytest.fail(f"{request.method} {request.path} neither waited for a lock nor finished")


def finished(*requests: Request) -> list:
    for request in requests:
        request.join(60)
        assert not request.is_alive(), f"{request.path} did not finish"
    return [request.response for request in requests]


def assert_chains_intact():
    for model in CHAIN_LOGS.values():
        report = chain_verify(model)
        assert report.intact, (model.__name__, report.breaks[:3], report.problems[:3])


def exported(client) -> dict:
    response = client.get(CONFIG_API)
    assert response.status_code == 200, response.content
    return json.loads(response.content)


def with_next_version(data: dict, *, environments, max_input_tokens: int) -> dict:
    """The exported file plus the next version of the strategy (its last one with another
    budget), live in `environments`: applying it freezes the version (audited), then moves
    the strategy's release there (prod is protected: an approval request)."""
    [strategy] = [d for d in data["documents"] if d["key"] == STRATEGY_KEY]
    strategy["draft"] = None
    new = copy.deepcopy(strategy["versions"][-1])
    new.update(number=new["number"] + 1, note="imported")
    new["body"]["budget"]["max_input_tokens"] = max_input_tokens
    strategy["versions"].append(new)
    for env in environments:
        data["live"].setdefault(env, {})[STRATEGY_KEY] = new["number"]
    return {"file": data, "dry_run": False}


def file_with_v4_live_in_sg_test(user) -> dict:
    client = Client()
    client.force_login(user)
    return with_next_version(exported(client), environments=["sg-test"], max_input_tokens=8500)


@pytest.fixture
def live_v1_to_v3():
    w = release_setup()
    for n in (1, 2, 3):
        publish(w.strategy[n], w.envs["sg-test"], actor=w.ops)
    publish(w.profile[1], w.envs["sg-test"], actor=w.ops)
    return w


def test_import_and_rollback_of_the_same_release__racing__no_deadlock_no_500(live_v1_to_v3):
    # Given an import that will freeze v4 and move the sg-test release, and a rollback of
    # that release, both let go at the moment the old lock order deadlocked them: the
    # import first in line for the audit chain, the rollback holding the release row
    w = live_v1_to_v3
    data = file_with_v4_live_in_sg_test(w.ops)
    rollback = {"version": 2, "reason": "race"}
    with transaction.atomic():
        with connection.cursor() as cursor:  # another audited writer holds the chain
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [AUDIT_CHAIN_KEY])
        importing = Request(w.ops, "post", CONFIG_API, data).go()
        wait_until_stuck_or_done(importing)
        rolling_back = Request(w.admin, "post", SG_TEST_RELEASE + "rollback/", rollback).go()
        wait_until_stuck_or_done(rolling_back)
    # When both go on
    imported, rolled_back = finished(importing, rolling_back)

    # Then neither fails: one of them moves the release, the other is told it moved (409)
    answers = sorted([imported.status_code, rolled_back.status_code])
    assert answers in ([200, 200], [200, 409]), (imported.content, rolled_back.content)
    assert b"deadlock" not in imported.content + rolled_back.content
    release = Release.objects.get(document__key=STRATEGY_KEY, environment__key="sg-test")
    assert release.revision == 3 + answers.count(200)
    assert_chains_intact()


def test_long_import__unrelated_audited_write__not_held_back(live_v1_to_v3):
    # Given an import stuck for 3 s after its first audited change (its release row is
    # locked by someone else)
    w = live_v1_to_v3
    someone = user_with_grants("someone", viewer=None)
    data = file_with_v4_live_in_sg_test(w.ops)
    release = Release.objects.get(document__key=STRATEGY_KEY, environment__key="sg-test")
    with transaction.atomic():
        Release.objects.select_for_update().get(pk=release.pk)
        held_since = time.monotonic()
        importing = Request(w.ops, "post", CONFIG_API, data).go()
        wait_until_stuck_or_done(importing)
        assert importing.is_alive(), importing.response.content
        # When someone else creates a personal token meanwhile
        token = Request(
            someone, "post", "/api/v1/me/tokens/", {"name": "ci", "capabilities": ["view_config"]}
        ).go()
        token.join(3.0)  # it should not need the import to finish
        time.sleep(max(0.0, 3.0 - (time.monotonic() - held_since)))
    imported, created = finished(importing, token)

    # Then the token was made at once, not after the import
    assert created.status_code == 201, created.content
    assert token.seconds < 1.5, f"token creation waited {token.seconds:.2f} s"
    assert imported.status_code == 200, imported.content
    assert AuditRecord.objects.filter(action="personal_token.create").count() == 1
    assert AuditRecord.objects.filter(action="config.import").count() == 1
    assert_chains_intact()


# --- Done-when: every kind of audited writer together for 30 s -------------------------------
SECONDS = 30
RACING = {400, 403, 404, 409}  # what a racing writer may be answered besides success; no 5xx


def deadlocks_so_far() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


class Writers:
    """Writers looping on threads of their own until `stop`, and what they were answered."""

    def __init__(self):
        self.stop = threading.Event()
        self.answers: dict[str, Counter] = {}  # writer: {status: how many}
        self.wins: Counter = Counter()  # writer: how many of its writes succeeded
        self.failures: list[str] = []
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def note(self, writer: str, response, *success: int) -> bool:
        """Count the answer; a success is one of `success`, anything else but a refusal of
        a racing write (RACING) is a failure."""
        with self._lock:
            self.answers.setdefault(writer, Counter())[response.status_code] += 1
            if response.status_code not in {*success, *RACING} or b"deadlock" in response.content:
                self.failures.append(f"{writer}: {response.status_code} {response.content[:300]}")
            won = response.status_code in success
            self.wins[writer] += won
        return won

    def start(self, writer: str, user, step) -> None:
        """Run `step(client, rng)` again and again as `user`, until told to stop."""

        def run():
            rng = random.Random(writer)
            client = Client(raise_request_exception=False)
            if user is not None:
                client.force_login(user)
            try:
                while not self.stop.is_set():
                    step(client, rng)
            except Exception as exc:  # noqa: BLE001 - reported by the test
                with self._lock:
                    self.failures.append(f"{writer} crashed: {exc!r}")
            finally:
                connection.close()

        self.threads.append(threading.Thread(target=run, name=writer, daemon=True))
        self.threads[-1].start()

    def post(self, writer: str, user, path: str, body, *success: int) -> None:
        """A writer POSTing `body(rng)` to `path`, answered one of `success` when it wins."""
        self.start(
            writer,
            user,
            lambda client, rng: self.note(
                writer, client.post(path, body(rng), content_type="application/json"), *success
            ),
        )

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)
            assert not thread.is_alive(), f"{thread.name} is stuck"


def test_writers_together_for_30_s__no_deadlock_no_500_chains_verify(live_v1_to_v3, caplog):
    # Given every kind of audited writer, and the chains checkpointed every second
    w = live_v1_to_v3
    someone = user_with_grants("someone", viewer=None)
    writers = Writers()
    caplog.set_level(logging.ERROR)
    deadlocks_before = deadlocks_so_far()

    def import_next_version(client, rng):
        data = with_next_version(
            exported(client),
            environments=["sg-test", "prod"],
            max_input_tokens=rng.randrange(4000, 9000),
        )
        writers.note("import", client.post(CONFIG_API, data, content_type="application/json"), 200)

    def approve_a_pending_request(client, rng):
        pending = client.get("/api/v1/approvals/", {"status": "pending"}).json()["results"]
        theirs = [r["id"] for r in pending if r["requested_by"] != "ops2"]
        if not theirs:
            time.sleep(0.05)
            return
        approve = f"/api/v1/approvals/{rng.choice(theirs)}/approve/"
        response = client.post(approve, {"note": "ok"}, content_type="application/json")
        writers.note("approve", response, 200)

    def grant_then_revoke(client, rng):
        grant = {"user": "someone", "role": "viewer", "agent": SAMPLE_AGENT, "reason": "race"}
        created = client.post("/api/v1/grants/", grant, content_type="application/json")
        if writers.note("grant", created, 201):
            revoke = f"/api/v1/grants/{created.json()['id']}/"
            response = client.delete(
                revoke, {"reason": "race over"}, content_type="application/json"
            )
            writers.note("revoke", response, 204)

    def checkpoint(client, rng):
        chain_checkpoints_write()
        time.sleep(1)

    # When they all run together for 30 s
    writers.start("import", w.ops, import_next_version)
    writers.post(
        "publish",
        w.ops,
        SG_TEST_RELEASE,
        lambda rng: {"version": rng.randint(1, 3), "reason": "race"},
        200,
    )
    writers.post(
        "rollback",
        w.admin,
        SG_TEST_RELEASE + "rollback/",
        lambda rng: {"version": rng.randint(1, 3), "reason": "race"},
        200,
    )
    writers.post(
        "promote",
        w.ops,
        AGENT_API + "promote/",
        lambda rng: {"source": "sg-test", "target": "prod", "reason": "race"},
        200,  # nothing to change
        202,  # an approval request in prod
    )
    writers.start("approve", w.ops2, approve_a_pending_request)
    writers.start("grant", w.admin, grant_then_revoke)
    made = itertools.count()
    writers.post(
        "token",
        someone,
        "/api/v1/me/tokens/",
        lambda rng: {"name": f"ci-{next(made)}", "capabilities": ["view_config"]},
        201,
    )
    writers.start("checkpoint", None, checkpoint)
    time.sleep(SECONDS)
    writers.join()
    time.sleep(0.6)  # the last transactions' statistics reach pg_stat_database
    deadlocks = deadlocks_so_far() - deadlocks_before
    print(
        {writer: dict(counts) for writer, counts in writers.answers.items()}, deadlocks, "deadlocks"
    )

    # Then PostgreSQL saw no deadlock, nobody was answered 500, and every writer got work done
    assert deadlocks == 0
    assert writers.failures == [], (len(writers.failures), writers.failures[:3])
    assert not [r for r in caplog.records if "deadlock" in r.getMessage().lower()]
    everyone = {"import", "publish", "rollback", "promote", "approve", "grant", "revoke", "token"}
    assert {writer for writer, won in writers.wins.items() if won} == everyone, writers.answers
    # and both chains verify, reaching the checkpoints taken while they ran
    for model in CHAIN_LOGS.values():
        report = chain_verify(model)
        assert report.intact, (model.__name__, report.breaks[:3], report.problems[:3])
        assert report.reached is not None and report.reached.last_id > 0


# --- what a service's rows become ---------------------------------------------------------------
@service_transaction
def _audited(label: str, *, fails: bool = False):
    audit_record(actor=None, action=AuditAction.AGENT_UPDATE, target=("test", 0, label))
    access_record(actor=None, action=AccessAction.TRACE_VIEW, target=("test", 0, label))
    if fails:
        raise Conflict(f"{label} refused")


@service_transaction
def _composed() -> int:
    _audited("first")
    with contextlib.suppress(Conflict):  # its caller goes on
        _audited("refused", fails=True)
    _audited("second")
    return AuditRecord.objects.count()  # nothing appended yet: that is the commit's last step


def test_service_rows__appended_at_the_end_in_order__a_failed_nested_service_s_dropped():
    # Given a service that composes three, the middle one refused and its refusal caught
    # When it runs
    seen_inside = _composed()

    # Then its rows were appended as its last step, in the order written, the refused
    # service's rows gone with its savepoint, and both chains verify
    assert seen_inside == 0
    for model in (AuditRecord, AccessLogEntry):
        labels = list(model.objects.order_by("id").values_list("target_label", flat=True))
        assert labels == ["first", "second"], model.__name__
    assert_chains_intact()


def test_rows_outside_a_service__appended_at_once():
    row = audit_record(actor=None, action=AuditAction.AGENT_UPDATE, target=("test", 0, "now"))
    assert AuditRecord.objects.get().pk == row.pk
