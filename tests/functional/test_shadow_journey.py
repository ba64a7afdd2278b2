"""Browser journey (issue 22, Done-when): in the demo world ops starts a shadow of v2 beside
live v3 in sg-test from the releases page, sees it in the grid, promotes it, and sees v2 live
with the shadow gone — and the runtime's configuration follows each step."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from strategies.releases.models import Release, ShadowRelease
from tests.factories import bearer, runtime_token

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SCREENS = Path(__file__).resolve().parents[2] / ".data" / "screens"
STRATEGY = "after_sales_consultation"
CELL = (
    f"#releases-assistant_professional tr[data-document='{STRATEGY}'] "
    "td[data-environment='sg-test']"
)


def shot(page, name):
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENS / f"shadow-{name}.png"), full_page=True)


def runtime_config(client, secret) -> dict:
    response = client.get("/api/v1/runtime/config/assistant_professional", **bearer(secret))
    assert response.status_code == 200
    return response.json()


def test_shadow_journey__start_v2_beside_v3_then_promote__live_and_shadow_gone(
    demo_world, page, login, live_server, client
):
    from strategies.catalog.models import Environment
    from strategies.delivery.config import cache_clear_all

    cache_clear_all()  # Redis outlives the test database between runs
    secret = runtime_token(Environment.objects.get(key="sg-test"))
    assert runtime_config(client, secret)["strategies"][STRATEGY]["version"] == 3

    login("ops", "ops-demo")
    page.goto(f"{live_server.url}/releases/?agent=assistant_professional")
    page.click(f"{CELL} a[data-shadow-start]")

    # The shadow page: choose v2, see how it differs from live and that the runtime runs it.
    page.select_option("#shadow-version", "2")
    page.wait_for_selector("#shadow-preview >> text=How v2 differs from live v3")
    assert "The runtime runs shadows" in page.inner_text("#shadow-preview")
    assert "needs no approval" in page.inner_text(".page-header-sub")
    page.fill("#shadow-reason", "Does v2 keep the order in budget?")
    shot(page, "start")
    page.click("#shadow-form button[type=submit]")

    page.wait_for_selector("text=after_sales_consultation v2 runs as shadow in sg-test")
    cell = page.locator(CELL)
    assert cell.locator("[data-shadow='2']").is_visible()
    assert "v2 shadow" in cell.inner_text() and "by ops" in cell.inner_text()
    assert "v3" in cell.inner_text()  # still live
    served = runtime_config(client, secret)
    assert served["shadow"][STRATEGY]["version"] == 2
    assert served["strategies"][STRATEGY]["version"] == 3
    shot(page, "running")

    # Promote: a publish of v2 (sg-test is not protected), with a reason.
    cell.locator("summary", has_text="Promote to live…").click()
    dialog = cell.locator("details[id^='promote-'] .confirm-panel")
    assert "users get v2 instead of v3" in dialog.inner_text()
    dialog.locator("textarea").fill("Shadow agreed on the demo traffic")
    dialog.locator("button[type=submit]").click()

    page.wait_for_selector(
        "text=after_sales_consultation v2 is live in sg-test; its shadow is stopped"
    )
    cell = page.locator(CELL)
    expect(cell.locator("[data-shadow]")).to_have_count(0)
    assert cell.locator("[data-shadow-start]").is_visible()  # a new one can start
    assert "v2" in cell.locator(".badge[data-status='live']").inner_text()
    shot(page, "promoted")
    release = Release.objects.get(document__key=STRATEGY, environment__key="sg-test")
    assert release.version.number == 2
    assert not ShadowRelease.objects.get(document__key=STRATEGY, environment__key="sg-test").running
    served = runtime_config(client, secret)
    assert served["shadow"] == {} and served["strategies"][STRATEGY]["version"] == 2
