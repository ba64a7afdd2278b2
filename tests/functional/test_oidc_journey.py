"""Browser (issue 33): a person signs in through the bank's identity provider — a real
oidc-provider on loopback — lands on the dashboard with exactly the role their group maps
to, confirms it is them at the provider before a dangerous action, and signs out at the
provider too (RP-initiated logout)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from console.access import group_mappings
from console.kernel.models import AccessLogEntry
from console.kernel.sessions import AUTHENTICATED_AT
from tests.factories import AgentFactory, role_named, user_with_grants
from tests.functional.layout import LAPTOP, PHONE, layout_faults
from tests.functional.test_sessions_journey import rewind

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def bank(oidc_provider, live_server, settings):
    oidc_provider.add_client(
        "console",
        "s3cret",
        redirect_uris=[f"{live_server.url}/login/sso/bank/callback/"],
        post_logout_redirect_uris=[f"{live_server.url}/login/"],
    )
    oidc_provider.add_user("alice", sub="alice-sub", email="alice@bank.test", groups=["pay-ops"])
    oidc_provider.start()
    settings.OIDC_PROVIDERS = [
        oidc_provider.provider_setting(
            key="bank", name="Bank SSO", client_id="console", client_secret="s3cret"
        )
    ]
    return oidc_provider


def test_sso__member_of_mapped_group__lands_with_the_mapped_role_and_signs_out_at_provider(
    bank, page, live_server
):
    AgentFactory(key="payments")
    AgentFactory(key="lending")
    admin = user_with_grants("root", admin=None)
    group_mappings.group_mapping_create(
        actor=admin,
        provider="bank",
        group="pay-ops",
        role=role_named("operator"),
        agents=[AgentFactory._meta.model.objects.get(key="payments")],
        all_agents=False,
        reason="payments operations team",
    )

    page.goto(f"{live_server.url}/login/")
    assert layout_faults(page, PHONE, LAPTOP) == {}
    page.get_by_role("link", name="Sign in with Bank SSO").click()
    page.get_by_label("Login").fill("alice")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_server.url}/")

    assert page.locator(".nav-user-roles").inner_text() == "operator on payments"
    assert page.locator("[data-agent=payments]").is_visible()
    expect(page.locator("[data-agent=lending]")).to_have_count(0)

    # A dangerous action later: the provider is asked to confirm it is her (not a password).
    rewind(page, 11 * 60, AUTHENTICATED_AT)
    page.goto(f"{live_server.url}/reauthenticate/?next=/agents/")
    page.get_by_role("link", name="Confirm with Bank SSO").click()
    page.get_by_label("Login").fill("alice")  # prompt=login: the provider asks again
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_server.url}/agents/")
    assert AccessLogEntry.objects.get(action="auth.reauthenticate").outcome == "allowed"

    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{live_server.url}/login/")
    page.goto(f"{live_server.url}/")
    assert "/login/" in page.url  # signed out of the console too


def test_sso__provider_refuses__sign_in_page_says_why_at_phone_and_laptop(bank, page, live_server):
    bank.set_tamper("wrong_key")

    page.goto(f"{live_server.url}/login/")
    page.get_by_role("link", name="Sign in with Bank SSO").click()
    page.get_by_label("Login").fill("alice")
    page.get_by_role("button", name="Sign in").click()

    error = page.get_by_test_id("sso-error")
    assert "signature does not match" in error.inner_text()
    assert page.get_by_role("link", name="Sign in with Bank SSO").is_visible()
    assert layout_faults(page, PHONE, LAPTOP) == {}


def test_group_mappings_page__admin_maps_a_group_then_removes_it(
    login, page, live_server, settings
):
    settings.OIDC_PROVIDERS = [
        {
            "key": "bank",
            "name": "Bank SSO",
            "issuer": "http://127.0.0.1:9",
            "client_id": "console",
            "client_secret": "s3cret",
        }
    ]
    AgentFactory(key="payments")
    user_with_grants("root", admin=None)
    login("root", "root-pass-1")

    page.goto(f"{live_server.url}/access/")
    page.get_by_role("link", name="Group mappings").click()
    page.get_by_label("Group", exact=True).fill("pay-ops")
    page.get_by_label("Role").select_option(label="operator")
    page.get_by_role("checkbox", name="payments").check()
    page.get_by_label("Reason (recorded in the audit log)").fill("payments operations team")
    page.get_by_role("button", name="Map the group").click()

    row = page.locator("[data-testid=group-mappings] tr", has_text="pay-ops")
    assert "operator" in row.inner_text() and "payments" in row.inner_text()
    assert layout_faults(page, PHONE, LAPTOP) == {}

    row.locator("summary", has_text="Remove…").click()
    row.get_by_label("Reason (recorded in the audit log)").fill("team disbanded")
    row.get_by_role("button", name="Remove").click()
    expect(page.locator("[data-testid=group-mappings]")).to_have_count(0)
    assert "Removed" in page.locator("#messages").inner_text()
