"""Support keeps a demo request in a new regression set from its trace page (issue 35): "P7
must be selected", with a ticket; the set page shows it passing against what is live in each
environment and failing, side by side, against a version that cuts the policy (v1)."""

from __future__ import annotations

import pytest

from console.kernel.models import AccessLogEntry, AuditRecord
from traces.regressions.models import Member

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_support_keeps_req_92_in_a_new_set__passes_live_fails_v1(demo_world, login):
    page = login("support", "support-demo")
    page.goto(page.url + "traces/req-92/")
    card = page.locator("#keep")
    # A refusal keeps what was typed and says why at the field: no note
    card.locator("#keep-new-name").fill("policy must be kept")
    card.locator("#keep-reason").fill("Incident reviews keep their requests")
    card.locator("#keep-want-item").check()
    card.locator("#keep-item").select_option("P7")
    page.locator("#keep-note").evaluate("el => el.removeAttribute('required')")
    card.locator("#keep-submit").click()
    errors = page.locator("#keep-errors")
    assert "note" in errors.inner_text()
    assert page.locator("#keep-new-name").input_value() == "policy must be kept"
    assert not Member.objects.exists()
    # With the ticket it is kept, and the set page opens
    page.locator("#keep-note").fill("INC-4711")
    page.locator("#keep-submit").click()
    page.wait_for_url("**/regression-sets/*/")
    assert page.locator("h1").inner_text() == "policy must be kept"
    row = page.locator("tr[data-request-id='req-92']")
    assert "INC-4711" in row.inner_text()
    live = row.locator("td.result")
    assert live.count() == 3  # sg-test, bank-uat, prod
    assert all("passed" in text for text in live.all_inner_texts())
    # Against v1, which does not read the policy: failed, recorded vs v1 side by side
    page.locator("#check-version").select_option("1")
    page.locator("#check-run").click()
    failed = page.locator("tr[data-request-id='req-92'] td.result-failed")
    assert failed.count() == 1
    text = failed.inner_text()
    assert "P7 must be selected" in text and "not_requested" in text and "selected" in text
    assert AuditRecord.objects.filter(action="regression_member.add").count() == 1
    assert AccessLogEntry.objects.filter(
        actor_label="support", action="regression_set.view"
    ).exists()
    # The trace page now says where the request is kept
    page.goto(page.url.split("/agents/")[0] + "/traces/req-92/")
    assert "policy must be kept" in page.locator("#kept-in").inner_text()
