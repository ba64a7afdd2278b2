"""Webhook pages (/releases/webhooks/)."""

from django.urls import path

from console.kernel.policy import Capability
from strategies.delivery import views

urlpatterns = [
    path("releases/webhooks/", views.webhook_list, name="webhook-list"),
    path("releases/webhooks/<int:pk>/", views.webhook_detail, name="webhook-detail"),
    path("releases/webhooks/<int:pk>/delete/", views.webhook_delete, name="webhook-delete"),
]

REQUIRED = {
    "webhook-list": Capability.MANAGE_TOKENS,
    "webhook-detail": Capability.MANAGE_TOKENS,
    "webhook-delete": Capability.MANAGE_TOKENS,
}
