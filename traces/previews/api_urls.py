"""Operator API for impact previews (/api/v1/previews/)."""

from django.urls import path

from console.kernel.policy import Capability
from traces.previews import api

urlpatterns = [
    path("previews/", api.preview_create, name="api-preview-create"),
    path("previews/<int:pk>/", api.preview_detail, name="api-preview-detail"),
    path("previews/<int:pk>/cancel", api.preview_cancel, name="api-preview-cancel"),
]

# The services and selectors ask for traces AND configuration on the preview's agent (404
# out of scope, 403 without one, logged).
REQUIRED = {
    "api-preview-create": Capability.VIEW_TRACES,
    "api-preview-detail": Capability.VIEW_TRACES,
    "api-preview-cancel": Capability.VIEW_TRACES,
}
