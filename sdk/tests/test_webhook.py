"""Webhooks from the console (RUNTIME_API §4): the signature check, and the config client
refreshing at once on a good delivery and refusing a bad one."""

from __future__ import annotations

import copy
import threading
import time
import urllib.error
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, make_server

import msgspec
import pytest
from context_runtime.client import ConfigClient
from context_runtime.webhook import (
    WebhookRefused,
    make_wsgi_app,
    read_delivery,
    sign,
    sign_delivery,
    verify_delivery,
    verify_signature,
)
from fake_console import AGENT, ENVIRONMENT, HANG, PAYLOAD, TOKEN

SECRET = "whsec_test-secret"
STRATEGY = "after_sales_consultation"


@pytest.fixture
def client(console, tmp_path):
    # Polls rarely: anything that changes within a test is the webhook's doing.
    made = ConfigClient(
        console.url,
        TOKEN,
        AGENT,
        poll_interval=60.0,
        timeout=0.3,
        cache_path=tmp_path / "cache.json",
        webhook_secret=SECRET,
    )
    made.start(wait=2.0)
    assert made.ready
    yield made
    made.stop(timeout=0.5)


def release_changed(console, *, agent=AGENT, environment=ENVIRONMENT, delivery="d-1"):
    body = msgspec.json.encode(
        {
            "event": "release.changed",
            "agent": agent,
            "environment": environment,
            "document": STRATEGY,
            "action": "publish",
            "from_version": 3,
            "to_version": 4,
            "etag": console.etag,
            "occurred_at": "2026-11-30T09:12:44Z",
        }
    )
    return signed(body, delivery), body


def signed(body: bytes, delivery: str = "d-1", *, at: float | None = None, secret=SECRET):
    """The headers the console sends with ``body`` (Standard Webhooks, and the old ones)."""
    timestamp = int(time.time() if at is None else at)
    return {
        "webhook-id": delivery,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign_delivery(secret, delivery, timestamp, body),
        "X-Console-Event": "release.changed",
        "X-Console-Delivery": delivery,
        "X-Console-Signature": sign(secret, body),
    }


def publish_version_4(console) -> str:
    entry = copy.deepcopy(PAYLOAD["strategies"][STRATEGY])
    entry["version"] = 4
    return console.publish(**{STRATEGY: entry})


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


# ---------------------------------------------------------------- the signature


def test_verify_signature__hmac_of_raw_body__true():
    body = b'{"event": "release.changed"}'

    assert verify_signature(SECRET, body, sign(SECRET, body))
    assert verify_signature(SECRET.encode(), body, sign(SECRET, body).upper().replace("SHA", "sha"))


def test_verify_signature__other_body_or_secret__false():
    body = b'{"event": "release.changed"}'
    header = sign(SECRET, body)

    assert not verify_signature(SECRET, body + b" ", header)
    assert not verify_signature("whsec_other", body, header)


@pytest.mark.parametrize(
    "header", [None, "", "sha256=", "sha1=abcd", "sha256=zz", "sha256=é", "abc", 42]
)
def test_verify_signature__missing_or_malformed_header__false(header):
    assert not verify_signature(SECRET, b"{}", header)


def test_verify_signature__secret_rotation__either_secret_matches():
    body = b"{}"

    assert verify_signature(["whsec_new", SECRET], body, sign(SECRET, body))
    assert verify_signature(["whsec_new", SECRET], body, sign("whsec_new", body))
    assert not verify_signature([], body, sign(SECRET, body))


def test_verify_delivery__signed_id_time_and_body__returns_the_id():
    body = b'{"event": "release.changed"}'

    assert verify_delivery(SECRET, signed(body, "d-7"), body) == "d-7"


def test_verify_delivery__captured_body_replayed_with_another_id__refused():
    body = b'{"event": "release.changed"}'
    captured = signed(body, "d-7")

    with pytest.raises(WebhookRefused) as refused:
        verify_delivery(SECRET, {**captured, "webhook-id": "d-8"}, body)

    assert (refused.value.status, refused.value.outcome) == (401, "bad_signature")


