"""Impact preview pages."""

from django.urls import path, re_path

from console.kernel.policy import Capability
from traces.previews import views

AGENT = "agents/<slug:agent>/"

urlpatterns = [
    path(AGENT + "documents/<slug:document>/preview/", views.preview_new, name="preview-new"),
    path(AGENT + "previews/<int:pk>/", views.preview_detail, name="preview-detail"),
    path(AGENT + "previews/<int:pk>/cancel", views.preview_cancel, name="preview-cancel"),
    re_path(
        r"^agents/(?P<agent>[-a-zA-Z0-9_]+)/previews/(?P<pk>[0-9]+)/traces/(?P<request_id>[\s\S]+)\Z",
        views.preview_sidebyside,
        name="preview-sidebyside",
    ),
]

# A preview replays the agent's traces with its configuration: the views ask for both
# (check_user_can_preview: 404 out of scope, 403 without one of them, logged).
REQUIRED = {
    "preview-new": Capability.VIEW_TRACES,
    "preview-detail": Capability.VIEW_TRACES,
    "preview-cancel": Capability.VIEW_TRACES,
    "preview-sidebyside": Capability.VIEW_TRACES,
}
