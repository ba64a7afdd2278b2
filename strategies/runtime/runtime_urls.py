"""Runtime API (/api/v1/runtime/): token-authenticated, see strategies.runtime.api."""

from django.urls import path

from console.kernel.policy import PUBLIC
from strategies.runtime import api as runtime_api

urlpatterns = [
    path("config/<str:agent>", runtime_api.config, name="runtime-config"),
    path("manifest", runtime_api.manifest, name="runtime-manifest"),
    path("heartbeat", runtime_api.heartbeat, name="runtime-heartbeat"),
]

# Public to the session layer: every request carries a runtime token instead.
REQUIRED = {
    "runtime-config": PUBLIC,
    "runtime-manifest": PUBLIC,
    "runtime-heartbeat": PUBLIC,
}
