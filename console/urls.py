"""URL map. Each job owns its url modules; this file holds the shell's own URLs (dashboard,
sign-in, health, admin, the API schema) and includes the rest from the three lists below:
PAGES, OPERATOR_API (under /api/v1/) and RUNTIME_API (under /api/v1/runtime/).
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.decorators import login_required
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from console import views
from console.kernel.policy import AUTHENTICATED, PUBLIC

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    # Sessions (console.kernel.sessions): where an ended one lands, and confirming a password.
    path("signed-out/", views.signed_out, name="signed-out"),
    path("reauthenticate/", views.reauthenticate, name="reauthenticate"),
    path("healthz", views.healthz, name="healthz"),
    path("django-admin/", admin.site.urls),
    path("api/v1/", views.api_root, name="api-root"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The docs page is a page: signed-out visitors go to sign-in like everywhere else (its own
    # permission check would answer a bare 403). /api/schema/ stays an API (401/403 JSON).
    path(
        "api/docs/",
        login_required(SpectacularSwaggerView.as_view(url_name="schema")),
        name="swagger-ui",
    ),
]

PAGES = (
    "strategies.documents.urls",
    "strategies.releases.urls",
    "strategies.runtime.urls",
    "strategies.delivery.urls",
    "strategies.catalog.urls",
    "strategies.exchange.urls",
    "traces.urls",
    "traces.previews.urls",
    "traces.outcomes.urls",
    "traces.health.urls",
    "traces.alerts.urls",
    "traces.regressions.urls",
    "traces.protection.urls",
    "console.access.urls",
    "console.accounts.urls",
)
OPERATOR_API = (
    "strategies.catalog.api_urls",
    "strategies.documents.api_urls",
    "strategies.exchange.api_urls",
    "strategies.releases.api_urls",
    "strategies.runtime.operator_api_urls",
    "strategies.delivery.api_urls",
    "traces.api_urls",
    "traces.previews.api_urls",
    "traces.outcomes.api_urls",
    "traces.health.api_urls",
    "traces.alerts.api_urls",
    "traces.regressions.api_urls",
    "traces.protection.api_urls",
    "console.access.api_urls",
    "console.accounts.api_urls",
)
RUNTIME_API = (
    "strategies.runtime.runtime_urls",
    "traces.runtime_urls",
    "traces.outcomes.runtime_urls",
)
urlpatterns += [path("", include(module)) for module in PAGES]
urlpatterns += [path("api/v1/", include(module)) for module in OPERATOR_API]
urlpatterns += [path("api/v1/runtime/", include(module)) for module in RUNTIME_API]
# SCIM 2.0 provisioning (issue 33): an identity provider's client, with its own token.
urlpatterns += [path("scim/v2/", include("console.accounts.scim_urls"))]

# Access rules of this module's pages (see console.kernel.policy.requires and the access matrix).

REQUIRED = {
    "dashboard": AUTHENTICATED,
    "login": PUBLIC,
    "logout": AUTHENTICATED,
    "signed-out": PUBLIC,
    "reauthenticate": AUTHENTICATED,
    "healthz": PUBLIC,
    "api-root": AUTHENTICATED,
    "schema": AUTHENTICATED,
    "swagger-ui": AUTHENTICATED,
}
