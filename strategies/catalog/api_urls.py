"""Operator API for agents and environments: /api/v1/agents/, /api/v1/environments/ (see
strategies.catalog.api)."""

from __future__ import annotations

from django.urls import path

from console.kernel.policy import AUTHENTICATED, Capability, Everywhere
from strategies.catalog import api

urlpatterns = [
    path("agents/", api.agent_list, name="api-agent-list"),
    path("agents/<slug:agent>/", api.agent_detail, name="api-agent-detail"),
    path("environments/", api.environment_list_api, name="api-environment-list"),
    path("environments/<slug:environment>/", api.environment_detail, name="api-environment-detail"),
]

# Creating agents and environments, and changing environments, are console-wide; editing or
# archiving one agent needs the capability on that agent (deleting it, on all agents).
REQUIRED = {
    "api-agent-list": {
        "GET": AUTHENTICATED,  # lists only the agents the caller can see
        "POST": Everywhere(Capability.MANAGE_CATALOG),
    },
    "api-agent-detail": {
        "GET": Capability.VIEW_CONFIG,
        "PATCH": Capability.MANAGE_CATALOG,
        "DELETE": Everywhere(Capability.MANAGE_CATALOG),
    },
    "api-environment-list": {
        "GET": AUTHENTICATED,  # environments are console-wide: every grid shows them
        "POST": Everywhere(Capability.MANAGE_CATALOG),
    },
    "api-environment-detail": {
        "GET": AUTHENTICATED,
        "PATCH": Everywhere(Capability.MANAGE_CATALOG),
        "DELETE": Everywhere(Capability.MANAGE_CATALOG),
    },
}
