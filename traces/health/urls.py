"""Version-health pages."""

from django.urls import path

from console.kernel.policy import Capability
from traces.health import views

HEALTH = "agents/<slug:agent>/health/<slug:environment>/<slug:document>/"

urlpatterns = [
    path(HEALTH, views.version_health_page, name="health-version"),
    path(HEALTH + "requests", views.health_requests_page, name="health-requests"),
]

# Health figures are counts of traces: whoever may view the agent's traces (404 out of
# scope, 403 without the capability, logged).
REQUIRED = {
    "health-version": Capability.VIEW_TRACES,
    "health-requests": Capability.VIEW_TRACES,
}
