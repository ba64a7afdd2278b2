"""Browser: the on-call operator sets a standing alert on context health (issue 35 item 4) —
a threshold out of range is refused at its field with what was typed kept; the order service
fails; the alert shows in the history with its request ids (each with a copy button, each a
link to the trace) and the version health page; they silence the rule with a reason and an end."""

from __future__ import annotations

import random
import re
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest
from context_runtime.client import ConfigSnapshot
from django.test import Client
from django.utils import timezone
from playwright.sync_api import expect

from console.demo import traffic
from tests.factories import post_batch, runtime_token
from tests.factories.releases import release_setup_serving
from tests.factories.sdk_traffic import runtime_config
from tests.factories.users import user_with_grants
from tests.functional.layout import layout_faults
from traces.alerts import services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AGENT = "assistant_professional"
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def order_service_fails(secret: str, count: int = 40) -> None:
    """`count` demo requests whose order service times out, stored through the ingest."""
    client = Client()
    config = ConfigSnapshot.from_payload(runtime_config(client, secret))
    now = timezone.now()
    rng = random.Random(4)
    traces = [
        traffic.run(
            traffic.ORDER_TIMEOUT,
            config=config,
            request_id=f"order-down-{n}",
            occurred_at=now - timedelta(seconds=rng.randint(0, 50)),
        )
        for n in range(count)
    ]
    response = post_batch(client, secret, body=msgspec.json.encode({"traces": traces}))
    assert response.json()["rejected"] == []


def test_oncall__creates_rule__order_service_fails__alert_in_history__silences_it(
    login, live_server
):
    w = release_setup_serving()
    user_with_grants("oncall", admin=w.agent)
    secret = runtime_token(w.sg)

    page = login("oncall", "oncall-pass-1")
    page.goto(f"{live_server.url}/agents/{AGENT}/")
    page.locator("nav.tabs a", has_text="Alerts").click()
    page.wait_for_url(re.compile(rf".*/agents/{AGENT}/alerts/$"))
    assert page.locator('nav.tabs a[aria-current="page"]').inner_text() == "Alerts"
    assert "No rule yet" in page.locator("#alert-rules").inner_text()

    # A threshold out of range: refused at its field, what was typed kept, nothing saved
    form = page.locator("#rule-form")
    form.locator("#a-name").fill("Orders missing")
    form.locator("#a-environment").select_option("sg-test")
    form.locator("#a-metric").select_option("missing_required_data")
    form.locator("#a-warning").fill("1")
    form.locator("#a-alert").fill("250")
    form.locator("#a-window").fill("5")
    form.locator("#a-nodata").fill("10")
    form.get_by_role("button", name="Create rule").click()
    error = page.locator('#rule-errors [data-path="alert_threshold"]')
    assert "100 %" in error.inner_text()
    assert page.locator("#a-alert").input_value() == "250"
    assert page.locator("#a-name").input_value() == "Orders missing"
    assert "No rule yet" in page.locator("#alert-rules").inner_text()

    page.locator("#a-alert").fill("2")
    page.get_by_role("button", name="Create rule").click()
    page.wait_for_url(re.compile(rf".*/agents/{AGENT}/alerts/$"))
    rule_row = page.locator('#alert-rules [data-rule="Orders missing"]')
    assert "warning 1.0 %, alert 2.0 %" in rule_row.inner_text()

    # The order service fails; the evaluator's tick (the beat's, run here) fires
    order_service_fails(secret)
    services.alerts_evaluate(now=timezone.now())
    page.reload()
    assert page.locator('#alert-rules [data-rule="Orders missing"] [data-level="alert"]').count()
    history = page.locator("#alert-history tbody tr")
    assert history.count() == 1
    assert "100.0 %" in history.first.inner_text()
    assert "open" in history.first.inner_text()
    assert not layout_faults(page)

    # Its request ids: each copied with one click (to paste into a ticket), each a link
    request = history.first.locator("li[data-request-id]").first
    request_id = request.get_attribute("data-request-id")
    assert request_id.startswith("order-down-")
    assert history.first.locator("li[data-request-id] .copy-btn").count() == len(
        set(
            history.first.locator("li[data-request-id]").evaluate_all(
                "items => items.map(i => i.dataset.requestId)"
            )
        )
    )
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    copy = request.get_by_role("button", name=f"Copy request_id {request_id}")
    copy.click()
    expect(copy).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == request_id
    # It leads to the trace, and the alert's link to the version health page
    request_link = request.locator("a.copy-value")
    assert request_link.inner_text() == request_id
    request_link.click()
    page.wait_for_url(re.compile(rf".*/traces/{request_id}/.*"))
    page.go_back()
    page.locator("#alert-history tbody tr").first.get_by_role("link", name="Version health").click()
    page.wait_for_url(re.compile(r".*/health/sg-test/after_sales_consultation/$"))
    page.go_back()

    # Silence it: a reason and an end; the silence is listed as active
    silence = page.locator("#silence-form")
    silence.locator("#s-rule").select_option(label="Orders missing (sg-test)")
    silence.get_by_role("button", name="Silence").click()
    assert page.locator('#silence-errors [data-path="reason"]').count() == 1
    page.locator("#s-reason").fill("order service maintenance until 18:00")
    page.get_by_role("button", name="Silence").click()
    page.wait_for_url(re.compile(rf".*/agents/{AGENT}/alerts/$"))
    silences = page.locator("#alert-silences tbody tr")
    assert "order service maintenance" in silences.first.inner_text()
    assert "active" in silences.first.inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "alerts-1280.png"), full_page=True)
