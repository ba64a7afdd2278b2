"""An admin declares an outcome kind for sg-test; the application reports an outcome of that
kind through the runtime API; support sees it on the trace page."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from strategies.catalog.models import Environment
from tests.factories import runtime_token
from tests.factories.outcomes import post_outcomes
from traces.outcomes.models import OutcomeKind

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_admin_declares_a_kind__reported_outcome_shows_on_the_trace_page(demo_world, login, client):
    page = login("admin", "admin-demo")
    page.goto(page.url + "catalog/")
    page.locator("[data-environment=sg-test]").get_by_role("link", name="Outcomes").click()
    page.wait_for_url("**/catalog/environments/sg-test/outcomes/")
    expect(page.locator("[data-kind=escalated]")).to_have_count(1)  # the demo's kinds

    # A mistake first: the page says why and keeps what was typed.
    page.fill("#k-key", "first_contact")
    page.select_option("#k-type", "flag")
    page.fill("#k-bad", "maybe")
    page.click("#kind-form button[type=submit]")
    assert "Give it a name people read" in page.locator("#kind-errors").inner_text()
    assert page.input_value("#k-key") == "first_contact"

    page.fill("#k-label", "Solved at first contact")
    page.fill("#k-bad", "false")
    page.fill("#k-rate", "repeat-contact rate")
    page.click("#kind-form button[type=submit]")
    row = page.locator("[data-kind=first_contact]")
    row.wait_for()
    assert "repeat-contact rate" in row.inner_text()
    assert OutcomeKind.objects.get(environment__key="sg-test", key="first_contact").bad_values == [
        False
    ]

    # The helpdesk application reports it for req-93 with an outcomes:write token.
    secret = runtime_token(Environment.objects.get(key="sg-test"), capabilities=("outcomes:write",))
    response = post_outcomes(
        client, secret, [{"request_id": "req-93", "kind": "first_contact", "value": False}]
    )
    assert response.json()["accepted"] == 1

    page.context.clear_cookies()  # signed out: support signs in
    page = login("support", "support-demo")
    page.goto(page.url + "traces/req-93/")
    card = page.locator("#outcomes")
    reported = card.locator("[data-outcome=first_contact]")
    assert "Solved at first contact" in reported.inner_text()
    assert "no" in reported.locator("[data-label=Value]").inner_text()
    assert "test sg-test" in reported.inner_text()
    # The demo's own outcomes of req-93 are there too.
    expect(card.locator("[data-outcome=escalated]")).to_have_count(1)
