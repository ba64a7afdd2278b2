"""Operator API for configuration as code: /api/v1/agents/<agent>/config."""

from __future__ import annotations

from django.urls import path

from console.kernel.policy import Capability
from strategies.exchange import api

urlpatterns = [
    path("agents/<slug:agent>/config", api.config, name="api-config"),
]

REQUIRED = {
    # POST to an agent that does not exist yet creates it: manage_catalog on all agents.
    "api-config": {"GET": Capability.VIEW_CONFIG, "POST": Capability.EDIT_DRAFTS},
}
