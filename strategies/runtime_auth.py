"""Runtime token authentication for /api/v1/runtime/ (RUNTIME_API.md "Authentication").

`Authorization: Bearer <token>`. Missing/unknown/revoked → 401; valid without the capability
→ 403; agent outside the token's scope or unknown → 404 (the same answer for both).
Tokens are looked up by the SHA-256 of the secret; the secret itself is never stored.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from django.db import transaction

from console.errors import ApplicationError, Forbidden, NotFound

TOKEN_PREFIX = "cc_rt_"


class NotAuthenticated(ApplicationError):
    status = 401
    code = "not_authenticated"


@dataclass(frozen=True)
class RuntimeIdentity:
    """What a request's token allows: a plain value, cheap to cache (see runtime API)."""

    token_id: int
    name: str
    environment_id: int
    environment_key: str
    agent_keys: frozenset[str]  # empty: every agent
    capabilities: frozenset[str]
    is_runtime_token = True

    @property
    def pk(self) -> int:
        return self.token_id

    def covers_agent(self, agent_key: str) -> bool:
        return not self.agent_keys or agent_key in self.agent_keys


def token_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def bearer_secret(request) -> str:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise NotAuthenticated("Send the runtime token as 'Authorization: Bearer <token>'.")
    return value.strip()


def identity_for_secret(secret: str) -> RuntimeIdentity | None:
    """Database lookup of an active token (callers may cache the result by hash)."""
    from strategies.models import RuntimeToken

    token = (
        RuntimeToken.objects.select_related("environment")
        .prefetch_related("agents")
        .filter(token_hash=token_hash(secret), revoked_at__isnull=True)
        .first()
    )
    if token is None:
        return None
    return RuntimeIdentity(
        token_id=token.pk,
        name=token.name,
        environment_id=token.environment_id,
        environment_key=token.environment.key,
        agent_keys=frozenset(a.key for a in token.agents.all()),
        capabilities=frozenset(token.capabilities),
    )


def authenticate_runtime(
    request, capability: str, *, lookup=identity_for_secret
) -> RuntimeIdentity:
    """The token's identity, or 401/403 as the contract says."""
    identity = lookup(bearer_secret(request))
    if identity is None:
        raise NotAuthenticated("The runtime token is unknown or revoked.")
    if capability not in identity.capabilities:
        raise Forbidden(f"This runtime token lacks the '{capability}' capability.")
    return identity


def check_agent_scope(identity: RuntimeIdentity, agent_key: str) -> None:
    """404 for an agent outside the token's scope — the same answer as an unknown agent."""
    if not identity.covers_agent(agent_key):
        raise NotFound(f"Unknown agent '{agent_key}'.")


@transaction.atomic
def runtime_token_create(*, name: str, environment, capabilities, agents=(), actor=None):
    """Create a token; returns (token, secret). The secret is shown once and never stored."""
    from console.audit import audit_record
    from console.errors import ValidationFailed
    from strategies.models import RuntimeToken

    capabilities = sorted(set(capabilities))
    unknown = [c for c in capabilities if c not in RuntimeToken.CAPABILITIES]
    if unknown or not capabilities:
        raise ValidationFailed(
            "Choose at least one capability among " + ", ".join(RuntimeToken.CAPABILITIES) + ".",
            details=[
                {
                    "path": "capabilities",
                    "code": "invalid_choice",
                    "message": f"unknown: {', '.join(unknown)}",
                }
            ]
            if unknown
            else [
                {"path": "capabilities", "code": "required", "message": "at least one capability"}
            ],
        )
    secret = new_secret()
    token = RuntimeToken.objects.create(
        name=name,
        environment=environment,
        capabilities=capabilities,
        prefix=secret[: len(TOKEN_PREFIX) + 6],
        token_hash=token_hash(secret),
        created_by=getattr(actor, "username", "") or "system",
    )
    token.agents.set(agents)
    audit_record(
        actor=actor,
        action="runtime_token.create",
        target=token,
        after={
            "name": name,
            "environment": environment.key,
            "capabilities": capabilities,
            "agents": sorted(a.key for a in agents),
        },
    )
    return token, secret
