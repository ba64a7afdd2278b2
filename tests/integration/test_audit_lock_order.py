"""The audit chains' lock is the last lock a transaction takes, held only while it commits.

A service's audit and access rows are appended when its outermost transaction is about to
commit (console.kernel.audit), so a long import neither deadlocks against a publish of the
same release (it used to take the chain lock first and the release row later, a publish the
reverse) nor holds back every other audited write in the console while it runs. Real
PostgreSQL, each request on its own connection; a test holds a lock to stop the other
transactions exactly where the race used to bite, and watches pg_locks to know they wait."""

from __future__ import annotations

import copy
import json
import threading
import time

import pytest
from django.db import connection, transaction
from django.test import Client

from console.kernel.audit import CHAIN_LOGS, chain_verify
from console.kernel.models import AuditRecord
from strategies.releases.models import Release
from tests.factories import STRATEGY_KEY, SAMPLE_AGENT, publish, release_setup, user_with_grants

pytestmark = pytest.mark.django_db(transaction=True)
CONFIG_API = f"/api/v1/agents/{SAMPLE_AGENT}/config"
SG_TEST_RELEASE = f"/api/v1/agents/{SAMPLE_AGENT}/documents/{STRATEGY_KEY}/releases/sg-test/"
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
        cursor.execute("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted)", [pid])
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


def file_with_v4_live_in_sg_test(user) -> dict:
    """The agent's exported file with v4 of the strategy (v3 with a bigger budget) live in
    sg-test: applying it freezes v4 (audited), then moves the sg-test release."""
    client = Client()
    client.force_login(user)
    data = json.loads(client.get(CONFIG_API).content)
    [strategy] = [d for d in data["documents"] if d["key"] == STRATEGY_KEY]
    strategy["draft"] = None
    new = copy.deepcopy(strategy["versions"][-1])
    new.update(number=4, note="bigger budget")
    new["body"]["budget"]["max_input_tokens"] = 8500
    strategy["versions"].append(new)
    data["live"]["sg-test"][STRATEGY_KEY] = 4
    return data


@pytest.fixture
def live_v1_to_v3():
    w = release_setup()
    for n in (1, 2, 3):
        publish(w.strategy[n], w.envs["sg-test"], actor=w.ops)
    return w


def test_import_and_rollback_of_the_same_release__racing__no_deadlock_no_500(live_v1_to_v3):
    # Given an import that will freeze v4 and move the sg-test release, and a rollback of
    # that release, both let go at the moment the old lock order deadlocked them: the
    # import first in line for the audit chain, the rollback holding the release row
    w = live_v1_to_v3
    data = {"file": file_with_v4_live_in_sg_test(w.ops), "dry_run": False}
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
    data = {"file": file_with_v4_live_in_sg_test(w.ops), "dry_run": False}
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
