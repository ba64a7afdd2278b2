"""Browser journey (issue 19, item 3): an admin alone switches prod's protection off — only as
a break-glass, with a reason — sees the banner, publishes, and the history marks the version
unreviewed; the rollback page does not offer it."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from strategies.catalog.models import Environment
from strategies.releases.services import release_publish
from tests.factories import publish, release_setup

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
STRATEGY = "after_sales_consultation"


def test_break_glass_journey__relax_publish_history_marks_it_rollback_does_not_offer_it(
    page, login, live_server
):
    w = release_setup()
    publish(w.strategy[1], w.envs["prod"], actor=w.ops, approver=w.ops2)
    login("admin", "admin-pass-1")

    # Switching protection off alone is refused until it is said to be a break-glass.
    page.goto(f"{live_server.url}/catalog/environments/prod/edit/")
    page.uncheck("#id_protected")
    page.click("#environment-form button[type=submit]")
    assert "break-glass reason" in page.inner_text("[data-field='break_glass_reason']")
    assert Environment.objects.get(key="prod").protected is True
    page.uncheck("#id_protected")
    page.fill("#id_break_glass_reason", "INC-4711: refunds broken, approver unreachable")
    page.click("#environment-form button[type=submit]")
    page.wait_for_selector("text=Environment prod saved.")
    assert "break-glass" in page.inner_text("tr[data-environment='prod']").lower()

    # The releases page says so while it lasts; a publish now goes live at once.
    page.goto(f"{live_server.url}/releases/")
    banner = page.inner_text("#break-glass-prod")
    assert "approvals switched off by admin" in banner
    assert "INC-4711" in banner
    page.goto(
        f"{live_server.url}/releases/assistant_professional/{STRATEGY}/prod/publish/?version=2"
    )
    assert page.is_visible("#break-glass-prod")
    page.fill("#publish-reason", "Hotfix under INC-4711")
    page.click("#publish-form button[type=submit]")
    page.wait_for_selector("text=is live in prod")
    cell = page.inner_text(f"tr[data-document='{STRATEGY}'] td[data-environment='prod']")
    assert "unreviewed" in cell.lower()

    # The history marks it; the version's page too.
    page.goto(f"{live_server.url}/releases/assistant_professional/history/?environment=prod")
    marked = page.locator("li[data-unreviewed='true']")
    expect(marked).to_have_count(1)
    assert "v1 → v2" in marked.inner_text()
    assert "unreviewed (break-glass)" in marked.inner_text().lower()

    # v3 follows the same way; the rollback page offers v1, not the unreviewed v2.
    release_publish(
        version=w.strategy[3], environment=Environment.objects.get(key="prod"), actor=w.admin
    )
    page.goto(f"{live_server.url}/releases/assistant_professional/{STRATEGY}/prod/rollback/")
    offered = page.locator("#rollback-form input[name=version]")
    assert [offered.nth(i).get_attribute("value") for i in range(offered.count())] == ["1"]
    assert "v2" in page.inner_text("#unreviewed-not-offered")
