"""Operator API for version health (/api/v1/)."""

from django.urls import path

from console.kernel.policy import Capability
from traces.health import api

HEALTH = "agents/<slug:agent>/health/<slug:environment>/<slug:document>/"

urlpatterns = [
    path(HEALTH, api.version_health, name="api-health-version"),
    path(HEALTH + "requests", api.health_requests, name="api-health-requests"),
]

REQUIRED = {
    "api-health-version": Capability.VIEW_TRACES,
    "api-health-requests": Capability.VIEW_TRACES,
}
