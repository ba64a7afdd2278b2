"""The config client against payloads a broken or hostile console (or a cache in front of it)
sends: nesting that would overflow Python's recursion, and content that changes under an
unchanged ETag. The client never raises out of a refresh, keeps its last good copy when it
refuses, and never swaps what it serves without saying so."""

from __future__ import annotations

import copy
import logging
import time

import msgspec
import pytest
from context_runtime.client import STALE, ConfigClient
from context_runtime.client._http import Response
from context_runtime.webhook import WebhookRefused, read_delivery, sign_delivery
from fake_console import AGENT, PAYLOAD, TOKEN, dead_url

STRATEGY = "after_sales_consultation"


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def with_deep_field(depth: int) -> bytes:
    """The console's payload with one strategy body carrying a field nested ``depth`` deep."""
    text = msgspec.json.encode({**PAYLOAD, "etag": '"r9-deep"'}).decode()
    marker = '"max_extra_reads":2'
    return text.replace(marker, marker + ',"x":' + nested(depth).decode()).encode()


@pytest.fixture
def client(console, tmp_path):
    made = ConfigClient(console.url, TOKEN, AGENT, timeout=1.0, cache_path=tmp_path / "cache.json")
    assert made.refresh_now()
    yield made
    made.stop(timeout=0.5)


# ---------------------------------------------------------------- nesting


@pytest.mark.parametrize("depth", [5_000, 100_000])
def test_refresh__payload_nested_thousands_deep__refused_not_raised_last_good_copy_kept(
    console, client, depth, caplog
):
    caplog.set_level(logging.WARNING, logger="context_runtime.client")
    good_etag = client.snapshot().etag
    console.config_body = nested(depth)

    assert client.refresh_now() is False

    snapshot = client.snapshot()
    assert snapshot.etag == good_etag
    assert snapshot.strategy(STRATEGY).version == 3
    status = client.status()
    assert status["reason"] == STALE
    assert "nested too deeply" in status["last_error"]
    assert any("nested too deeply" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("depth", [100, 5_000])
def test_refresh__body_with_a_field_nested_too_deep__payload_refused_last_good_copy_kept(
    console, client, depth
):
    console.config_body = with_deep_field(depth)

    assert client.refresh_now() is False

    assert client.snapshot().strategy(STRATEGY).version == 3
    status = client.status()
    assert status["reason"] == STALE
    assert "nested" in status["last_error"]


def test_start__disk_copy_nested_thousands_deep__not_used_and_no_exception(tmp_path):
    cache = tmp_path / "cache.json"
    cache.write_bytes(nested(5_000))

    client = ConfigClient(dead_url(), TOKEN, AGENT, cache_path=cache)

    assert client.ready is False


def test_error_answer_nested_thousands_deep__summarised_not_raised():
    answer = Response(status=500, headers={}, body=b'{"error":' + nested(5_000) + b"}")

    assert answer.error_summary().startswith("HTTP 500")


def test_webhook__signed_body_nested_thousands_deep__refused_as_malformed():
    body = nested(5_000)
    stamp = int(time.time())
    headers = {
        "webhook-id": "d-1",
        "webhook-timestamp": str(stamp),
        "webhook-signature": sign_delivery("whsec_x", "d-1", stamp, body),
    }

    with pytest.raises(WebhookRefused) as refused:
        read_delivery(["whsec_x"], headers, body)

    assert (refused.value.status, refused.value.outcome) == (400, "malformed")


# ---------------------------------------------------------------- same ETag, other content


def test_refresh__same_etag_other_content__new_content_served_on_change_called_and_logged(
    console, tmp_path, caplog
):
    changes = []
    client = ConfigClient(
        console.url, TOKEN, AGENT, timeout=1.0, on_change=changes.append, cache_path=None
    )
    assert client.refresh_now()
    assert len(changes) == 1
    etag = client.snapshot().etag
    caplog.set_level(logging.WARNING, logger="context_runtime.client")
    other = copy.deepcopy({**PAYLOAD, "etag": etag})
    other["strategies"][STRATEGY]["version"] = 4
    other["strategies"][STRATEGY]["body"]["max_extra_reads"] = 0
    console.config_body = msgspec.json.encode(other)

    assert client.refresh_now()

    snapshot = client.snapshot()
    assert snapshot.etag == etag
    assert snapshot.strategy(STRATEGY).version == 4
    assert snapshot.strategy(STRATEGY).body["max_extra_reads"] == 0
    assert [c.strategy(STRATEGY).version for c in changes] == [3, 4]
    assert client.status()["etag_conflicts"] == 1
    assert any("same ETag" in r.getMessage() for r in caplog.records)


def test_refresh__same_etag_same_content_answered_200__no_change_and_no_warning(console, caplog):
    changes = []
    client = ConfigClient(console.url, TOKEN, AGENT, timeout=1.0, on_change=changes.append)
    assert client.refresh_now()
    caplog.set_level(logging.WARNING, logger="context_runtime.client")
    # A console that ignores If-None-Match: the same bytes again, as a 200.
    console.config_body = msgspec.json.encode({**PAYLOAD, "etag": client.snapshot().etag})

    assert client.refresh_now()

    assert len(changes) == 1
    assert client.status()["etag_conflicts"] == 0
    assert not caplog.records


def test_refresh__rejected_content_then_good_content_under_the_same_etag__good_one_taken(
    console, client
):
    etag = client.snapshot().etag
    bad = copy.deepcopy({**PAYLOAD, "etag": etag})
    bad["strategies"][STRATEGY]["body"]["budget"]["max_input_tokens"] = -5
    console.config_body = msgspec.json.encode(bad)
    assert client.refresh_now() is False
    assert client.status()["rejected_payloads"] == 1

    good = copy.deepcopy({**PAYLOAD, "etag": etag})
    good["strategies"][STRATEGY]["version"] = 5
    console.config_body = msgspec.json.encode(good)

    assert client.refresh_now()
    assert client.snapshot().strategy(STRATEGY).version == 5
