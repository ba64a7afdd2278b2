"""Operator API for documents: /api/v1/agents/<agent>/documents/… (see strategies.documents.api;
the agents themselves are strategies.catalog.api_urls)."""

from __future__ import annotations

from django.urls import path

from console.kernel.policy import Capability
from strategies.documents import api

DOC = "agents/<slug:agent>/documents/<slug:document>/"

urlpatterns = [
    path("agents/<slug:agent>/documents/", api.document_list, name="api-document-list"),
    path(DOC, api.document_detail, name="api-document-detail"),
    path(DOC + "versions/", api.version_list, name="api-version-list"),
    path(DOC + "versions/<int:number>/", api.version_detail, name="api-version-detail"),
    path(DOC + "draft/", api.draft, name="api-draft"),
    path(DOC + "draft/freeze/", api.draft_freeze, name="api-draft-freeze"),
    path(DOC + "diff/", api.version_diff, name="api-version-diff"),
    path("agents/<slug:agent>/validate", api.document_validate, name="api-document-validate"),
]

REQUIRED = {
    "api-document-list": {"GET": Capability.VIEW_CONFIG, "POST": Capability.EDIT_DRAFTS},
    "api-document-detail": Capability.VIEW_CONFIG,
    "api-version-list": Capability.VIEW_CONFIG,
    "api-version-detail": Capability.VIEW_CONFIG,
    "api-draft": Capability.EDIT_DRAFTS,
    "api-draft-freeze": Capability.EDIT_DRAFTS,
    "api-version-diff": Capability.VIEW_CONFIG,
    "api-document-validate": Capability.VIEW_CONFIG,
}
