"""Writes for roles, grants and other console-wide objects (one transaction each, audited)."""

from __future__ import annotations

import logging

from axes.models import AccessAttempt
from django.db import transaction

from console.kernel.audit import CHAIN_LOGS, AuditAction, audit_record, chain_head
from console.kernel.errors import Conflict, ValidationFailed
from console.kernel.models import ChainCheckpoint, Grant, Role
from console.kernel.policy import (
    STANDARD_ROLES,
    Capability,
    check_user_can,
    check_user_can_change_role,
    check_user_can_grant_role,
    check_user_can_revoke_grant,
    forget_cached_grants,
)
from console.kernel.reasons import reason_clean
from console.kernel.request_context import ip_normalise
from console.kernel.transactions import service_transaction


def standard_roles_ensure() -> None:
    """Create the four standard roles if missing (demo loader, test fixtures).
    Existing roles are left as they are: admins may have tuned them."""
    for name, (description, capabilities) in STANDARD_ROLES.items():
        Role.objects.get_or_create(
            name=name,
            defaults={
                "description": description,
                "capabilities": [c.value for c in capabilities],
                "is_standard": True,
            },
        )


# --- roles and grants ----------------------------------------------------------------------------
# Nobody hands out more than they hold (console.kernel.policy.grant_refusal): a grant on one
# agent needs MANAGE_GRANTS and every capability of its role on that agent, a grant on all
# agents the same on all agents, and never goes to the granter (or a group they are in);
# revoking needs the same but the self rule. Roles are console-wide: creating or changing
# one needs MANAGE_GRANTS and each of its capabilities (before and after) on all agents.


def _role_state(role) -> dict:
    return {
        "name": role.name,
        "description": role.description,
        "capabilities": sorted(role.capabilities),
    }


def _grant_state(grant) -> dict:
    return {
        "user": grant.user.get_username() if grant.user_id else None,
        "group": grant.group.name if grant.group_id else None,
        "role": grant.role.name,
        "agent": grant.agent.key if grant.agent_id else None,
    }


def capabilities_clean(capabilities) -> list[str]:
    known = {c.value for c in Capability}
    unknown = sorted({str(c) for c in capabilities} - known)
    if unknown:
        raise ValidationFailed(
            "Unknown capabilities.",
            details=[
                {
                    "path": "capabilities",
                    "code": "invalid_choice",
                    "message": f"{c!r} is not a capability; known: {', '.join(sorted(known))}",
                }
                for c in unknown
            ],
        )
    return sorted({str(c) for c in capabilities})


def _check_role_name(name: str, *, exclude_pk=None) -> str:
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise ValidationFailed(
            "A role needs a name.",
            details=[{"path": "name", "code": "required", "message": "1 to 100 characters."}],
        )
    clash = Role.objects.filter(name__iexact=name).exclude(pk=exclude_pk)
    if clash.exists():
        raise Conflict(f"A role named {name!r} already exists.", code="role_exists")
    return name


@service_transaction(durable=True)
def role_create(*, actor, name: str, description: str = "", capabilities=()) -> Role:
    """Create a role. A new role holds exactly the capabilities given — none by default."""

    check_user_can(actor, Capability.MANAGE_GRANTS)
    capabilities = capabilities_clean(capabilities)
    check_user_can_change_role(actor, after=capabilities)
    role = Role.objects.create(
        name=_check_role_name(name),
        description=(description or "").strip(),
        capabilities=capabilities,
    )
    audit_record(actor=actor, action=AuditAction.ROLE_CREATE, target=role, after=_role_state(role))
    return role


@service_transaction(durable=True)
def role_update(
    *, actor, role: Role, name: str | None = None, description: str | None = None, capabilities=None
) -> Role:
    """Change a role's name, description or capabilities (standard roles keep their name)."""

    check_user_can(actor, Capability.MANAGE_GRANTS)
    role = Role.objects.select_for_update().get(pk=role.pk)
    before = _role_state(role)
    if name is not None and name.strip() != role.name:
        if role.is_standard:
            raise ValidationFailed(
                "Standard roles keep their name.",
                details=[{"path": "name", "code": "read_only", "message": "Cannot rename."}],
            )
        role.name = _check_role_name(name, exclude_pk=role.pk)
    if description is not None:
        role.description = description.strip()
    if capabilities is not None:
        role.capabilities = capabilities_clean(capabilities)
    check_user_can_change_role(
        actor, before=before["capabilities"], after=role.capabilities, target=role
    )
    after = _role_state(role)
    if after == before:
        return role
    role.save()
    audit_record(
        actor=actor, action=AuditAction.ROLE_UPDATE, target=role, before=before, after=after
    )
    return role


@service_transaction(durable=True)
def grant_create(*, actor, role: Role, agent=None, user=None, group=None, reason: str) -> Grant:
    """Give a role to a user or a group on one agent (or on all agents when agent is None)."""

    check_user_can(actor, Capability.MANAGE_GRANTS, agent)
    if (user is None) == (group is None):
        raise ValidationFailed(
            "Grant a role to either a user or a group.",
            details=[{"path": "user", "code": "required", "message": "Choose a user or a group."}],
        )
    check_user_can_grant_role(actor, role, agent, to_user=user, to_group=group)
    reason = reason_clean(reason, ask="Give a reason (it is recorded in the audit log).")
    by_hand = Grant.objects.filter(mapping__isnull=True)
    if by_hand.filter(user=user, group=group, role=role, agent=agent).exists():
        raise Conflict("That grant already exists.", code="grant_exists")
    grant = Grant.objects.create(user=user, group=group, role=role, agent=agent, created_by=actor)
    audit_record(
        actor=actor,
        action=AuditAction.GRANT_CREATE,
        target=grant,
        agent=agent,
        after={**_grant_state(grant), "reason": reason},
    )
    if user is not None:
        forget_cached_grants(user)
    return grant


