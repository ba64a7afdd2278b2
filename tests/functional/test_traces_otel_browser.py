"""Support follows a request into the tracing system (issue 32.4): with
TRACE_LINK_URL_TEMPLATE using `{trace_id}`, the trace page of a request the runtime recorded
an OpenTelemetry span for links to that trace; one without says there is no link and why —
never a link that opens nothing. In a real browser, on a phone and a laptop."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from context_runtime import wire
from context_runtime.reporter import encode_trace
from playwright.sync_api import expect

from tests.factories import post_batch, runtime_token, world
from tests.functional.layout import LAPTOP, PHONE, layout_faults

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TEMPLATE = "https://grafana.example/explore?traceId={trace_id}"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"


def sdk_trace(request_id: str, otel: wire.TraceOtel | None) -> bytes:
    """What the SDK's reporter sends for a ready request, with or without the span's ids."""
    return encode_trace(
        wire.Trace(
            request_id=request_id,
            agent="assistant_professional",
            occurred_at=datetime.now(UTC),
            status="ready",
            documents={"profile": 7, "after_sales_consultation": 3},
            strategy="after_sales_consultation",
            sections=wire.Sections(user_context=["high_level_profile"], query_context=[]),
            otel=otel,
        )
    )


@pytest.fixture
def traced(client, make_user, settings):
    settings.TRACE_LINK_URL_TEMPLATE = TEMPLATE
    secret = runtime_token(world()["environments"]["sg-test"])
    with_span = sdk_trace("e-7f3a#2", wire.TraceOtel(trace_id=TRACE_ID, span_id=SPAN_ID))
    without = sdk_trace("e-9b1c", None)
    body = b'{"traces":[' + with_span + b"," + without + b"]}"
    assert post_batch(client, secret, body=body).json()["accepted"] == 2
    make_user("sup", support="assistant_professional")


@pytest.mark.parametrize("size", [PHONE, LAPTOP], ids=["390", "1366"])
def test_support_follows_a_request_into_the_tracing_system__link_carries_the_trace_id(
    traced, login, size
):
    page = login("sup", "sup-pass-1")
    page.set_viewport_size(size)

    page.goto(page.url + "traces/e-7f3a%232/")

    link = page.locator("#trace-link")
    assert link.inner_text().strip() == "in your tracing system ↗"
    assert link.get_attribute("href") == f"https://grafana.example/explore?traceId={TRACE_ID}"
    tracing = page.locator("#trace-tracing")
    assert TRACE_ID in tracing.inner_text() and SPAN_ID in tracing.inner_text()
    expect(page.locator("#trace-link-none")).to_have_count(0)
    assert layout_faults(page, size) == {}


@pytest.mark.parametrize("size", [PHONE, LAPTOP], ids=["390", "1366"])
def test_support_opens_a_request_without_a_span__no_link_and_the_reason_in_words(
    traced, login, size
):
    page = login("sup", "sup-pass-1")
    page.set_viewport_size(size)

    page.goto(page.url + "traces/e-9b1c/")

    expect(page.locator("#trace-link")).to_have_count(0)
    expect(page.locator("a[href*='grafana.example']")).to_have_count(0)
    none = page.locator("#trace-link-none")
    assert none.inner_text().startswith(
        "no link to your tracing system: its runtime recorded no trace id for this request"
    )
    # "why" leads to the Tracing row; its explanation is one disclosure away.
    none.get_by_role("link", name="why").click()
    tracing = page.locator("#trace-tracing")
    assert tracing.inner_text().startswith("no trace id recorded")
    explanation = tracing.locator("details p")
    assert not explanation.is_visible()
    tracing.locator("summary").click()
    assert "OpenTelemetry is installed beside it" in explanation.inner_text()
    assert layout_faults(page, size) == {}
