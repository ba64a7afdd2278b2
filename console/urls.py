"""URL map. Each app owns its own url modules; this file only includes them.

- pages:        strategies.urls, strategies.release_urls, traces.urls, console.access_urls
- operator API: /api/v1/ → strategies.api_urls, traces.api_urls, console.access_api_urls
- runtime API:  /api/v1/runtime/ → strategies.runtime_urls, traces.runtime_urls
"""

from __future__ import annotations

from importlib.util import find_spec

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import NoReverseMatch, include, path, reverse
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from console import views


def _optional(module: str):
    """Include an app's url module once it exists (apps grow issue by issue)."""
    return [path("", include(module))] if find_spec(module) else []


urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", views.healthz, name="healthz"),
    path("django-admin/", admin.site.urls),
    path("api/v1/", views.api_root, name="api-root"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
]

for _module in ("strategies.urls", "strategies.release_urls", "traces.urls", "console.access_urls"):
    urlpatterns += _optional(_module)
for _module in ("strategies.api_urls", "traces.api_urls", "console.access_api_urls"):
    if find_spec(_module):
        urlpatterns.append(path("api/v1/", include(_module)))
for _module in ("strategies.runtime_urls", "traces.runtime_urls"):
    if find_spec(_module):
        urlpatterns.append(path("api/v1/runtime/", include(_module)))

# Shown at /api/v1/: (label, url name). Names that do not resolve are skipped.
API_INDEX = [
    ("agents", "api-agent-list"),
    ("traces", "api-trace-list"),
    ("roles", "api-role-list"),
    ("grants", "api-grant-list"),
    ("audit", "api-audit-list"),
]


def api_index_links():
    for label, name in API_INDEX:
        try:
            reverse(name)
        except NoReverseMatch:
            continue
        yield label, name


# Access rules of this module's pages (see console.policy.requires and the access matrix).
from console.policy import AUTHENTICATED, PUBLIC  # noqa: E402

REQUIRED = {
    "dashboard": AUTHENTICATED,
    "login": PUBLIC,
    "logout": AUTHENTICATED,
    "healthz": PUBLIC,
    "api-root": AUTHENTICATED,
    "schema": AUTHENTICATED,
    "swagger-ui": AUTHENTICATED,
}
