"""Browser journey (Done-when): ops publishes to sg-test and bank-uat, the prod publish waits
for ops2's approval, admin rolls prod back — and the runtime's config follows each step."""

from __future__ import annotations

from pathlib import Path

import pytest

from strategies.releases.services import approval_approve, release_publish
from tests.factories import bearer, release_setup, runtime_token

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SCREENS = Path(__file__).resolve().parents[2] / ".data" / "screens"
STRATEGY = "after_sales_consultation"


def shot(page, name):
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENS / f"releases-{name}.png"), full_page=True)


def live_config(client, secret):
    response = client.get("/api/v1/runtime/config/assistant_professional", **bearer(secret))
    assert response.status_code == 200
    return response["ETag"], response.json()["strategies"].get(STRATEGY, {}).get("version")


def switch_user(page, login, username):
    page.click("form[action='/logout/'] button")
    return login(username, f"{username}-pass-1")


def test_release_journey__publish_approve_rollback__runtime_serves_each_state(
    page, login, live_server, client
):
    w = release_setup()
    for env in ("sg-test", "bank-uat", "prod"):
        outcome = release_publish(version=w.strategy[1], environment=w.envs[env], actor=w.ops)
        if outcome.approval:
            approval_approve(approval=outcome.approval, actor=w.ops2)
    prod_token = runtime_token(w.envs["prod"])
    sg_token = runtime_token(w.envs["sg-test"])
    prod_etag_v1, prod_version = live_config(client, prod_token)
    assert prod_version == 1

    # ops publishes v2 to sg-test, seeing the diff and the validation first.
    login("ops", "ops-pass-1")
    page.goto(f"{live_server.url}/releases/")
    shot(page, "overview-before")
    grid_row = page.locator(f"#releases-assistant_professional tr[data-document='{STRATEGY}']")
    grid_row.locator("td[data-environment='sg-test'] >> text=Publish…").click()
    page.select_option("#version-select", "2")
    page.wait_for_selector("#change-preview >> text=applicable_policy added to optional sources")
    assert "The runtime implements everything" in page.inner_text("#change-preview")
    shot(page, "publish-preview")
    page.fill("#publish-reason", "Policy as optional context")
    page.click("#publish-form button[type=submit]")
    page.wait_for_selector("text=is live in sg-test")
    assert live_config(client, sg_token)[1] == 2

    # v3 cannot go to bank-uat (its runtime lacks general_policy_only): refused with the reason.
    page.goto(
        f"{live_server.url}/releases/assistant_professional/{STRATEGY}/bank-uat/publish/?version=3"
    )
    assert "general_policy_only" in page.inner_text("#change-preview")
    page.select_option("#version-select", "2")
    page.wait_for_selector("#change-preview >> text=The runtime implements everything")
    page.fill("#publish-reason", "Promote after sg-test")
    page.click("#publish-form button[type=submit]")
    page.wait_for_selector("text=is live in bank-uat")

    # prod waits for a second person: the runtime still gets v1, same ETag.
    page.goto(
        f"{live_server.url}/releases/assistant_professional/{STRATEGY}/prod/publish/?version=2"
    )
    page.fill("#publish-reason", "Promote after bank-uat")
    page.click("#publish-form button[type=submit]")
    page.wait_for_selector("text=waits for approval in prod")
    shot(page, "overview-pending")
    assert live_config(client, prod_token) == (prod_etag_v1, 1)

    # ops2 reviews and approves: prod serves v2 with a new ETag.
    switch_user(page, login, "ops2")
    page.goto(f"{live_server.url}/releases/")
    page.click("#releases-assistant_professional td[data-environment='prod'] >> text=Review…")
    shot(page, "approval")
    page.click("#approve-form button[type=submit]")
    page.wait_for_selector("text=Approved:")
    prod_etag_v2, prod_version = live_config(client, prod_token)
    assert prod_version == 2 and prod_etag_v2 != prod_etag_v1

    # admin rolls prod back to v1 in one action; the ETag moves on again.
    switch_user(page, login, "admin")
    page.goto(f"{live_server.url}/releases/")
    page.click(
        f"#releases-assistant_professional tr[data-document='{STRATEGY}'] td[data-environment='prod'] >> text=Roll back…"
    )
    page.wait_for_selector("#change-preview")
    shot(page, "rollback")
    page.fill("#rollback-reason", "v2 regressed answers in prod")
    page.click("#rollback-form button[type=submit]")
    page.wait_for_selector("text=prod is back on")
    prod_etag_back, prod_version = live_config(client, prod_token)
    assert prod_version == 1 and prod_etag_back not in (prod_etag_v1, prod_etag_v2)

    page.goto(f"{live_server.url}/releases/assistant_professional/history/?environment=prod")
    timeline = page.inner_text("ol.timeline")
    assert "Rollback" in timeline and "v2 regressed answers in prod" in timeline
    assert "approved by ops2" in timeline
    shot(page, "history")


def test_tokens_page__create_then_revoke__secret_shown_once_and_token_stops(
    page, login, live_server, client
):
    w = release_setup()
    login("admin", "admin-pass-1")
    page.goto(f"{live_server.url}/releases/tokens/")
    page.fill("#t-name", "bank-uat runtime")
    page.select_option("#t-env", "bank-uat")
    page.click("#token-form button[type=submit]")
    secret = page.locator("#new-token .copy-value").inner_text()
    shot(page, "tokens")
    assert secret.startswith("cc_rt_")
    assert (
        client.get("/api/v1/runtime/config/assistant_professional", **bearer(secret)).status_code
        == 200
    )

    page.goto(f"{live_server.url}/releases/tokens/")
    assert secret not in page.content()  # shown once
    row = page.locator("tr", has_text="bank-uat runtime")
    row.locator("summary", has_text="Revoke…").click()
    row.locator("textarea").fill("runtime decommissioned")
    row.locator("button[type=submit]").click()
    page.wait_for_selector("text=It stops working now")
    assert (
        client.get("/api/v1/runtime/config/assistant_professional", **bearer(secret)).status_code
        == 401
    )
    assert w.admin is not None
