"""Browser journeys (issue 32 items 5 and 6): the runtime token form refuses a token that could
never report a manifest, keeping what was typed; and the pages say which runtime reported what
the publish check runs against — after the SDK's example, run with sg-test's token, was
refused instead of replacing sg-test's manifest."""

from __future__ import annotations

from pathlib import Path

import pytest
from context_runtime.manifest_report import ManifestReportError, Registry, report_manifest

from strategies.catalog.models import Manifest
from strategies.releases.services import release_publish
from strategies.runtime.models import RuntimeToken
from tests.factories import manifest_body, release_setup, runtime_token
from tests.functional.layout import LAPTOP, PHONE, layout_faults

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SCREENS = Path(__file__).resolve().parents[2] / ".data" / "screens"
AGENT, STRATEGY = "assistant_professional", "after_sales_consultation"


def shot(page, name):
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENS / f"runtime-reports-{name}.png"), full_page=True)


def registry_of(body: dict) -> Registry:
    """What a runtime registers in code, to report `body` with the SDK."""
    registry = Registry(features=tuple(body.get("features", ())))
    for source in body["providers"]:
        registry.register_provider(source)
    for tool in body["tools"]:
        registry.register_tool(tool)
    for handler in body["handlers"]:
        registry.register_handler(handler)
    for section in body["sections"]:
        registry.register_section(section["key"], section["block"], section["sensitive"])
    for switch in body["switches"]:
        registry.register_switch(switch)
    return registry


@pytest.mark.parametrize("size", [PHONE, LAPTOP], ids=["390", "1366"])
def test_token_form__agent_scoped_manifest_write__refused_with_reason_form_kept(
    page, login, live_server, size
):
    release_setup()
    page.set_viewport_size(size)
    login("admin", "admin-pass-1")
    page.goto(f"{live_server.url}/releases/tokens/")

    page.fill("#t-name", "returns runtime")
    page.select_option("#t-env", "bank-uat")
    page.check("input[name=capabilities][value='manifest:write']")
    page.check(f"input[name=agents][value='{AGENT}']")
    page.click("#token-form button[type=submit]")

    refusal = page.locator("#refusal")
    assert "manifest:write needs a token for every agent" in refusal.inner_text()
    assert "Give it every agent, or leave manifest:write out" in refusal.inner_text()
    assert page.locator("#new-token").count() == 0 and not RuntimeToken.objects.exists()
    # what was typed is still there, to fix one tick rather than start again
    assert page.locator("#t-name").input_value() == "returns runtime"
    assert page.locator("#t-env").input_value() == "bank-uat"
    assert page.locator("input[name=capabilities][value='manifest:write']").is_checked()
    assert page.locator(f"input[name=agents][value='{AGENT}']").is_checked()
    assert layout_faults(page, size) == {}
    shot(page, f"token-refused-{size['width']}")

    # Every agent instead: the token is made and its secret shown once.
    page.uncheck(f"input[name=agents][value='{AGENT}']")
    page.click("#token-form button[type=submit]")
    assert page.locator("#new-token .copy-value").inner_text().startswith("cc_rt_")


def test_manifest_pages__say_which_runtime_reported_what__example_refused(page, login, live_server):
    w = release_setup()
    sg = w.envs["sg-test"]
    release_publish(version=w.profile[1], environment=sg, actor=w.ops)
    release_publish(version=w.strategy[3], environment=sg, actor=w.ops)
    secret = runtime_token(sg)
    # The sg-test runtime reports, with the SDK, one tool more than before.
    served = manifest_body(features=["shadow", "split"])
    served["tools"] = [*served["tools"], "refund_order"]
    result = report_manifest(
        live_server.url,
        secret,
        registry_of(served),
        "bank-assistant 2026.12.1",
        instance_id="pod-7:4242",
        raise_on_failure=True,
    )
    assert result.version == 2
    # The SDK's example, run once with the same token, lacks the handler v3 needs: refused.
    with pytest.raises(ManifestReportError) as refused:
        report_manifest(
            live_server.url,
            secret,
            registry_of(manifest_body(handlers=[])),
            "sdk example",
            instance_id="laptop:99",
            raise_on_failure=True,
        )
    assert refused.value.status == 409 and "general_policy_only" in str(refused.value)
    assert Manifest.objects.filter(environment=sg).latest("version").runtime == (
        "bank-assistant 2026.12.1"
    )

    # ops publishes v3 to sg-test: the check names the runtime, the process and the day.
    login("ops", "ops-pass-1")
    page.goto(f"{live_server.url}/releases/{AGENT}/{STRATEGY}/sg-test/publish/?version=2")
    preview = page.locator("#change-preview")
    report = preview.locator("[data-runtime-report]")
    words = report.locator("p").first.inner_text()
    assert "Checked against what the sg-test runtime reported on" in words
    assert "bank-assistant 2026.12.1 on pod-7:4242" in words
    assert "sdk example" not in preview.inner_text()
    assert "its manifest v" not in preview.inner_text()  # the code sits one disclosure away
    assert not report.locator("details").get_attribute("open")
    report.locator("summary").click()
    assert "Manifest v2" in report.locator(".expander-body").inner_text()
    assert "refund_order" in report.locator(".expander-body").inner_text()
    assert layout_faults(page) == {}
    shot(page, "publish-check")

    # The agent's runtimes page says the same per environment.
    page.goto(f"{live_server.url}/releases/{AGENT}/runtimes/")
    sg_report = page.locator("[data-manifest-of='sg-test']")
    assert "bank-assistant 2026.12.1 on pod-7:4242" in sg_report.inner_text()
    assert "What it implements, as its runtime reported on" in sg_report.inner_text()
    refused_note = page.locator("[data-manifest-refused='sg-test']").inner_text()
    assert "A later report was refused" in refused_note
    assert "sdk example on laptop:99" in refused_note
    assert "after_sales_consultation v3" in refused_note
    assert layout_faults(page) == {}
    shot(page, "runtimes")
