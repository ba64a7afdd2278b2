"""Pages for configuration as code (see strategies.exchange.views)."""

from __future__ import annotations

from django.urls import path

from console.kernel.policy import Capability
from strategies.exchange import views

AGENT = "agents/<slug:agent>/"

urlpatterns = [
    path(AGENT + "config/export/", views.config_export, name="config-export"),
    path(AGENT + "config/import/", views.config_import, name="config-import"),
]

REQUIRED = {
    "config-export": Capability.VIEW_CONFIG,
    "config-import": Capability.EDIT_DRAFTS,  # publishes within it follow each environment's rule
}
