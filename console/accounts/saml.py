"""SAML 2.0 sign-in (issue 33, item 2; docs/sso.md says why djangosaml2 on pysaml2).

pysaml2 does the protocol's sharp parts: the AuthnRequest, the response's XML and its
signature checked by xmlsec1 against the certificate of the provider's metadata (an
unsigned assertion is refused: `want_assertions_signed`), the audience (our SP entity id),
the Recipient and Destination (this provider's own ACS URL), NotBefore/NotOnOrAfter with a
bounded clock skew (OIDC_CLOCK_SKEW_SECONDS), InResponseTo against the requests this browser
started (no unsolicited, IdP-initiated answer). djangosaml2 keeps those requests in a cookie of
their own (SameSite=None over HTTPS: the provider's answer is a cross-site POST) and this
module adds the rest in one place: several providers (SAML_PROVIDERS, each with its own
metadata, ACS and start URLs), the provider's metadata fetched within a timeout, the checks
repeated on the accepted assertion (defence in depth), a replayed assertion refused across
processes (console.accounts.sso_accounts.saml_assertion_use), plain-words refusals in the
access log exactly as OpenID Connect's, and re-authentication (ForceAuthn) for the dangerous
actions. Accounts and groups are console.accounts.sso_accounts' job.
"""

from __future__ import annotations

import base64
import logging
import shutil
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

import requests
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import resolve_url
from django.urls import reverse
from django.utils.decorators import decorator_from_middleware
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST
from djangosaml2.cache import OutstandingQueriesCache
from djangosaml2.middleware import SamlSessionMiddleware
from saml2 import BINDING_HTTP_POST, BINDING_HTTP_REDIRECT
from saml2.client import Saml2Client
from saml2.config import SPConfig
from saml2.metadata import entity_descriptor
from saml2.response import StatusError, UnsolicitedResponse
from saml2.saml import NAMEID_FORMAT_PERSISTENT, NAMEID_FORMAT_TRANSIENT, NameID
from saml2.samlp import response_from_string
from saml2.sigver import MissingKey, SignatureError
from saml2.validate import ResponseLifetimeExceed, ToEarly

from console.accounts.models import ExternalIdentity
from console.accounts.oidc import (
    SignInRefused,
    provider_login,
    reauthentication_refused,
    safe_next,
    sign_in_refused_page,
)
from console.accounts.sso_accounts import ProviderPerson, saml_assertion_use, sso_sign_in
from console.kernel.sessions import authentication_recorded, reauthentication_record
from console.kernel.sso_providers import SSO_SESSION_KEY, SamlProvider, provider_get

logger = logging.getLogger(__name__)

# The pending sign-ins of this browser, in djangosaml2's own cookie (request.saml_session).
saml_session = decorator_from_middleware(SamlSessionMiddleware)
# Where a verified re-authentication waits for the top-level GET that finishes it (which
# carries the console's Lax session cookie; the provider's cross-site POST does not).
REAUTHENTICATED = "console_reauthenticated"


# --- the provider's metadata, kept a while per process -----------------------------------------------
METADATA_SECONDS = 3600.0
_metadata: dict[str, tuple[float, str]] = {}
_metadata_lock = threading.Lock()


def idp_metadata(provider: SamlProvider) -> str:
    """The provider's metadata XML (kept METADATA_SECONDS), from its URL within its timeout
    or from its file; SignInRefused when it cannot be had."""
    source = provider.metadata_url or provider.metadata_file
    with _metadata_lock:
        kept = _metadata.get(source)
    if kept is not None and time.monotonic() - kept[0] < METADATA_SECONDS:
        return kept[1]
    name = provider.name
    try:
        if provider.metadata_url:
            response = requests.get(provider.metadata_url, timeout=provider.timeout)
            response.raise_for_status()
            xml = response.text
        else:
            xml = Path(provider.metadata_file).read_text(encoding="utf-8")
    except requests.Timeout as error:
        raise SignInRefused(
            "provider_timeout",
            f"{name} did not answer within {provider.timeout:g} seconds. Try again later; "
            "local accounts still sign in with their password.",
            504,
        ) from error
    except (requests.RequestException, OSError) as error:
        raise SignInRefused(
            "provider_unreachable",
            f"{name} cannot be reached. Try again later; local accounts still sign in with "
            "their password.",
            503,
        ) from error
    with _metadata_lock:
        _metadata[source] = (time.monotonic(), xml)
    return xml


