"""The OpenTelemetry ids of a trace (issue 32.4): the runtime's `otel` block is checked at
ingest (W3C ids: lowercase hex, 32 and 16 digits, never all zero), stored, returned by the
API, shown on the trace page, and used by TRACE_LINK_URL_TEMPLATE's `{trace_id}` and
`{span_id}`; a trace without the ids a template needs gets no link and the page says why."""

from __future__ import annotations

import html

import orjson
import pytest

from tests.factories import post_batch, runtime_token, trace_payload, world
from tests.integration.test_foundation import run_manage
from traces.models import Trace

pytestmark = pytest.mark.django_db

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
OTEL = {"trace_id": TRACE_ID, "span_id": SPAN_ID}


@pytest.fixture
def secret():
    env = world()
    return runtime_token(env["environments"]["sg-test"])


@pytest.fixture
def support(make_user, secret):
    return make_user("sup", support="assistant_professional")


def page(client, request_id: str) -> str:
    return html.unescape(client.get(f"/traces/{request_id}/").content.decode())


def test_ingest__otel_ids__stored_and_returned_by_the_api(client, secret, support):
    response = post_batch(client, secret, [trace_payload("req-o", otel=OTEL)])
    client.force_login(support)

    exported = orjson.loads(client.get("/api/v1/traces/req-o").content)

    assert response.json()["accepted"] == 1
    stored = Trace.objects.get(request_id="req-o")
    assert (stored.otel_trace_id, stored.otel_span_id) == (TRACE_ID, SPAN_ID)
    assert exported["otel"] == OTEL


def test_ingest__no_otel_block__stored_without_ids_and_api_says_null(client, secret, support):
    post_batch(client, secret, [trace_payload("req-a"), trace_payload("req-b", otel=None)])
    client.force_login(support)

    exported = orjson.loads(client.get("/api/v1/traces/req-a").content)

    assert list(Trace.objects.values_list("otel_trace_id", "otel_span_id")) == [(None, None)] * 2
    assert exported["otel"] is None


MALFORMED = [
    ({"trace_id": "0" * 32, "span_id": SPAN_ID}, "otel.trace_id"),  # all zero: no trace
    ({"trace_id": TRACE_ID, "span_id": "0" * 16}, "otel.span_id"),
    ({"trace_id": TRACE_ID.upper(), "span_id": SPAN_ID}, "otel.trace_id"),
    ({"trace_id": TRACE_ID[:31], "span_id": SPAN_ID}, "otel.trace_id"),
    ({"trace_id": TRACE_ID + "\n", "span_id": SPAN_ID}, "otel.trace_id"),
    ({"trace_id": "g" * 32, "span_id": SPAN_ID}, "otel.trace_id"),
    ({"trace_id": TRACE_ID, "span_id": SPAN_ID + "00"}, "otel.span_id"),
    ({"trace_id": TRACE_ID}, "otel.span_id"),
    ({"trace_id": 4736, "span_id": SPAN_ID}, "otel.trace_id"),  # a number, not text
]


@pytest.mark.parametrize(("otel", "path"), MALFORMED)
def test_ingest__malformed_otel_ids__that_trace_refused_at_the_field_the_rest_stored(
    client, secret, otel, path
):
    response = post_batch(
        client, secret, [trace_payload("req-ok", otel=OTEL), trace_payload("req-bad", otel=otel)]
    )

    body = response.json()
    assert response.status_code == 200
    assert body["accepted"] == 1
    (rejected,) = body["rejected"]
    assert rejected["request_id"] == "req-bad"
    (error,) = rejected["errors"]
    assert error["path"] == path
    assert error["code"] in ("invalid_format", "invalid_type", "required")
    if error["code"] == "invalid_format":  # the rule in words, not the regular expression
        assert "lowercase hexadecimal digits, not all zero" in error["message"]
    assert list(Trace.objects.values_list("request_id", flat=True)) == ["req-ok"]


# --- the link to the tracing system ---------------------------------------------------------------
def test_trace_page__template_with_trace_id__link_carries_the_recorded_trace_id(
    client, secret, support, settings
):
    settings.TRACE_LINK_URL_TEMPLATE = "https://grafana.example/explore?traceId={trace_id}"
    post_batch(client, secret, [trace_payload("req-o", otel=OTEL)])
    client.force_login(support)

    text = page(client, "req-o")

    assert f'href="https://grafana.example/explore?traceId={TRACE_ID}"' in text
    assert 'id="trace-link-none"' not in text
    # The ids themselves, each with its copy button.
    assert f'data-copy="{TRACE_ID}"' in text and f'data-copy="{SPAN_ID}"' in text


def test_trace_page__template_with_all_three_placeholders__each_replaced(
    client, secret, support, settings
):
    settings.TRACE_LINK_URL_TEMPLATE = (
        "https://tempo.example/t/{trace_id}?span={span_id}&q=request_id%3D{request_id}"
    )
    post_batch(client, secret, [trace_payload("e-1#2", otel=OTEL)])
    client.force_login(support)

    text = page(client, "e-1%232")

    assert f'href="https://tempo.example/t/{TRACE_ID}?span={SPAN_ID}&q=request_id%3De-1%232"' in (
        text
    )


def test_trace_page__template_needs_a_trace_id_the_trace_lacks__no_link_and_says_why(
    client, secret, support, settings
):
    settings.TRACE_LINK_URL_TEMPLATE = "https://grafana.example/explore?traceId={trace_id}"
    post_batch(client, secret, [trace_payload("req-n")])
    client.force_login(support)

    text = page(client, "req-n")

    assert 'id="trace-link"' not in text
    assert "grafana.example" not in text
    assert "no link to your tracing system: its runtime recorded no trace id" in text
    assert "no trace id recorded" in text


def test_trace_page__no_template__ids_shown_without_a_link_or_a_complaint(
    client, secret, support, settings
):
    settings.TRACE_LINK_URL_TEMPLATE = ""
    post_batch(client, secret, [trace_payload("req-o", otel=OTEL), trace_payload("req-n")])
    client.force_login(support)

    with_ids, without = page(client, "req-o"), page(client, "req-n")

    assert 'id="trace-link"' not in with_ids and f'data-copy="{TRACE_ID}"' in with_ids
    assert 'id="trace-tracing"' not in without and "no link" not in without


# --- the setting --------------------------------------------------------------------------------
def check_with(template: str):
    return run_manage("check", TRACE_LINK_URL_TEMPLATE=template)


@pytest.mark.parametrize(
    "template",
    [
        "https://grafana.example/explore?traceId={trace_id}",
        "https://tempo.example/span/{span_id}",
        "http://jaeger.local/search?tags=request_id%3D{request_id}",
    ],
)
def test_setting__any_one_placeholder__the_console_starts(template):
    result = check_with(template)

    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("template", "words"),
    [
        ("https://grafana.example/explore?traceId=", "must contain at least one of {request_id}"),
        ("https://grafana.example/explore?traceId={traceid}", "{trace_id}, {span_id}"),
        ("grafana.example/explore?traceId={trace_id}", "must be an http(s) URL"),
    ],
)
def test_setting__no_placeholder_or_not_http__the_start_stops_naming_it(template, words):
    result = check_with(template)

    assert result.returncode != 0
    assert "TRACE_LINK_URL_TEMPLATE" in result.stderr and words in result.stderr
    assert "Traceback" not in result.stderr
