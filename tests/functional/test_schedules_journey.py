"""Browser journeys of scheduled go-lives and freeze windows (issue 34, item 2): ops schedules
a publish a few minutes ahead, sees it on the releases page with its countdown and the next
window, and cancels it; an admin freezes an environment from its calendar page, an operator's
publish is refused naming the freeze, and under a freeze break-glass it goes through, marked
on the release history. Real time, the live server, real Chromium."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import expect

from strategies.releases.models import FreezeWindow, Release, ScheduledGoLive
from tests.factories import release_setup

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
AGENT = "assistant_professional"
STRATEGY = "after_sales_consultation"
PUBLISH = f"/releases/{AGENT}/{STRATEGY}/sg-test/publish/?version=3"
SCREENS = Path(__file__).resolve().parents[2] / ".data" / "screens"


def local_utc(moment: datetime) -> str:
    """A datetime-local value in UTC (sg-test has no change hours: its zone is UTC)."""
    return f"{moment.astimezone(UTC):%Y-%m-%dT%H:%M}"


def signed_in(browser, live_server, username: str):
    """A second person in their own browser context, signed in (password `<name>-pass-1`)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=live_server.url)
    context.set_default_timeout(15_000)
    other = context.new_page()
    other.goto("/login/")
    other.fill("input[name=username]", username)
    other.fill("input[name=password]", f"{username}-pass-1")
    other.click("button[type=submit]")
    other.wait_for_url(f"{live_server.url}/")
    return other


def test_schedule_journey__ops_schedules_sees_countdown_and_window_then_cancels(
    page, login, live_server
):
    release_setup()
    login("ops", "ops-pass-1")
    page.goto(PUBLISH)
    expect(page.locator("[data-schedule-zone]")).to_have_text("UTC")
    expect(page.locator("#schedule-field [data-next-window]")).to_contain_text(
        "Next allowed window in sg-test: now"
    )

    page.fill("#publish-reason", "CHG-12: after the morning stand-up")
    page.fill("#schedule-run-at", local_utc(datetime.now(UTC) + timedelta(minutes=6)))
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENS / "releases-schedule-publish.png"), full_page=True)
    page.click("#schedule-button")

    expect(page.locator("body")).to_contain_text(
        "Scheduled the publish of after_sales_consultation v3 in sg-test"
    )
    row = page.locator("li[data-schedule]")
    expect(row).to_contain_text(f"{AGENT} / {STRATEGY} v3")
    expect(row.locator("[data-countdown]")).to_have_text(re.compile(r"in [45]\s+minutes"))
    expect(page.locator("li[data-calendar='sg-test'] [data-next-window]")).to_contain_text(
        "Next window: open now"
    )
    planned = ScheduledGoLive.objects.get()
    assert planned.state == ScheduledGoLive.State.SCHEDULED

    row.locator("summary", has_text="Cancel…").click()
    row.locator("textarea[name=reason]").fill("The CAB moved it to next week")
    row.get_by_role("button", name="Cancel it").click()

    expect(page.locator("body")).to_contain_text("Cancelled: after_sales_consultation v3")
    expect(page.locator("li[data-schedule]")).to_have_count(0)
    planned.refresh_from_db()
    assert planned.state == ScheduledGoLive.State.CANCELLED
    assert planned.cancelled_by == "ops"


def test_freeze_journey__admin_freezes_publish_refused_naming_it_break_glass_lets_it_through(
    page, login, live_server, browser
):
    release_setup()
    login("admin", "admin-pass-1")
    page.goto("/catalog/environments/sg-test/edit/")
    page.get_by_role("link", name="Calendar of sg-test").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("When changes go live in")

    now = datetime.now(UTC)
    page.fill("#f-starts", local_utc(now - timedelta(minutes=2)))
    page.fill("#f-ends", local_utc(now + timedelta(hours=2)))
    page.fill("#f-reason", "Year-end freeze CHG-77")
    page.get_by_role("button", name="Add freeze").click()
    expect(page.locator("body")).to_contain_text("sg-test is frozen from")
    expect(page.locator("#freeze-windows tr[data-freeze]")).to_contain_text(
        "Year-end freeze CHG-77"
    )
    expect(page.locator("#calendar-now")).to_contain_text("Frozen")
    assert FreezeWindow.objects.count() == 1

    ops = signed_in(browser, live_server, "ops")
    ops.goto(PUBLISH)
    ops.fill("#publish-reason", "Fix the refund wording")
    ops.click("#publish-actions button[type=submit]")
    refusal = ops.locator("#refusal")
    expect(refusal).to_have_attribute("data-code", "frozen")
    expect(refusal).to_contain_text("Year-end freeze CHG-77")
    assert not Release.objects.filter(environment__key="sg-test", document__key=STRATEGY).exists()

    page.fill("#g-reason", "INC-4711: refund wording is wrong for customers")
    page.fill("#g-minutes", "30")
    page.get_by_role("button", name="Start the freeze break-glass").click()
    expect(page.locator("body")).to_contain_text("Freeze break-glass in sg-test until")
    expect(page.locator("#freeze-break-glass")).to_contain_text("INC-4711")
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENS / "environment-calendar.png"), full_page=True)

    ops.goto(PUBLISH)
    ops.fill("#publish-reason", "Fix the refund wording")
    ops.click("#publish-actions button[type=submit]")
    expect(ops.locator("body")).to_contain_text("is live in sg-test")

    ops.goto(f"/releases/{AGENT}/history/?environment=sg-test")
    marked = ops.locator("li[data-freeze-break-glass='true']")
    expect(marked).to_have_count(1)
    expect(marked).to_contain_text("v3")
    expect(marked).to_contain_text("through a freeze (break-glass)")
    ops.context.close()
