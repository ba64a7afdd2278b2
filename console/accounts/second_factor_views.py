"""Pages of second factors and break-glass accounts (console.accounts.second_factors writes):

- the sign-in's second step: after a right password, an account that needs a second factor
  is only *pending* (its id in the anonymous session for PENDING_SECONDS); a right code or
  security key then signs it in (`login()`, which also renews the session key);
- the account page's "Second factor" actions: an authenticator app (QR code as SVG, made
  here, confirmed with a code), security keys (django-otp-webauthn's ceremony), new recovery
  codes, removing a factor;
- the Access page of break-glass accounts.
"""

from __future__ import annotations

import io
import json
import time

import segno
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth.decorators import login_not_required
from django.http import JsonResponse
from django.middleware import csrf
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_otp import login as otp_login
from django_otp.plugins.otp_totp.models import TOTPDevice
from django_otp_webauthn import views as webauthn_views
from django_otp_webauthn.exceptions import OTPWebAuthnApiError
from django_otp_webauthn.models import WebAuthnCredential

from console.accounts import second_factors
from console.accounts.models import BreakGlassAccount
from console.kernel.audit import AccessAction, access_record
from console.kernel.credentials import shows_secret
from console.kernel.errors import ApplicationError, NotFound
from console.kernel.policy import Capability, Everywhere, requires

PENDING = "console_sign_in_pending"
# How long the second step waits after the password (then the password is asked again).
PENDING_SECONDS = 300


# --- the sign-in's second step ------------------------------------------------------------------
def sign_in_pending_start(request, user, *, next_url: str):
    """The password was right and this account needs a second factor: remember who, for a
    few minutes, and ask for it. No session is made yet."""
    request.session[PENDING] = {
        "user": user.pk,
        "backend": getattr(user, "backend", settings.AUTHENTICATION_BACKENDS[-1]),
        "at": time.time(),
        "next": next_url,
    }
    return redirect("second-factor")


def pending_user(request):
    """The account waiting for its second factor, or None (none, or waited too long)."""
    pending = request.session.get(PENDING)
    if not pending or time.time() - pending.get("at", 0) > PENDING_SECONDS:
        return None
    user = get_user_model().objects.filter(pk=pending["user"], is_active=True).first()
    if user is not None:
        user.backend = pending["backend"]
    return user


