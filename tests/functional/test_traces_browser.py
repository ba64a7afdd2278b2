"""Support's journey: paste a request_id, understand the answer; admin opens a snapshot."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import expect

from console.kernel.models import AccessLogEntry
from strategies.catalog.models import Environment
from strategies.documents.models import Document
from strategies.documents.services import draft_create, version_freeze
from tests.factories import post_batch, runtime_token, trace_payload
from tests.factories.documents import STRATEGY_KEY

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_support_pastes_req_92__one_page_explains_it__look_in_access_log(demo_world, login):
    page = login("support", "support-demo")

    page.keyboard.press("/")
    page.keyboard.type("  req-92 ")
    page.keyboard.press("Enter")

    page.wait_for_url("**/traces/req-92/")
    assert page.locator("#trace-facts").inner_text().count("ready") == 1
    assert "Look first at: model and prompt" in page.locator("#trace-summary").inner_text()
    candidates = page.locator("#candidates")
    assert "older product introduction" in candidates.inner_text()
    expect(candidates.locator("[data-decision-group=irrelevant]")).to_have_count(1)
    assert "model-x" in page.locator("#where-to-look").inner_text()
    # The demo's strategy versions do not allow snapshots (snapshot.allowed), so none was sent.
    assert "sent no snapshot" in page.locator("#snapshot").inner_text()
    assert AccessLogEntry.objects.filter(
        actor_label="support", action="trace.view", target_id="req-92"
    ).exists()
    assert AccessLogEntry.objects.filter(actor_label="support", action="trace.search").exists()


def test_support_opens_req_93__degraded_names_handler_and_provider(demo_world, login):
    page = login("support", "support-demo")
    page.goto(page.url + "traces/req-93/")
    where = page.locator("#where-to-look").inner_text()
    assert "handler general_policy_only" in where
    assert "order_delivery provider" in where


def test_admin_views_snapshot__reason_required__shown_and_logged(demo_world, login, client):
    # req-92 has no snapshot (v3 does not allow one); a version that allows it gets one kept.
    document = Document.objects.get(key="after_sales_consultation")
    admin = User.objects.get(username="admin")
    body = {**document.versions.get(number=3).body, "snapshot": {"allowed": True}}
    allowing = version_freeze(
        draft=draft_create(document=document, body=body, actor=admin), actor=admin
    )
    secret = runtime_token(Environment.objects.get(key="sg-test"))
    snapshot = {"messages": ["order A1042 r12: delivered 2026-11-02, quality not yet verified"]}
    documents = {"profile": 1, "after_sales_consultation": allowing.number}
    response = post_batch(
        client, secret, [trace_payload("req-snap", snapshot=snapshot, documents=documents)]
    )
    assert response.json()["accepted"] == 1
    page = login("admin", "admin-demo")
    page.goto(page.url + "traces/req-snap/")
    page.click("#snapshot-view summary")
    page.fill("#snapshot-view-reason", "ticket 4711: wrong policy quoted")
    page.click("#snapshot-view button[type=submit]")

    body = page.locator("#snapshot-body")
    body.wait_for()
    assert "A1042" in body.inner_text()
    entry = AccessLogEntry.objects.get(action="snapshot.view")
    assert (entry.actor_label, entry.reason) == ("admin", "ticket 4711: wrong policy quoted")


def test_support_narrows_the_list_by_the_last_day_and_by_date(demo_world, login):
    """The list's time filters as a person uses them: a "last 24 hours" count, then the From
    date field (both once answered 500: a date or a datetime without offset)."""
    page = login("support", "support-demo")
    page.goto(page.url + "traces/")
    page.locator("#last-day a[data-status=ready]").click()
    page.wait_for_url("**/traces/?status=ready&since=*")
    assert page.locator("#trace-table tbody tr").count() > 0
    expect(page.locator(".chip[data-filter=since]")).to_have_count(1)

    page.goto(page.url.split("?")[0])
    yesterday = (timezone.now() - timedelta(days=1)).date().isoformat()
    page.fill("#f-since", yesterday)
    page.click("form[aria-label='Filter traces'] button[type=submit]")
    page.wait_for_url(f"**/traces/?*since={yesterday}*")
    assert "req-92" in page.locator("#trace-table").inner_text()
    assert page.locator("#f-since").input_value() == yesterday


def test_support_replays_req_92_with_a_tighter_draft__sees_what_changes(demo_world, login):
    """Issue 20: the trace page's Replay card. The version req-92 used reproduces its
    decisions; a draft of the strategy with max_input_tokens 4000 shows, side by side, the
    decisions that change and the status ready → budget_exceeded; each replay is logged."""
    document = Document.objects.get(agent__key="assistant_professional", key=STRATEGY_KEY)
    body = document.versions.get(number=3).body
    draft = draft_create(
        document=document,
        body={**body, "budget": {**body["budget"], "max_input_tokens": 4000}},
        actor=User.objects.get(username="ops"),
    )
    page = login("support", "support-demo")
    page.goto(page.url + "traces/req-92/")
    # Plain words first; the engine's id (what a replay compares) on hover.
    assert "Decided by the SDK's selection engine" in page.locator("#trace-engine").inner_text()
    engine = page.locator("#trace-engine .help-term").get_attribute("title")
    assert engine.startswith("engine context_runtime ") and " · rules " in engine

    page.click("#replay-run")  # the recorded version is chosen first
    page.locator("#replay-result").wait_for()
    assert "reproduces every recorded decision" in page.locator("#replay-finding").inner_text()

    page.select_option("#replay-version", str(draft.number))
    page.click("#replay-run")
    page.locator(f"#replay-result[data-version='{draft.number}']").wait_for()
    assert page.url.endswith("/traces/req-92/")  # swapped in place (htmx), not a new page
    summary = page.locator("#replay-summary")
    expect(summary.locator("[data-status=ready]")).to_have_count(1)
    expect(summary.locator("[data-status=budget_exceeded]")).to_have_count(1)
    changed = page.locator("#replay-result tr[data-changed=true]")
    assert changed.count() >= 1
    assert "over budget" in changed.first.locator("[data-replay=replayed]").inner_text().lower()
    assert "change" in page.locator("#replay-finding").inner_text()
    assert [
        entry.detail["version"]
        for entry in AccessLogEntry.objects.filter(action="trace.replay").order_by("id")
    ] == [3, draft.number]
