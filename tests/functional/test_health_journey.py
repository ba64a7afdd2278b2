"""Browser: support follows a live version's health from its release row to the version-health
page, then to the request ids behind a figure, then to one trace — whose card says the same
required source was left out for everyone (issue 22)."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone
from playwright.sync_api import expect

from tests.factories import candidate, post_batch, runtime_token, trace_payload
from tests.factories.releases import publish, release_setup
from tests.factories.users import user_with_grants

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOC = "after_sales_consultation"
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def _traffic(secret: str) -> None:
    """v3's first requests in sg-test: 6 ready, 4 missing the policy (provider not fetched)."""
    at = (timezone.now() + timedelta(seconds=30)).isoformat()
    batch = [trace_payload(f"ok-{i}", occurred_at=at) for i in range(6)]
    batch += [
        trace_payload(
            f"policy-miss-{i}",
            occurred_at=at,
            status="missing_required_data",
            candidates=[
                candidate(),
                candidate(
                    "P7-v2",
                    source="applicable_policy",
                    decision="not_fetched",
                    reason="timeout after 800 ms",
                    reason_code="provider_not_fetched",
                ),
            ],
        )
        for i in range(4)
    ]
    for trace in batch:
        trace["documents"] = {"profile": 1, DOC: 3}
    assert post_batch(Client(), secret, batch).json()["accepted"] == 10


def test_support__release_row_to_health_page_to_request_ids_to_trace(login, live_server):
    w = release_setup()
    sg = w.envs["sg-test"]
    publish(w.profile[1], sg, actor=w.ops)
    publish(w.strategy[2], sg, actor=w.ops)
    publish(w.strategy[3], sg, actor=w.ops)
    user_with_grants("sup", support=w.agent)
    _traffic(runtime_token(sg))

    page = login("sup", "sup-pass-1")
    page.goto(f"{live_server.url}/releases/")
    glance = page.locator(f'[data-health-glance="{DOC}-sg-test"]')
    assert "40.0% failed" in glance.inner_text()
    glance.click()

    page.wait_for_url(re.compile(rf".*/health/sg-test/{DOC}/$"))
    assert "Live: v3" in page.locator("#health-rates thead").text_content()
    assert "Before: v2" in page.locator("#health-rates thead").text_content()
    row = page.locator('[data-metric="required_missing:applicable_policy:provider_not_fetched"]')
    live_cell = row.locator('[data-column="live"]')
    assert "40.0%" in live_cell.inner_text()
    assert "4/10" in live_cell.inner_text()
    assert page.locator("#health-series svg").is_visible()
    live_cell.locator("[data-requests]").click()

    page.wait_for_url(re.compile(r".*/requests\?.*"))
    assert (
        "required applicable_policy not selected" in page.locator("#requests-filter").inner_text()
    )
    ids = page.locator("#health-request-ids tbody tr")
    expect(ids).to_have_count(4)
    # In words; the code is one hover away.
    assert "applicable_policy — its provider did not deliver it" in ids.first.inner_text()
    reason = ids.first.locator("[data-reason-code]")
    assert reason.get_attribute("title") == "reason code: provider_not_fetched"
    ids.first.locator("a.mono").click()

    page.wait_for_url(re.compile(r".*/traces/policy-miss-\d/.*"))
    card = page.locator("#trace-patterns")
    assert "4 of 10 requests" in card.inner_text()
    assert "not only this one" in card.inner_text()
    card.screenshot(path=str(SHOTS / "trace-pattern-card.png"))


def test_demo__v3_health_against_v2__a_change_to_its_request_ids_to_a_v3_trace(demo_world, login):
    """The demo's story (issue 22): v3 has been live in sg-test since yesterday. Support opens
    its version-health page from the release row, sees v3 against v2 over the same hours —
    rates with intervals for both — and a change (v3 degrades to the general policy where v2
    had none), clicks its request ids and lands on a trace of v3 with its outcomes."""
    page = login("support", "support-demo")
    page.goto(page.url + "releases/")
    page.locator(f'[data-health-glance="{DOC}-sg-test"]').click()

    page.wait_for_url(re.compile(rf".*/health/sg-test/{DOC}/$"))
    head = page.locator("#health-rates thead").text_content()
    assert "Before: v2" in head and "Live: v3" in head
    failed = page.locator('[data-metric="failed"]')
    for column in ("previous", "live"):
        assert re.search(r"\d+/\d+", failed.locator(f'[data-column="{column}"]').inner_text())
    row = page.locator('[data-metric="degraded:general_policy_only"]')
    live_cell = row.locator('[data-column="live"]')
    assert live_cell.get_attribute("data-verdict") == "worse"
    assert re.search(r"0/\d+", row.locator('[data-column="previous"]').inner_text())
    assert page.locator('[data-metric="outcome:escalated:true"] [data-column="previous"]').count()
    # The docs' picture of the page: the demo's story, both versions with traffic.
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "version-health-1280.png"), full_page=True)
    live_cell.locator("[data-requests]").click()

    page.wait_for_url(re.compile(r".*/requests\?.*"))
    assert "degraded via general_policy_only" in page.locator("#requests-filter").inner_text()
    ids = page.locator("#health-request-ids tbody tr")
    assert ids.count() > 5
    # Newest first: req-93, the order service timeout support pasted (DEMO.md).
    assert "req-93" in ids.first.inner_text()
    ids.first.locator("a.mono").click()

    page.wait_for_url(re.compile(r".*/traces/req-93/(\?.*)?$"))
    used = page.locator("#versions-used").inner_text()
    assert re.search(rf"{DOC}\s+v3", used), used
    escalated = page.locator("#outcomes [data-outcome=escalated]")
    assert "for v3 in sg-test" in escalated.inner_text()
