"""Pages: Agents & environments (/catalog/), see strategies.catalog.views."""

from __future__ import annotations

from django.urls import path

from console.kernel.policy import Capability, Everywhere
from strategies.catalog import views

AGENT = "catalog/agents/<slug:agent>/"
ENVIRONMENT = "catalog/environments/<slug:environment>/"

urlpatterns = [
    path("catalog/", views.overview, name="catalog"),
    path("catalog/agents/new/", views.agent_create, name="catalog-agent-create"),
    path(AGENT + "edit/", views.agent_edit, name="catalog-agent-edit"),
    path(AGENT + "archive/", views.agent_archive, name="catalog-agent-archive"),
    path(AGENT + "unarchive/", views.agent_unarchive, name="catalog-agent-unarchive"),
    path(AGENT + "delete/", views.agent_delete, name="catalog-agent-delete"),
    path("catalog/environments/new/", views.environment_create, name="catalog-environment-create"),
    path(ENVIRONMENT + "edit/", views.environment_edit, name="catalog-environment-edit"),
    path(ENVIRONMENT + "archive/", views.environment_archive, name="catalog-environment-archive"),
    path(
        ENVIRONMENT + "unarchive/",
        views.environment_unarchive,
        name="catalog-environment-unarchive",
    ),
    path(ENVIRONMENT + "delete/", views.environment_delete, name="catalog-environment-delete"),
]

# Creating agents and environments, and everything about environments, is console-wide;
# editing or archiving one agent needs the capability on that agent (deleting, on all).
REQUIRED = {
    "catalog": Capability.MANAGE_CATALOG,  # shows the agents where the user holds it
    "catalog-agent-create": Everywhere(Capability.MANAGE_CATALOG),
    "catalog-agent-edit": Capability.MANAGE_CATALOG,
    "catalog-agent-archive": Capability.MANAGE_CATALOG,
    "catalog-agent-unarchive": Capability.MANAGE_CATALOG,
    "catalog-agent-delete": Everywhere(Capability.MANAGE_CATALOG),
    "catalog-environment-create": Everywhere(Capability.MANAGE_CATALOG),
    "catalog-environment-edit": Everywhere(Capability.MANAGE_CATALOG),
    "catalog-environment-archive": Everywhere(Capability.MANAGE_CATALOG),
    "catalog-environment-unarchive": Everywhere(Capability.MANAGE_CATALOG),
    "catalog-environment-delete": Everywhere(Capability.MANAGE_CATALOG),
}
