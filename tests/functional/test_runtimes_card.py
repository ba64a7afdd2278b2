"""Ops after a publish: the releases page says which runtimes serve what (issue 21.3).

Runtimes report what they serve (contract §2a); the releases page's Runtimes card, refreshed by
htmx, reads "2 of 2 runtimes serve …" in sg-test and flags an SDK the console no longer
supports — instead of promising that "the runtime gets it now"."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from strategies.catalog.models import Environment
from tests.factories import bearer, runtime_token

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AGENT = "assistant_professional"


def _report(secret: str, instance: str, sdk_version: str) -> None:
    """What an SDK runtime does: read the config, then say what it serves."""
    api = Client()
    config = api.get(f"/api/v1/runtime/config/{AGENT}", **bearer(secret))
    payload = config.json()
    documents = {key: doc["version"] for key, doc in payload["strategies"].items()}
    documents["profile"] = payload["profile"]["version"]
    body = {
        "instance": instance,
        "sdk_version": sdk_version,
        "runtime": "adk-example",
        "transport": "stream",
        "agents": {AGENT: {"etag": config["ETag"], "documents": documents, "resolution": "fresh"}},
    }
    answer = api.post(
        "/api/v1/runtime/heartbeat",
        data=json.dumps(body),
        content_type="application/json",
        **bearer(secret),
    )
    assert answer.status_code == 200, answer.content


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
