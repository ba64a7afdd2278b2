"""Demo standing alert (docs/alerts.md): "Required data missing" on `missing_required_data` for
assistant_professional in prod — over 2 % a warning, over 5 % an alert, over 10 minutes, and no
traffic for 15 minutes a no-data alert — created by admin through the rule service (audited
like any rule). Idempotent: a second load finds the rule by its name and changes nothing."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from strategies.catalog.models import Agent
from traces.alerts import services
from traces.alerts.models import AlertRule

AGENT = "assistant_professional"
ENVIRONMENT = "prod"
RULE = {
    "name": "Required data missing",
    "metric": "missing_required_data",
    "comparison": "above",
    "warning_threshold": 0.02,
    "alert_threshold": 0.05,
    "window_minutes": 10,
    "min_traffic": 20,
    "no_data_minutes": 15,
}


def load(*, stdout=None) -> None:
    agent = Agent.objects.get(key=AGENT)
    if AlertRule.objects.filter(
        agent=agent, environment__key=ENVIRONMENT, name=RULE["name"]
    ).exists():
        return
    admin = get_user_model().objects.get(username="admin")
    services.rule_create(agent=agent, environment=ENVIRONMENT, values=RULE, actor=admin)
    if stdout is not None:
        stdout.write(f"Demo alert rule: “{RULE['name']}” in {ENVIRONMENT}.")
