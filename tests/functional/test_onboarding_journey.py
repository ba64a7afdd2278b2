"""Browser journey (Done-when, issue 13): an admin creates an agent and an environment and
grants a person the operator role on it through the pages; a runtime token made on the tokens
page reports the runtime's manifest with the SDK; the person creates a strategy for the new
agent and publishes it to the new environment; the runtime reads it over HTTP — no shell.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from context_runtime.manifest_report import Registry, report_manifest

from console.kernel.models import Role
from strategies.catalog.models import Agent, Environment
from strategies.delivery.config import cache_clear_all
from tests.factories import UserFactory, standard_roles, user_with_grants

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SCREENS = Path(__file__).resolve().parents[2] / ".data" / "screens"
AGENT, ENVIRONMENT, STRATEGY = "assistant_returns", "returns-test", "returns_consultation"


def shot(page, name):
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENS / f"onboarding-{name}.png"), full_page=True)


def runtime_config(base_url: str, secret: str) -> tuple[int, dict]:
    """What a runtime does: GET its agent's configuration with its token."""
    request = urllib.request.Request(
        f"{base_url}/api/v1/runtime/config/{AGENT}",
        headers={"Authorization": f"Bearer {secret}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the live server
        return response.status, json.loads(response.read())


def test_onboarding__admin_creates_agent_and_environment__person_publishes__runtime_reads_it(
    page, login, live_server
):
    cache_clear_all()  # Redis outlives the test database between runs
    standard_roles()
    user_with_grants("admin", admin=None)
    UserFactory(username="ann")  # a person without any grant yet

    # The admin onboards the agent through the pages.
    login("admin", "admin-pass-1")
    page.get_by_role("navigation", name="Main").get_by_role(
        "link", name="Agents & environments"
    ).click()
    page.locator("#catalog-agents").get_by_role("link", name="New agent").click()  # empty state
    page.fill("#id_key", AGENT)
    page.fill("#id_name", "Returns desk")
    page.get_by_role("button", name="Create agent").click()
    page.wait_for_url(f"{live_server.url}/agents/{AGENT}/")
    onboarding = page.locator("#onboarding")
    assert "Create your first strategy" in onboarding.inner_text()
    assert live_server.url in page.locator("[data-snippet=connect-runtime]").inner_text()
    shot(page, "agent-next-steps")

    # … and the environment, whose runtime has not reported yet.
    page.goto(f"{live_server.url}/catalog/")
    page.locator(".page-header-actions").get_by_role("link", name="New environment").click()
    page.fill("#id_key", ENVIRONMENT)
    page.get_by_role("button", name="Create environment").click()
    assert f"Environment {ENVIRONMENT} created" in page.locator(".messages").inner_text()
    assert page.locator(f"#catalog-environments tr[data-environment='{ENVIRONMENT}']").count()
    shot(page, "catalog")

    # The agent's page says the new environment has no manifest yet, and where to get a token.
    page.goto(f"{live_server.url}/agents/{AGENT}/")
    step = page.locator("[data-step=manifest]")
    assert f"No manifest from {ENVIRONMENT} yet" in step.inner_text()
    step.get_by_role("link", name="Create a runtime token").click()
    assert page.locator("#t-env").input_value() == ENVIRONMENT
    page.fill("#t-name", "returns runtime")
    page.check("input[name=capabilities][value='manifest:write']")
    page.check("input[name=capabilities][value='traces:write']")
    page.click("#token-form button[type=submit]")
    secret = page.locator("#new-token .copy-value").inner_text()
    assert secret.startswith("cc_rt_")

    # The runtime starts and reports what it implements, with the SDK, over HTTP.
    registry = Registry()
    registry.register_provider("task_state")
    registry.register_provider("order_delivery")
    result = report_manifest(
        live_server.url, secret, registry, "returns-runtime 1.0", raise_on_failure=True
    )
    assert result.version == 1

    # The admin grants ann the operator role on the new agent (Access pages).
    page.goto(f"{live_server.url}/access/grants/new/?agent={AGENT}")
    page.select_option("select[name=username]", "ann")
    page.select_option("select[name=role]", str(Role.objects.get(name="operator").pk))
    page.select_option("select[name=agent]", AGENT)
    page.fill("textarea[name=reason]", "owns the returns assistant")
    page.get_by_role("button", name="Review the grant…").click()
    page.get_by_role("button", name="Confirm grant").click()
    assert "operator" in page.locator("[data-testid=people-matrix] [data-person=ann]").inner_text()

    # ann creates the agent's first strategy …
    page.click("form[action='/logout/'] button")
    login("ann", "ann-pass-1")
    page.goto(f"{live_server.url}/agents/{AGENT}/")
    page.locator("[data-step=strategy]").get_by_role(
        "link", name="Create your first strategy"
    ).click()
    page.fill("#id_key", STRATEGY)
    page.get_by_role("button", name="Create and open its draft").click()
    page.wait_for_url(f"{live_server.url}/agents/{AGENT}/documents/{STRATEGY}/draft/")

    # … and publishes it to the new environment (unprotected: it goes live at once).
    page.goto(f"{live_server.url}/releases/?agent={AGENT}")
    row = page.locator(f"#releases-{AGENT} tr[data-document='{STRATEGY}']")
    row.locator(f"td[data-environment='{ENVIRONMENT}'] >> text=Publish…").click()
    page.wait_for_selector("#change-preview >> text=The runtime implements everything")
    page.fill("#publish-reason", "First strategy of the returns desk")
    page.click("#publish-form button[type=submit]")
    page.wait_for_selector(f"text=is live in {ENVIRONMENT}")
    shot(page, "published")

    # The runtime reads it with its token.
    status, config = runtime_config(live_server.url, secret)
    assert status == 200
    assert config["strategies"][STRATEGY]["version"] == 1
    assert Agent.objects.get(key=AGENT).name == "Returns desk"
    assert Environment.objects.get(key=ENVIRONMENT).protected is False
