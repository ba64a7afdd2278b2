"""Browser: ops previews a tighter budget on sg-test's real traffic before publishing it — the
progress bar runs (a real Celery worker replays the window), the status matrix shows who
becomes budget_exceeded, one trace side by side; the approver of the prod publish sees the
saved prod preview in the request (issue 20)."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pytest
from context_runtime import wire
from django.contrib.auth.models import User

from strategies.catalog.models import Environment
from strategies.documents.models import Document
from strategies.documents.services import draft_create, version_freeze
from strategies.releases.models import ApprovalRequest
from strategies.releases.services import release_publish
from tests.functional.layout import layout_faults
from tests.functional.steps import run_impact_preview
from traces.previews import services
from traces.previews.models import Preview

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
AGENT = "assistant_professional"


def _wait_for(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.2)


def test_ops_previews_budget_4000_on_sg_test__approver_sees_the_prod_preview(
    demo_world, login, browser, live_server, celery_worker_process, settings
):
    settings.CELERY_TASK_DEFAULT_QUEUE = celery_worker_process
    ops = User.objects.get(username="ops")
    document = Document.objects.get(agent__key=AGENT, key="after_sales_consultation")
    body = copy.deepcopy(document.versions.get(number=3).body)
    body["budget"]["max_input_tokens"] = 4000
    v4 = version_freeze(
        draft=draft_create(document=document, body=body, actor=ops, note="budget 4000"),
        actor=ops,
    )
    # prod needs its own preview of v4 (against v2, live there) for the approver to see.
    prod = Environment.objects.get(key="prod")
    prod_preview, _ = services.preview_request(actor=ops, version=v4, environment=prod)

    page = login("ops", "ops-demo")
    run_impact_preview(
        page, agent=AGENT, document="after_sales_consultation", version=4, environment="sg-test"
    )
    cell = page.locator('#status-matrix td[data-old="ready"][data-new="budget_exceeded"]')
    assert int(cell.get_attribute("data-count")) > 0
    assert "cell-bad" in cell.get_attribute("class")
    assert "reproduced" in page.locator("#fidelity").inner_text()
    # Plain words first (issue 32 item 10): the replay's trust as a count, no "Fidelity 100 %"
    # in front; why items changed in words, each reason code one hover away
    fidelity = page.locator("#fidelity").inner_text()
    assert fidelity.startswith("Can the replay be trusted?") and "Yes: replaying" in fidelity
    assert "Fidelity" not in fidelity
    assert "Fidelity 100 %" in page.locator("#fidelity .help-term").get_attribute("title")
    per_source = page.locator("#per-source").inner_text()
    assert not [code for code in wire.REASON_CODES if "_" in code and code in per_source]
    why = page.locator("#per-source td[data-code] .help-term").first
    assert why.get_attribute("title").startswith("reason code ")
    assert "_" not in why.inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(
        path=str(SHOTS / "preview-report-1280.png"), full_page=True, animations="disabled"
    )
    assert layout_faults(page) == {}  # on a phone too

    cell.locator("a").click()
    listed = page.locator("#ids-ready-budget_exceeded")
    listed.locator("summary").click()
    listed.locator("a").first.click()
    page.wait_for_selector("#side-by-side")
    assert "v4\n✕\nbudget exceeded" in page.locator(".page-header-sub").inner_text()
    assert page.locator("#side-by-side tr[data-changed=true]").count() > 0

    _wait_for(lambda: Preview.objects.get(pk=prod_preview.pk).state == Preview.State.COMPLETE)
    release_publish(version=v4, environment=prod, actor=ops, reason="tighter budget, previewed")
    approval = ApprovalRequest.objects.get(version=v4, environment=prod, status="pending")
    approver = browser.new_context(
        viewport={"width": 1280, "height": 900}, base_url=live_server.url
    )
    try:
        second = approver.new_page()
        second.goto("/login/")
        second.fill("input[name=username]", "ops2")
        second.fill("input[name=password]", "ops2-demo")
        second.click("button[type=submit]")
        second.wait_for_url(f"{live_server.url}/")
        second.goto(f"/releases/{AGENT}/approvals/{approval.pk}/")
        summary = second.locator("#impact-summary")
        summary.wait_for()
        assert summary.get_attribute("data-state") == "complete"
        text = summary.inner_text()
        assert "Impact on 0 traces of prod, last 7 days" in text
        assert "not previewable (counted apart)" in text
        second.click("#impact-report")
        second.wait_for_selector("#not-previewable")
        assert "never requested it under v1, v2" in second.locator("#not-previewable").inner_text()
    finally:
        approver.close()
