"""Ops after a publish: the releases page says which runtimes serve what (issue 21.3).

Runtimes report what they serve (contract §2a); the releases page's Runtimes card, refreshed by
htmx, reads "2 of 2 runtimes serve …" in sg-test and flags an SDK the console no longer
supports — instead of promising that "the runtime gets it now". With a fleet (issue 31.2) it
counts every runtime, lists the first few, leaves the ones stopped long ago to "N stopped
today", and links to the page that lists them all."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from playwright.sync_api import expect

from strategies.catalog.models import Agent, Environment
from strategies.runtime.selectors import CARD_ROWS
from tests.factories import bearer, runtime_instances, runtime_token

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AGENT = "assistant_professional"


def _report(secret: str, instance: str, sdk_version: str, transport: str = "stream") -> str:
    """What an SDK runtime does: read the config, then say what it serves (its ETag)."""
    api = Client()
    config = api.get(f"/api/v1/runtime/config/{AGENT}", **bearer(secret))
    payload = config.json()
    documents = {key: doc["version"] for key, doc in payload["strategies"].items()}
    documents["profile"] = payload["profile"]["version"]
    body = {
        "instance": instance,
        "sdk_version": sdk_version,
        "runtime": "adk-example",
        "transport": transport,
        "agents": {AGENT: {"etag": config["ETag"], "documents": documents, "resolution": "fresh"}},
    }
    answer = api.post(
        "/api/v1/runtime/heartbeat",
        data=json.dumps(body),
        content_type="application/json",
        **bearer(secret),
    )
    assert answer.status_code == 200, answer.content
    return config["ETag"]


def test_ops_opens_releases__runtimes_card_says_who_serves_the_live_version(demo_world, login):
    secret = runtime_token(Environment.objects.get(key="sg-test"))
    _report(secret, "pod-a:101", "0.2.0")
    _report(secret, "pod-b:102", "0.1.0")  # an SDK older than the console supports

    page = login("ops", "ops-demo")
    page.goto(page.url + f"releases/?agent={AGENT}")

    card = page.locator(f"#runtimes-{AGENT} [data-environment=sg-test]")
    card.wait_for()  # htmx loads the card after the page
    summary = card.locator("[data-summary]").inner_text()
    assert "2 of 2 runtimes serve" in summary
    assert "after_sales_consultation v3" in summary
    # Tags are shown in capitals (CSS): read them lower-cased.
    pod_a = card.locator("[data-instance='pod-a:101']").inner_text().lower()
    pod_b = card.locator("[data-instance='pod-b:102']").inner_text().lower()
    assert pod_a.count("✓ live") == 1
    assert "unsupported sdk" in pod_b
    assert "unsupported sdk" not in pod_a


def test_ops_opens_releases__a_fleet__counted_stopped_ones_apart_all_listed_a_click_away(
    demo_world, login
):
    # Given 60 runtimes serving the live configuration in sg-test, one that just stopped
    # cleanly, and 30 that stopped a quarter of an hour ago
    sg_test = Environment.objects.get(key="sg-test")
    secret = runtime_token(sg_test)
    live = _report(secret, "pod-a:101", "0.2.0")
    _report(secret, "pod-z:999", "0.2.0")
    _report(secret, "pod-z:999", "0.2.0", transport="stopped")
    agent = Agent.objects.get(key=AGENT)
    fleet = {"environment": sg_test, "agent": agent, "token_secret": secret, "etag": live}
    runtime_instances(count=59, prefix="fleet", **fleet)
    earlier = timezone.now() - timedelta(minutes=15)
    runtime_instances(count=30, prefix="old", transport="stopped", last_seen=earlier, **fleet)
    midnight = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    stopped_today = 1 + (30 if earlier >= midnight else 0)

    # When ops opens the releases page
    page = login("ops", "ops-demo")
    page.goto(page.url + f"releases/?agent={AGENT}")
    card = page.locator(f"#runtimes-{AGENT} [data-environment=sg-test]")
    card.wait_for()

    # Then the card counts the 60 serving, lists the first few, the stopped one without a
    # LIVE badge, and the ones stopped long ago only as a count
    assert "60 of 60 runtimes serve" in card.locator("[data-summary]").inner_text()
    assert card.locator("[data-instance]").count() == CARD_ROWS
    assert card.locator("[data-stopped-today]").inner_text() == f"{stopped_today} stopped today"
    more = card.locator("[data-more]")
    assert more.inner_text().startswith(f"{CARD_ROWS} of 61 runtimes listed")

    # And one click lists them all, the stopped one last, serving nothing
    more.get_by_role("link").click()
    page.wait_for_url("**/runtimes/?environment=sg-test")
    rows = page.locator("[data-environment=sg-test] [data-instance]")
    expect(rows).to_have_count(61)
    assert "1–61 of 61 runtimes" in page.locator(".pagination").inner_text()
    stopped = page.locator("[data-instance='pod-z:999']").inner_text().lower()
    assert "(stopped)" in stopped and "✓ live" not in stopped
    assert rows.last.get_attribute("data-instance") == "pod-z:999"
    expect(page.locator("[data-instance^='old-']")).to_have_count(0)
