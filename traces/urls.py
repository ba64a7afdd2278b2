"""Trace pages."""

from django.urls import path, re_path

from console.kernel.policy import Capability
from traces import views

# Any stored request_id, slashes and newlines included (ids from before the contract defined
# their characters): `[\s\S]`, not `.`, which stops at a newline. Each route's fixed ending
# tells them apart: /traces/<id>/, /traces/<id>/export.json, /traces/<id>/snapshot.
REQUEST_ID = r"(?P<request_id>[\s\S]+)"

urlpatterns = [
    path("traces/", views.trace_list, name="trace-list"),
    path("traces/search", views.trace_search, name="trace-search"),
    re_path(rf"^traces/{REQUEST_ID}/\Z", views.trace_detail, name="trace-detail"),
    re_path(rf"^traces/{REQUEST_ID}/export\.json\Z", views.trace_export, name="trace-export"),
    re_path(rf"^traces/{REQUEST_ID}/snapshot\Z", views.trace_snapshot, name="trace-snapshot"),
    re_path(rf"^traces/{REQUEST_ID}/replay\Z", views.trace_replay, name="trace-replay"),
]

# Scope is per agent: each view lets through only traces of agents where the user holds the
# capability (others answer 404, as if missing).
REQUIRED = {
    "trace-list": Capability.VIEW_TRACES,
    "trace-search": Capability.VIEW_TRACES,
    "trace-detail": Capability.VIEW_TRACES,
    "trace-export": Capability.VIEW_TRACES,
    "trace-snapshot": Capability.VIEW_SNAPSHOTS,
    # and VIEW_CONFIG on the trace's agent (a draft's body): policy.check_user_can_replay_trace
    "trace-replay": Capability.VIEW_TRACES,
}
