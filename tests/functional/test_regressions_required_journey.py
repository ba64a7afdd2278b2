"""Issue 35's Done-when, in the browser: support keeps a demo request whose policy bundle was
cut (req-94) with "the policy bundle must be selected"; ops drafts a budget of 4000 and the
editor shows the set failing with the decision side by side; with the set required in prod
(admin), the publish is refused naming it; a draft that fixes it passes and goes live (ops2
approves, prod being protected)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from strategies.releases.models import ApprovalRequest, Release

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
AGENT = "assistant_professional"
STRATEGY = "after_sales_consultation"
SET = "policy bundle kept"


def switch_user(page, login, username):
    page.click("form[action='/logout/'] button")
    return login(username, f"{username}-demo")


def draft_with_budget(page, base, tokens: str, expected: str):
    """A new draft from the newest version with this budget; the editor's result for the set."""
    page.goto(f"{base}/agents/{AGENT}/documents/{STRATEGY}/")
    page.locator("text=/New draft from v\\d+/").first.click()
    expect(page.locator("#id_budget_max_input_tokens")).to_be_visible()
    page.fill("#id_budget_max_input_tokens", tokens)
    result = page.locator(f"#regression-results [data-set='{SET}']")
    expect(result).to_have_attribute("data-outcome", expected)
    return result


def test_done_when__a_kept_request_guards_prod_until_a_draft_fixes_it(
    demo_world, login, live_server
):
    base = live_server.url
    # support keeps req-94 (its policy bundle cut over the budget): the bundle must be selected
    page = login("support", "support-demo")
    page.goto(f"{base}/traces/req-94/?environment=sg-test")
    card = page.locator("#keep")
    card.locator("#keep-new-name").fill(SET)
    card.locator("#keep-reason").fill("Incident reviews keep their requests")
    card.locator("#keep-want-item").check()
    card.locator("#keep-item").select_option("policy-P7")
    page.locator("#keep-note").fill("INC-5120")
    card.locator("#keep-submit").click()
    expect(page.locator("h1")).to_have_text(SET)
    expect(page.locator("tr[data-request-id='req-94']")).to_contain_text("INC-5120")
    set_url = page.url

    # ops drafts a budget of 4000: the editor shows the set failing, decisions side by side
    switch_user(page, login, "ops")
    failing = draft_with_budget(page, base, "4000", "failed")
    member = failing.locator("[data-request-id='req-94']")
    expect(member).to_contain_text("policy-P7 must be selected")
    expect(member.locator("table.side-by-side")).to_contain_text("over_budget")
    expect(member.locator("table.side-by-side thead")).to_contain_text("Recorded")
    page.click("button[name=then][value=freeze]")
    expect(page.locator("body")).to_contain_text("frozen")

    # admin requires the set in prod (an environment's rule)
    switch_user(page, login, "admin")
    page.goto(set_url)
    page.locator("#required-in input[value='prod']").check()
    page.click("#required-save")
    expect(page.locator("#required-in input[value='prod']")).to_be_checked()

    # ops publishes the 4000 version to prod: refused, naming the set and the request
    switch_user(page, login, "ops")
    page.goto(f"{base}/releases/{AGENT}/{STRATEGY}/prod/publish/?version=4")
    expect(page.locator(f"#regression-results [data-set='{SET}']")).to_have_attribute(
        "data-outcome", "failed"
    )
    page.fill("#publish-reason", "Smaller budget")
    page.click("#publish-form button[type=submit]")
    refusal = page.locator("body")
    expect(refusal).to_contain_text(f"prod requires the regression set “{SET}” to pass")
    expect(refusal).to_contain_text("req-94")
    live = Release.objects.get(
        document__agent__key=AGENT, document__key=STRATEGY, environment__key="prod"
    )
    assert live.version.number != 4  # nothing went live, nothing asked for approval
    assert not ApprovalRequest.objects.filter(version=live.document.versions.get(number=4)).exists()

    # a draft that fits the bundle passes, and goes live once ops2 approves
    draft_with_budget(page, base, "16000", "passed")
    page.click("button[name=then][value=freeze]")
    expect(page.locator("body")).to_contain_text("frozen")
    page.goto(f"{base}/releases/{AGENT}/{STRATEGY}/prod/publish/?version=5")
    expect(page.locator(f"#regression-results [data-set='{SET}']")).to_have_attribute(
        "data-outcome", "passed"
    )
    page.fill("#publish-reason", "Budget fits the policy bundle")
    page.click("#publish-form button[type=submit]")
    expect(page.locator("body")).to_contain_text("waits for approval in prod")

    switch_user(page, login, "ops2")
    page.goto(f"{base}/releases/")
    page.click(f"#releases-{AGENT} td[data-environment='prod'] >> text=Review…")
    expect(page.locator(f"#regression-results [data-set='{SET}']")).to_have_attribute(
        "data-outcome", "passed"
    )
    page.click("#approve-form button[type=submit]")
    expect(page.locator("body")).to_contain_text("Approved:")
    live = Release.objects.get(
        document__agent__key=AGENT, document__key=STRATEGY, environment__key="prod"
    )
    assert live.version.number == 5
