"""Webhooks (docs/runtime-contract.md §4) delivered to a local receiver, by a real Celery worker
(and single tries in this process, where only the clock or a setting differs)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from context_runtime.webhook import read_delivery
from django.urls import reverse

from strategies.delivery import webhooks
from strategies.delivery.webhooks import Webhook, WebhookAttempt, WebhookDelivery, webhook_create
from strategies.releases.services import release_publish
from tests.conftest import celery_worker
from tests.factories import (
    EnvironmentFactory,
    bearer,
    release_setup,
    runtime_token,
    user_with_grants,
)


class Receiver:
    """A runtime's webhook endpoint: answers with the next status of `statuses`."""

    def __init__(self, statuses):
        self.statuses = list(statuses)
        self.calls: list[tuple[dict, bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.calls.append((dict(self.headers), body))
                status = (
                    receiver.statuses.pop(0) if len(receiver.statuses) > 1 else receiver.statuses[0]
                )
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/console"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@pytest.fixture
def fast_retries(monkeypatch):
    monkeypatch.setenv("WEBHOOK_RETRY_BASE_SECONDS", "0.2")  # read by the worker process


@pytest.fixture
def loopback_targets(monkeypatch, settings):
    """The receivers are on 127.0.0.1: allow private targets here and in the worker process."""
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE_TARGETS", "true")  # read by the worker process
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True


@pytest.fixture
def worker(fast_retries, loopback_targets, celery_worker_process, settings):
    settings.CELERY_TASK_DEFAULT_QUEUE = celery_worker_process
    return celery_worker_process


def wait_for_outcome(delivery_filter, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        delivery = WebhookDelivery.objects.filter(**delivery_filter).first()
        if delivery and delivery.status != WebhookDelivery.Status.PENDING:
            return delivery
        time.sleep(0.2)
    pytest.fail("the webhook delivery did not finish in time")


def publish_to_receiver(world, statuses, version_number):
    """Register a receiver answering `statuses` for sg-test, publish, wait for the outcome."""
    receiver = Receiver(statuses)
    try:
        hook, secret = webhook_create(
            environment=world.envs["sg-test"], url=receiver.url, actor=world.admin
        )
        release_publish(
            version=world.strategy[version_number],
            environment=world.envs["sg-test"],
            actor=world.ops,
        )
        return wait_for_outcome({"webhook": hook}), receiver, secret
    finally:
        receiver.close()


def standard_webhooks_valid(secret: str, headers: dict, body: bytes) -> bool:
    """The Standard Webhooks check, written from the spec: any `v1,<base64>` of the
    space-separated list equals HMAC-SHA256 of "id.timestamp.body" (key: the secret's bytes)."""
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(secret.encode(), signed, hashlib.sha256).digest())
    return any(
        part.startswith("v1,") and hmac.compare_digest(part[3:].encode(), expected)
        for part in headers["webhook-signature"].split()
    )


def test_webhook__every_try__signs_its_id_and_time_with_the_body_standard_webhooks(worker, client):
    world = release_setup()
    before = int(time.time())

    delivery, receiver, secret = publish_to_receiver(world, [500, 200], version_number=2)

    assert delivery.status == WebhookDelivery.Status.DELIVERED and len(receiver.calls) == 2
    for headers, body in receiver.calls:
        assert headers["webhook-id"] == str(delivery.delivery_id)
        assert before - 1 <= int(headers["webhook-timestamp"]) <= int(time.time()) + 1
        assert standard_webhooks_valid(secret, headers, body)
        # A replay under another id, or with another time, does not verify.
        assert not standard_webhooks_valid(secret, {**headers, "webhook-id": "other"}, body)
        later = str(int(headers["webhook-timestamp"]) + 600)
        assert not standard_webhooks_valid(secret, {**headers, "webhook-timestamp": later}, body)
    # The old body-only header still goes along during the transition (until its date).
    headers, body = receiver.calls[-1]
    if webhooks.legacy_headers_until(int(headers["webhook-timestamp"])) is not None:
        expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(headers["X-Console-Signature"], expected)


LEGACY = ("X-Console-Event", "X-Console-Delivery", "X-Console-Signature")


def test_webhook__legacy_headers_switched_off__worker_sends_only_standard_webhooks_headers(
    transactional_db, settings
):
    # Given an operator who switched the old headers off (the workers' environment)
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    with celery_worker(
        WEBHOOK_LEGACY_HEADERS="false", WEBHOOK_ALLOW_PRIVATE_TARGETS="true"
    ) as queue:
        settings.CELERY_TASK_DEFAULT_QUEUE = queue
        world = release_setup()

        # When a release change is delivered, long before the transition's end
        delivery, receiver, secret = publish_to_receiver(world, [200], version_number=2)

    # Then the receiver gets the Standard Webhooks headers and none of the old ones
    assert delivery.status == WebhookDelivery.Status.DELIVERED
    [(headers, body)] = receiver.calls
    assert standard_webhooks_valid(secret, headers, body)
    assert not [name for name in headers if name.lower().startswith("x-console-")], headers
    # and a runtime on the SDK takes it as before
    assert read_delivery([secret], headers, body).event == "release.changed"


@pytest.mark.parametrize(
    ("until_in", "switched_on", "old_headers_sent"),
    [
        (-1, True, False),  # the transition's date has passed: never again
        (3600, True, True),  # before it: they go along
        (3600, False, False),  # before it, switched off by the operator
    ],
)
def test_webhook_try__legacy_headers__only_before_their_date_and_while_switched_on(
    db, client, settings, until_in, switched_on, old_headers_sent
):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    settings.WEBHOOK_LEGACY_HEADERS = switched_on
    settings.WEBHOOK_LEGACY_HEADERS_UNTIL = datetime.fromtimestamp(time.time() + until_in, UTC)
    receiver = Receiver([200])
    try:
        hook = Webhook.objects.create(
            environment=EnvironmentFactory(key="sg-test"), url=receiver.url, secret="whsec_t"
        )
        delivery = WebhookDelivery.objects.create(webhook=hook, body=b'{"event": "x"}')

        status, _ = webhooks.delivery_try(delivery_id=delivery.pk)
    finally:
        receiver.close()

    assert status == WebhookDelivery.Status.DELIVERED
    [(headers, body)] = receiver.calls
    assert standard_webhooks_valid("whsec_t", headers, body)
    assert [name in headers for name in LEGACY] == [old_headers_sent] * 3, headers
    # and the webhooks page says what is sent
    client.force_login(user_with_grants("admin", admin=None))
    page = client.get(reverse("webhook-list")).content.decode()
    assert ('old <span class="mono">X-Console-Signature</span>' in page) == old_headers_sent
    assert ("are no longer sent" in page) != old_headers_sent


def test_webhook__receiver_fails_twice__third_try_delivers_signed_payload(worker, client):
    world = release_setup()

    delivery, receiver, secret = publish_to_receiver(world, [500, 503, 200], version_number=2)

    assert delivery.status == WebhookDelivery.Status.DELIVERED
    assert delivery.tries == 3 and len(receiver.calls) == 3
    attempts = list(WebhookAttempt.objects.filter(delivery=delivery).order_by("number"))
    assert [(a.number, a.status_code, a.ok) for a in attempts] == [
        (1, 500, False),
        (2, 503, False),
        (3, 200, True),
    ]
    ids = {headers["webhook-id"] for headers, _ in receiver.calls}
    assert ids == {str(delivery.delivery_id)}  # the idempotency key is stable across retries
    headers, body = receiver.calls[-1]
    assert standard_webhooks_valid(secret, headers, body)
    event = json.loads(body)
    config = client.get(
        "/api/v1/runtime/config/assistant_professional",
        **bearer(runtime_token(world.envs["sg-test"])),
    )
    assert event == {
        "event": "release.changed",
        "agent": "assistant_professional",
        "environment": "sg-test",
        "document": "after_sales_consultation",
        "action": "publish",
        "from_version": None,
        "to_version": 2,
        "etag": config["ETag"],
        "occurred_at": event["occurred_at"],
        "actor": {"type": "user", "name": "ops", "token": None},
        "approval": None,
    }


def test_webhook__receiver_always_down__five_tries_then_failed(worker):
    world = release_setup()

    delivery, receiver, _ = publish_to_receiver(world, [500], version_number=1)

    assert delivery.status == WebhookDelivery.Status.FAILED
    assert delivery.tries == 5 and len(receiver.calls) == 5
    assert WebhookAttempt.objects.filter(delivery=delivery, ok=False).count() == 5


def test_webhooks__many_deliveries_queued_as_one_message__worker_tries_each(worker):
    # Given three receivers of one environment, outbox rows for all of them in one INSERT
    world = release_setup()
    receivers = [Receiver([200]) for _ in range(3)]
    try:
        hooks = [
            webhook_create(
                environment=world.envs["sg-test"],
                url=r.url,
                events=["alert.fired"],
                actor=world.admin,
            )[0]
            for r in receivers
        ]
        (ids,) = webhooks.deliveries_create_many(
            [(world.envs["sg-test"].pk, "alert.fired", b'{"event":"alert.fired"}')]
        )
        assert len(ids) == 3
        # When they are queued at once (one fan-out message), the worker delivers each once
        webhooks.deliveries_send(ids)
        for hook in hooks:
            assert wait_for_outcome({"webhook": hook}).status == WebhookDelivery.Status.DELIVERED
    finally:
        for r in receivers:
            r.close()
    assert [len(r.calls) for r in receivers] == [1, 1, 1]
