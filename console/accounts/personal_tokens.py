"""Personal API tokens: a person's (or an automation account's) credential for the operator
API, `Authorization: Bearer ccp_…`.

The secret is shown once and never stored (only its SHA-256, console.kernel.credentials). A token
expires (DEFAULT_DAYS unless chosen, at most MAX_DAYS) and can be revoked by its owner or by
an admin. Its scope — some capabilities, optionally some agents — is never wider than the
user's own grants when it is made, and what it may do is evaluated again at every request:
the user's grants AND the scope (console.kernel.policy), so a user who loses a grant, loses it for
their tokens too. Creation and revocation are audited, without the secret.
"""

from __future__ import annotations

from datetime import timedelta

from context_runtime.findings import Finding
from django.utils import timezone

from console.access.services import capabilities_clean
from console.accounts.models import PersonalToken
from console.kernel.audit import AuditAction, acting_token, audit_record
from console.kernel.credentials import (
    check_agent_scope_explicit,
    secret_hash,
    secret_new,
    secret_shown,
)
from console.kernel.errors import Conflict, Forbidden, NotFound, ValidationFailed
from console.kernel.policy import (
    Capability,
    agents_visible_to,
    capability_label,
    refuse,
    user_can,
    user_can_anywhere,
)
from console.kernel.transactions import service_transaction
from console.kernel.writes import create_or_refuse, update_or_refuse
from strategies.catalog.dependents import Reference

TOKEN_PREFIX = "ccp_"
DEFAULT_DAYS = 90
MAX_DAYS = 365
EXPIRY_CHOICES = (7, 30, 90, 180, 365)  # the account page's choices, in days
NAME_MAX = 100
LAST_USED_EVERY = timedelta(minutes=1)  # last_used_at is written at most this often


def capabilities_offered(user) -> list[Capability]:
    """The capabilities a user may put in a token: those they hold on at least one agent."""
    return [c for c in Capability if user_can_anywhere(user, c)]


def _state(token: PersonalToken) -> dict:
    return {
        "name": token.name,
        "prefix": token.prefix,
        "user": token.user.get_username(),
        "capabilities": sorted(token.capabilities),
        "all_agents": token.all_agents,
        "agents": sorted(a.key for a in token.agents.all()),
        "expires_at": token.expires_at.isoformat(),
    }


def _clean_name(name) -> str:
    name = name.strip() if isinstance(name, str) else ""
    if not name:
        raise ValidationFailed(
            "Give the token a name that says which script or machine uses it.",
            details=[Finding("name", "required", "A name is required.")],
        )
    if len(name) > NAME_MAX:
        raise ValidationFailed(
            f"The name is {len(name)} characters; keep it under {NAME_MAX}.",
            details=[Finding("name", "too_long", f"At most {NAME_MAX} characters.")],
        )
    return name


def _clean_days(days) -> int:
    if days in (None, ""):
        return DEFAULT_DAYS
    try:
        days = int(days)
    except (TypeError, ValueError):
        days = 0
    if not 1 <= days <= MAX_DAYS:
        raise ValidationFailed(
            f"A token expires after 1 to {MAX_DAYS} days.",
            details=[Finding("expires_in_days", "out_of_range", f"Between 1 and {MAX_DAYS} days.")],
        )
    return days


def _clean_scope(user, capabilities, all_agents, agent_keys) -> tuple[list[str], list]:
    """The token's capabilities and agents, refused (400, naming each) when wider than what
    the user holds: a capability they hold on no agent, an agent they do not see."""
    capabilities = capabilities_clean(capabilities or [])
    if not capabilities:
        raise ValidationFailed(
            "Choose at least one capability for the token.",
            details=[Finding("capabilities", "required", "At least one capability.")],
        )
    wider = [c for c in capabilities if not user_can_anywhere(user, c)]
    if wider:
        raise ValidationFailed(
            "A token's scope is never wider than your own grants: you do not hold "
            + ", ".join(f"“{capability_label(c)}”" for c in wider)
            + ".",
            code="scope_too_wide",
            details=[
                Finding(
                    "capabilities", "scope_too_wide", f"You do not hold “{capability_label(c)}”."
                )
                for c in wider
            ],
        )
    keys = sorted({str(k) for k in agent_keys or []})
    check_agent_scope_explicit(all_agents=all_agents, agents=keys)
    agents = list(agents_visible_to(user).filter(key__in=keys).order_by("key"))
    unknown = sorted(set(keys) - {a.key for a in agents})
    if unknown:  # the same answer for an agent that does not exist and one out of scope
        raise ValidationFailed(
            "A token's scope is never wider than your own grants: unknown agent "
            + ", ".join(unknown)
            + ".",
            code="scope_too_wide",
            details=[Finding("agents", "scope_too_wide", f"Unknown agent {k}.") for k in unknown],
        )
    return capabilities, agents


def check_session_manages_tokens(user) -> None:
    """Token management (list, read, revoke) is for a signed-in session, as creation is: a
    request made with a personal token gets 403, whatever its scope — a leaked read-only
    token must not list its user's other tokens or revoke the CI's one."""
    if acting_token(user) is not None:
        refuse(
            Forbidden(
                "A personal token cannot manage tokens: sign in and use your account page.",
                code="token_cannot_manage_tokens",
            ),
            user=user,
            capability="personal_token.manage",
        )