def sign_in_finish(request, user, device) -> str:
    """The second factor was right: sign in now. Returns where to go."""
    pending = request.session.pop(PENDING, {})
    login(request, user, backend=user.backend)
    otp_login(request, device)
    access_record(
        actor=user,
        action=AccessAction.AUTH_LOGIN,
        target=user,
        outcome="allowed",
        detail={"second_factor": second_factors.device_kind(device)},
    )
    next_url = pending.get("next", "")
    safe = url_has_allowed_host_and_scheme(
        next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return next_url if next_url and safe else reverse(settings.LOGIN_REDIRECT_URL)


def _key_config(request, *, begin: str, complete: str) -> dict:
    """What django-otp-webauthn's script reads (json_script, no inline code)."""
    return {
        "autocompleteLoginFieldSelector": None,
        "nextFieldSelector": "input[name='next']",
        "csrfToken": csrf.get_token(request),
        "beginAuthenticationUrl": reverse(begin) if "authentication" in begin else "",
        "completeAuthenticationUrl": reverse(complete) if "authentication" in complete else "",
        "beginRegistrationUrl": reverse(begin) if "registration" in begin else "",
        "completeRegistrationUrl": reverse(complete) if "registration" in complete else "",
    }


@login_not_required
@never_cache
@require_http_methods(["GET", "POST"])
def second_factor(request):
    """Step two of signing in: a code from the app, a recovery code, or a security key."""
    user = pending_user(request)
    if user is None:
        request.session.pop(PENDING, None)
        messages.info(request, "Sign in again: the second step waits 5 minutes at most.")
        return redirect("login")
    error = ""
    status = 200
    if request.method == "POST":
        try:
            device = second_factors.second_factor_verify(
                user=user, code=request.POST.get("code", ""), path=request.path
            )
        except ApplicationError as refusal:
            error, status = refusal.message, refusal.status
        else:
            return redirect(sign_in_finish(request, user, device))
    has_key = any(
        second_factors.device_kind(d) == second_factors.KIND_WEBAUTHN
        for d in second_factors.second_factors_of(user)
    )
    context = {
        "pending_username": user.get_username(),
        "error": error,
        "has_key": has_key,
        "key_config": _key_config(
            request,
            begin="second-factor-key-authentication-begin",
            complete="second-factor-key-authentication-complete",
        ),
    }
    return TemplateResponse(request, "registration/second_factor.html", context, status=status)


class SignInFirst(OTPWebAuthnApiError):
    status_code = 401
    default_detail = "Sign in with your password first."
    default_code = "sign_in_first"


class KeyNotYours(OTPWebAuthnApiError):
    status_code = 403
    default_detail = "That key belongs to another account."
    default_code = "key_not_yours"


class ProviderAccount(OTPWebAuthnApiError):
    status_code = 403
    default_detail = "Accounts that sign in through an identity provider use its factors."
    default_code = "provider_account"


class _PendingUserMixin:
    """django-otp-webauthn's ceremony for the pending account (not yet signed in)."""

    def get_user(self):
        return pending_user(self.request)


@method_decorator(login_not_required, name="dispatch")
class KeyAuthenticationBegin(_PendingUserMixin, webauthn_views.BeginCredentialAuthenticationView):
    def check_can_authenticate(self):
        if self.get_user() is None:
            raise SignInFirst()


class _KeyAnswerAudited:
    """A key's answer, in the access log either way (`auth.second_factor`, kind webauthn),
    and only for the account it is asked of (`key_owner`)."""

    def key_owner(self):
        return self.get_user()

    def handle_exception(self, exc):
        user = self.key_owner() if hasattr(self, "request") else None
        if user is not None and isinstance(exc, OTPWebAuthnApiError):
            second_factors.second_factor_record(
                user, kind=second_factors.KIND_WEBAUTHN, path=self.request.path, why=exc.code
            )
        return super().handle_exception(exc)

    def check_device_usable(self, device):
        super().check_device_usable(device)
        if device.user_id != self.key_owner().pk:
            raise KeyNotYours()

    def complete_auth(self, device):
        second_factors.second_factor_record(
            self.key_owner(), kind=second_factors.KIND_WEBAUTHN, path=self.request.path
        )
        self.key_proved(device)


@method_decorator(login_not_required, name="dispatch")
class KeyAuthenticationComplete(
    _KeyAnswerAudited, _PendingUserMixin, webauthn_views.CompleteCredentialAuthenticationView
):
    """A key's answer for the pending account: signed in, or refused and audited."""

    def check_can_authenticate(self):
        if self.get_user() is None:
            raise SignInFirst()

    def key_proved(self, device):
        self._next = sign_in_finish(self.request, self.get_user(), device)

    def get_success_url(self):
        return self._next


# --- re-authentication with a security key ------------------------------------------------------
# A key used on the confirm-your-password page: the password then posted within this many
# seconds needs no code (console.accounts.forms.ReauthenticationForm).
REAUTH_KEY_AT = "console_reauth_key_at"
REAUTH_KEY_SECONDS = 120


def reauth_key_proved(request) -> bool:
    """A key was used on the confirm page just now. It counts for one request (taken from the
    session; the middleware and /reauthenticate/ may both check the same POST)."""
    if not hasattr(request, "_console_reauth_key"):
        at = request.session.pop(REAUTH_KEY_AT, None)
        request._console_reauth_key = at is not None and time.time() - at < REAUTH_KEY_SECONDS
    return request._console_reauth_key


class ReauthKeyBegin(webauthn_views.BeginCredentialAuthenticationView):
    """The signed-in person's key, before confirming their password."""


class ReauthKeyComplete(_KeyAnswerAudited, webauthn_views.CompleteCredentialAuthenticationView):
    """The signed-in person's key on the confirm page: the password posted next needs no code."""

    def key_owner(self):
        user = self.request.user
        return user if user.is_authenticated else None

    def key_proved(self, device):
        self.request.session[REAUTH_KEY_AT] = time.time()

    def get_success_url(self):
        # Back to the same page with its fragment only: nothing reloads, what was typed stays.
        return self.get_redirect_url() or reverse("reauthenticate") + "#key-confirmed"


def reauth_key_context(request) -> dict:
    """The confirm page's key button (only for someone with a key)."""
    user = request.user
    has_key = user.is_authenticated and any(
        second_factors.device_kind(d) == second_factors.KIND_WEBAUTHN
        for d in second_factors.second_factors_of(user)
    )
    if not has_key:
        return {"reauth_has_key": False}
    config = _key_config(
        request,
        begin="reauth-key-authentication-begin",
        complete="reauth-key-authentication-complete",
    )
    config["nextFieldSelector"] = "#reauth-key-next"
    return {
        "reauth_has_key": True,
        "reauth_key_config": config,
        "reauth_key_next": request.get_full_path().split("#")[0] + "#key-confirmed",
    }


# --- the account page's second factors ---------------------------------------------------------
def qr_svg(uri: str) -> str:
    """The QR code of an otpauth:// address as inline SVG (made here: nothing leaves)."""
    out = io.BytesIO()
    segno.make(uri, error="m").save(out, kind="svg", scale=4, xmldecl=False, svgns=True)
    return out.getvalue().decode()


def account_second_factor_context(request) -> dict:
    """The account page's "Second factor" section."""
    user = request.user
    local = user.has_usable_password() and not user.external_identities.exists()
    pending = TOTPDevice.objects.filter(user=user, confirmed=False).first() if local else None
    factors = [
        {
            "kind": second_factors.device_kind(d),
            "kind_words": second_factors.KIND_WORDS[second_factors.device_kind(d)],
            "id": d.pk,
            "name": d.name,
        }
        for d in second_factors.second_factors_of(user)
    ]
    return {
        "second_factor_local": local,
        "second_factors": factors,
        "factor_state": second_factors.factor_state(user),
        "totp_pending": pending,
        "totp_secret": second_factors.totp_secret(pending) if pending else "",
        "totp_qr": qr_svg(second_factors.totp_uri(pending)) if pending else "",
        "key_config": _key_config(
            request,
            begin="account-key-registration-begin",
            complete="account-key-registration-complete",
        ),
        "is_break_glass": second_factors.is_break_glass(user),
        "sso_enforced": second_factors.sso_enforced(),
    }


@require_POST
def account_totp_start(request):
    """Show a new authenticator app's QR code and secret on the account page."""
    if not request.user.has_usable_password() or request.user.external_identities.exists():
        raise NotFound("Accounts that sign in through an identity provider use its factors.")
    second_factors.totp_pending(request.user)
    return redirect(reverse("account") + "#second-factor")


def recovery_codes_page(request, codes: list[str], *, title: str):
    return TemplateResponse(
        request, "accounts/recovery_codes.html", {"codes": codes, "title": title}
    )


@shows_secret
@require_POST
def account_totp_confirm(request):
    try:
        codes = second_factors.totp_confirm(user=request.user, code=request.POST.get("code", ""))
    except ApplicationError as error:
        if error.status in (403, 404):
            raise
        messages.error(request, error.message)
        return redirect(reverse("account") + "#second-factor")
    device = TOTPDevice.objects.filter(user=request.user, confirmed=True).first()
    otp_login(request, device)
    if codes:
        return recovery_codes_page(request, codes, title="Authenticator app added")
    messages.success(request, "Authenticator app added: it is asked each time you sign in.")
    return redirect(reverse("account") + "#second-factor")


@shows_secret
@require_POST
def account_recovery_codes(request):
    try:
        codes = second_factors.recovery_codes_regenerate(user=request.user)
    except ApplicationError as error:
        if error.status in (401, 403, 404):
            raise
        messages.error(request, error.message)
        return redirect(reverse("account") + "#second-factor")
    return recovery_codes_page(request, codes, title="New recovery codes")


@require_POST
def account_second_factor_remove(request):
    try:
        device_id = int(request.POST.get("id", ""))
    except ValueError:
        raise NotFound("No such second factor.") from None
    try:
        second_factors.second_factor_remove(
            user=request.user, kind=request.POST.get("kind", ""), device_id=device_id
        )
    except ApplicationError as error:
        if error.status in (401, 403, 404):
            raise
        messages.error(request, error.message)
    else:
        messages.success(request, "Second factor removed.")
    return redirect(reverse("account") + "#second-factor")


class KeyRegistrationBegin(webauthn_views.BeginCredentialRegistrationView):
    def check_can_register(self):
        user = self.get_user()
        if not user.has_usable_password() or user.external_identities.exists():
            raise ProviderAccount()


class KeyRegistrationComplete(webauthn_views.CompleteCredentialRegistrationView):
    """The key is stored by django-otp-webauthn; the enrolment is audited here."""

    def post(self, *args, **kwargs):
        response = super().post(*args, **kwargs)
        if isinstance(response, JsonResponse) and response.status_code == 200:
            device = WebAuthnCredential.objects.get(
                user=self.request.user, pk=json.loads(response.content)["id"]
            )
            second_factors.webauthn_enrolled(user=self.request.user, device=device)
        return response


# --- break-glass accounts (Access) ---------------------------------------------------------------
@require_GET
@requires(Everywhere(Capability.MANAGE_GRANTS), agent_kwarg=None)
def break_glass_list(request):
    return TemplateResponse(request, "accounts/break_glass_list.html", _break_glass_context())


def _break_glass_context(**extra) -> dict:
    return {
        "rows": second_factors.break_glass_rows(),
        "limit": settings.BREAK_GLASS_ACCOUNTS_MAX,
        "sso_enforced": second_factors.sso_enforced(),
        **extra,
    }


def _user_named(username: str):
    user = get_user_model().objects.filter(username=username.strip()).first()
    if user is None:
        raise NotFound(f"No user named {username.strip()!r}.")
    return user


@require_POST
@requires(Everywhere(Capability.MANAGE_GRANTS), agent_kwarg=None)
def break_glass_mark(request):
    try:
        user = _user_named(request.POST.get("username", ""))
        second_factors.break_glass_mark(
            actor=request.user, user=user, reason=request.POST.get("reason", "")
        )
    except ApplicationError as error:
        if error.status in (401, 403):
            raise
        context = _break_glass_context(
            error=error.message,
            typed={
                "username": request.POST.get("username", ""),
                "reason": request.POST.get("reason", ""),
            },
        )
        return TemplateResponse(
            request, "accounts/break_glass_list.html", context, status=error.status
        )
    messages.success(request, f"{user.get_username()} is now a break-glass account.")
    return redirect("break-glass-list")


@require_POST
@requires(Everywhere(Capability.MANAGE_GRANTS), agent_kwarg=None)
def break_glass_unmark(request, pk: int):
    account = BreakGlassAccount.objects.select_related("user").filter(pk=pk).first()
    if account is None:
        raise NotFound("No such break-glass account.")
    user = account.user
    try:
        second_factors.break_glass_unmark(
            actor=request.user, user=user, reason=request.POST.get("reason", "")
        )
    except ApplicationError as error:
        if error.status in (401, 403, 404):
            raise
        messages.error(request, error.message)
    else:
        messages.success(request, f"{user.get_username()} is no longer a break-glass account.")
    return redirect("break-glass-list")
