"""Alerts pages: an agent's standing rules, its alerts (history) and silences."""

from django.urls import path

from console.kernel.policy import Capability
from traces.alerts import views

ALERTS = "agents/<slug:agent>/alerts/"

urlpatterns = [
    path(ALERTS, views.alerts_page, name="alerts-page"),
    path(ALERTS + "rules/<int:pk>/", views.rule_edit, name="alerts-rule-edit"),
    path(ALERTS + "silences", views.silence_add, name="alerts-silence-add"),
    path(ALERTS + "silences/<int:pk>/lift", views.silence_lift, name="alerts-silence-lift"),
]

# Reading alerts is reading the agent's health (view_traces); rules and silences are the
# on-call operator's (policy.ALERTS_CAPABILITY, asked again by each service).
REQUIRED = {
    "alerts-page": {"GET": Capability.VIEW_TRACES, "POST": Capability.ROLLBACK},
    "alerts-rule-edit": {"GET": Capability.VIEW_TRACES, "POST": Capability.ROLLBACK},
    "alerts-silence-add": Capability.ROLLBACK,
    "alerts-silence-lift": Capability.ROLLBACK,
}
