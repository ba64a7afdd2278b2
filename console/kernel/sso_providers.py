"""The identity providers people may sign in through (OIDC_PROVIDERS; docs/sso.md): read
and checked here, the one place every job asks — the sign-in page and its views
(console.accounts.oidc), the group mappings page (console.access)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from console.kernel.errors import NotFound

KEY_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,49}")
# The session key of the provider a person signed in through: {"provider": key, "protocol":
# "saml" for SAML (absent: OpenID Connect), and what signing out needs (an ID token, …)}.
SSO_SESSION_KEY = "sso"


@dataclass(frozen=True)
class Provider:
    key: str
    name: str
    issuer: str
    client_id: str
    client_secret: str
    scopes: str = "openid email profile"
    groups_claim: str = "groups"
    timeout: float = 5.0


def _provider(entry) -> Provider:
    if not isinstance(entry, dict):
        raise ImproperlyConfigured("Each OIDC_PROVIDERS entry is a JSON object.")
    missing = [f for f in ("key", "issuer", "client_id", "client_secret") if not entry.get(f)]
    if missing:
        raise ImproperlyConfigured(f"OIDC_PROVIDERS entry {entry.get('key')!r} lacks {missing}")
    if not KEY_PATTERN.fullmatch(str(entry["key"])):
        raise ImproperlyConfigured(
            f"OIDC_PROVIDERS key {entry['key']!r}: lower-case letters, digits and '-'"
        )
    known = set(Provider.__dataclass_fields__)
    unknown = sorted(set(entry) - known)
    if unknown:
        raise ImproperlyConfigured(f"OIDC_PROVIDERS entry {entry['key']!r}: unknown {unknown}")
    values = {**entry, "name": entry.get("name") or entry["key"]}
    values["issuer"] = str(values["issuer"]).rstrip("/")
    values["timeout"] = float(values.get("timeout", 5.0))
    return Provider(**values)


def providers() -> dict[str, Provider]:
    """The configured providers by key, in the order configured (none: local accounts only)."""
    found: dict[str, Provider] = {}
    for entry in settings.OIDC_PROVIDERS:
        provider = _provider(entry)
        if provider.key in found:
            raise ImproperlyConfigured(f"OIDC_PROVIDERS names {provider.key!r} twice")
        found[provider.key] = provider
    return found


def sso_buttons() -> list[Provider]:
    """What the sign-in page offers beside the password form."""
    return list(providers().values())


def provider_get(key: str) -> Provider:
    provider = providers().get(key)
    if provider is None:
        raise NotFound("No such identity provider.")
    return provider


def signed_in_through(session) -> Provider | None:
    """The configured provider this session's person signed in through; None for a password."""
    signed_in = session.get(SSO_SESSION_KEY) or {}
    return providers().get(signed_in.get("provider", ""))
