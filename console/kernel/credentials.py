"""Bearer secrets, in one place for both kinds of token: a runtime token (`cc_rt_…`,
strategies.runtime) and a person's API token (`ccp_…`, console.accounts.personal_tokens).

A secret is a recognisable prefix and 32 random bytes (URL-safe base64); only its SHA-256
is stored, so a leaked database does not leak a usable token. `bearer_value` reads the
`Authorization: Bearer <secret>` header both authentication classes accept. `shows_secret`
marks the views whose answer may carry a secret, shown once; `check_agent_scope_explicit`
says what "every agent" is for both kinds.
"""

from __future__ import annotations

import hashlib
import secrets

from context_runtime.findings import Finding
from django.views.decorators.cache import never_cache

from console.kernel.errors import ValidationFailed

PREFIX_SHOWN = 6  # random characters kept after the prefix, to recognise a token in a list


def secret_hash(secret: str) -> str:
    """The stored form of a secret: its SHA-256 in hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def secret_new(prefix: str) -> str:
    """A new secret: `prefix` and 32 random bytes."""
    return prefix + secrets.token_urlsafe(32)


def secret_shown(secret: str, prefix: str) -> str:
    """The part of a secret that lists may show: the prefix and a few characters."""
    return secret[: len(prefix) + PREFIX_SHOWN]


def bearer_value(header: str) -> str | None:
    """The secret of an `Authorization: Bearer <secret>` header value; None for any other
    header (none, another scheme, or an empty value)."""
    scheme, _, value = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def shows_secret(view):
    """View decorator for an answer that may carry a secret shown once (a new token, a
    webhook's signing secret): `Cache-Control: no-store` (with no-cache, must-revalidate,
    private, max-age=0), so no browser cache, back button or proxy keeps a copy."""
    return never_cache(view)


def check_agent_scope_explicit(*, all_agents, agents) -> None:
    """A token covers every agent (`all_agents`) or the agents named, never both, and never
    none by omission: "every agent" is said, not inferred from an empty list (400)."""
    if all_agents is not True and all_agents is not False:
        raise ValidationFailed(
            "Say whether the token covers every agent (all_agents true or false).",
            details=[Finding("all_agents", "required", "true or false.")],
        )
    if all_agents and agents:
        raise ValidationFailed(
            "Choose every agent or a list of agents, not both.",
            details=[Finding("agents", "conflicts", "Give no agents with all_agents.")],
        )
    if not all_agents and not agents:
        raise ValidationFailed(
            "Choose at least one agent, or every agent.",
            details=[Finding("agents", "required", "At least one agent, or all_agents.")],
        )
