"""Admins register a webhook (secret shown once) and read its delivery log."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from strategies.delivery.webhooks import Webhook
from strategies.releases.services import release_publish
from tests.factories import release_setup

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SCREENS = Path(__file__).resolve().parents[2] / ".data" / "screens"


def test_webhooks_page__register_then_release__delivery_listed(page, login, live_server, settings):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True  # the URL below is a loopback one
    w = release_setup()
    login("admin", "admin-pass-1")
    page.goto(f"{live_server.url}/releases/webhooks/")
    page.fill("#w-url", "http://127.0.0.1:9/hooks/console")
    page.select_option("#w-env", "sg-test")
    page.fill("#w-desc", "sg-test runtime")
    # Release changes are ticked by default; approval requests are for a review channel.
    assert page.get_by_label("Release changed (runtimes)").is_checked()
    page.get_by_label("Approval requested (chat, review routing)").check()
    page.click("#webhook-form button[type=submit]")
    secret = page.locator("#new-webhook .copy-value").inner_text()
    hook = Webhook.objects.get()
    assert secret.startswith("whsec_") and hook.secret == secret
    assert hook.events == ["release.changed", "approval.requested"]
    events = page.locator(f"tr[data-webhook='{hook.pk}'] [data-events]").inner_text()
    assert events == "release.changed, approval.requested"
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENS / "releases-webhooks.png"), full_page=True)

    release_publish(version=w.strategy[1], environment=w.envs["sg-test"], actor=w.ops)
    page.goto(f"{live_server.url}/releases/webhooks/")
    assert secret not in page.content()
    page.click("text=http://127.0.0.1:9/hooks/console")

    row = page.locator("tr[data-delivery]")
    expect(row).to_have_count(1)
    page.screenshot(path=str(SCREENS / "releases-webhook-deliveries.png"), full_page=True)
