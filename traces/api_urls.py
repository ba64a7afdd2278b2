"""Operator API for traces (/api/v1/)."""

from django.urls import path

from console.policy import Capability
from traces import api

urlpatterns = [
    path("traces", api.trace_list, name="api-trace-list"),
    path("traces/<str:request_id>", api.trace_detail, name="api-trace-detail"),
]

REQUIRED = {
    "api-trace-list": Capability.VIEW_TRACES,
    "api-trace-detail": Capability.VIEW_TRACES,
}