# --- pysaml2's service provider, for one provider ------------------------------------------------------
def acs_url(request, provider: SamlProvider) -> str:
    return request.build_absolute_uri(reverse("saml-acs", args=[provider.key]))


def sls_url(request, provider: SamlProvider) -> str:
    return request.build_absolute_uri(reverse("saml-sls", args=[provider.key]))


def sp_entity_id(request, provider: SamlProvider) -> str:
    metadata = reverse("saml-metadata", args=[provider.key])
    return provider.sp_entity_id or request.build_absolute_uri(metadata)


def sp_config(request, provider: SamlProvider, metadata_xml: str | None) -> SPConfig:
    """The console as this provider's service provider: signed assertions wanted, answers
    only to the requests it sent, to this provider's ACS URL only."""
    config = {
        "entityid": sp_entity_id(request, provider),
        "xmlsec_binary": shutil.which("xmlsec1") or "/usr/bin/xmlsec1",
        "accepted_time_diff": settings.OIDC_CLOCK_SKEW_SECONDS,
        "allow_unknown_attributes": True,
        "service": {
            "sp": {
                "name": "Context Console",
                "endpoints": {
                    "assertion_consumer_service": [(acs_url(request, provider), BINDING_HTTP_POST)],
                    "single_logout_service": [(sls_url(request, provider), BINDING_HTTP_REDIRECT)],
                },
                "allow_unsolicited": False,
                "authn_requests_signed": False,
                "want_assertions_signed": True,
                "want_response_signed": False,
                "only_use_keys_in_metadata": True,
                "name_id_format": NAMEID_FORMAT_PERSISTENT,
                "name_id_format_allow_create": True,
            }
        },
        "metadata": {"inline": [metadata_xml]} if metadata_xml else {},
    }
    sp = SPConfig()
    sp.load(config)
    return sp


def _client(request, provider: SamlProvider) -> tuple[Saml2Client, str]:
    """pysaml2's client for this provider, and the provider's entity id."""
    xml = idp_metadata(provider)
    try:
        client = Saml2Client(sp_config(request, provider, xml))
        [idp] = client.metadata.identity_providers()
    except Exception as error:  # noqa: BLE001 - any unreadable metadata is one refusal
        logger.warning("SAML metadata of %s unreadable: %s", provider.key, error)
        with _metadata_lock:  # not kept: the next sign-in reads it again
            _metadata.pop(provider.metadata_url or provider.metadata_file, None)
        raise SignInRefused(
            "provider_bad_metadata",
            f"{provider.name} publishes metadata the console cannot read (one identity "
            "provider, signing certificate included).",
            502,
        ) from error
    return client, idp


# --- what is wrong with an answer -----------------------------------------------------------------------
FAULTS = {
    "unsolicited_response": "This sign-in was not started here (or was already used). Start again.",
    "unsigned_assertion": "The sign-in answer from {name} is not signed.",
    "bad_signature": "The sign-in answer's signature does not match {name}'s certificate.",
    "wrong_audience": "The sign-in answer from {name} was issued for another application.",
    "wrong_recipient": "The sign-in answer from {name} was sent to another address.",
    "expired_assertion": "The sign-in answer from {name} has expired (or the clocks differ by "
    "more than {skew} seconds).",
    "assertion_not_yet_valid": "The sign-in answer from {name} is not valid yet.",
    "provider_error": "{name} did not sign you in.",
    "invalid_response": "{name} sent a sign-in answer that does not check out.",
}


def _refusal(provider: SamlProvider, code: str) -> SignInRefused:
    words = {"name": provider.name, "skew": settings.OIDC_CLOCK_SKEW_SECONDS}
    return SignInRefused(code, FAULTS[code].format(**words))


def _diagnosis(request, provider: SamlProvider, raw: str) -> str | None:
    """Why pysaml2 refused an answer, read from the (unverified) answer itself: it only
    chooses the words of a refusal already decided, so it never lets anything in."""
    try:
        answer = response_from_string(base64.b64decode(raw, validate=False))
    except Exception:  # noqa: BLE001 - unreadable: no more to say
        return None
    if answer is None:
        return None
    acs, now = acs_url(request, provider), datetime.now(UTC)
    skew = timedelta(seconds=settings.OIDC_CLOCK_SKEW_SECONDS)
    if answer.destination and answer.destination != acs:
        return "wrong_recipient"
    for assertion in answer.assertion:
        if assertion.signature is None:
            return "unsigned_assertion"
        conditions = assertion.conditions
        if conditions is not None:
            audiences = {a.text for r in conditions.audience_restriction for a in r.audience}
            if sp_entity_id(request, provider) not in audiences:
                return "wrong_audience"
            end, start = _instant(conditions.not_on_or_after), _instant(conditions.not_before)
            if end is not None and end + skew <= now:
                return "expired_assertion"
            if start is not None and start - skew > now:
                return "assertion_not_yet_valid"
        confirmations = assertion.subject.subject_confirmation if assertion.subject else []
        for confirmation in confirmations:
            data = confirmation.subject_confirmation_data
            if data is not None and data.recipient and data.recipient != acs:
                return "wrong_recipient"
    return None