def test_verify_delivery__body_swapped_under_a_captured_signature__refused():
    captured = signed(b'{"event": "release.changed", "etag": "a"}', "d-7")

    with pytest.raises(WebhookRefused, match="does not match"):
        verify_delivery(SECRET, captured, b'{"event": "release.changed", "etag": "b"}')


@pytest.mark.parametrize("offset", [-301, 301, -3600, 86400])
def test_verify_delivery__timestamp_outside_five_minutes__refused(offset):
    body = b"{}"
    headers = signed(body, at=time.time() + offset)  # genuinely signed, at another time

    with pytest.raises(WebhookRefused) as refused:
        verify_delivery(SECRET, headers, body)

    assert refused.value.outcome == "stale_timestamp"


@pytest.mark.parametrize("offset", [-299, 0, 299])
def test_verify_delivery__timestamp_within_five_minutes__accepted(offset):
    body = b"{}"
    now = time.time()

    assert verify_delivery(SECRET, signed(body, at=now + offset), body, now=now) == "d-1"


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_verify_delivery__a_header_missing__refused_even_with_the_old_signature(missing):
    body = b"{}"
    headers = signed(body)
    del headers[missing]

    with pytest.raises(WebhookRefused) as refused:
        verify_delivery(SECRET, headers, body)

    assert (refused.value.status, refused.value.outcome) == (401, "missing_header")


@pytest.mark.parametrize("value", ["v1,", "v1,not base64!", "v2,AAAA", "sha256=00", "abc"])
def test_verify_delivery__malformed_signature__refused(value):
    body = b"{}"

    with pytest.raises(WebhookRefused, match="does not match"):
        verify_delivery(SECRET, {**signed(body), "webhook-signature": value}, body)


def test_verify_delivery__rotation__any_signature_of_the_list_under_any_secret():
    body = b"{}"
    headers = signed(body)
    new = signed(body, secret="whsec_new")["webhook-signature"]
    both = {**headers, "webhook-signature": f"{new} {headers['webhook-signature']}"}

    assert verify_delivery(SECRET, both, body) == "d-1"  # a receiver still on the old secret
    assert verify_delivery(["whsec_new"], both, body) == "d-1"
    assert verify_delivery(["whsec_new", SECRET], headers, body) == "d-1"
    with pytest.raises(WebhookRefused):
        verify_delivery(["whsec_other"], both, body)


def test_read_delivery__the_id_is_the_signed_one_not_the_old_header():
    body = b'{"event": "release.changed", "agent": "a"}'
    headers = {**signed(body, "d-1"), "X-Console-Delivery": "d-forged"}

    assert read_delivery([SECRET], headers, body).delivery == "d-1"


# ---------------------------------------------------------------- the config client


def test_webhook__good_signature__refresh_within_1s(console, client):
    new_etag = publish_version_4(console)
    headers, body = release_changed(console)

    started = time.monotonic()
    result = client.handle_webhook(headers, body)

    assert result.status == 202
    assert result.outcome == "refresh_scheduled"
    assert wait_for(lambda: client.snapshot().etag == new_etag, timeout=1.0)
    assert time.monotonic() - started < 1.0
    assert client.snapshot().strategy(STRATEGY).version == 4


def test_webhook__bad_signature__refused_and_no_refresh(console, client):
    old_etag = client.snapshot().etag
    publish_version_4(console)
    headers, body = release_changed(console)
    headers["webhook-signature"] = signed(body, secret="whsec_attacker")["webhook-signature"]
    requests_before = len(console.config_requests)

    result = client.handle_webhook(headers, body)

    assert result.status == 401
    assert result.outcome == "bad_signature"
    time.sleep(0.3)
    assert client.snapshot().etag == old_etag
    assert len(console.config_requests) == requests_before


def test_webhook__body_changed_after_signing__refused(console, client):
    headers, body = release_changed(console)

    result = client.handle_webhook(headers, body.replace(b"publish", b"rollback"))

    assert result.status == 401


@pytest.mark.parametrize(
    ("agent", "environment", "outcome"),
    [("someone_else", ENVIRONMENT, "ignored_agent"), (AGENT, "uat", "ignored_environment")],
)
def test_webhook__other_agent_or_environment__ignored(console, client, agent, environment, outcome):
    publish_version_4(console)
    headers, body = release_changed(console, agent=agent, environment=environment)
    requests_before = len(console.config_requests)

    result = client.handle_webhook(headers, body)

    assert (result.status, result.outcome) == (200, outcome)
    time.sleep(0.2)
    assert len(console.config_requests) == requests_before


