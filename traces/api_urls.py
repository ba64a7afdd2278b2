"""Operator API for traces (/api/v1/)."""

from django.urls import path, re_path

from console.kernel.policy import Capability
from traces import api

urlpatterns = [
    path("traces", api.trace_list, name="api-trace-list"),
    # Any stored request_id, slashes and newlines included (as in traces.urls); the replay
    # first, as the detail's pattern would take "<id>/replay" for an id.
    re_path(r"^traces/(?P<request_id>[\s\S]+)/replay\Z", api.trace_replay, name="api-trace-replay"),
    re_path(r"^traces/(?P<request_id>[\s\S]+)\Z", api.trace_detail, name="api-trace-detail"),
]

REQUIRED = {
    "api-trace-list": Capability.VIEW_TRACES,
    "api-trace-detail": Capability.VIEW_TRACES,
    # and VIEW_CONFIG on the trace's agent: policy.check_user_can_replay_trace
    "api-trace-replay": Capability.VIEW_TRACES,
}