def _fault(request, provider: SamlProvider, raw: str, error: Exception | None) -> SignInRefused:
    """What is wrong with an answer pysaml2 refused (`error`, or None when it returned none)."""
    if isinstance(error, UnsolicitedResponse):
        return _refusal(provider, "unsolicited_response")
    code = _diagnosis(request, provider, raw)
    if code is None and isinstance(error, SignatureError | MissingKey):
        code = "bad_signature"
    if code is None and isinstance(error, ResponseLifetimeExceed):
        code = "expired_assertion"
    if code is None and isinstance(error, ToEarly):
        code = "assertion_not_yet_valid"
    if code is None and isinstance(error, StatusError):
        code = "provider_error"
    return _refusal(provider, code or "invalid_response")


def _instant(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)


def _checked(request, provider: SamlProvider, response) -> tuple[str, datetime]:
    """The checks repeated on what pysaml2 accepted, and the assertion's (id, end)."""
    name = provider.name
    assertion = response.assertion
    if assertion is None or assertion.signature is None:
        raise _refusal(provider, "unsigned_assertion")
    entity = sp_entity_id(request, provider)
    audiences = {
        audience.text
        for restriction in (
            assertion.conditions.audience_restriction if assertion.conditions else []
        )
        for audience in restriction.audience
    }
    if entity not in audiences:
        raise _refusal(provider, "wrong_audience")
    acs = acs_url(request, provider)
    recipients = {
        data.recipient
        for confirmation in assertion.subject.subject_confirmation
        for data in [confirmation.subject_confirmation_data]
        if data is not None
    }
    destination = response.response.destination
    if recipients != {acs} or (destination and destination != acs):
        raise _refusal(provider, "wrong_recipient")
    ends = [_instant(assertion.conditions.not_on_or_after if assertion.conditions else None)]
    ends += [
        _instant(c.subject_confirmation_data.not_on_or_after)
        for c in assertion.subject.subject_confirmation
        if c.subject_confirmation_data is not None
    ]
    ends = [end for end in ends if end is not None]
    if not ends:
        raise SignInRefused(
            "invalid_response", f"The sign-in answer from {name} says not until when it holds."
        )
    return assertion.id, min(ends)


def _attributes(response) -> dict[str, list[str]]:
    """Each attribute by its Name and by its FriendlyName: values as text."""
    found: dict[str, list[str]] = {}
    for statement in response.assertion.attribute_statement or []:
        for attribute in statement.attribute:
            values = [v.text.strip() for v in attribute.attribute_value if v.text]
            for label in {attribute.name, attribute.friendly_name} - {None, ""}:
                found.setdefault(label, []).extend(values)
    return found


def _person(provider: SamlProvider, response) -> ProviderPerson:
    name_id = response.assertion.subject.name_id
    if name_id is None or not (name_id.text or "").strip():
        raise SignInRefused("no_subject", f"{provider.name} did not say who signed in.")
    if name_id.format == NAMEID_FORMAT_TRANSIENT:
        raise SignInRefused(
            "transient_name_id",
            f"{provider.name} sent a one-time name for you; it must send a persistent one.",
        )
    attributes = _attributes(response)

    def first(label: str) -> str:
        return (attributes.get(label) or [""])[0]

    return ProviderPerson(
        provider=provider.key,
        subject=name_id.text.strip(),
        email=first(provider.email_attribute),
        username=first(provider.username_attribute),
        name=first(provider.name_attribute),
        groups=tuple(attributes.get(provider.groups_attribute) or ()),
    )


# --- the views --------------------------------------------------------------------------------------
def _start(request, provider: SamlProvider, pending: dict, *, force: bool):
    try:
        client, idp = _client(request, provider)
        request_id, info = client.prepare_for_authenticate(
            entityid=idp, binding=BINDING_HTTP_REDIRECT, force_authn=force
        )
    except SignInRefused as refusal:
        return sign_in_refused_page(request, provider.key, refusal, provider.name)
    OutstandingQueriesCache(request.saml_session).set(request_id, pending)
    location = dict(info["headers"])["Location"]
    return HttpResponseRedirect(location)