def test_webhook__same_delivery_twice__acted_on_once(console, client):
    new_etag = publish_version_4(console)
    headers, body = release_changed(console, delivery="d-42")

    first = client.handle_webhook(headers, body)
    assert wait_for(lambda: client.snapshot().etag == new_etag, timeout=1.0)
    requests_after_first = len(console.config_requests)
    second = client.handle_webhook(headers, body)

    assert first.outcome == "refresh_scheduled"
    assert (second.status, second.outcome) == (200, "duplicate")
    time.sleep(0.2)
    assert len(console.config_requests) == requests_after_first


def test_webhook__etag_already_served__no_refresh(console, client):
    headers, body = release_changed(console)

    result = client.handle_webhook(headers, body)

    assert (result.status, result.outcome) == (200, "already_current")


def test_webhook__console_hangs__handler_returns_at_once(console, client):
    publish_version_4(console)
    console.modes["config"] = HANG
    headers, body = release_changed(console)

    started = time.perf_counter()
    result = client.handle_webhook(headers, body)

    assert result.status == 202
    assert time.perf_counter() - started < 0.25  # a network call would wait 0.3 s or more


def test_webhook__no_secret_configured__refused(console, tmp_path):
    unconfigured = ConfigClient(console.url, TOKEN, AGENT, cache_path=tmp_path / "c.json")
    headers, body = release_changed(console)

    result = unconfigured.handle_webhook(headers, body)

    assert (result.status, result.outcome) == (401, "not_configured")


def test_webhook__client_not_started__503_so_console_retries(console, tmp_path):
    stopped = ConfigClient(
        console.url, TOKEN, AGENT, cache_path=tmp_path / "c.json", webhook_secret=SECRET
    )
    publish_version_4(console)
    headers, body = release_changed(console)

    first = stopped.handle_webhook(headers, body)
    stopped.start()
    try:
        retried = stopped.handle_webhook(headers, body)  # the console's retry, same delivery id
    finally:
        stopped.stop()

    assert (first.status, first.outcome) == (503, "not_running")
    assert retried.status in (200, 202)  # scheduled, or already current after the first poll
    assert retried.outcome != "duplicate"


def test_webhook__captured_delivery_replayed_under_a_new_id__refused_and_no_refresh(
    console, client
):
    captured_headers, body = release_changed(console, delivery="d-1")
    assert client.handle_webhook(captured_headers, body).status in (200, 202)
    publish_version_4(console)  # what the attacker wants the runtime to fetch out of turn
    requests_before = len(console.config_requests)
    replay = {**captured_headers, "webhook-id": "d-2", "X-Console-Delivery": "d-2"}

    result = client.handle_webhook(replay, body)

    assert (result.status, result.outcome) == (401, "bad_signature")
    time.sleep(0.3)
    assert len(console.config_requests) == requests_before


def test_webhook__not_json_but_signed__400(client):
    body = b"not json"
    headers = signed(body, "d-9")

    assert client.handle_webhook(headers, body).status == 400


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def test_webhook__wsgi_app_over_loopback__202_and_refreshed(console, client):
    server = make_server(
        "127.0.0.1", 0, make_wsgi_app(client.handle_webhook), handler_class=_QuietHandler
    )
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    try:
        new_etag = publish_version_4(console)
        headers, body = release_changed(console)
        url = f"http://127.0.0.1:{server.server_port}/hooks/console"
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=2) as answer:  # noqa: S310 (loopback)
            status, reply = answer.status, msgspec.json.decode(answer.read())
        bad = urllib.request.Request(
            url, data=body, headers={**headers, "webhook-signature": "v1,AAAA"}, method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(bad, timeout=2)  # noqa: S310 (loopback)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(2)

    assert status == 202
    assert reply["outcome"] == "refresh_scheduled"
    assert refused.value.code == 401
    assert wait_for(lambda: client.snapshot().etag == new_etag, timeout=1.0)
