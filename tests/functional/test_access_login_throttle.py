"""Browser: someone guessing a password is stopped after five tries with a clear message,
and the admin sees the attempts in the access log."""

from __future__ import annotations

import pytest
from django.core.cache import cache

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


COUNTERS = ["login-fail:user:support", "login-fail:ip:127.0.0.1"]


@pytest.fixture
def fresh_counters():
    """The browser signs in from 127.0.0.1 like every browser test: leave no failures behind."""
    cache.delete_many(COUNTERS)
    yield
    cache.delete_many(COUNTERS)


def test_login__five_wrong_passwords__locked_message_and_attempts_in_access_log(
    demo_world, fresh_counters, login, page, live_server
):
    for _ in range(5):
        page.goto(f"{live_server.url}/login/")
        page.fill("input[name=username]", "support")
        page.fill("input[name=password]", "guess")
        page.click("button[type=submit]")
    page.fill("input[name=username]", "support")
    page.fill("input[name=password]", "support-demo")  # right, but too late
    page.click("button[type=submit]")
    assert "Too many failed sign-ins" in page.locator("[role=alert]").inner_text()
    assert "/login/" in page.url

    cache.delete("login-fail:ip:127.0.0.1")  # the admin signs in from the same machine
    login("admin", "admin-demo")
    page.goto(f"{live_server.url}/audit/access/?action=auth.login&outcome=denied")
    rows = page.locator("[data-testid=access-table] tbody tr")
    assert rows.count() == 6
    assert "support" in rows.first.inner_text()
