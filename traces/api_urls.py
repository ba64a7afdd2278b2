"""Operator API for traces (/api/v1/)."""

from django.urls import path, re_path

from console.kernel.policy import Capability
from traces import api

urlpatterns = [
    path("traces", api.trace_list, name="api-trace-list"),
    # Any stored request_id, slashes and newlines included (as in traces.urls).
    re_path(r"^traces/(?P<request_id>[\s\S]+)\Z", api.trace_detail, name="api-trace-detail"),
]

REQUIRED = {
    "api-trace-list": Capability.VIEW_TRACES,
    "api-trace-detail": Capability.VIEW_TRACES,
}
