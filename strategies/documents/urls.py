"""Pages for agents, documents and versions (see strategies.documents.views)."""

from __future__ import annotations

from django.urls import path

from console.kernel.policy import AUTHENTICATED, Capability
from strategies.documents import views

AGENT = "agents/<slug:agent>/"
DOC = AGENT + "documents/<slug:document>/"

urlpatterns = [
    path("agents/", views.agent_list, name="agent-list"),
    path(AGENT, views.agent_detail, name="agent-detail"),
    path(AGENT + "profile/", views.profile_save, name="profile-save"),
    path(AGENT + "strategies/", views.agent_strategies, name="agent-strategies"),
    path(DOC, views.document_detail, name="document-detail"),
    path(DOC + "versions/<int:number>/", views.version_detail, name="version-detail"),
    path(DOC + "compare/", views.version_compare, name="version-compare"),
    path(DOC + "draft/new/", views.draft_create, name="draft-create"),
    path(DOC + "draft/", views.draft_edit, name="draft-edit"),
    path(DOC + "draft/validate/", views.draft_validate, name="draft-validate"),
    path(DOC + "draft/freeze/", views.draft_freeze, name="draft-freeze"),
    path(DOC + "draft/discard/", views.draft_discard, name="draft-discard"),
]

REQUIRED = {
    "agent-list": AUTHENTICATED,  # lists only the agents the user can see
    "agent-detail": Capability.VIEW_CONFIG,
    "profile-save": Capability.EDIT_DRAFTS,
    "agent-strategies": Capability.VIEW_CONFIG,  # adding a strategy (POST) needs EDIT_DRAFTS
    "document-detail": Capability.VIEW_CONFIG,
    "version-detail": Capability.VIEW_CONFIG,
    "version-compare": Capability.VIEW_CONFIG,
    "draft-create": Capability.EDIT_DRAFTS,
    "draft-edit": Capability.EDIT_DRAFTS,
    "draft-validate": Capability.EDIT_DRAFTS,
    "draft-freeze": Capability.EDIT_DRAFTS,
    "draft-discard": Capability.EDIT_DRAFTS,
}
