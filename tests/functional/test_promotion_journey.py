"""Browser journeys: ops promotes bank-uat → prod from the releases page (preview, confirm,
one request per changed document, visible to the approver); and a rollback in an environment
whose revert policy asks for a second person becomes a request that ops2 approves."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from strategies.releases.models import ApprovalRequest, Release
from tests.factories import bank_uat_ahead_of_prod, publish, release_setup

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SCREENS = Path(__file__).resolve().parents[2] / ".data" / "screens"
AGENT = "#releases-assistant_professional"


def shot(page, name):
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENS / f"promotion-{name}.png"), full_page=True)


def switch_user(page, login, username):
    page.click("form[action='/logout/'] button")
    return login(username, f"{username}-pass-1")


def test_promotion_journey__preview_confirm__one_request_per_changed_document(
    page, login, live_server
):
    w = bank_uat_ahead_of_prod(release_setup())
    prod = w.envs["prod"]

    login("ops", "ops-pass-1")
    page.goto(f"{live_server.url}/releases/")
    page.click(f"{AGENT} a[data-promote='bank-uat-prod']")
    page.wait_for_selector("#promotion-plan")
    plan = page.locator("#promotion-plan")
    expect(plan.locator("[data-document='profile'][data-outcome='unchanged']")).to_have_count(1)
    expect(plan.locator("[data-outcome='requested']")).to_have_count(2)
    preview = page.inner_text("[data-preview='after_sales_consultation']")
    assert "applicable_policy added to optional sources" in preview
    assert "The runtime implements everything" in preview
    shot(page, "preview")
    page.fill("#promote-reason", "bank-uat signed off")
    page.click("#promote-form button[type=submit]")

    page.wait_for_selector("text=Promoted bank-uat → prod: 2 wait for approval")
    pending = list(ApprovalRequest.objects.filter(status="pending", environment=prod))
    assert sorted(a.document.key for a in pending) == [
        "after_sales_consultation",
        "returns_consultation",
    ]
    for approval in pending:
        expect(page.locator(f"[data-approval='{approval.pk}']")).to_have_count(1)
    shot(page, "requested")

    # The approver sees both requests waiting.
    switch_user(page, login, "ops2")
    page.goto(f"{live_server.url}/releases/")
    for approval in pending:
        expect(page.locator(f"[data-approval='{approval.pk}']")).to_have_count(1)


def test_rollback_with_revert_policy__request_then_second_person_approves(page, login, live_server):
    w = release_setup()
    sg = w.envs["sg-test"]
    publish(w.strategy[1], sg, actor=w.ops)
    publish(w.strategy[2], sg, actor=w.ops)
    sg.rollback_needs_approval = True
    sg.save()
    cell = f"{AGENT} tr[data-document='after_sales_consultation'] td[data-environment='sg-test']"

    login("admin", "admin-pass-1")
    page.goto(f"{live_server.url}/releases/")
    page.click(f"{cell} >> text=Roll back…")
    assert "revert policy asks for a second person" in page.inner_text("#revert-policy")
    page.fill("#rollback-reason", "v2 regressed: INC-42")
    page.click("#rollback-form button[type=submit]")
    page.wait_for_selector("text=waits for approval")
    assert "Roll back after_sales_consultation in sg-test to v1?" in page.inner_text("h1")
    shot(page, "rollback-requested")
    release = Release.objects.get(environment=sg, document=w.strategy[1].document)
    assert release.version.number == 2  # nothing moved yet

    switch_user(page, login, "ops2")
    page.goto(f"{live_server.url}/releases/")
    page.click(f"{cell} >> text=Review…")
    page.fill("#approve-note", "agreed")
    page.click("#approve-form button[type=submit]")
    page.wait_for_selector("text=again (rolled back)")

    release.refresh_from_db()
    assert release.version.number == 1
    assert release.events.get(revision=3).approved_by == "ops2"
