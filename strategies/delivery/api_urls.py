"""Operator API for webhooks: /api/v1/webhooks/ (see strategies.delivery.api)."""

from __future__ import annotations

from django.urls import path

from console.kernel.policy import Capability, Everywhere
from strategies.delivery import api

urlpatterns = [
    path("webhooks/", api.webhook_list, name="api-webhook-list"),
    path("webhooks/<int:pk>/", api.webhook_detail, name="api-webhook-detail"),
]

# Console-wide, as the webhook pages: manage_tokens on all agents.
REQUIRED = {
    "api-webhook-list": Everywhere(Capability.MANAGE_TOKENS),
    "api-webhook-detail": Everywhere(Capability.MANAGE_TOKENS),
}
