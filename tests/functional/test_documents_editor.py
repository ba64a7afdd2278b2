"""Browser: an operator drafts a strategy change, sees validation at its field as they type,
freezes it and compares it with an earlier version; and toggles a section in the profile grid."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_strategy_draft__type_validate_freeze_compare__in_browser(demo_world, login, page):
    # Given ops on the strategy page
    login("ops", "ops-demo")
    page.click("nav.nav-main >> text=Agents")
    page.click("text=Strategies")
    page.click("a:has-text('after_sales_consultation') >> nth=0")
    expect(page.locator("h1")).to_have_text("after_sales_consultation")

    # When they open a draft and type a number out of range
    page.click("text=New draft from v3")
    expect(page.locator("h1")).to_contain_text("draft v4")
    page.fill("#id_max_extra_reads", "50")

    # Then the error appears at that field, without saving
    field_error = page.locator("#fe-max_extra_reads")
    expect(field_error).to_contain_text("max_extra_reads")
    expect(page.locator("#validation [data-path=max_extra_reads]")).to_be_visible()

    # When they fix it, the structure is valid and the JSON follows
    page.fill("#id_max_extra_reads", "3")
    expect(page.locator("#validation")).to_contain_text("The structure is valid")
    expect(page.locator("#json-editor")).to_have_value(re.compile(r'"max_extra_reads": 3'))

    # And checking against bank-uat names the handler its runtime lacks
    page.select_option("#environment", "bank-uat")
    expect(page.locator("[data-environment=bank-uat]")).to_contain_text("general_policy_only")

    # When they save and freeze
    page.fill("#draft-note", "Allow three extra reads")
    page.click("text=Save and freeze as v4")
    expect(page.locator("h1")).to_have_text("after_sales_consultation v4")
    expect(page.locator(".changes")).to_contain_text("Max extra reads changed from 2 to 3")

    # Then they can compare it with v1
    page.click("text=Compare")
    page.select_option("#compare-a", "1")
    page.select_option("#compare-b", "4")
    page.click("button:has-text('Compare')")
    expect(page.locator(".changes")).to_contain_text("applicable_policy added to required sources")
    expect(page.locator(".changes")).to_contain_text("Max extra reads changed from 1 to 3")


def test_profile_grid__toggle_section__draft_opens_and_sensitive_refused(demo_world, login, page):
    login("ops", "ops-demo")
    page.goto(page.url + "agents/assistant_professional/")
    expect(page.locator(".profile-state")).to_contain_text("v1")

    # Switching a section off opens a draft from v1
    page.locator("input[name='sections.query_context.chat_topic']").click()
    expect(page.locator(".profile-state")).to_contain_text("Draft v2")
    expect(page.locator("input[name='sections.query_context.chat_topic']")).not_to_be_checked()

    # Switching a sensitive one on is refused for an operator, with the reason
    page.locator("input[name='sections.user_context.personal_particulars']").click()
    expect(page.locator("#profile-grid [role=alert]")).to_contain_text("personal_particulars")
    expect(
        page.locator("input[name='sections.user_context.personal_particulars']")
    ).not_to_be_checked()


def test_draft_editor__two_people_save_same_revision__second_sees_conflict(
    demo_world, login, page, browser, live_server
):
    # Given ops opened a draft, and admin opens the same draft in another browser
    login("ops", "ops-demo")
    page.goto(
        f"{live_server.url}/agents/assistant_professional/documents/after_sales_consultation/"
    )
    page.click("text=New draft from v3")
    other = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    other.goto(f"{live_server.url}/login/")
    other.fill("input[name=username]", "admin")
    other.fill("input[name=password]", "admin-demo")
    other.click("button[type=submit]")
    other.goto(page.url)

    # When admin saves first and ops saves afterwards from the revision they loaded
    other.fill("#id_max_extra_reads", "1")
    other.click("button:has-text('Save draft')")
    expect(other.locator(".banner-success, .banner")).to_contain_text("saved")
    page.fill("#id_max_extra_reads", "4")
    page.click("button:has-text('Save draft')")

    # Then ops is told, sees what admin changed, and their own value is not lost
    expect(page.locator("[data-conflict]")).to_contain_text("admin saved revision 2")
    expect(page.locator("[data-conflict] .changes")).to_contain_text("Max extra reads")
    expect(page.locator("#id_max_extra_reads")).to_have_value("4")

    # And loading their version shows admin's value
    page.click("text=Load their version")
    expect(page.locator("#id_max_extra_reads")).to_have_value("1")
    other.context.close()