@service_transaction(durable=True)
def personal_token_create(
    *, user, name: str, capabilities, all_agents: bool, agents=(), expires_in_days=None
) -> tuple[PersonalToken, str]:
    """Create one of `user`'s tokens; returns (token, secret). The secret is shown once.
    `all_agents`: every agent the user's grants cover, now and later; otherwise `agents`,
    agent keys (at least one). A request made with a token cannot make another: a token
    would outlive or outgrow itself."""
    if acting_token(user) is not None:
        refuse(
            Forbidden(
                "A personal token cannot create tokens: sign in and use your account page.",
                code="token_cannot_create_tokens",
            ),
            user=user,
            capability="personal_token.create",
        )
    name = _clean_name(name)
    days = _clean_days(expires_in_days)
    capabilities, agent_objects = _clean_scope(user, capabilities, all_agents, agents)
    secret = secret_new(TOKEN_PREFIX)
    token = create_or_refuse(
        PersonalToken,
        lambda: Conflict(
            f"You already have a token named “{name}”; choose another name or revoke it.",
            code="duplicate_name",
            details=[Finding("name", "duplicate", "Already used by one of your tokens.")],
        ),
        user=user,
        name=name,
        prefix=secret_shown(secret, TOKEN_PREFIX),
        token_hash=secret_hash(secret),
        capabilities=capabilities,
        all_agents=all_agents,
        expires_at=timezone.now() + timedelta(days=days),
    )
    token.agents.set(agent_objects)
    audit_record(
        actor=user, action=AuditAction.PERSONAL_TOKEN_CREATE, target=token, after=_state(token)
    )
    return token, secret


def user_can_revoke_token(user, token: PersonalToken) -> bool:
    """Its owner, or an admin who manages access on all agents."""
    return token.user_id == getattr(user, "pk", None) or user_can(user, Capability.MANAGE_GRANTS)


@service_transaction(durable=True)
def personal_token_revoke(*, token: PersonalToken, actor, reason: str = "") -> PersonalToken:
    """Revoke at once (the next request with it gets 401). Someone else's token is 404
    unless the actor manages access on all agents; a request made with a token is 403."""
    check_session_manages_tokens(actor)
    if not user_can_revoke_token(actor, token):
        refuse(NotFound("Not found."), user=actor, capability=Capability.MANAGE_GRANTS)
    reason = reason.strip()[:1000] if isinstance(reason, str) else ""
    now = timezone.now()
    update_or_refuse(
        PersonalToken.objects.filter(pk=token.pk, revoked_at__isnull=True),
        lambda: Conflict("This token is already revoked.", code="already_revoked"),
        revoked_at=now,
        revoked_by=actor if getattr(actor, "pk", None) else None,
    )
    before = _state(token)
    token.refresh_from_db()
    audit_record(
        actor=actor,
        action=AuditAction.PERSONAL_TOKEN_REVOKE,
        target=token,
        before={**before, "revoked_at": None},
        after={"revoked_at": now.isoformat(), "reason": reason},
    )
    return token


@service_transaction
def personal_tokens_revoke_all(*, user, actor, reason: str) -> int:
    """Revoke every one of `user`'s active tokens at once, one audit row each — for a person
    deactivated by their identity provider (console.accounts.scim; `actor` names its SCIM
    token). The next request with any of them gets 401. Returns how many."""
    now = timezone.now()
    tokens = list(
        PersonalToken.objects.select_for_update()
        .filter(user=user, revoked_at__isnull=True)
        .select_related("user")
        .prefetch_related("agents")
    )
    PersonalToken.objects.filter(pk__in=[t.pk for t in tokens]).update(revoked_at=now)
    for token in tokens:
        audit_record(
            actor=actor,
            action=AuditAction.PERSONAL_TOKEN_REVOKE,
            target=token,
            before={**_state(token), "revoked_at": None},
            after={"revoked_at": now.isoformat(), "reason": reason},
        )
    return len(tokens)


def personal_token_for_secret(secret: str) -> PersonalToken | None:
    """The token with this secret (whatever its state), with its user; None if unknown."""
    if not secret.startswith(TOKEN_PREFIX):
        return None
    return (
        PersonalToken.objects.select_related("user").filter(token_hash=secret_hash(secret)).first()
    )


def personal_token_note_use(token: PersonalToken) -> None:
    """Write last_used_at, at most once a minute per token (one UPDATE, no read)."""
    now = timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_EVERY:
        return
    PersonalToken.objects.filter(pk=token.pk).update(last_used_at=now)
    token.last_used_at = now


def references_to_agent(agent) -> list[Reference]:
    """Active personal tokens naming the agent refuse its delete (named, with their owners,
    to revoke first): without it they would cover no agent; revoking is the owners' call."""
    tokens = (
        PersonalToken.objects.active()
        .filter(agents=agent)
        .order_by("user__username", "name")
        .values_list("user__username", "name")
    )
    if not tokens:
        return []
    return [
        Reference(
            "has_personal_tokens",
            "personal tokens are scoped to it ("
            + ", ".join(f"{user}’s “{name}”" for user, name in tokens)
            + "): revoke them first",
        )
    ]


def personal_tokens_of(user):
    """A user's own tokens, newest first (revoked ones too: the page shows them greyed)."""
    return PersonalToken.objects.filter(user=user).prefetch_related("agents")


def personal_tokens_all():
    """Everyone's tokens, for admins who manage access on all agents."""
    return PersonalToken.objects.select_related("user", "revoked_by").prefetch_related("agents")
