"""Groups at an identity provider map to roles (issue 33, item 3): the mappings (one
transaction and one audit row each) and `groups_sync`, the one function that brings a
person's mapped grants in line with their groups — OpenID Connect sign-in calls it, and SAML
and SCIM will.

A mapping needs its author to hold MANAGE_GRANTS on all agents (mappings are console-wide
configuration) and every capability of its role wherever it applies: the escalation rule of
grants (console.kernel.policy.grant_refusal), judged for each agent the mapping covers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from console.kernel.audit import AuditAction, SystemActor, audit_record
from console.kernel.errors import Conflict, ValidationFailed
from console.kernel.models import Grant, GroupMapping, Role
from console.kernel.policy import (
    Capability,
    check_user_can,
    check_user_can_grant_role,
    forget_cached_grants,
)
from console.kernel.reasons import reason_clean
from console.kernel.transactions import service_transaction

GROUP_MAX = 200
PROVIDER_MAX = 50


def _mapping_state(mapping: GroupMapping, agent_keys=None) -> dict:
    if agent_keys is None:
        agent_keys = sorted(mapping.agents.values_list("key", flat=True))
    return {
        "provider": mapping.provider,
        "group": mapping.group,
        "role": mapping.role_name,
        "agents": "all" if mapping.all_agents else agent_keys,
    }


def _grant_state(grant: Grant, mapping: GroupMapping) -> dict:
    return {
        "user": grant.user.get_username(),
        "role": grant.role.name,
        "agent": grant.agent.key if grant.agent_id else None,
        "from_mapping": _mapping_state(mapping),
    }


def _scopes(mapping_agents, all_agents: bool) -> list:
    """The agents a mapping grants on: [None] (all agents) or each named agent."""
    return [None] if all_agents else list(mapping_agents)


def _check_may_map(actor, role: Role, scopes) -> None:
    check_user_can(actor, Capability.MANAGE_GRANTS)
    for agent in scopes:
        check_user_can_grant_role(actor, role, agent)


def _required(value: str, path: str, limit: int, words: str) -> str:
    value = (value or "").strip()
    if not value or len(value) > limit:
        raise ValidationFailed(
            f"Name the {words}.",
            details=[{"path": path, "code": "required", "message": f"1 to {limit} characters."}],
        )
    return value


@service_transaction(durable=True)
def group_mapping_create(
    *, actor, provider: str, group: str, role: Role, agents=(), all_agents: bool, reason: str
) -> GroupMapping:
    """Map a provider's group to a role on all agents or on the named agents. Takes effect at
    each member's next sign-in through that provider."""
    provider = _required(provider, "provider", PROVIDER_MAX, "identity provider")
    group = _required(group, "group", GROUP_MAX, "group as the provider sends it")
    agents = list(agents)
    if not all_agents and not agents:
        raise ValidationFailed(
            "Choose all agents or at least one agent.",
            details=[{"path": "agents", "code": "required", "message": "No agent chosen."}],
        )
    _check_may_map(actor, role, _scopes(agents, all_agents))
    reason = reason_clean(reason, ask="Give a reason (it is recorded in the audit log).")
    if GroupMapping.objects.filter(provider=provider, group=group, role=role).exists():
        raise Conflict(
            f"Group {group} of {provider} already maps to {role.name}; change that mapping's "
            "agents by removing it and mapping again.",
            code="group_mapping_exists",
        )
    mapping = GroupMapping.objects.create(
        provider=provider,
        group=group,
        role=role,
        role_name=role.name,
        all_agents=all_agents,
        created_by=actor,
    )
    if not all_agents:
        mapping.agents.set(agents)
    audit_record(
        actor=actor,
        action=AuditAction.GROUP_MAPPING_CREATE,
        target=mapping,
        after={**_mapping_state(mapping, sorted(a.key for a in agents)), "reason": reason},
    )
    return mapping


