"""Operator API for standing alerts (/api/v1/)."""

from django.urls import path

from console.kernel.policy import Capability
from traces.alerts import api

AGENT = "agents/<slug:agent>/"

urlpatterns = [
    path(AGENT + "alert-rules", api.alert_rules, name="api-alert-rules"),
    path(AGENT + "alert-rules/<int:pk>", api.alert_rule_detail, name="api-alert-rule"),
    path(AGENT + "alerts", api.alerts, name="api-alerts"),
    path(AGENT + "alert-silences", api.alert_silences, name="api-alert-silences"),
    path(AGENT + "alert-silences/<int:pk>", api.alert_silence_detail, name="api-alert-silence"),
]

# Reading is reading the agent's health (view_traces); writing is the on-call operator's
# (policy.ALERTS_CAPABILITY, asked again by each service).
REQUIRED = {
    "api-alert-rules": {"GET": Capability.VIEW_TRACES, "POST": Capability.ROLLBACK},
    "api-alert-rule": {"GET": Capability.VIEW_TRACES, "PATCH": Capability.ROLLBACK},
    "api-alerts": Capability.VIEW_TRACES,
    "api-alert-silences": {"GET": Capability.VIEW_TRACES, "POST": Capability.ROLLBACK},
    "api-alert-silence": {"DELETE": Capability.ROLLBACK},
}
