"""Browser: a person logs in with a demo login and sees the dashboard."""

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_login__demo_operator__sees_dashboard_with_their_agent(demo_world, login, page):
    login("ops", "ops-demo")
    assert page.locator("h1").inner_text() == "Dashboard"
    assert page.locator("[data-agent=assistant_professional]").is_visible()
    expect(page.locator("[data-agent=assistant_lite]")).to_have_count(0)


def test_login__wrong_password__stays_on_login_with_message(demo_world, page, live_server):
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", "ops")
    page.fill("input[name=password]", "wrong")
    page.click("button[type=submit]")
    assert "/login/" in page.url
    assert "correct username and password" in page.content()
