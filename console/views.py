"""Cross-cutting pages: dashboard, login, health, API root."""

from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.http import HttpResponseRedirect, JsonResponse
from django.shortcuts import redirect, render
from django.template.response import TemplateResponse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response
from rest_framework.reverse import reverse

from console.access.forms import lockout_message
from console.accounts.forms import (
    REAUTH_CODE_FIELD,
    REAUTH_FIELD,
    LoginForm,
    ReauthenticationForm,
)
from console.accounts.oidc import logout_url
from console.accounts.saml import logout_url as saml_logout_url
from console.accounts.second_factor_views import reauth_key_context, sign_in_pending_start
from console.accounts.second_factors import second_factor_required, sso_enforced
from console.demo.users import DEMO_USERS
from console.health import health_public, health_report
from console.kernel.audit import AccessAction, access_record
from console.kernel.policy import agents_visible_to
from console.kernel.sessions import authentication_recorded
from console.kernel.sso_providers import SSO_SESSION_KEY, signed_in_through, sso_buttons
from console.kernel.wording import counted
from strategies.catalog.selectors import environment_list
from strategies.releases.selectors import dashboard_context as strategies_part
from traces.selectors import dashboard_context as traces_part


def demo_logins() -> list[tuple[str, str]]:
    if not settings.DEMO_MODE:
        return []

    return [(name, f"{name}-demo") for name, _grants in DEMO_USERS]


class LoginView(auth_views.LoginView):
    """Sign-in (console.accounts.forms.LoginForm: enforced single sign-on, second factors), locked out per username and address by django-axes;
    each failed and each successful sign-in is written to the access log."""

    template_name = "registration/login.html"
    redirect_authenticated_user = True
    form_class = LoginForm

    def form_valid(self, form):
        user = form.get_user()
        if second_factor_required(user):
            # No session on the password alone: the second step signs them in.
            return sign_in_pending_start(self.request, user, next_url=self.get_success_url())
        access_record(actor=user, action=AccessAction.AUTH_LOGIN, target=user, outcome="allowed")
        return super().form_valid(form)

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["demo_logins"] = demo_logins()
        context["sso_providers"] = sso_buttons()
        context["sso_enforced"] = sso_enforced()
        return context


class LogoutView(auth_views.LogoutView):
    """Sign-out. A person who came through an identity provider is then sent to the
    provider's end-session endpoint (RP-initiated logout) or, for SAML, its single logout
    service, which returns them to sign-in."""

    def post(self, request, *args, **kwargs):
        # Read before the session is flushed: OpenID Connect's end-session, SAML's single logout.
        at_provider = logout_url(request) or saml_logout_url(request)
        response = super().post(request, *args, **kwargs)
        return HttpResponseRedirect(at_provider) if at_provider else response


def login_lockout_response(request, original_response=None, credentials=None):
    """AXES_LOCKOUT_CALLABLE: the sign-in page again, saying why and for how long, with the
    username as typed (status 429). The console's and the break-glass admin's sign-ins alike.
    A signed-in person confirming their password keeps the page that asked for it (which says
    the same): they are not signing in."""
    if original_response is not None and request.user.is_authenticated:
        return original_response
    username = request.POST.get("username", "")
    context = {
        "form": LoginForm(request, initial={"username": username}),
        "lockout_message": lockout_message(),
        "next": request.POST.get("next") or request.GET.get("next", ""),
        "demo_logins": demo_logins(),
        "sso_providers": sso_buttons(),
        "sso_enforced": sso_enforced(),
    }
    return render(
        request, LoginView.template_name, context, status=settings.AXES_HTTP_RESPONSE_CODE
    )


# --- sessions (console.kernel.sessions) ----------------------------------------------------------
def session_ended_words(why: str) -> str:
    """Why the console signed someone out, in the words of the signed-out page and the API."""
    if why == "idle":
        minutes = counted(settings.SESSION_IDLE_MINUTES, "minute")
        return f"You were signed out after {minutes} without activity."
    if why == "absolute":
        hours = counted(settings.SESSION_ABSOLUTE_HOURS, "hour")
        return (
            f"You were signed out because a session lasts at most {hours}, however active you are."
        )
    return "You are signed out."


