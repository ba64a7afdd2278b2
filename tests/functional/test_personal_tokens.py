"""Browser: a person makes a personal API token on their account page, sees it once, a
script uses it against the live server's API, and after revoking it the API refuses it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from playwright.sync_api import expect

from console.accounts.models import PersonalToken
from console.kernel.models import AuditRecord
from tests.factories import AgentFactory, password_for, user_with_grants

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = "/tmp/access-shots"


def api_get(live_server, path: str, secret: str) -> tuple[int, dict]:
    request = urllib.request.Request(
        live_server.url + path, headers={"Authorization": f"Bearer {secret}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the live server
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_personal_token__create_once_use_revoke__401_after(login, page, live_server):
    AgentFactory(key="assistant_professional")
    AgentFactory(key="assistant_lite")
    user_with_grants("ann", viewer="assistant_professional")
    login("ann", password_for("ann"))

    page.locator(".nav-user").get_by_role("link", name="ann").click()
    page.wait_for_url(f"{live_server.url}/account/")
    page.fill("input[name=name]", "ci-deploy")
    assert page.get_by_label("View configuration").is_checked()  # the one capability ann holds
    expect(page.locator("input[name=capabilities]")).to_have_count(1)
    page.get_by_role("button", name="Create token").click()
    banner = page.locator("#new-token")
    assert "it is not shown again" in banner.inner_text()
    secret = banner.locator(".copy-value").inner_text()
    assert secret.startswith("ccp_")
    assert banner.get_by_role("button", name="Copy token").is_visible()
    page.screenshot(path=f"{SHOTS}/account-token-created.png", full_page=True)

    status, body = api_get(live_server, "/api/v1/agents/", secret)
    assert status == 200
    assert [a["key"] for a in body.get("results", body)] == ["assistant_professional"]

    page.goto(f"{live_server.url}/account/")
    assert page.locator("#new-token").count() == 0 and secret not in page.content()
    row = page.locator("[data-token=ci-deploy]")
    assert "never" not in row.inner_text()  # the script's use shows as last used
    row.locator("summary", has_text="Revoke").click()
    assert "stops working at once" in row.inner_text()
    row.locator("textarea[name=reason]").fill("rotating the CI secret")
    page.screenshot(path=f"{SHOTS}/account-token-revoke.png", full_page=True)
    row.get_by_role("button", name="Revoke now").click()
    assert "Revoked ci-deploy" in page.locator(".messages").inner_text()

    status, body = api_get(live_server, "/api/v1/agents/", secret)
    assert status == 401 and body["error"]["code"] == "not_authenticated"
    assert PersonalToken.objects.get().state == "revoked"
    actions = list(
        AuditRecord.objects.filter(action__startswith="personal_token.")
        .order_by("id")
        .values_list("action", "actor_label")
    )
    assert actions == [("personal_token.create", "ann"), ("personal_token.revoke", "ann")]