@service_transaction(durable=True)
def grant_revoke(*, actor, grant: Grant, reason: str) -> None:
    """Take a role away. Needs MANAGE_GRANTS where the grant applies (404 out of scope) and
    every capability of its role there (a delegate does not take away a role above theirs)."""

    check_user_can(actor, Capability.MANAGE_GRANTS, grant.agent, target=grant)
    check_user_can_revoke_grant(actor, grant)
    if grant.mapping_id is not None:
        # It follows the group (console.access.group_mappings): revoked by hand, the next
        # sign-in would bring it back.
        raise Conflict(
            f"This grant comes from the mapping “{grant.mapping}”: it follows the group. "
            "Remove the person from the group at the provider, or remove the mapping.",
            code="grant_from_mapping",
        )
    reason = reason_clean(reason, ask="Give a reason (it is recorded in the audit log).")
    _keep_one_console_admin(without=grant)
    state = _grant_state(grant)
    target = ("console.grant", grant.pk, str(grant))
    Grant.objects.filter(pk=grant.pk).delete()
    audit_record(
        actor=actor,
        action=AuditAction.GRANT_REVOKE,
        target=target,
        agent=grant.agent,
        before=state,
        after={"reason": reason},
    )


def _keep_one_console_admin(*, without: Grant) -> None:
    """Refuse to remove the last grant that lets an active user manage access on all
    agents: nobody could grant anything any more (only break-glass would help)."""

    def console_admins(grants):
        return grants.filter(
            agent__isnull=True,
            role__capabilities__contains=[Capability.MANAGE_GRANTS.value],
            user__is_active=True,
        )

    if not console_admins(Grant.objects.filter(pk=without.pk)).exists():
        return
    if not console_admins(Grant.objects.exclude(pk=without.pk)).exists():
        raise Conflict(
            "This is the last grant that lets someone manage access on all agents; "
            "grant that to someone else first.",
            code="last_console_admin",
        )


# --- sign-in lockouts ----------------------------------------------------------------------------
@service_transaction(durable=True)
def login_lock_clear(*, username: str, ip_address: str | None, actor, reason: str) -> int:
    """Unlock sign-in for one username from one address: django-axes forgets that pair's
    failures (other addresses are left as they are). Needs MANAGE_GRANTS on all agents and a
    reason; audited. Returns the number of failures forgotten."""

    check_user_can(actor, Capability.MANAGE_GRANTS)
    reason = reason_clean(reason, ask="Give a reason (it is recorded in the audit log).")
    if not username:
        raise ValidationFailed(
            "Which username?",
            details=[{"path": "username", "code": "required", "message": "Name the username."}],
        )
    if ip_address is not None:
        # The form django-axes stored it in (console.kernel.request_context.client_ip).
        ip_address = ip_normalise(ip_address)
        if ip_address is None:
            raise ValidationFailed(
                "Not an IP address.",
                details=[
                    {"path": "ip_address", "code": "invalid", "message": "An IPv4 or IPv6 address."}
                ],
            )
    # The database handler's rows are the truth (AXES_HANDLER); `ip_address=None` matches
    # attempts whose address was unknown.
    attempts = AccessAttempt.objects.select_for_update().filter(
        username=username, ip_address=ip_address
    )
    failures = sum(a.failures_since_start for a in attempts)
    if not failures:
        raise Conflict(
            f"{username} is not locked out from {ip_address or 'an unknown address'} any more.",
            code="not_locked",
        )
    attempts.delete()
    audit_record(
        actor=actor,
        action=AuditAction.AUTH_UNLOCK,
        target=("auth.user", username, username),
        before={"username": username, "ip_address": ip_address, "failures": failures},
        after={"reason": reason},
    )
    return failures


# --- anchoring the audit chains ------------------------------------------------------------------
anchor_log = logging.getLogger("console.kernel.audit.anchor")


def chain_checkpoints_write() -> list[ChainCheckpoint]:
    """Anchor the head of the audit log's and the access log's hash chains: an append-only
    checkpoint row each (audit_verify then reports a chain that no longer reaches it — a
    deleted tail), and the head on the `console.kernel.audit.anchor` logger, whose lines production
    ships off the database host: a checkpoint deleted or rewritten together with the rows it
    names is still caught there (`audit_verify --anchor LOG:ID:HASH`)."""
    saved = []
    with transaction.atomic():
        for log, model in CHAIN_LOGS.items():
            last_id, last_hash, row_count = chain_head(model)
            saved.append(
                ChainCheckpoint.objects.create(
                    log=log, last_id=last_id, last_hash=last_hash, row_count=row_count
                )
            )
    for checkpoint in saved:
        anchor_log.info(
            "%s head #%s, %s records, hash %s (checkpoint #%s); verify with "
            "`manage.py audit_verify --anchor %s:%s:%s`",
            checkpoint.get_log_display(),
            checkpoint.last_id,
            checkpoint.row_count,
            checkpoint.last_hash,
            checkpoint.pk,
            checkpoint.log,
            checkpoint.last_id,
            checkpoint.last_hash,
            extra={
                "chain_log": checkpoint.log,
                "chain_last_id": checkpoint.last_id,
                "chain_last_hash": checkpoint.last_hash,
                "chain_row_count": checkpoint.row_count,
                "checkpoint_id": checkpoint.pk,
            },
        )
    return saved
