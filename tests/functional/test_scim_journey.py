"""Browser (issue 33, item 5): an admin creates a SCIM token on Access → Provisioning (SCIM)
and sees its secret once; the identity provider's SCIM calls (HTTP, shaped as Okta sends
them) provision a person into a mapped group — the Access page shows their grant as from the
mapping; a SCIM deactivation shows them deactivated on the Provisioning page, grant gone."""

from __future__ import annotations

import json
import urllib.request

import pytest
from playwright.sync_api import expect

from console.access import group_mappings
from tests.factories import AgentFactory, role_named, user_with_grants
from tests.functional.layout import LAPTOP, PHONE, layout_faults
from tests.integration import scim_fixtures as fx

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _scim(live_server, secret: str, method: str, path: str, body=None) -> dict:
    request = urllib.request.Request(
        f"{live_server.url}/scim/v2/{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/scim+json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - loopback
        return json.loads(answer.read() or b"{}")


def test_scim__token_made_on_the_page_provisions_a_mapped_person_then_deactivates_them(
    login, page, live_server
):
    payments = AgentFactory(key="payments")
    admin = user_with_grants("root", admin=None)
    group_mappings.group_mapping_create(
        actor=admin,
        provider="bank",
        group="pay-ops",
        role=role_named("operator"),
        agents=[payments],
        all_agents=False,
        reason="payments operations team",
    )
    login("root", "root-pass-1")

    page.goto(f"{live_server.url}/access/")
    page.get_by_role("link", name="Provisioning (SCIM)").click()
    page.get_by_label("Identity provider").fill("bank")
    page.get_by_label("Name").fill("Okta production")
    page.get_by_role("button", name="Create the token").click()
    banner = page.get_by_test_id("scim-secret")
    secret = banner.locator("code.copy-value").inner_text()
    assert secret.startswith("scim_") and "not shown again" in banner.inner_text()
    assert page.get_by_test_id("scim-provider-unconfigured").is_visible()
    assert layout_faults(page, PHONE, LAPTOP) == {}
    page.reload()
    expect(page.get_by_test_id("scim-secret")).to_have_count(0)  # shown once
    assert secret not in page.content()

    user = _scim(live_server, secret, "POST", "Users", fx.OKTA_USER)
    _scim(
        live_server,
        secret,
        "POST",
        "Groups",
        {**fx.OKTA_GROUP, "displayName": "pay-ops", "members": [{"value": user["id"]}]},
    )

    page.goto(f"{live_server.url}/access/")
    row = page.locator("tr[data-grant]", has_text="test.user@okta.local")
    assert "payments" in row.inner_text()
    assert row.get_by_test_id("grant-from-mapping").inner_text() == "From group pay-ops at bank"

    _scim(live_server, secret, "PATCH", f"Users/{user['id']}", fx.OKTA_DEACTIVATE)

    page.goto(f"{live_server.url}/access/provisioning/")
    person = page.locator("[data-testid=scim-people] tr", has_text="test.user@okta.local")
    assert person.get_by_test_id("scim-state").inner_text().strip().endswith("deactivated")
    tokens = page.locator("[data-testid=scim-tokens] tr", has_text="Okta production")
    assert "never" not in tokens.inner_text()  # its last use is shown
    page.goto(f"{live_server.url}/access/")
    expect(page.locator("tr[data-grant]", has_text="test.user@okta.local")).to_have_count(0)
