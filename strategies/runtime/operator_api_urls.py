"""Operator API for runtime tokens: /api/v1/runtime-tokens/ (see strategies.runtime.operator_api;
the runtime API that runtimes call is strategies.runtime.runtime_urls)."""

from __future__ import annotations

from django.urls import path

from console.kernel.policy import Capability, Everywhere
from strategies.runtime import operator_api as api

urlpatterns = [
    path("runtime-tokens/", api.runtime_token_list, name="api-runtimetoken-list"),
    path("runtime-tokens/<int:pk>/", api.runtime_token_detail, name="api-runtimetoken-detail"),
    path(
        "runtime-tokens/<int:pk>/revoke/",
        api.runtime_token_revoke_view,
        name="api-runtimetoken-revoke",
    ),
    path("runtimes/", api.runtimes_list, name="api-runtimes-list"),
]

# Console-wide, as the token pages: manage_runtime_tokens on all agents (a personal token
# needs it in its scope, for every agent).
REQUIRED = {
    "api-runtimetoken-list": Everywhere(Capability.MANAGE_RUNTIME_TOKENS),
    "api-runtimetoken-detail": Everywhere(Capability.MANAGE_RUNTIME_TOKENS),
    "api-runtimetoken-revoke": Everywhere(Capability.MANAGE_RUNTIME_TOKENS),
    # the agents one may view the configuration of (filtered with agents_where)
    "api-runtimes-list": Capability.VIEW_CONFIG,
}
