"""Browser: full-page screenshots of the pages people look at most — the dashboard, the profile
grid and a trace page — on a laptop (1366 px) and a phone (390 px), saved under
docs/screenshots/ (issue 12). Each page must fit its width: no sideways scroll."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.functional.layout import sideways_scroll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
PAGES = [
    ("dashboard", "/", "h1"),
    ("profile-grid", "/agents/assistant_professional/", "#profile-grid"),
    ("trace", "/traces/req-93/", "#where-to-look"),
]
VIEWPORTS = {1366: {"width": 1366, "height": 900}, 390: {"width": 390, "height": 844}}


@pytest.mark.parametrize("width", [1366, 390])
def test_screenshots__dashboard_profile_grid_trace__fit_the_width(
    demo_world, browser, live_server, width
):
    SHOTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(
        viewport=VIEWPORTS[width], base_url=live_server.url, timezone_id="Europe/Zurich"
    )
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        page.goto("/login/")
        page.fill("input[name=username]", "ops")
        page.fill("input[name=password]", "ops-demo")
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        for name, path, ready in PAGES:
            page.goto(path)
            page.locator(ready).first.wait_for()
            page.evaluate("document.activeElement && document.activeElement.blur()")
            page.evaluate("window.scrollTo(0, 0)")
            overflow = sideways_scroll(page)
            assert overflow <= 0, f"{path} scrolls sideways by {overflow}px at {width}px"
            target = SHOTS / f"{name}-{width}.png"
            page.screenshot(path=str(target), full_page=True, animations="disabled", caret="hide")
            assert target.stat().st_size > 10_000
    finally:
        context.close()
