"""Browser: the dashboard's status charts over the demo traffic, and a requester withdrawing
their own pending approval request."""

from __future__ import annotations

import pytest

from console.kernel.models import AuditRecord
from strategies.releases.models import ApprovalRequest
from strategies.releases.services import release_publish
from tests.factories import release_setup
from traces.models import HourlyRollup

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_dashboard__demo_world__status_chart_with_bars_per_environment(demo_world, login):
    assert HourlyRollup.objects.filter(decision="").exists()  # load_demo rolls its traces up

    page = login("support", "support-demo")

    chart = page.locator("#chart-assistant_professional-sg-test")
    chart.wait_for()
    assert chart.locator("rect.chart-seg").count() > 0
    assert chart.locator("rect.chart-ready").count() > 0
    bars = page.locator("#agent-assistant_professional .status-chart")
    assert bars.count() >= 2  # one per environment with traffic
    assert "ready" in chart.locator(".chart-legend").inner_text()
    tooltip = chart.locator("g.chart-bar[data-total]:not([data-total='0']) > title").first
    assert "traces —" in tooltip.text_content()
    assert "in the last 7 days" in chart.locator("svg desc").text_content()
    assert chart.locator(".chart-reasons").is_visible()
    box = chart.locator("svg").bounding_box()
    assert box["width"] > 200 and box["height"] > 40


def test_approval_page__requester_withdraws_with_reason(page, login, live_server):
    w = release_setup()
    approval = release_publish(
        version=w.strategy[2], environment=w.envs["prod"], actor=w.ops, reason="promote"
    ).approval

    login("ops", "ops-pass-1")
    page.goto(f"{live_server.url}/releases/assistant_professional/approvals/{approval.pk}/")
    page.click("#withdraw-request summary")
    page.fill("#withdraw-request-reason", "Wrong version, v3 instead")
    page.click("#withdraw-request button[type=submit]")

    page.wait_for_selector("text=Withdrawn: the publish of after_sales_consultation v2")
    approval.refresh_from_db()
    assert approval.status == "withdrawn"
    assert approval.decision_note == "Wrong version, v3 instead"
    assert AuditRecord.objects.filter(action="approval.withdraw", actor_label="ops").exists()
    assert not ApprovalRequest.objects.filter(status="pending").exists()