def _safe_next(request, value: str) -> str:
    """`value` when it is an address on this console, else ""."""
    allowed = url_has_allowed_host_and_scheme(
        value, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return value if value and allowed else ""


@login_not_required
@never_cache
@require_GET
def signed_out(request):
    """Where an ended session lands: why it ended, and a way back in (to where they were)."""
    return TemplateResponse(
        request,
        "registration/signed_out.html",
        {
            "why_words": session_ended_words(request.GET.get("why", "")),
            "next": _safe_next(request, request.GET.get("next", "")),
        },
    )


def _return_address(request) -> str:
    """Where to come back to after confirming at a provider, when the action was a form: the
    page it was posted from (a provider's round trip cannot post it again)."""
    if request.method == "GET":
        return request.get_full_path()
    return _safe_next(request, request.META.get("HTTP_REFERER", "")) or reverse("dashboard")


def _provider_confirmation(request, next_url: str) -> dict | None:
    """For a person who signed in through an identity provider: its name and the address that
    asks it to confirm it is them, then returns to `next_url`. None after a password sign-in."""
    provider = signed_in_through(request.session)
    if provider is None:
        return None
    saml = (request.session.get(SSO_SESSION_KEY) or {}).get("protocol") == "saml"
    view = "saml-reauthenticate" if saml else "sso-reauthenticate"
    query = urlencode({"next": next_url or reverse("dashboard")})
    return {"name": provider.name, "url": f"{reverse(view, args=[provider.key])}?{query}"}


def reauthentication_page(request, *, message: str, form=None, next_url: str | None = None):
    """The confirm-your-password page, asked before a dangerous action (status 401: it was
    not done). Asked by a form (`next_url` None), it posts to the same address again with
    everything typed kept as hidden fields, plus the password:
    console.middleware.SessionLifetimeMiddleware checks the password before the view runs,
    and the action goes through. The standalone page (`next_url` given) posts to
    /reauthenticate/, which returns there. htmx requests get the whole page (HX-Retarget:
    body), so the action's form is a plain one again. Accounts without a password (single
    sign-on, later) are told to sign in again instead."""
    inline = next_url is None and request.method == "POST"
    kept = [
        (name, value)
        for name, values in (request.POST.lists() if inline else [])
        if name not in ("csrfmiddlewaretoken", REAUTH_FIELD, REAUTH_CODE_FIELD)
        for value in values
    ]
    response = TemplateResponse(
        request,
        "registration/reauthenticate.html",
        {
            "message": message,
            "form": form or ReauthenticationForm(request),
            "action": request.get_full_path() if inline else "",
            "kept": kept,
            "next": next_url or "",
            "files_lost": inline and bool(request.FILES),
            "has_password": request.user.has_usable_password(),
            "provider_confirmation": _provider_confirmation(
                request, next_url if next_url is not None else _return_address(request)
            ),
            "window_words": counted(settings.REAUTHENTICATION_MINUTES, "minute"),
            **reauth_key_context(request),
        },
        status=401,
    )
    if getattr(request, "htmx", False):
        response["HX-Retarget"] = "body"
        response["HX-Reswap"] = "innerHTML"
    return response


@never_cache
@require_http_methods(["GET", "POST"])
def reauthenticate(request):
    """Confirm your password now (e.g. before an API call made with the session, answered 401
    `reauthentication_required`); then back to `next`, the dashboard by default."""
    next_url = _safe_next(request, request.POST.get("next") or request.GET.get("next", ""))
    if request.method == "POST":
        form = ReauthenticationForm(request, data=request.POST)
        if form.is_valid():
            authentication_recorded(request.session)
            return redirect(next_url or "dashboard")
    else:
        form = ReauthenticationForm(request)
    message = (
        "Approving, break-glass, switching on sensitive sections and viewing snapshots ask "
        "for your password when you signed in more than "
        f"{counted(settings.REAUTHENTICATION_MINUTES, 'minute')} ago."
    )
    response = reauthentication_page(request, message=message, form=form, next_url=next_url)
    if request.method == "GET":
        response.status_code = 200
    return response


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
