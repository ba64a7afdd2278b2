"""Cross-cutting pages: dashboard, login, health, API root."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.http import HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.template.response import TemplateResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response
from rest_framework.reverse import reverse

from console.access.forms import LoginForm, lockout_message
from console.accounts.oidc import logout_url
from console.demo.users import DEMO_USERS
from console.health import health_public, health_report
from console.kernel.audit import AccessAction, access_record
from console.kernel.policy import agents_visible_to
from console.kernel.sso_providers import sso_buttons
from strategies.catalog.selectors import environment_list
from strategies.releases.selectors import dashboard_context as strategies_part
from traces.selectors import dashboard_context as traces_part


def demo_logins() -> list[tuple[str, str]]:
    if not settings.DEMO_MODE:
        return []

    return [(name, f"{name}-demo") for name, _grants in DEMO_USERS]


class LoginView(auth_views.LoginView):
    """Sign-in (console.access.forms.LoginForm), locked out per username and address by django-axes;
    each failed and each successful sign-in is written to the access log."""

    template_name = "registration/login.html"
    redirect_authenticated_user = True
    form_class = LoginForm

    def form_valid(self, form):
        user = form.get_user()
        access_record(actor=user, action=AccessAction.AUTH_LOGIN, target=user, outcome="allowed")
        return super().form_valid(form)

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["demo_logins"] = demo_logins()
        context["sso_providers"] = sso_buttons()
        return context


class LogoutView(auth_views.LogoutView):
    """Sign-out. A person who came through an identity provider is then sent to the
    provider's end-session endpoint (RP-initiated logout), which returns them to sign-in."""

    def post(self, request, *args, **kwargs):
        at_provider = logout_url(request)  # read before the session is flushed
        response = super().post(request, *args, **kwargs)
        return HttpResponseRedirect(at_provider) if at_provider else response


def login_lockout_response(request, original_response=None, credentials=None):
    """AXES_LOCKOUT_CALLABLE: the sign-in page again, saying why and for how long, with the
    username as typed (status 429). The console's and the break-glass admin's sign-ins alike."""
    username = request.POST.get("username", "")
    context = {
        "form": LoginForm(request, initial={"username": username}),
        "lockout_message": lockout_message(),
        "next": request.POST.get("next") or request.GET.get("next", ""),
        "demo_logins": demo_logins(),
        "sso_providers": sso_buttons(),
    }
    return render(
        request, LoginView.template_name, context, status=settings.AXES_HTTP_RESPONSE_CODE
    )


def dashboard(request):
    """For each agent the user can see: environments with what is live, pending approvals,
    and recent non-ready traces (each app contributes its part)."""

    agents = list(agents_visible_to(request.user).filter(archived_at__isnull=True))
    context = {
        "agents": agents,
        "environments": environment_list(),
        **strategies_part(user=request.user, agents=agents),
        **traces_part(user=request.user, agents=agents),
    }
    return TemplateResponse(request, "console/dashboard.html", context)


@login_not_required
@never_cache
@require_GET
def healthz(request):
    """Readiness: 200 when the database and the broker answer, else 503 naming what failed;
    a missing worker or beat is named in `missing` (status `degraded`, still 200). Why a
    check failed (exception text with hosts and ports) only for signed-in users."""
    ok, report = health_report()
    if not request.user.is_authenticated:
        report = health_public(report)
    return JsonResponse(report, status=200 if ok else 503)


# Shown at /api/v1/: (label, url name).
API_INDEX = [
    ("agents", "api-agent-list"),
    ("traces", "api-trace-list"),
    ("roles", "api-role-list"),
    ("grants", "api-grant-list"),
    ("audit", "api-audit-list"),
]


@extend_schema(summary="API index", responses={200: dict})
@api_view(["GET"])
def api_root(request, format=None):
    """Links to the API's collections and its schema."""
    links = {
        "schema": reverse("schema", request=request),
        "docs": reverse("swagger-ui", request=request),
    }

    for name, url_name in API_INDEX:
        links[name] = reverse(url_name, request=request)
    return Response({"version": "v1", "links": links})
