"""Browser journey (issue 22, Done-when): in the demo world ops starts a version with a
4,000-token budget as shadow beside live v3 in sg-test from the releases page; sg-test's
runtime sends traffic (the SDK's engine and shadow run, in the test process); ops follows the
release row to the version-health page, sees the shadow's disagreement figure, opens the
request ids behind it and one trace whose Shadow run card names the candidates decided
otherwise, then goes back and promotes the shadow — and sees it live."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from strategies.catalog.models import Environment
from strategies.delivery.config import cache_clear_all
from strategies.documents.models import Version
from strategies.documents.services import draft_create, version_freeze
from tests.factories import runtime_token
from tests.factories.sdk_traffic import runtime_config, sdk_traffic
from tests.factories.traces import candidates_of
from tests.functional.layout import layout_faults
from traces.models import Trace

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SCREENS = Path(__file__).resolve().parents[2] / ".data" / "screens"
STRATEGY = "after_sales_consultation"
CELL = (
    f"#releases-assistant_professional tr[data-document='{STRATEGY}'] "
    "td[data-environment='sg-test']"
)
REQUESTS = 40


def shot(page, name):
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENS / f"shadow-health-{name}.png"), full_page=True)


def freeze_4k_version() -> Version:
    """v3 with budget.max_input_tokens 4000, drafted and frozen by ops (documents service)."""
    v3 = Version.objects.get(document__key=STRATEGY, number=3)
    body = copy.deepcopy(v3.body)
    body["budget"]["max_input_tokens"] = 4000
    ops = get_user_model().objects.get(username="ops")
    draft = draft_create(document=v3.document, body=body, actor=ops, note="a 4k budget?")
    return version_freeze(draft=draft, actor=ops)


def test_ops__shadow_4k__health_disagreements__trace_card__promote__live(
    demo_world, page, login, live_server, client
):
    cache_clear_all()  # Redis outlives the test database between runs
    v4 = freeze_4k_version()
    secret = runtime_token(Environment.objects.get(key="sg-test"))

    login("ops", "ops-demo")
    releases = f"{live_server.url}/releases/?agent=assistant_professional"
    page.goto(releases)
    page.click(f"{CELL} a[data-shadow-start]")
    page.select_option("#shadow-version", str(v4.number))
    page.wait_for_selector("#shadow-preview >> text=How v4 differs from live v3")
    assert "max_input_tokens" in page.inner_text("#shadow-preview")
    page.fill("#shadow-reason", "Does a 4k budget keep the order?")
    page.click("#shadow-form button[type=submit]")
    page.wait_for_selector("text=after_sales_consultation v4 runs as shadow in sg-test")
    assert runtime_config(client, secret)["shadow"][STRATEGY]["version"] == 4

    # sg-test's runtime: the configuration it fetches now, each request through the engine
    # and the shadow beside it, the traces posted to ingest.
    sdk_traffic(secret, count=REQUESTS, prefix="web-", client=client)
    stored = {t.request_id: t for t in Trace.objects.filter(request_id__startswith="web-")}
    differing = {
        rid
        for rid, t in stored.items()
        if t.shadow["status"] != t.status
        or set(t.shadow["selected"])
        != {c.item_id for c in candidates_of(t) if c.decision == "selected"}
    }
    assert differing  # a 4,000-token budget cannot hold what the consultation needs

    # From the release row to the version-health page.
    page.goto(releases)
    page.locator(f'[data-health-glance="{STRATEGY}-sg-test"]').click()
    page.wait_for_url(re.compile(rf".*/health/sg-test/{STRATEGY}/$"))
    assert "Shadow: v4" in page.locator("#health-rates thead").text_content()
    same = page.locator('[data-metric="same_status"] [data-column="shadow:4"]')
    agreed = sum(1 for t in stored.values() if t.shadow["status"] == t.status)
    assert f"{agreed}/{REQUESTS}" in same.inner_text()
    selected = page.locator('[data-metric="same_selected"] [data-column="shadow:4"]')
    assert f"{REQUESTS - len(differing)}/{REQUESTS}" in selected.inner_text()
    shot(page, "health")
    assert layout_faults(page) == {}  # the shadow's column on a phone and at 1366 too
    selected.locator("[data-requests]").click()

    # The request ids behind it: exactly the requests where the shadow decided otherwise.
    page.wait_for_url(re.compile(r".*/requests\?.*"))
    assert "shadow disagrees with live" in page.inner_text("#requests-filter")
    rows = page.locator("#health-request-ids tbody tr")
    listed = {rows.nth(i).locator("a.mono").inner_text().strip() for i in range(rows.count())}
    assert listed == differing
    assert layout_faults(page) == {}  # on a phone too
    first = rows.first.locator("a.mono")
    request_id = first.inner_text().strip()
    first.click()

    # One trace: the Shadow run card names the candidates v4 decided differently.
    page.wait_for_url(re.compile(rf".*/traces/{request_id}/.*"))
    card = page.locator("#shadow-run")
    assert "v4 beside live v3" in card.inner_text()
    assert "decides this request differently" in card.locator("#shadow-finding").inner_text()
    trace = stored[request_id]
    by_position = {c.position: c for c in candidates_of(trace)}
    differences = trace.shadow["differences"]
    assert differences
    table = card.locator("#shadow-differences")
    for difference in differences:
        row = table.locator(f"tr[data-position='{difference['index']}']")
        assert by_position[difference["index"]].item_id in row.inner_text()
    shot(page, "trace")

    # Back to the releases page: promote the shadow (sg-test needs no approval).
    page.goto(releases)
    cell = page.locator(CELL)
    cell.locator("summary", has_text="Promote to live…").click()
    dialog = cell.locator("details[id^='promote-'] .confirm-panel")
    assert "users get v4 instead of v3" in dialog.inner_text()
    dialog.locator("textarea").fill("The shadow's disagreements are the budget we want")
    dialog.locator("button[type=submit]").click()
    page.wait_for_selector(
        "text=after_sales_consultation v4 is live in sg-test; its shadow is stopped"
    )
    cell = page.locator(CELL)
    assert "v4" in cell.locator(".badge[data-status='live']").inner_text()
    expect(cell.locator("[data-shadow]")).to_have_count(0)
    served = runtime_config(client, secret)
    assert served["strategies"][STRATEGY]["version"] == 4 and served["shadow"] == {}
