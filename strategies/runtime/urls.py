"""Runtime token pages (/releases/tokens/)."""

from django.urls import path

from console.kernel.policy import Capability
from strategies.runtime import views

urlpatterns = [
    path("releases/tokens/", views.tokens, name="token-list"),
    path("releases/tokens/<int:pk>/revoke/", views.token_revoke, name="token-revoke"),
    path("releases/<slug:agent>/runtimes/", views.instances, name="runtime-instances"),
]

REQUIRED = {
    "token-list": Capability.MANAGE_RUNTIME_TOKENS,
    "token-revoke": Capability.MANAGE_RUNTIME_TOKENS,
    "runtime-instances": Capability.VIEW_CONFIG,
}
