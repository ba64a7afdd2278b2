"""Browser (issue 33, item 2): a person signs in through the bank's SAML identity provider — a
real pysaml2 IdP on loopback (tests/idp/saml_idp.py) — lands on the dashboard with exactly
the role their group maps to, later confirms it is them at the IdP (ForceAuthn) before a
dangerous action, and signs out of both (SP-initiated single logout)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from console.access import group_mappings
from console.accounts import saml
from console.kernel.models import AccessLogEntry
from console.kernel.sessions import AUTHENTICATED_AT
from tests.factories import AgentFactory, role_named, user_with_grants
from tests.functional.test_sessions_journey import rewind

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def corp(saml_idp, settings, live_server):
    saml._metadata.clear()
    console = f"{live_server.url}/login/saml/corp"
    saml_idp.register_sp(
        entity_id=f"{console}/metadata/", acs=f"{console}/acs/", sls=f"{console}/sls/"
    )
    saml_idp.add_user("alice", subject="alice-pid", email="alice@bank.test", groups=["pay-ops"])
    saml_idp.start()
    settings.SAML_PROVIDERS = [saml_idp.provider_setting(key="corp", name="Corp SAML")]
    return saml_idp


def test_saml__member_of_mapped_group__lands_with_the_mapped_role_and_confirms_at_idp(
    corp, page, live_server
):
    payments = AgentFactory(key="payments")
    AgentFactory(key="lending")
    admin = user_with_grants("root", admin=None)
    group_mappings.group_mapping_create(
        actor=admin,
        provider="corp",
        group="pay-ops",
        role=role_named("operator"),
        agents=[payments],
        all_agents=False,
        reason="payments operations team",
    )

    page.goto(f"{live_server.url}/login/")
    page.get_by_role("link", name="Sign in with Corp SAML").click()
    page.get_by_label("Login").fill("alice")
    page.get_by_role("button", name="Sign in").click()  # the IdP's page posts the answer back
    page.wait_for_url(f"{live_server.url}/")

    assert page.locator(".nav-user-roles").inner_text() == "operator on payments"
    assert page.locator("[data-agent=payments]").is_visible()
    expect(page.locator("[data-agent=lending]")).to_have_count(0)

    # A dangerous action later: the IdP is asked to confirm it is her (ForceAuthn="true").
    rewind(page, 11 * 60, AUTHENTICATED_AT)
    page.goto(f"{live_server.url}/reauthenticate/?next=/agents/")
    page.get_by_role("link", name="Confirm with Corp SAML").click()
    assert page.get_by_text("forced re-authentication").is_visible()
    page.get_by_label("Login").fill("alice")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_server.url}/agents/")
    assert AccessLogEntry.objects.get(action="auth.reauthenticate").outcome == "allowed"

    page.get_by_role("button", name="Log out").click()  # and at the IdP: single logout
    page.wait_for_url(f"{live_server.url}/login/")
    assert corp.logouts() == ["alice-pid"]
    page.goto(f"{live_server.url}/")
    assert "/login/" in page.url  # the console's session ended
