"""An admin protects sg-test's traces: adds a custom redaction rule (a pattern that would match
everything is refused first), sees a test string redacted in the preview box, and runs an
erasure for a principal, downloading its receipt (docs/data-protection.md)."""

from __future__ import annotations

import json

import pytest

from strategies.catalog.models import Environment
from tests.factories import post_batch, runtime_token, trace_payload, user_with_grants, world
from tests.functional.layout import layout_faults
from traces.models import RedactionRule, Trace

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_admin_adds_rule__preview_redacts__erasure_receipt(login, client):
    world()
    user_with_grants("dpo", admin=None)
    sg = Environment.objects.get(key="sg-test")
    post_batch(client, runtime_token(sg), [trace_payload("req-1", principal="shop-a/user-417")])

    page = login("dpo", "dpo-pass-1")
    page.goto(page.url + "catalog/")
    page.locator("[data-environment=sg-test]").get_by_role("link", name="Data protection").click()
    page.wait_for_url("**/catalog/environments/sg-test/data-protection/")

    # A pattern that would redact ordinary words is refused, and what was typed stays.
    page.select_option("#r-detector", "custom")
    page.fill("#r-key", "customer-number")
    page.fill("#r-pattern", "[a-z]+")
    page.click("#rule-form button[type=submit]")
    assert "ordinary text" in page.locator("#rule-errors").inner_text()
    assert page.input_value("#r-pattern") == "[a-z]+"
    assert not RedactionRule.objects.exists()

    page.fill("#r-pattern", r"CUST-\d{6}")
    page.click("#rule-form button[type=submit]")
    page.locator("[data-rule=customer-number]").wait_for()
    page.select_option("#r-detector", "card")
    page.fill("#r-key", "")
    page.fill("#r-pattern", "")
    page.click("#rule-form button[type=submit]")
    page.locator("[data-rule=card]").wait_for()
    assert layout_faults(page) == {}  # a phone and a laptop

    page.fill("#p-text", "Customer CUST-123456 paid with 4111 1111 1111 1111")
    page.click("#preview-form button[type=submit]")
    shown = page.locator("[data-preview=redacted]")
    shown.wait_for()
    assert shown.inner_text() == ("Customer [redacted:customer-number] paid with [redacted:card]")

    # The data-protection officer's request: erase the principal, get the receipt.
    page.goto(page.url.split("/catalog/")[0] + "/data-protection/erasures/")
    page.fill("#e-principal", "shop-a/user-417")
    page.fill("#e-reference", "DPO-2026-17")
    page.click("#erasure-form button[type=submit]")
    receipt = page.locator("#erasure-receipt")
    receipt.wait_for()
    assert receipt.locator("[data-table=traces_trace] td").inner_text() == "1"
    assert layout_faults(page) == {}  # the principal's digest wraps on a phone
    with page.expect_download() as download:
        page.click("#receipt-download")
    body = json.loads(open(download.value.path(), encoding="utf-8").read())  # noqa: SIM115
    assert body["reference"] == "DPO-2026-17" and body["counts"]["traces_trace"] == 1
    assert "shop-a/user-417" not in json.dumps(body)
    assert not Trace.objects.exists()
