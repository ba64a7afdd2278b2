"""OpenID Connect sign-in (issue 33, item 1; docs/sso.md says why mozilla-django-oidc).

The library does the protocol's sharp parts: the token request, the JWKS lookup by `kid` (at
each sign-in, so a rotated key is picked up at once), the signature with the algorithm pinned
(`none` refused), the nonce, PKCE's challenge. This module adds what it leaves out, in one
place: several providers (OIDC_PROVIDERS, each with its own callback URL so one provider's
answer is never taken for another's), the ID token's audience, issuer and expiry with a
bounded clock skew, the `sub` of userinfo matched to the ID token's, plain-words refusals —
each failed sign-in in the access log with the provider and the reason — and RP-initiated
logout. Accounts and groups are console.accounts.sso_accounts' job.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from urllib.parse import urlencode

import jwt
import requests
from django.conf import settings
from django.contrib import auth, messages
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.http import HttpResponseRedirect
from django.shortcuts import render, resolve_url
from django.urls import reverse
from django.utils.crypto import get_random_string
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import (
    add_state_and_verifier_and_nonce_to_session,
    generate_code_challenge,
)

from console.access.forms import LoginForm
from console.accounts.models import ExternalIdentity
from console.accounts.sso_accounts import ProviderPerson, sso_sign_in
from console.kernel.audit import AccessAction, access_record
from console.kernel.sessions import authentication_recorded, reauthentication_record
from console.kernel.sso_providers import (
    SSO_SESSION_KEY,
    Provider,
    provider_get,
    providers,
    sso_buttons,
)

# Where the session keeps the provider a person signed in through, and its ID token (the hint
# of RP-initiated logout).
SESSION_KEY = SSO_SESSION_KEY
# What Django's session remembers the user by: the console's own backend loads every user,
# local or not (a provider account has no usable password, so it cannot sign in with one).
SESSION_BACKEND = "django.contrib.auth.backends.ModelBackend"
SIGN_ALGORITHM = "RS256"


# --- refusals: a code for the log, words for the person --------------------------------------------
class SignInRefused(Exception):
    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def _network_refusal(provider: Provider, error: requests.RequestException) -> SignInRefused:
    name = provider.name
    if isinstance(error, requests.Timeout):
        return SignInRefused(
            "provider_timeout",
            f"{name} did not answer within {provider.timeout:g} seconds. Try again later; "
            "local accounts still sign in with their password.",
            504,
        )
    if isinstance(error, requests.HTTPError):
        return SignInRefused(
            "provider_refused",
            f"{name} refused to complete the sign-in. Start again from this page.",
            400,
        )
    return SignInRefused(
        "provider_unreachable",
        f"{name} cannot be reached. Try again later; local accounts still sign in with "
        "their password.",
        503,
    )


@contextmanager
def talking_to(provider: Provider):
    """What can go wrong asking a provider, as a refusal in words."""
    try:
        yield
    except ValueError as error:  # first: requests' JSONDecodeError is a RequestException too
        raise SignInRefused(
            "provider_bad_answer", f"{provider.name} answered with something unreadable.", 502
        ) from error
    except requests.RequestException as error:
        raise _network_refusal(provider, error) from error


# --- the provider's metadata, kept a while per process ---------------------------------------------
DISCOVERY_SECONDS = 3600.0
_discovered: dict[str, tuple[float, dict]] = {}
_discovered_lock = threading.Lock()


def discovery(provider: Provider) -> dict:
    """The provider's /.well-known/openid-configuration (kept DISCOVERY_SECONDS). Its
    `issuer` must be the configured one (OpenID Connect Discovery §4.3)."""
    with _discovered_lock:
        kept = _discovered.get(provider.issuer)
    if kept is not None and time.monotonic() - kept[0] < DISCOVERY_SECONDS:
        return kept[1]
    url = f"{provider.issuer}/.well-known/openid-configuration"
    with talking_to(provider):
        response = requests.get(url, timeout=provider.timeout)
        response.raise_for_status()
        metadata = response.json()
    if str(metadata.get("issuer", "")).rstrip("/") != provider.issuer:
        raise SignInRefused(
            "wrong_issuer",
            f"{provider.name} says it is {metadata.get('issuer')!r}, not the configured "
            f"{provider.issuer!r}.",
            502,
        )
    with _discovered_lock:
        _discovered[provider.issuer] = (time.monotonic(), metadata)
    return metadata


# --- the library's backend, for one provider ---------------------------------------------------------
class ProviderBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend bound to one provider's settings (its own are global),
    with the ID token's audience, issuer and expiry checked under a bounded clock skew."""

    def __init__(self, provider: Provider, metadata: dict):
        # Not super().__init__: it reads one provider's endpoints from global settings.
        self.provider = provider
        self.OIDC_OP_TOKEN_ENDPOINT = metadata["token_endpoint"]
        self.OIDC_OP_USER_ENDPOINT = metadata.get("userinfo_endpoint")
        self.OIDC_OP_JWKS_ENDPOINT = metadata["jwks_uri"]
        self.OIDC_RP_CLIENT_ID = provider.client_id
        self.OIDC_RP_CLIENT_SECRET = provider.client_secret
        self.OIDC_RP_SIGN_ALGO = SIGN_ALGORITHM
        self.OIDC_RP_IDP_SIGN_KEY = None

    def get_settings(self, attr, *args):
        own = {
            "OIDC_TIMEOUT": self.provider.timeout,
            "OIDC_RP_SCOPES": self.provider.scopes,
            "OIDC_VERIFY_SSL": True,
            "OIDC_PROXY": None,
            "OIDC_TOKEN_USE_BASIC_AUTH": False,
            "OIDC_ALLOW_UNSECURED_JWT": False,
            "OIDC_USE_NONCE": True,
        }
        if attr in own:
            return own[attr]
        if args:
            return args[0]
        raise ImproperlyConfigured(f"{attr} is not set for provider {self.provider.key}")

    def verify_token(self, token, **kwargs):
        """The ID token's claims, or SignInRefused saying what is wrong with it."""
        name = self.provider.name
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as error:
            raise SignInRefused(
                "malformed_token", f"{name} sent an unreadable sign-in token."
            ) from error
        if header.get("alg") != self.OIDC_RP_SIGN_ALGO:
            code = "unsigned_token" if str(header.get("alg")).lower() == "none" else "wrong_alg"
            raise SignInRefused(
                code,
                f"{name} sent a sign-in token that is not signed the way it must be.",
            )
        try:
            key = self.retrieve_matching_jwk(token)
        except (SuspiciousOperation, KeyError) as error:
            raise SignInRefused(
                "unknown_key", f"{name} signed the sign-in token with a key it does not publish."
            ) from error
        payload = self._verify_jws(token, key)
        if payload.get("nonce") != kwargs.get("nonce"):
            raise SignInRefused(
                "nonce_mismatch", f"The sign-in token from {name} was not issued for this sign-in."
            )
        return payload

    def _verify_jws(self, payload, key):
        try:
            return jwt.decode(
                payload,
                key,
                algorithms=[self.OIDC_RP_SIGN_ALGO],
                audience=self.provider.client_id,
                issuer=self.provider.issuer,
                leeway=settings.OIDC_CLOCK_SKEW_SECONDS,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError as error:
            code, words = next(
                (code, words) for kind, code, words in TOKEN_FAULTS if isinstance(error, kind)
            )
            raise SignInRefused(
                code,
                words.format(
                    name=self.provider.name,
                    issuer=self.provider.issuer,
                    skew=settings.OIDC_CLOCK_SKEW_SECONDS,
                ),
            ) from error


# What is wrong with a sign-in token, most specific first: (PyJWT's error, code, words).
TOKEN_FAULTS = (
    (
        jwt.ExpiredSignatureError,
        "expired_token",
        "The sign-in token from {name} has expired (or the clocks differ by more than {skew} "
        "seconds).",
    ),
    (
        jwt.ImmatureSignatureError,
        "token_not_yet_valid",
        "The sign-in token from {name} is not valid yet.",
    ),
    (
        jwt.InvalidAudienceError,
        "wrong_audience",
        "The sign-in token from {name} was issued for another application.",
    ),
    (
        jwt.InvalidIssuerError,
        "wrong_issuer",
        "The sign-in token did not come from {name} ({issuer}).",
    ),
    (
        jwt.InvalidSignatureError,
        "bad_signature",
        "The sign-in token's signature does not match {name}'s keys.",
    ),
    (jwt.PyJWTError, "invalid_token", "{name} sent a sign-in token that does not check out."),
)


# --- the two views ------------------------------------------------------------------------------------
def sign_in_refused_page(request, provider_key: str, refusal: SignInRefused, name: str = ""):
    """The sign-in page again, saying why in plain words; the access log has the code."""
    access_record(
        actor=AnonymousUser(),
        action=AccessAction.AUTH_LOGIN,
        target=("sso.provider", provider_key, name or provider_key),
        outcome="denied",
        detail={"provider": provider_key, "why": refusal.code, "message": refusal.message},
    )
    context = {
        "form": LoginForm(request),
        "sso_error": refusal.message,
        "sso_providers": sso_buttons(),
        "next": "",
    }
    return render(request, "registration/login.html", context, status=refusal.status)


def safe_next(request) -> str | None:
    next_url = request.GET.get("next")
    if next_url and url_has_allowed_host_and_scheme(
        next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return next_url
    return None


def _authorization_redirect(request, key: str, provider: Provider, **extra):
    """Send the browser to the provider with state, nonce and PKCE's challenge (S256); what
    the callback must know of this request (`extra`: a re-authentication's person and start)
    is kept with its state."""
    try:
        metadata = discovery(provider)
    except SignInRefused as refusal:
        return sign_in_refused_page(request, key, refusal, provider.name)
    state = get_random_string(32)
    verifier = get_random_string(64)
    params = {
        "response_type": "code",
        "scope": provider.scopes,
        "client_id": provider.client_id,
        "redirect_uri": request.build_absolute_uri(reverse("sso-callback", args=[key])),
        "state": state,
        "nonce": get_random_string(32),
        "code_challenge": generate_code_challenge(verifier, "S256"),
        "code_challenge_method": "S256",
    }
    if extra.get("reauthenticate"):
        # The provider must ask the person again now, and say when it did (OIDC Core §3.1.2.1).
        params.update(prompt="login", max_age="0")
    add_state_and_verifier_and_nonce_to_session(request, state, params, verifier)
    # The state is answered by this provider only (its own callback URL checks it).
    request.session["oidc_states"][state].update(provider=key, **extra)
    request.session["oidc_login_next"] = safe_next(request)
    request.session.modified = True
    return HttpResponseRedirect(f"{metadata['authorization_endpoint']}?{urlencode(params)}")


@login_not_required
@never_cache
@require_GET
def sso_start(request, provider: str):
    """Sign in through `provider`."""
    return _authorization_redirect(request, provider, provider_get(provider))


@never_cache
@require_GET
def sso_reauthenticate(request, provider: str):
    """Confirm it is you at your provider before a dangerous action (the password's place for
    accounts that sign in through one): the provider is asked to sign the person in again
    (`prompt=login`, `max_age=0`); the callback accepts the answer only for the same person
    and only with a fresh `auth_time`."""
    key, provider = provider, provider_get(provider)
    signed_in = request.session.get(SESSION_KEY) or {}
    if signed_in.get("provider") != key:
        refusal = SignInRefused(
            "not_signed_in_here",
            f"You did not sign in through {provider.name}; confirm the way you signed in.",
        )
        return reauthentication_refused(request, refusal, safe_next(request) or "")
    return _authorization_redirect(
        request, key, provider, reauthenticate=request.user.pk, started=int(time.time())
    )


def _claims(provider: Provider, backend: ProviderBackend, token_info: dict, nonce) -> dict:
    id_token = token_info.get("id_token")
    if not id_token:
        raise SignInRefused("no_id_token", f"{provider.name} sent no sign-in token.")
    claims = backend.verify_token(id_token, nonce=nonce)
    if backend.OIDC_OP_USER_ENDPOINT and token_info.get("access_token"):
        userinfo = backend.get_userinfo(token_info["access_token"], id_token, claims)
        if userinfo.get("sub") != claims["sub"]:
            raise SignInRefused(
                "userinfo_mismatch", f"{provider.name} described someone else than it signed in."
            )
        claims = {**userinfo, **claims}
    return claims


def _person(provider: Provider, claims: dict) -> ProviderPerson:
    groups = claims.get(provider.groups_claim) or []
    if isinstance(groups, str):
        groups = [groups]
    return ProviderPerson(
        provider=provider.key,
        subject=str(claims["sub"]),
        email=str(claims.get("email") or ""),
        username=str(claims.get("preferred_username") or ""),
        name=str(claims.get("name") or ""),
        groups=tuple(str(g) for g in groups if isinstance(g, str | int)),
    )


def _exchange(request, key: str, provider: Provider, entry: dict) -> tuple[dict, dict]:
    """The provider's tokens for the callback's code (with PKCE's verifier), and the ID
    token's checked claims."""
    backend = ProviderBackend(provider, discovery(provider))
    with talking_to(provider):
        token_info = backend.get_token(
            {
                "client_id": provider.client_id,
                "client_secret": provider.client_secret,
                "grant_type": "authorization_code",
                "code": request.GET["code"],
                "redirect_uri": request.build_absolute_uri(reverse("sso-callback", args=[key])),
                "code_verifier": entry["code_verifier"],
            }
        )
        return token_info, _claims(provider, backend, token_info, entry["nonce"])


def reauthentication_refused(request, refusal: SignInRefused, next_url: str):
    """Back to the confirm-it's-you page, saying why; `auth.reauthenticate` denied."""
    if request.user.is_authenticated:
        reauthentication_record(request.user, path=next_url, why=refusal.code)
    messages.error(request, refusal.message)
    return HttpResponseRedirect(f"{reverse('reauthenticate')}?{urlencode({'next': next_url})}")


def _reauthentication_answer(request, key: str, provider: Provider, entry: dict):
    """The provider's answer to sso_reauthenticate: accepted only for the person of this
    session, signed in at the provider after the request was sent (`auth_time`)."""
    next_url = request.session.get("oidc_login_next") or ""
    try:
        if request.GET.get("error"):
            raise SignInRefused(
                "provider_error",
                f"{provider.name} did not confirm it is you: "
                f"{request.GET.get('error_description') or request.GET['error']}.",
            )
        if request.user.pk != entry["reauthenticate"] or not request.GET.get("code"):
            raise SignInRefused(
                "state_mismatch", "This confirmation was not started in this session. Start again."
            )
        token_info, claims = _exchange(request, key, provider, entry)
        if not ExternalIdentity.objects.filter(
            user=request.user, provider=key, subject=str(claims["sub"])
        ).exists():
            raise SignInRefused(
                "another_person",
                f"{provider.name} confirmed someone else than {request.user.get_username()}. "
                "Sign in there as yourself.",
            )
        auth_time = claims.get("auth_time")
        skew = settings.OIDC_CLOCK_SKEW_SECONDS
        if not isinstance(auth_time, int | float) or auth_time < entry["started"] - skew:
            raise SignInRefused(
                "not_asked_again",
                f"{provider.name} did not ask you to sign in again. Try again; if it keeps "
                "happening, its administrator must honour prompt=login.",
            )
    except SignInRefused as refusal:
        return reauthentication_refused(request, refusal, next_url)
    authentication_recorded(request.session)
    request.session[SESSION_KEY] = {"provider": key, "id_token": token_info["id_token"]}
    reauthentication_record(request.user, path=next_url)
    return HttpResponseRedirect(next_url or resolve_url(settings.LOGIN_REDIRECT_URL))


@login_not_required
@never_cache
@require_GET
def sso_callback(request, provider: str):
    """The provider's answer: check the state, exchange the code (with PKCE's verifier),
    check the ID token, then sign the person in — account made on first sign-in, mapped grants
    in line with their groups. Any refusal: the sign-in page saying why, nobody signed in."""
    key, provider = provider, provider_get(provider)
    states = request.session.get("oidc_states") or {}
    entry = states.pop(request.GET.get("state", ""), None)
    request.session.modified = True  # a state is used once, whatever happens next
    if entry is not None and entry.get("reauthenticate"):
        return _reauthentication_answer(request, key, provider, entry)
    try:
        if request.GET.get("error"):
            raise SignInRefused(
                "provider_error",
                f"{provider.name} did not sign you in: "
                f"{request.GET.get('error_description') or request.GET['error']}.",
            )
        if entry is None or entry.get("provider") != key or not request.GET.get("code"):
            raise SignInRefused(
                "state_mismatch",
                "This sign-in was not started here (or was already used). Start again.",
            )
        token_info, claims = _exchange(request, key, provider, entry)
        user, sync, created = sso_sign_in(person=_person(provider, claims))
        if not user.is_active:
            raise SignInRefused(
                "account_disabled", "Your console account is deactivated. Ask an admin.", 403
            )
    except SignInRefused as refusal:
        return sign_in_refused_page(request, key, refusal, provider.name)

    next_url = request.session.get("oidc_login_next")
    provider_login(request, user, key, (created, sync), id_token=token_info["id_token"])
    return HttpResponseRedirect(next_url or resolve_url(settings.LOGIN_REDIRECT_URL))


def provider_login(request, user, key: str, outcome: tuple, **remembered) -> None:
    """Sign `user` in through provider `key` (OpenID Connect's or SAML's): the session
    remembers the provider and `remembered` (SESSION_KEY), the access log the sign-in with
    what it changed. `outcome` is sso_sign_in's (created, sync)."""
    created, sync = outcome
    auth.login(request, user, backend=SESSION_BACKEND)
    request.session[SESSION_KEY] = {"provider": key, **remembered}
    access_record(
        actor=user,
        action=AccessAction.AUTH_LOGIN,
        target=user,
        outcome="allowed",
        detail={
            "provider": key,
            **({"protocol": remembered["protocol"]} if "protocol" in remembered else {}),
            "account_created": created,
            "grants_added": len(sync.added),
            "grants_removed": len(sync.removed),
        },
    )


def logout_url(request) -> str | None:
    """Where signing out sends a person who came through a provider: its end-session
    endpoint (RP-initiated logout), back to the sign-in page. None for local accounts, or
    when the provider cannot be reached (the console's own session still ends)."""
    signed_in = request.session.get(SESSION_KEY)
    if not signed_in:
        return None
    provider = providers().get(signed_in.get("provider", ""))
    if provider is None or provider.protocol != "oidc":
        return None  # SAML: the console's own session ends (console.accounts.saml)
    try:
        end_session = discovery(provider).get("end_session_endpoint")
    except SignInRefused:
        return None
    if not end_session:
        return None
    params = {
        "id_token_hint": signed_in.get("id_token", ""),
        "client_id": provider.client_id,
        "post_logout_redirect_uri": request.build_absolute_uri(resolve_url(settings.LOGIN_URL)),
    }
    return f"{end_session}?{urlencode(params)}"
