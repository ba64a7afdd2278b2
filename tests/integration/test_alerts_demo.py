"""The demo's standing alert (docs/alerts.md "Try it on the demo"): `load_demo` creates
"Required data missing" for assistant_professional in prod, by admin, audited like any rule,
and a second load changes nothing."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from console.kernel.models import AuditRecord
from traces.alerts.models import AlertRule

pytestmark = pytest.mark.django_db


def test_load_demo__required_data_missing_rule_in_prod__audited_once_and_idempotent():
    out = io.StringIO()
    call_command("load_demo", "--quiet-logins", stdout=out)
    assert "Demo alert rule: “Required data missing” in prod." in out.getvalue()
    call_command("load_demo", "--quiet-logins", stdout=io.StringIO())

    rule = AlertRule.objects.select_related("agent", "environment").get()
    assert (rule.agent.key, rule.environment.key, rule.name) == (
        "assistant_professional",
        "prod",
        "Required data missing",
    )
    assert (rule.metric, rule.comparison) == ("missing_required_data", "above")
    assert (rule.warning_threshold, rule.alert_threshold) == (0.02, 0.05)
    assert (rule.window_minutes, rule.no_data_minutes, rule.enabled) == (10, 15, True)
    assert rule.created_by == "admin"
    audits = AuditRecord.objects.filter(action="alert_rule.create")
    assert [(a.actor_label, a.target_id) for a in audits] == [("admin", str(rule.pk))]
