"""The identity providers people may sign in through (OIDC_PROVIDERS and SAML_PROVIDERS;
docs/sso.md): read and checked here, the one place every job asks — the sign-in page and its
views (console.accounts.oidc, console.accounts.saml), the group mappings page
(console.access). One registry: a key names one provider, whichever its protocol."""

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
    protocol = "oidc"  # not a field: what the sign-in page's button starts


@dataclass(frozen=True)
class SamlProvider:
    """A SAML 2.0 identity provider (console.accounts.saml). Its metadata comes from
    `metadata_url` (fetched within `timeout`) or `metadata_file`; `sp_entity_id` is the
    console's own entity id with it (default: the absolute URL of its SP metadata)."""

    key: str
    name: str
    metadata_url: str = ""
    metadata_file: str = ""
    groups_attribute: str = "groups"
    email_attribute: str = "email"
    username_attribute: str = "username"
    name_attribute: str = "name"
    sp_entity_id: str = ""
    timeout: float = 5.0
    protocol = "saml"


def _checked(entry, setting: str, kind, required: tuple[str, ...]) -> dict:
    if not isinstance(entry, dict):
        raise ImproperlyConfigured(f"Each {setting} entry is a JSON object.")
    missing = [f for f in required if not entry.get(f)]
    if missing:
        raise ImproperlyConfigured(f"{setting} entry {entry.get('key')!r} lacks {missing}")
    if not KEY_PATTERN.fullmatch(str(entry["key"])):
        raise ImproperlyConfigured(
            f"{setting} key {entry['key']!r}: lower-case letters, digits and '-'"
        )
    unknown = sorted(set(entry) - set(kind.__dataclass_fields__))
    if unknown:
        raise ImproperlyConfigured(f"{setting} entry {entry['key']!r}: unknown {unknown}")
    values = {**entry, "name": entry.get("name") or entry["key"]}
    values["timeout"] = float(values.get("timeout", 5.0))
    return values


def _provider(entry) -> Provider:
    values = _checked(
        entry, "OIDC_PROVIDERS", Provider, ("key", "issuer", "client_id", "client_secret")
    )
    values["issuer"] = str(values["issuer"]).rstrip("/")
    return Provider(**values)


def _saml_provider(entry) -> SamlProvider:
    values = _checked(entry, "SAML_PROVIDERS", SamlProvider, ("key",))
    if bool(values.get("metadata_url")) == bool(values.get("metadata_file")):
        raise ImproperlyConfigured(
            f"SAML_PROVIDERS entry {values['key']!r}: give metadata_url or metadata_file (one)"
        )
    return SamlProvider(**values)


def providers() -> dict[str, Provider | SamlProvider]:
    """The configured providers by key — OpenID Connect's, then SAML's, each in the order
    configured (none: local accounts only). A key names one provider across both."""
    found: dict[str, Provider | SamlProvider] = {}
    configured = [(_provider, "OIDC_PROVIDERS", e) for e in settings.OIDC_PROVIDERS]
    configured += [(_saml_provider, "SAML_PROVIDERS", e) for e in settings.SAML_PROVIDERS]
    for read, setting, entry in configured:
        provider = read(entry)
        if provider.key in found:
            raise ImproperlyConfigured(f"{setting} names {provider.key!r}, already a provider")
        found[provider.key] = provider
    return found


def sso_buttons() -> list[Provider | SamlProvider]:
    """What the sign-in page offers beside the password form."""
    return list(providers().values())


def provider_get(key: str, protocol: str = "oidc"):
    """The provider `key` if it speaks `protocol` ("oidc" or "saml"), else NotFound."""
    provider = providers().get(key)
    if provider is None or provider.protocol != protocol:
        raise NotFound("No such identity provider.")
    return provider


def signed_in_through(session) -> Provider | None:
    """The configured provider this session's person signed in through; None for a password."""
    signed_in = session.get(SSO_SESSION_KEY) or {}
    return providers().get(signed_in.get("provider", ""))