@login_not_required
@never_cache
@require_GET
@saml_session
def saml_start(request, provider: str):
    """Send the browser to the provider with an AuthnRequest this browser will be answered to."""
    provider = provider_get(provider, "saml")
    return _start(request, provider, {"next": safe_next(request)}, force=False)


@login_not_required
@never_cache
@require_GET
def saml_metadata(request, provider: str):
    """The console's SP metadata for this provider (entity id, ACS URL, NameID format)."""
    provider = provider_get(provider, "saml")
    xml = str(entity_descriptor(sp_config(request, provider, None)))
    return HttpResponse(xml, content_type="application/samlmetadata+xml")


def _response(request, provider: SamlProvider, client: Saml2Client, outstanding: dict):
    raw = request.POST.get("SAMLResponse", "")
    if not raw:
        raise SignInRefused("no_response", f"{provider.name} sent no sign-in answer.")
    try:
        response = client.parse_authn_request_response(raw, BINDING_HTTP_POST, outstanding)
    except Exception as error:  # noqa: BLE001 - garbage of any shape is one refusal
        logger.info("SAML response from %s refused: %r", provider.key, error)
        raise _fault(request, provider, raw, error) from error
    if response is None or response.assertion is None:
        raise _fault(request, provider, raw, None)
    if response.in_response_to not in outstanding:
        raise _refusal(provider, "unsolicited_response")
    return response


@login_not_required
@never_cache
@csrf_exempt  # the provider's POST: its signature and InResponseTo are the checks
@require_POST
@saml_session
def saml_acs(request, provider: str):
    """The provider's answer: check it (signature, audience, recipient, times, InResponseTo,
    not seen before), then sign the person in — or, for a re-authentication, hand the proof to
    the page that asked. Any refusal: the sign-in page saying why, nobody signed in."""
    key, provider = provider, provider_get(provider, "saml")
    queries = OutstandingQueriesCache(request.saml_session)
    outstanding = dict(queries.outstanding_queries())
    try:
        client, _idp = _client(request, provider)
        response = _response(request, provider, client, outstanding)
        pending = outstanding.get(response.in_response_to) or {}
        queries.delete(response.in_response_to)  # a request is answered once
        assertion_id, ends = _checked(request, provider, response)
        person = _person(provider, response)
        if not saml_assertion_use(provider=key, assertion_id=assertion_id, not_on_or_after=ends):
            raise SignInRefused(
                "replayed_assertion",
                f"This sign-in answer from {provider.name} was already used. Start again.",
            )
        if pending.get("reauthenticate"):
            return _reauthenticated(request, provider, response, person, pending)
        user, sync, created = sso_sign_in(person=person)
        if not user.is_active:
            raise SignInRefused(
                "account_disabled", "Your console account is deactivated. Ask an admin.", 403
            )
    except SignInRefused as refusal:
        return sign_in_refused_page(request, key, refusal, provider.name)

    remembered = {
        "protocol": "saml",
        "subject": person.subject,
        "name_id_format": response.assertion.subject.name_id.format or "",
        "session_index": next(
            (a.session_index for a in response.assertion.authn_statement if a.session_index), ""
        ),
        "assertion": assertion_id,
    }
    provider_login(request, user, key, (created, sync), **remembered)
    return HttpResponseRedirect(pending.get("next") or resolve_url(settings.LOGIN_REDIRECT_URL))


# --- re-authentication (GitHub's sudo mode) ----------------------------------------------------------------
def _reauthenticated(request, provider: SamlProvider, response, person, pending: dict):
    """A verified forced sign-in: kept in the SAML cookie for the same-site GET that finishes
    it (the provider's cross-site POST does not carry the console's session cookie)."""
    statements = response.assertion.authn_statement or []
    instants = [_instant(s.authn_instant) for s in statements]
    request.saml_session[REAUTHENTICATED] = {
        "provider": provider.key,
        "subject": person.subject,
        "request": pending["reauthenticate"],
        "started": pending["started"],
        "authn_instant": max((i.timestamp() for i in instants if i), default=0),
        "next": pending.get("next") or "",
    }
    finish = reverse("saml-reauthenticate", args=[provider.key])
    return HttpResponseRedirect(f"{finish}?{urlencode({'finish': pending['reauthenticate']})}")


