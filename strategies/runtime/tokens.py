"""The one place that creates and revokes runtime tokens. The secret is shown once and
never stored (only its SHA-256); a revocation takes effect at once through the identity
cache (a tombstone written after commit) and closes the token's open config streams on every
stream server (a notification on REVOKED_CHANNEL, delivered on commit)."""

from __future__ import annotations

from context_runtime.findings import Finding
from django.db import connection, transaction
from django.utils import timezone

from console.kernel.audit import AuditAction, actor_label, audit_record
from console.kernel.credentials import check_agent_scope_explicit
from console.kernel.errors import Conflict, ValidationFailed
from console.kernel.transactions import service_transaction
from console.kernel.writes import update_or_refuse
from strategies.catalog.selectors import archived_finding
from strategies.runtime.auth import TOKEN_PREFIX, identity_forget, new_secret, token_hash
from strategies.runtime.models import RuntimeToken

# Every stream server LISTENs here (strategies/runtime/stream.py); the payload is the token id.
REVOKED_CHANNEL = "context_console_token_revoked"


def _identity_forget_after_commit(token: RuntimeToken, *, revoked: bool) -> None:
    """Once the change is committed, replace the token's cached identity: by a tombstone on
    revocation, by nothing on creation (a stale 'unknown' goes). A rollback leaves the cache.
    Robust: a Redis error cannot fail the committed change; the revocation in PostgreSQL is
    the truth and the reconcile task writes a tombstone that could not be written now."""
    hash_hex = token.token_hash
    transaction.on_commit(lambda: identity_forget(hash_hex, revoked=revoked), robust=True)


MANIFEST_NEEDS_ALL_AGENTS = "manifest:write needs a token for every agent"


def check_token_can_use_capabilities(*, capabilities, all_agents: bool) -> None:
    """A capability the token could never use is refused at creation (400), not at its first
    call: manifest:write on a token limited to some agents (manifests.manifest_writer_check
    refuses every report it makes). The form, the API and the command all come through here."""
    if "manifest:write" in capabilities and not all_agents:
        raise ValidationFailed(
            f"{MANIFEST_NEEDS_ALL_AGENTS}: a manifest describes the whole environment's "
            "runtime, so a token limited to some agents could never report one. Give it every "
            "agent, or leave manifest:write out of this token.",
            code="manifest_needs_all_agents",
            details=[
                Finding("capabilities", "manifest_needs_all_agents", MANIFEST_NEEDS_ALL_AGENTS)
            ],
        )


@service_transaction
def runtime_token_create(
    *, name: str, environment, capabilities, all_agents: bool, agents=(), actor=None
):
    """Create a token; returns (token, secret). The secret is shown once and never stored.
    `all_agents`: every agent, now and later; otherwise `agents` (at least one)."""
    name = name.strip() if isinstance(name, str) else ""
    if not name:
        raise ValidationFailed(
            "Give the token a name that says which runtime uses it.",
            details=[Finding("name", "required", "A name is required.")],
        )
    if environment.archived_at is not None:
        archived = archived_finding(environment, path="environment")
        raise ValidationFailed(archived.message, details=[archived])
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
    agents = list(agents)
    check_agent_scope_explicit(all_agents=all_agents, agents=agents)
    check_token_can_use_capabilities(capabilities=capabilities, all_agents=all_agents)
    secret = new_secret()
    token = RuntimeToken.objects.create(
        name=name,
        environment=environment,
        capabilities=capabilities,
        all_agents=all_agents,
        prefix=secret[: len(TOKEN_PREFIX) + 6],
        token_hash=token_hash(secret),
        created_by=actor_label(actor),
    )
    token.agents.set(agents)
    _identity_forget_after_commit(token, revoked=False)
    audit_record(
        actor=actor,
        action=AuditAction.RUNTIME_TOKEN_CREATE,
        target=token,
        after={
            "name": name,
            "environment": environment.key,
            "capabilities": capabilities,
            "all_agents": all_agents,
            "agents": sorted(a.key for a in agents),
        },
    )
    return token, secret


@service_transaction
def runtime_token_revoke(*, token: RuntimeToken, actor, reason: str = "") -> RuntimeToken:
    """Revoke at once: the cached identity is replaced by a tombstone after commit."""
    update_or_refuse(
        RuntimeToken.objects.filter(pk=token.pk, revoked_at__isnull=True),
        lambda: Conflict("This token is already revoked.", code="already_revoked"),
        revoked_at=timezone.now(),
    )
    token.refresh_from_db()
    _identity_forget_after_commit(token, revoked=True)
    with connection.cursor() as cursor:  # delivered on commit; dropped with a rollback
        cursor.execute("SELECT pg_notify(%s, %s)", [REVOKED_CHANNEL, str(token.pk)])
    audit_record(
        actor=actor,
        action=AuditAction.RUNTIME_TOKEN_REVOKE,
        target=token,
        before={"revoked_at": None},
        after={"revoked_at": token.revoked_at.isoformat(), "reason": reason},
    )
    return token
