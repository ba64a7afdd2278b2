"""Browser: someone guessing a password is stopped after five tries with a clear message (the
username stays in the field), the admin sees the attempts in the access log, and unlocks the
sign-in from the Access area."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LOCKED = (
    "Too many failed sign-ins for this account from this address. "
    "Wait 15 minutes, or ask an admin to unlock it."
)


def try_sign_in(page, live_server, username, password):
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")


def lock_out_support(page, live_server):
    for _ in range(5):
        try_sign_in(page, live_server, "support", "guess")
    try_sign_in(page, live_server, "support", "support-demo")  # right, but too late


def test_login__five_wrong_passwords__locked_message_username_kept_and_attempts_in_access_log(
    demo_world, login, page, live_server
):
    lock_out_support(page, live_server)
    assert page.locator("[role=alert] .banner-body").inner_text().strip() == LOCKED
    assert page.input_value("input[name=username]") == "support"
    assert "/login/" in page.url

    login("admin", "admin-demo")  # same machine, other username: not locked
    page.goto(f"{live_server.url}/audit/access/?action=auth.login&outcome=denied")
    rows = page.locator("[data-testid=access-table] tbody tr")
    expect(rows).to_have_count(6)
    assert "support" in rows.first.inner_text()


def test_login_locks_page__admin_unlocks__user_signs_in_at_once(
    demo_world, browser, login, page, live_server
):
    person = browser.new_context(base_url=live_server.url)
    person.set_default_timeout(15_000)
    their_page = person.new_page()
    try:
        lock_out_support(their_page, live_server)
        assert LOCKED in their_page.locator("[role=alert]").inner_text()

        login("admin", "admin-demo")
        page.goto(f"{live_server.url}/access/")
        page.click("text=Locked sign-ins")
        row = page.locator("[data-testid=login-locks] tbody tr[data-lock=support]")
        assert "127.0.0.1" in row.inner_text()
        row.locator("summary", has_text="Unlock…").click()
        row.locator("textarea[name=reason]").fill("Confirmed by phone: mistyped the password")
        row.locator("button[type=submit]", has_text="Unlock").click()
        assert "Unlocked: support can sign in from 127.0.0.1 again." in page.inner_text("body")
        assert "Nobody is locked out." in page.inner_text("body")

        try_sign_in(their_page, live_server, "support", "support-demo")
        their_page.wait_for_url(f"{live_server.url}/")

        page.goto(f"{live_server.url}/audit/?action=auth.unlock")
        assert "support" in page.inner_text("main")
    finally:
        person.close()