def _proof_refusal(request, provider: SamlProvider, proof: dict) -> SignInRefused | None:
    """Why a forced sign-in does not confirm this session's person (None: it does)."""
    user = request.user
    if (
        proof.get("provider") != provider.key
        or proof.get("request") != request.GET.get("finish")
        or not str(proof.get("request", "")).startswith(f"{user.pk}:")
    ):
        return SignInRefused(
            "state_mismatch", "This confirmation was not started in this session. Start again."
        )
    if not ExternalIdentity.objects.filter(
        user=user, provider=provider.key, subject=proof.get("subject", "")
    ).exists():
        return SignInRefused(
            "another_person",
            f"{provider.name} confirmed someone else than {user.get_username()}. "
            "Sign in there as yourself.",
        )
    if proof.get("authn_instant", 0) < proof.get("started", 0) - settings.OIDC_CLOCK_SKEW_SECONDS:
        return SignInRefused(
            "not_asked_again",
            f"{provider.name} did not ask you to sign in again. Try again; if it keeps "
            'happening, its administrator must honour ForceAuthn="true".',
        )
    return None


@never_cache
@require_GET
@saml_session
def saml_reauthenticate(request, provider: str):
    """`?next=…`: send the signed-in person to the provider with ForceAuthn="true". Back
    (`?finish=…`, after the ACS checked the answer): the same person — same provider, same
    NameID as this account's, signed in at the provider after the request was sent — opens
    the dangerous actions for REAUTHENTICATION_MINUTES and goes to `next`; anything else is
    refused (`auth.reauthenticate` denied, with the reason) and changes nothing."""
    key, provider = provider, provider_get(provider, "saml")
    if "finish" not in request.GET:
        if (request.session.get(SSO_SESSION_KEY) or {}).get("provider") != key:
            refusal = SignInRefused(
                "not_signed_in_here",
                f"You did not sign in through {provider.name}; confirm the way you signed in.",
            )
            return reauthentication_refused(request, refusal, safe_next(request) or "")
        pending = {
            "next": safe_next(request),
            "reauthenticate": f"{request.user.pk}:{time.time_ns()}",
            "started": int(time.time()),
        }
        return _start(request, provider, pending, force=True)
    proof = request.saml_session.pop(REAUTHENTICATED, None) or {}
    next_url = proof.get("next") or ""
    refusal = _proof_refusal(request, provider, proof)
    if refusal is not None:
        return reauthentication_refused(request, refusal, next_url)
    authentication_recorded(request.session)
    reauthentication_record(request.user, path=next_url)
    return HttpResponseRedirect(next_url or resolve_url(settings.LOGIN_REDIRECT_URL))


# --- single logout (SP-initiated) -------------------------------------------------------------------------
def logout_url(request) -> str | None:
    """Where signing out sends a person who came through a SAML IdP that publishes a
    SingleLogoutService (HTTP-Redirect): a LogoutRequest for their NameID and session, the
    IdP answering to `saml-sls`. None otherwise — or when anything about the IdP fails: the
    console's own session ends whatever happens."""
    signed_in = request.session.get(SSO_SESSION_KEY) or {}
    if signed_in.get("protocol") != "saml" or not signed_in.get("subject"):
        return None
    try:
        provider = provider_get(signed_in.get("provider", ""), "saml")
        client, idp = _client(request, provider)
        services = client.metadata.single_logout_service(idp, BINDING_HTTP_REDIRECT, "idpsso")
        if not services:
            return None
        destination = services[0]["location"]
        name_id = NameID(format=signed_in.get("name_id_format") or None, text=signed_in["subject"])
        index = signed_in.get("session_index")
        _request_id, message = client.create_logout_request(
            destination,
            idp,
            name_id=name_id,
            session_indexes=[index] if index else None,
            sign=False,
        )
        info = client.apply_binding(BINDING_HTTP_REDIRECT, str(message), destination)
        return dict(info["headers"])["Location"]
    except Exception as error:  # noqa: BLE001 - signing out never fails on the IdP's account
        logger.info("SAML single logout not started: %r", error)
        return None


@login_not_required
@never_cache
@require_GET
def saml_sls(request, provider: str):
    """The IdP's LogoutResponse after single logout: the console's session already ended
    (console.views.LogoutView), so whatever it says, the person lands on the sign-in page."""
    provider_get(provider, "saml")
    return HttpResponseRedirect(resolve_url(settings.LOGIN_URL))
