"""Trace pages."""

from django.urls import path

from console.policy import Capability
from traces import views

urlpatterns = [
    path("traces/", views.trace_list, name="trace-list"),
    path("traces/search", views.trace_search, name="trace-search"),
    path("traces/<str:request_id>/", views.trace_detail, name="trace-detail"),
    path("traces/<str:request_id>/export.json", views.trace_export, name="trace-export"),
    path("traces/<str:request_id>/snapshot", views.trace_snapshot, name="trace-snapshot"),
]

# Scope is per agent: each view lets through only traces of agents where the user holds the
# capability (others answer 404, as if missing).
REQUIRED = {
    "trace-list": Capability.VIEW_TRACES,
    "trace-search": Capability.VIEW_TRACES,
    "trace-detail": Capability.VIEW_TRACES,
    "trace-export": Capability.VIEW_TRACES,
    "trace-snapshot": Capability.VIEW_SNAPSHOTS,
}