@service_transaction(durable=True)
def group_mapping_delete(*, actor, mapping: GroupMapping, reason: str) -> int:
    """Remove a mapping and, at once, every grant it made (each named in the audit row).
    Judged like revoking those grants: the actor must hold the role's capabilities wherever
    the mapping applied. Returns how many grants went."""
    mapping = GroupMapping.objects.select_for_update().get(pk=mapping.pk)
    scopes = _scopes(mapping.agents.all(), mapping.all_agents)
    if mapping.role is not None:
        _check_may_map(actor, mapping.role, scopes)
    else:
        check_user_can(actor, Capability.MANAGE_GRANTS)
    reason = reason_clean(reason, ask="Give a reason (it is recorded in the audit log).")
    state = _mapping_state(mapping)
    grants = list(mapping.grants.select_related("user", "role", "agent"))
    removed = [
        {"user": g.user.get_username(), "agent": g.agent.key if g.agent_id else None}
        for g in grants
    ]
    target = ("console.groupmapping", mapping.pk, str(mapping))
    mapping.delete()  # its grants go with it (Grant.mapping: CASCADE)
    audit_record(
        actor=actor,
        action=AuditAction.GROUP_MAPPING_DELETE,
        target=target,
        before={**state, "grants": removed},
        after={"reason": reason},
    )
    for grant in grants:
        forget_cached_grants(grant.user)
    return len(grants)


@dataclass
class SyncResult:
    """What a sync changed: grants added and removed, mappings skipped (role gone)."""

    added: list[Grant] = field(default_factory=list)
    removed: list[dict] = field(default_factory=list)
    skipped: list[GroupMapping] = field(default_factory=list)


@service_transaction
def groups_sync(*, user, provider: str, groups, actor=None) -> SyncResult:
    """Bring `user`'s grants from `provider`'s mappings in line with `groups` (the groups the
    provider says they are in now): a grant of a mapping whose group they are in is added if
    missing, one whose group they left is removed. Grants by hand, and grants from other
    providers' mappings, are left as they are. Each change is audited (actor
    `sso:<provider>`, or `actor` — SCIM names its token); a mapping whose role no longer
    exists grants nothing and is audited."""
    actor = actor or SystemActor(f"sso:{provider}")
    groups = {str(g) for g in groups or ()}
    mappings = list(
        GroupMapping.objects.filter(provider=provider, group__in=groups)
        .select_related("role")
        .prefetch_related("agents")
    )
    wanted: set[tuple[int, int, int | None]] = set()
    result = SyncResult()
    for mapping in mappings:
        if mapping.role is None:
            result.skipped.append(mapping)
            audit_record(
                actor=actor,
                action=AuditAction.GROUP_MAPPING_ROLE_MISSING,
                target=mapping,
                after={
                    "user": user.get_username(),
                    **_mapping_state(mapping, sorted(a.key for a in mapping.agents.all())),
                    "granted": "nothing: the role no longer exists",
                },
            )
            continue
        for agent in _scopes(mapping.agents.all(), mapping.all_agents):
            wanted.add((mapping.pk, mapping.role_id, getattr(agent, "pk", None)))

    held = {
        (g.mapping_id, g.role_id, g.agent_id): g
        for g in Grant.objects.filter(user=user, mapping__provider=provider).select_related(
            "mapping", "role", "agent", "user"
        )
    }
    for key in sorted(set(held) - wanted, key=str):
        grant = held[key]
        state, grant_pk = _grant_state(grant, grant.mapping), grant.pk
        grant.delete()
        result.removed.append(state)
        audit_record(
            actor=actor,
            action=AuditAction.GRANT_REVOKE,
            target=("console.grant", grant_pk, f"{user.get_username()}: {state['role']}"),
            agent=grant.agent,
            before=state,
            after={"reason": f"no longer in group {grant.mapping.group} at {provider}"},
        )
    by_pk = {m.pk: m for m in mappings}
    for mapping_pk, _role_id, agent_id in sorted(set(wanted) - set(held), key=str):
        mapping = by_pk[mapping_pk]
        agent = next((a for a in mapping.agents.all() if a.pk == agent_id), None)
        grant = Grant.objects.create(
            user=user, role=mapping.role, agent=agent, mapping=mapping, created_by=None
        )
        result.added.append(grant)
        audit_record(
            actor=actor,
            action=AuditAction.GRANT_CREATE,
            target=grant,
            agent=agent,
            after={
                **_grant_state(grant, mapping),
                "reason": f"in group {mapping.group} at {provider}",
            },
        )
    if result.added or result.removed:
        forget_cached_grants(user)
    return result
