"""The runtime read path under Redis faults (issue 11, items 1 and 2).

PostgreSQL is the truth: the rendered payload (`ConfigPayload`) and the revocation
(`RuntimeToken.revoked_at`). Redis and each process's mirror are caches of it, so

- a Redis error at commit never fails the change: the pushes after commit are robust, a beat
  task (`strategies.reconcile_runtime_cache`) brings Redis and the mirrors back in line with
  PostgreSQL, a relay re-queues webhook deliveries left pending, and mirror entries expire
  (tests/integration/test_runtime_mirror.py);
- with Redis stopped, a real console process still serves config (200 and 304 with the
  stored ETag), takes traces, lets a person sign in and shows the tokens page, checks tokens
  against the database, and `/healthz` answers 503 naming the broker.

The outage test starts its own redis-server on a free port and stops only that one.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from http.cookiejar import CookieJar
from pathlib import Path

import pytest
import redis
from axes.models import AccessAttempt
from django.test import Client

from strategies.delivery import config as runtime_config
from strategies.delivery import webhooks
from strategies.delivery.models import ConfigPayload, Webhook, WebhookDelivery
from strategies.releases.services import release_publish, release_rollback
from strategies.runtime.auth import token_hash
from strategies.runtime.models import RuntimeToken
from strategies.runtime.tokens import runtime_token_revoke
from strategies.tasks import reconcile_runtime_cache, relay_webhook_deliveries
from tests.engines import child_env
from tests.factories import bearer, release_setup, runtime_token, trace_payload
from tests.runtime_sim import ConsoleServer
from traces.models import Trace

CONFIG = "/api/v1/runtime/config/assistant_professional"
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world():
    w = release_setup()
    release_publish(version=w.profile[1], environment=w.envs["sg-test"], actor=w.ops)
    release_publish(version=w.strategy[2], environment=w.envs["sg-test"], actor=w.ops)
    return w


# --- item 1: a Redis error at commit -----------------------------------------------------------
class BrokenRedis:
    """Every command fails as on a connection blip (the pub/sub listener is left alone)."""

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise redis.ConnectionError("Connection reset by peer (simulated blip)")

        return fail


@pytest.fixture
def redis_blip(monkeypatch):
    """While active, the Redis client of this process and the Celery broker both fail."""

    def start():
        monkeypatch.setattr(runtime_config, "_client", BrokenRedis())

        def send_task(*args, **kwargs):
            raise redis.ConnectionError("broker unreachable (simulated blip)")

        monkeypatch.setattr(webhooks.current_app, "send_task", send_task)

    def end():
        monkeypatch.undo()
        runtime_config.redis_circuit_reset()

    yield start, end
    monkeypatch.undo()
    runtime_config.redis_circuit_reset()


def wait_until(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_publish__redis_error_at_commit__committed_no_error_and_reconciled(world, redis_blip):
    start_blip, end_blip = redis_blip
    sg_test = world.envs["sg-test"]
    secret = runtime_token(sg_test)
    client = Client()
    old_etag = client.get(CONFIG, **bearer(secret))["ETag"]
    key = runtime_config._config_key("assistant_professional", sg_test.pk)
    # Another web process would still hold the old payload in its mirror:
    other_process_entry = ("stale", b"{}")

    start_blip()
    release_publish(version=world.strategy[3], environment=sg_test, actor=world.ops)  # no error
    end_blip()

    row = ConfigPayload.objects.get(agent=world.agent, environment=sg_test)
    assert row.etag != old_etag  # the durable state moved with the release
    runtime_config.mirror.remember(key, other_process_entry, runtime_config.mirror.generation)
    assert runtime_config.mirror.get(key) == other_process_entry

    assert reconcile_runtime_cache() >= 1  # the beat task: Redis and mirrors follow PostgreSQL

    assert wait_until(lambda: runtime_config.mirror.get(key) is None)  # invalidation arrived
    response = client.get(CONFIG, **bearer(secret))
    assert response["ETag"] == row.etag
    assert response.content == bytes(row.body)
    assert reconcile_runtime_cache() == 0  # nothing left to repair


def test_publish_page__redis_error_at_commit__operator_redirected_not_500(world, redis_blip):
    start_blip, end_blip = redis_blip
    client = Client(raise_request_exception=False)
    client.force_login(world.ops)
    page = "/releases/assistant_professional/after_sales_consultation/sg-test/publish/"

    start_blip()
    response = client.post(page, {"version": "3", "reason": "blip", "revision": "1"})
    end_blip()

    assert response.status_code == 302
    row = ConfigPayload.objects.get(agent=world.agent, environment=world.envs["sg-test"])
    assert json.loads(bytes(row.body))["strategies"]["after_sales_consultation"]["version"] == 3


def test_rollback__redis_error_at_commit__committed_without_error(world, redis_blip):
    start_blip, end_blip = redis_blip
    release = release_publish(
        version=world.strategy[3], environment=world.envs["sg-test"], actor=world.ops
    ).release

    start_blip()
    release_rollback(
        release=release, to_version=world.strategy[2], actor=world.admin, reason="Redis blip drill"
    )
    end_blip()

    release.refresh_from_db()
    assert release.version == world.strategy[2]


def test_revoke__redis_error_at_commit__token_refused_after_reconcile(world, redis_blip):
    start_blip, end_blip = redis_blip
    secret = runtime_token(world.envs["sg-test"])
    client = Client()
    assert client.get(CONFIG, **bearer(secret)).status_code == 200  # identity cached in Redis

    start_blip()
    runtime_token_revoke(token=RuntimeToken.objects.get(), actor=world.admin)  # no error
    end_blip()

    assert RuntimeToken.objects.get().revoked_at is not None
    reconcile_runtime_cache()
    assert client.get(CONFIG, **bearer(secret)).status_code == 401


def test_webhook__broker_error_at_commit__relayed_when_overdue(world, redis_blip, monkeypatch):
    sg_test = world.envs["sg-test"]
    Webhook.objects.create(environment=sg_test, url="https://runtime.invalid/hook", secret="s")
    start_blip, end_blip = redis_blip

    start_blip()
    release_publish(version=world.strategy[3], environment=sg_test, actor=world.ops)
    end_blip()
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == WebhookDelivery.Status.PENDING and delivery.tries == 0

    sent = []
    relay_now = webhooks.deliveries_relay  # a fresh delivery is not overdue yet
    assert relay_now(grace=timedelta(minutes=5), send=sent.extend) == 0
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        created_at=datetime.now(UTC) - timedelta(minutes=10)
    )
    assert relay_now(grace=timedelta(minutes=5), send=sent.extend) == 1
    assert sent == [delivery.pk]
    queued = []
    monkeypatch.setattr(
        # (sent through one shared producer now: `producer=` is the broker connection)
        webhooks.current_app,
        "send_task",
        lambda name, args, queue, **producer: queued.append(args),
    )
    assert relay_webhook_deliveries() == 1  # the beat task, with its default grace
    assert queued == [(delivery.pk,)]


# --- item 2: a Redis outage, with a real console process ---------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class OwnRedis:
    """A redis-server of this test only, on a free loopback port, without persistence."""

    def __init__(self):
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> OwnRedis:
        binary = shutil.which("redis-server") or str(ROOT / ".venv" / "bin" / "redis-server")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            try:
                if redis.Redis(port=self.port, socket_timeout=1).ping():
                    return self
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # an outage, not a shutdown
            self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture
def own_redis():
    server = OwnRedis().start()
    yield server
    server.stop()


@pytest.fixture
def console_on_own_redis(own_redis, tmp_path):
    # The test database of this process, but a Redis of its own (the one the test kills).
    env = child_env(REDIS_URL=own_redis.url, DEBUG="false", LOG_LEVEL="WARNING")
    server = ConsoleServer(env, log_path=tmp_path / "console.log").start()
    yield server
    server.stop()


def fetch(url, *, method="GET", headers=None, data=None, opener=None):
    """(status, headers, body, final URL) of one request (redirects followed); errors are
    answers too."""
    request = urllib.request.Request(url, method=method, headers=headers or {}, data=data)
    try:
        with (opener or urllib.request.build_opener()).open(request, timeout=15) as response:
            return response.status, response.headers, response.read(), response.url
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read(), url


def sign_in(base: str, username: str, password: str):
    jar = CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    status, _, page, _ = fetch(f"{base}/login/", opener=opener)
    assert status == 200
    csrf = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1).decode()
    form = urllib.parse.urlencode(
        {"username": username, "password": password, "csrfmiddlewaretoken": csrf}
    ).encode()
    status, _, _, landed = fetch(
        f"{base}/login/",
        method="POST",
        data=form,
        headers={"Content-Type": "application/x-www-form-urlencoded", "Referer": f"{base}/login/"},
        opener=opener,
    )
    return status, landed, opener


def test_redis_stopped__console_serves_config_traces_sign_in_tokens_page(
    world, own_redis, console_on_own_redis
):
    base = console_on_own_redis.url
    secret = runtime_token(world.envs["sg-test"])
    doomed = runtime_token(world.envs["sg-test"])
    auth = {"Authorization": f"Bearer {secret}"}
    status, headers, body, _ = fetch(base + CONFIG, headers=auth)  # fills Redis and the mirror
    assert status == 200
    etag = headers["ETag"]
    assert fetch(base + CONFIG, headers={"Authorization": f"Bearer {doomed}"})[0] == 200

    own_redis.stop()
    runtime_token_revoke(
        token=RuntimeToken.objects.get(token_hash=token_hash(doomed)), actor=world.admin
    )

    # Config: from the stored payload, with its ETag; 304 while current.
    status, headers, again, _ = fetch(base + CONFIG, headers=auth)
    assert (status, headers["ETag"], again) == (200, etag, body)
    assert fetch(base + CONFIG, headers={**auth, "If-None-Match": etag})[0] == 304
    # Tokens are checked against the database: the one revoked meanwhile is refused.
    assert wait_until(
        lambda: fetch(base + CONFIG, headers={"Authorization": f"Bearer {doomed}"})[0] == 401,
        timeout=10,
    )
    # Trace ingest: 200, and the trace is committed.
    trace = trace_payload(
        "outage-1",
        occurred_at=datetime.now(UTC).isoformat(),
        documents={"profile": 1, "after_sales_consultation": 2},
    )
    status, _, answer, _ = fetch(
        f"{base}/api/v1/runtime/traces",
        method="POST",
        data=json.dumps({"traces": [trace]}).encode(),
        headers={**auth, "Content-Type": "application/json"},
    )
    assert status == 200, answer
    assert json.loads(answer)["accepted"] == 1
    assert Trace.objects.filter(request_id="outage-1").exists()
    # Sign-in throttling counts in PostgreSQL (django-axes' database handler): a bad password
    # is a failed attempt, not an error.
    status, landed, _ = sign_in(base, "admin", "not-the-password")
    assert (status, urllib.parse.urlsplit(landed).path) == (200, "/login/")
    assert AccessAttempt.objects.filter(username="admin", failures_since_start=1).exists()
    # A person signs in (lands on the dashboard) and opens the tokens page.
    status, landed, opener = sign_in(base, "admin", "admin-pass-1")
    assert (status, urllib.parse.urlsplit(landed).path) == (200, "/")
    status, _, page, _ = fetch(f"{base}/releases/tokens/", opener=opener)
    assert status == 200 and b"Runtime tokens" in page
    # Readiness names what is down (why, only to a signed-in user).
    status, _, report, _ = fetch(f"{base}/healthz")
    assert (status, json.loads(report)["failed"]) == (503, ["broker"])
    status, _, report, _ = fetch(f"{base}/healthz", opener=opener)
    assert (status, json.loads(report)["failed"]) == (503, ["broker"])
    assert json.loads(report)["checks"]["broker"]["detail"] != "ok"

    own_redis.start()  # back on the same port: readiness recovers
    assert wait_until(lambda: fetch(f"{base}/healthz")[0] == 200, timeout=15)
    assert fetch(base + CONFIG, headers=auth)[0] == 200
