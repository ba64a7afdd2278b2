"""The one permission policy: may this user do this on this agent?

Deny by default. Capabilities come only from grants: (user or one of the user's groups) ×
role × (one agent, or all agents). `is_superuser` grants nothing here; Django admin is the
audited break-glass path. Views, API views, selectors and templates all ask this module.

Two styles, as in airlock: `user_can(...)` returns a bool; `check_user_can(...)` raises —
`NotFound` when the agent is not visible to the user at all (it must look like it does not
exist), `Forbidden` when it is visible but the capability is missing.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from enum import StrEnum
from functools import wraps

from context_runtime.findings import Finding
from django.db import connection
from django.db.models import QuerySet

from console.kernel.audit import AccessAction, access_record, acting_token
from console.kernel.errors import Forbidden, NotFound
from console.kernel.models import ROLE_NAMES_CACHE_ATTR, Grant, agent_model, role_labels
from console.kernel.request_context import current_request
from console.kernel.sessions import require_recent_authentication


class Capability(StrEnum):
    VIEW_CONFIG = "view_config"
    EDIT_DRAFTS = "edit_drafts"
    PUBLISH = "publish"  # to unprotected environments
    REQUEST_PROTECTED_PUBLISH = "request_protected_publish"
    APPROVE = "approve"
    ROLLBACK = "rollback"
    VIEW_TRACES = "view_traces"
    VIEW_SNAPSHOTS = "view_snapshots"
    ENABLE_SENSITIVE = "enable_sensitive"
    MANAGE_GRANTS = "manage_grants"
    VIEW_AUDIT = "view_audit"
    MANAGE_TOKENS = "manage_tokens"  # webhooks (the name predates runtime tokens' own)
    # Runtime tokens alone (issue 32): what a platform team's onboarding script needs, without
    # the webhooks (which send every release to a URL of one's choosing).
    MANAGE_RUNTIME_TOKENS = "manage_runtime_tokens"
    MANAGE_CATALOG = "manage_catalog"  # agents and environments: onboarding, archive, retention
    # Regression sets (issue 35): keeping requests, with expectations, beyond trace retention.
    MANAGE_REGRESSIONS = "manage_regressions"


CAPABILITY_VALUES = tuple(c.value for c in Capability)

CAPABILITY_LABELS = {
    Capability.VIEW_CONFIG: "View configuration",
    Capability.EDIT_DRAFTS: "Edit drafts",
    Capability.PUBLISH: "Publish to unprotected environments",
    Capability.REQUEST_PROTECTED_PUBLISH: "Request publish to protected environments",
    Capability.APPROVE: "Approve publishes",
    Capability.ROLLBACK: "Roll back",
    Capability.VIEW_TRACES: "View traces",
    Capability.VIEW_SNAPSHOTS: "View snapshots (sensitive)",
    Capability.ENABLE_SENSITIVE: "Enable sensitive context sections",
    Capability.MANAGE_GRANTS: "Manage roles and grants",
    Capability.VIEW_AUDIT: "View audit and access logs",
    Capability.MANAGE_TOKENS: "Manage webhooks",
    Capability.MANAGE_RUNTIME_TOKENS: "Create and revoke runtime tokens",
    Capability.MANAGE_CATALOG: "Create and edit agents and environments",
    Capability.MANAGE_REGRESSIONS: "Keep requests in regression sets",
}


def capability_label(capability: Capability | str) -> str:
    """What a person reads for a capability (refusals, pages): its label, never its code.
    A name that is no capability (a token action) is returned as it is."""
    try:
        return CAPABILITY_LABELS[Capability(capability)]
    except ValueError:
        return str(capability)


# The standard roles created by migration (console 0002). Any other role starts empty.
STANDARD_ROLES: dict[str, tuple[str, list[Capability]]] = {
    "viewer": ("Reads configuration.", [Capability.VIEW_CONFIG]),
    "support": (
        "Investigates answers by request_id.",
        [Capability.VIEW_CONFIG, Capability.VIEW_TRACES, Capability.MANAGE_REGRESSIONS],
    ),
    "operator": (
        "Edits and publishes strategies and profiles.",
        [
            Capability.VIEW_CONFIG,
            Capability.EDIT_DRAFTS,
            Capability.PUBLISH,
            Capability.REQUEST_PROTECTED_PUBLISH,
            Capability.VIEW_TRACES,
            Capability.MANAGE_REGRESSIONS,
        ],
    ),
    "admin": ("Everything, including rollback and access management.", list(Capability)),
}

_CACHE_ATTR = "_console_grants_cache"


def _grant_rows(user) -> list[tuple[int | None, frozenset[str]]]:
    """(agent id or None for all agents, capabilities) for each of the user's grants,
    cached on the user object for the request."""
    if user is None or not user.is_authenticated or not user.is_active:
        return []
    cached = getattr(user, _CACHE_ATTR, None)
    if cached is not None:
        return cached
    grants = Grant.objects.rows_of(user)
    # The same rows name the user's roles (page headers, audit rows): no second query.
    setattr(user, ROLE_NAMES_CACHE_ATTR, role_labels((name, key) for _, _, name, key in grants))
    # A role without capabilities grants nothing, not even the sight of an agent.
    rows = [(agent_id, frozenset(caps)) for agent_id, caps, _, _ in grants if caps]
    token = acting_token(user)
    if token is not None:
        rows = _narrowed_to_token(rows, token)
    setattr(user, _CACHE_ATTR, rows)
    return rows


def _narrowed_to_token(rows, token) -> list[tuple[int | None, frozenset[str]]]:
    """A request made with a personal token may do what the user's grants allow AND the
    token's scope covers: its capabilities, and every agent (`all_agents`) or its agents —
    none left (all deleted): no agent. A grant on all agents, through a token for some
    agents, becomes a grant on each of those agents."""
    scope = frozenset(token.capabilities)
    agent_ids = (
        frozenset() if token.all_agents else frozenset(token.agents.values_list("pk", flat=True))
    )
    narrowed = []
    for agent_id, caps in rows:
        caps = caps & scope
        if not caps:
            continue
        if token.all_agents:
            narrowed.append((agent_id, caps))
        elif agent_id is None:
            narrowed.extend((scoped, caps) for scoped in sorted(agent_ids))
        elif agent_id in agent_ids:
            narrowed.append((agent_id, caps))
    return narrowed


def forget_cached_grants(user) -> None:
    """Call after changing a user's grants within the same request."""
    for attr in (_CACHE_ATTR, ROLE_NAMES_CACHE_ATTR):
        if hasattr(user, attr):
            delattr(user, attr)


def capabilities_on(user, agent) -> frozenset[str]:
    """Every capability the user holds on this agent (agent grants plus all-agent grants)."""
    agent_id = getattr(agent, "pk", agent)
    caps: set[str] = set()
    for granted_agent, granted_caps in _grant_rows(user):
        if granted_agent is None or granted_agent == agent_id:
            caps |= granted_caps
    return frozenset(caps)


def user_can(user, capability: Capability | str, agent=None) -> bool:
    """On an agent: the capability on that agent. Without one: the capability on all agents
    (for console-wide actions such as managing tokens or roles)."""
    if agent is None:
        return any(a is None and capability in caps for a, caps in _grant_rows(user))
    return capability in capabilities_on(user, agent)


def user_can_anywhere(user, capability: Capability | str) -> bool:
    """True when the user holds the capability on at least one agent (menus, nav)."""
    return any(capability in caps for _, caps in _grant_rows(user))


def user_sees_agent(user, agent) -> bool:
    """An agent is visible to a user with any grant on it; otherwise it does not exist."""
    return bool(capabilities_on(user, agent))


def check_user_can(
    user, capability: Capability | str, agent=None, *, target=None, message: str = ""
) -> None:
    """Raise NotFound when the agent is out of the user's scope, Forbidden when the action is.
    Every refusal is written to the access log (see `refuse`)."""
    if agent is not None and not user_sees_agent(user, agent):
        refuse(NotFound("Not found."), user=user, capability=capability, agent=agent, target=target)
    if not user_can(user, capability, agent):
        refuse(
            Forbidden(
                message or f"You do not have the permission “{capability_label(capability)}” here."
            ),
            user=user,
            capability=capability,
            agent=agent,
            target=target,
        )


def refuse(error, *, user, capability, agent=None, target=None):
    """Raise `error` as a refusal of `user`, written to the access log (outcome "denied").

    Outside a transaction the row is written at once. Inside one it would roll back with the
    refused change, so it is written when the unit of work ends (`denials_logged`, which the
    request middleware opens around every request); a flag on the error makes sure it is
    written exactly once.
    """
    error.denial = {
        "user": user,
        "capability": str(capability),
        "agent": agent,
        "target": target,
        "logged": False,
    }
    deferred = _deferred_denials.get()
    if connection.in_atomic_block and deferred is not None:
        deferred.append(error)
    else:  # outside a transaction, or in one opened without a unit of work (a bare script)
        denial_record(error)
    raise error


_deferred_denials: ContextVar[list | None] = ContextVar("deferred_denials", default=None)


@contextmanager
def denials_logged():
    """Around one unit of work (a request, a service called from a command or a task):
    refusals raised inside its transactions are written to the access log when it ends, even
    where a view turned the error into a message instead of letting it rise. Nested units
    hand their refusals to the outermost one."""
    if _deferred_denials.get() is not None:
        yield
        return
    token = _deferred_denials.set([])
    try:
        yield
    finally:
        deferred = _deferred_denials.get()
        _deferred_denials.reset(token)
        for error in deferred:
            denial_record(error)


def denial_record(error: Exception) -> None:
    """Write the access-log row for a refusal raised through `refuse` (once per error).
    Safe to call with any exception: others are ignored. Anonymous refusals are not logged
    (the login wall answers them)."""
    denial = getattr(error, "denial", None)
    if not denial or denial["logged"]:
        return
    user = denial["user"]
    if user is None or not getattr(user, "is_authenticated", False):
        return
    denial["logged"] = True
    access_record(
        actor=user,
        action=AccessAction.ACCESS_DENIED,
        target=denial["target"],
        agent=denial["agent"],
        outcome="denied",
        detail={
            "capability": denial["capability"],
            "status": getattr(error, "status", None),
            "path": current_request.get().path,
        },
    )


# --- named checks: one function per decision that is more than one capability ---------------------
def publish_capability(environment) -> Capability:
    """Publishing to a protected environment is a request for approval."""
    if environment.protected:
        return Capability.REQUEST_PROTECTED_PUBLISH
    return Capability.PUBLISH


def user_can_publish_to(user, environment, agent) -> bool:
    return user_can(user, publish_capability(environment), agent)


def publish_refusal(user, environment, agent) -> Finding | None:
    """Why `user` may not publish to `environment` at all (None: they may), as
    `check_user_can_publish_to` refuses it: the agent out of their scope (`not_found`, it must
    look like it does not exist), or the environment (`forbidden`). Agent None: an agent not
    created yet, judged by what the user may do on all agents."""
    if agent is not None and not user_sees_agent(user, agent):
        return Finding("", "not_found", "Not found.")
    if not user_can_publish_to(user, environment, agent):
        return Finding("environment", "forbidden", f"You may not publish to {environment.key}.")
    return None


def refuse_publish(refusal: Finding | None, *, user, environment, agent, target=None) -> None:
    """Raise a `publish_refusal` (404 or 403), written to the access log; None passes."""
    if refusal is None:
        return
    error = NotFound if refusal.code == "not_found" else Forbidden
    refuse(
        error(refusal.message),
        user=user,
        capability=publish_capability(environment),
        agent=agent,
        target=target,
    )


def check_user_can_publish_to(user, environment, agent, *, target=None) -> None:
    refuse_publish(
        publish_refusal(user, environment, agent),
        user=user,
        environment=environment,
        agent=agent,
        target=target,
    )


def shadow_refusal(user, environment, agent) -> Finding | None:
    """Why `user` may not start, stop or promote a shadow in `environment` (None: they may).
    A shadow changes nothing users see, but it is how the next live version is judged and
    promoting it is a publish: it takes what publishing there takes (in a protected
    environment the right to request a publish; a start or stop needs no second person)."""
    refusal = publish_refusal(user, environment, agent)
    if refusal is None or refusal.code == "not_found":
        return refusal
    return Finding(
        "environment", "forbidden", f"You may not run shadow releases in {environment.key}."
    )


def user_can_shadow(user, environment, agent) -> bool:
    return shadow_refusal(user, environment, agent) is None


def check_user_can_shadow(user, environment, agent, *, target=None) -> None:
    refuse_publish(
        shadow_refusal(user, environment, agent),
        user=user,
        environment=environment,
        agent=agent,
        target=target,
    )


# Staged rollouts (issue 23): starting, pausing, resuming, advancing and finishing one takes
# what publishing there takes (in a protected environment the right to request a publish: the
# plan then waits for a second person once); stopping one takes that or the right to roll
# back (stopping serves the live version again, as a rollback would).
ROLLOUT_ACTIONS = ("start", "pause", "resume", "advance", "finish", "stop")


def rollout_refusal(user, environment, agent, action: str = "start") -> Finding | None:
    """Why `user` may not take `action` on a staged rollout in `environment` (None: they may)."""
    refusal = publish_refusal(user, environment, agent)
    if refusal is None or refusal.code == "not_found":
        return refusal
    if action == "stop" and user_can(user, Capability.ROLLBACK, agent):
        return None
    return Finding(
        "environment",
        "forbidden",
        f"You may not {action} staged rollouts in {environment.key}.",
    )


def user_can_rollout(user, environment, agent, action: str = "start") -> bool:
    return rollout_refusal(user, environment, agent, action) is None


def check_user_can_rollout(user, environment, agent, action: str = "start", *, target=None):
    refuse_publish(
        rollout_refusal(user, environment, agent, action),
        user=user,
        environment=environment,
        agent=agent,
        target=target,
    )


def user_can_decide_approval(user, approval) -> bool:
    """Approving or rejecting needs APPROVE on the agent and is never one's own request."""
    return approval.requested_by_id != getattr(user, "pk", None) and user_can(
        user, Capability.APPROVE, approval.document.agent
    )


def check_user_can_decide_approval(user, approval) -> None:
    agent = approval.document.agent
    check_user_can(
        user,
        Capability.APPROVE,
        agent,
        target=approval,
        message="You may not approve or reject requests here.",
    )
    if approval.requested_by_id == getattr(user, "pk", None):
        refuse(
            Forbidden(
                "You cannot decide your own request: a second person must approve it.",
                code="self_approval",
            ),
            user=user,
            capability=Capability.APPROVE,
            agent=agent,
            target=approval,
        )


def user_can_withdraw_approval(user, approval) -> bool:
    """Withdrawing a pending request is for the person who made it, and nobody else."""
    return approval.requested_by_id == getattr(user, "pk", None) and user_sees_agent(
        user, approval.document.agent
    )


def check_user_can_withdraw_approval(user, approval) -> None:
    agent = approval.document.agent
    check_user_can(user, Capability.VIEW_CONFIG, agent, target=approval)
    if approval.requested_by_id != getattr(user, "pk", None):
        refuse(
            Forbidden(
                f"Only the person who requested this {approval.kind} can withdraw it; an "
                "approver can reject it instead.",
                code="not_requester",
            ),
            user=user,
            capability=approval_request_capability(approval),
            agent=agent,
            target=approval,
        )


def user_can_cancel_schedule(user, schedule) -> bool:
    """A scheduled go-live is cancelled by the person who asked for it, or an admin (who
    manages environments on all agents)."""
    agent = schedule.document.agent
    if not user_sees_agent(user, agent):
        return False
    return schedule.requested_by_id == getattr(user, "pk", None) or user_can(
        user, Capability.MANAGE_CATALOG
    )


def check_user_can_cancel_schedule(user, schedule) -> None:
    agent = schedule.document.agent
    check_user_can(user, Capability.VIEW_CONFIG, agent, target=schedule)
    if not user_can_cancel_schedule(user, schedule):
        refuse(
            Forbidden(
                "Only the person who scheduled this go-live, or an admin, can cancel it.",
                code="not_requester",
            ),
            user=user,
            capability=Capability.MANAGE_CATALOG,
            agent=agent,
            target=schedule,
        )


def user_can_view_traces_and(user, agent, capability: str) -> bool:
    """The sight of the agent's traces AND one more capability there (a replay, a kept
    request, a check against a set)."""
    return user_can(user, Capability.VIEW_TRACES, agent) and user_can(user, capability, agent)


def check_user_can_view_traces_and(
    user, agent, capability: str, *, target=None, message: str
) -> None:
    """user_can_view_traces_and, refused and logged: without the traces as any look at them
    (404 out of scope, 403), then without `capability` with `message`."""
    check_user_can(user, Capability.VIEW_TRACES, agent, target=target)
    check_user_can(user, capability, agent, target=target, message=message)


def user_can_replay_trace(user, agent) -> bool:
    """Replaying a trace re-runs the engine on its candidates with a version of the agent's
    strategy, a draft's body included: viewing the agent's traces AND its configuration."""
    return user_can_view_traces_and(user, agent, Capability.VIEW_CONFIG)


def check_user_can_replay_trace(user, agent, *, target=None) -> None:
    check_user_can_view_traces_and(
        user,
        agent,
        Capability.VIEW_CONFIG,
        target=target,
        message="Replaying a trace shows what a version of the strategy decides: it needs the "
        "permission to view this agent's configuration.",
    )


def rollback_needs_approval(environment) -> bool:
    """The revert policy: where it is on, a rollback is a request a second person approves
    (with APPROVE, never their own, like a publish); off, it takes effect at once."""
    return bool(environment.rollback_needs_approval)


def check_user_can_request_rollback(user, agent, *, target=None) -> None:
    """Rolling back, or asking for one where the revert policy says so: ROLLBACK either way."""
    check_user_can(
        user,
        Capability.ROLLBACK,
        agent,
        target=target,
        message="You may not roll back releases here.",
    )


def approval_request_capability(approval) -> Capability:
    """What it takes to make this request: a rollback request needs ROLLBACK."""
    if approval.kind == "rollback":
        return Capability.ROLLBACK
    return Capability.REQUEST_PROTECTED_PUBLISH


def sensitive_findings(paths: list[str]) -> list[Finding]:
    """One finding per sensitive section switched on (its path in the body): the one wording
    of the refusal, wherever it is judged (saving, publishing, an import's plan)."""
    return [
        Finding(
            path,
            "sensitive_section",
            f"Switching on {path.rsplit('.', 1)[-1]} needs the permission to enable sensitive "
            "sections.",
        )
        for path in paths
    ]


def sensitive_refusals(user, agent, paths: list[str]) -> list[Finding]:
    """The sensitive sections (paths) `user` may not switch on (none when they may): switching
    one on needs ENABLE_SENSITIVE. Agent None: judged on all agents."""
    if not paths or user_can(user, Capability.ENABLE_SENSITIVE, agent):
        return []
    return sensitive_findings(paths)


def refuse_sensitive(refusals: list[Finding], *, user, agent) -> None:
    """Raise `sensitive_refusals` as one 403 naming every section, written to the access log;
    none passes."""
    if not refusals:
        return
    keys = [finding.path.rsplit(".", 1)[-1] for finding in refusals]
    refuse(
        Forbidden(
            f"Switching on {', '.join(keys)} needs the permission to enable sensitive "
            "sections. Ask an admin, or leave them off.",
            code="sensitive_section",
            details=refusals,
        ),
        user=user,
        capability=Capability.ENABLE_SENSITIVE,
        agent=agent,
    )


def check_user_can_enable_sensitive(user, agent, paths: list[str]) -> None:
    """Switching sensitive sections on (their paths in the body) needs ENABLE_SENSITIVE, and
    in a session a recent sign-in (console.kernel.sessions)."""
    refuse_sensitive(sensitive_refusals(user, agent, paths), user=user, agent=agent)
    if paths:
        require_recent_authentication(user, action="switch on a sensitive context section")


# --- impact previews: a look at an agent's traces through its configuration ------------------
PREVIEW_CAPABILITIES = (Capability.VIEW_TRACES, Capability.VIEW_CONFIG)


def user_can_preview(user, agent) -> bool:
    """Requesting or reading an impact preview replays the agent's retained traces with its
    strategy versions: it needs the sight of both, traces and configuration."""
    return all(user_can(user, capability, agent) for capability in PREVIEW_CAPABILITIES)


def check_user_can_preview(user, agent, *, target=None) -> None:
    """404 when the agent is out of scope, 403 without traces or configuration; logged."""
    for capability in PREVIEW_CAPABILITIES:
        check_user_can(
            user,
            capability,
            agent,
            target=target,
            message="Impact previews replay this agent's traces: you need the permissions "
            "to view its traces and its configuration.",
        )


# --- regression sets: requests kept beyond trace retention (issue 35) ------------------------
def user_can_view_regressions(user, agent) -> bool:
    """A set's members are kept requests: reading them is a look at the agent's traces."""
    return user_can(user, Capability.VIEW_TRACES, agent)


def check_user_can_view_regressions(user, agent, *, target=None) -> None:
    check_user_can(user, Capability.VIEW_TRACES, agent, target=target)


def user_can_manage_regressions(user, agent) -> bool:
    """Keeping a request beyond retention (a set, a member): the sight of the agent's traces
    AND the right to keep them."""
    return user_can_view_traces_and(user, agent, Capability.MANAGE_REGRESSIONS)


def check_user_can_manage_regressions(user, agent, *, target=None) -> None:
    check_user_can_view_traces_and(
        user,
        agent,
        Capability.MANAGE_REGRESSIONS,
        target=target,
        message="Keeping requests in regression sets needs the permission "
        f"“{CAPABILITY_LABELS[Capability.MANAGE_REGRESSIONS]}” on this agent.",
    )


def user_can_check_regressions(user, agent) -> bool:
    """Checking a version against a set replays its members with that version (a draft's body
    included): the sight of traces and configuration, as a trace's replay."""
    return user_can_replay_trace(user, agent)


def check_user_can_check_regressions(user, agent, *, target=None) -> None:
    check_user_can_view_traces_and(
        user,
        agent,
        Capability.VIEW_CONFIG,
        target=target,
        message="Checking a version against a regression set shows what that version decides: "
        "it needs the permission to view this agent's configuration.",
    )


# --- grants and roles: nobody hands out more than they hold ------------------------------------
# Kubernetes RBAC's escalate rule: a grant needs MANAGE_GRANTS where it applies AND every
# capability of its role there, so a delegate of one agent can pass on what they may do and
# no more; nobody grants to themselves (or to a group they are in). Roles are console-wide,
# so defining one is judged the same way on all agents.
def capabilities_held(user, agent=None) -> frozenset[str]:
    """On an agent: everything the user may do there. Agent None: what they hold on all
    agents (through grants without an agent)."""
    if agent is not None:
        return capabilities_on(user, agent)
    caps: set[str] = set()
    for granted_agent, granted_caps in _grant_rows(user):
        if granted_agent is None:
            caps |= granted_caps
    return frozenset(caps)


def _scope_words(agent) -> str:
    return f"on {getattr(agent, 'key', agent)}" if agent is not None else "on all agents"


def _above_own(user, capabilities, agent) -> list[str]:
    """The capabilities in `capabilities` the user does not hold there, as labels."""
    missing = set(capabilities) - capabilities_held(user, agent)
    return [CAPABILITY_LABELS.get(c, c) for c in CAPABILITY_VALUES if c in missing]


def _is_self(user, to_user=None, to_group=None) -> bool:
    if to_user is not None and to_user.pk == getattr(user, "pk", None):
        return True
    return to_group is not None and user.groups.filter(pk=to_group.pk).exists()


def grant_refusal(user, role, agent, *, to_user=None, to_group=None) -> Finding | None:
    """Why `user` may not grant `role` on `agent` (None: all agents) to `to_user` or
    `to_group` (None: they may): the agent out of their scope (`not_found`), no
    MANAGE_GRANTS there (`forbidden`), a role holding more than they hold there
    (`role_above_own`), or a grant to themselves (`self_grant`)."""
    if agent is not None and not user_sees_agent(user, agent):
        return Finding("", "not_found", "Not found.")
    where = _scope_words(agent)
    if not user_can(user, Capability.MANAGE_GRANTS, agent):
        return Finding("agent", "forbidden", f"You may not manage access {where}.")
    missing = _above_own(user, role.capabilities, agent)
    if missing:
        return Finding(
            "role",
            "role_above_own",
            f"You cannot grant “{role.name}” {where}: it includes {', '.join(missing)}, which "
            "you do not hold there yourself. Ask someone who holds them.",
        )
    if _is_self(user, to_user, to_group):
        whom = "yourself" if to_group is None else f"group {to_group.name}, which you are in"
        return Finding(
            "group" if to_group is not None else "username",
            "self_grant",
            f"You cannot grant a role to {whom}: another manager has to.",
        )
    return None


def _refuse_finding(refusal: Finding | None, *, user, agent, target=None) -> None:
    """Raise a grant or role refusal (404 or a 403 carrying its code and field), logged."""
    if refusal is None:
        return
    if refusal.code == "not_found":
        error = NotFound(refusal.message)
    else:
        error = Forbidden(refusal.message, code=refusal.code, details=[refusal])
    refuse(error, user=user, capability=Capability.MANAGE_GRANTS, agent=agent, target=target)


def user_can_grant_role(user, role, agent=None, *, to_user=None, to_group=None) -> bool:
    return grant_refusal(user, role, agent, to_user=to_user, to_group=to_group) is None


def check_user_can_grant_role(
    user, role, agent=None, *, to_user=None, to_group=None, target=None
) -> None:
    _refuse_finding(
        grant_refusal(user, role, agent, to_user=to_user, to_group=to_group),
        user=user,
        agent=agent,
        target=target,
    )


def revoke_refusal(user, grant) -> Finding | None:
    """Revoking is judged like granting, without the self rule (giving up one's own role is
    no escalation): a delegate may not take away a role above their own there either."""
    return grant_refusal(user, grant.role, grant.agent)


def user_can_revoke_grant(user, grant) -> bool:
    return revoke_refusal(user, grant) is None


def check_user_can_revoke_grant(user, grant) -> None:
    _refuse_finding(revoke_refusal(user, grant), user=user, agent=grant.agent, target=grant)


def role_refusal(user, before, after) -> Finding | None:
    """Why `user` may not define a role holding `after` (capabilities) where it held `before`
    (empty for a new role): MANAGE_GRANTS on all agents, and every capability of the role,
    before and after, held on all agents — editing a role regrants it to all its holders."""
    if not user_can(user, Capability.MANAGE_GRANTS):
        return Finding("", "forbidden", "Roles apply to all agents: you may not change them.")
    missing = _above_own(user, set(before) | set(after), None)
    if missing:
        return Finding(
            "capabilities",
            "role_above_own",
            f"You cannot define a role with {', '.join(missing)}: you do not hold "
            "that on all agents yourself.",
        )
    return None


def user_can_change_role(user, before=(), after=()) -> bool:
    return role_refusal(user, before, after) is None


def check_user_can_change_role(user, before=(), after=(), *, target=None) -> None:
    _refuse_finding(role_refusal(user, before, after), user=user, agent=None, target=target)


def grantable_roles(user, roles, agents) -> list:
    """The roles `user` may grant on at least one of `agents` (None: all agents), for the
    grant form's choices."""
    return [r for r in roles if any(user_can_grant_role(user, r, a) for a in agents)]


def _agent_ids(rows) -> frozenset[int] | None:
    """The agents of these grant rows (no query past them: a grant goes with its agent);
    None when one of them is on every agent."""
    agent_ids = frozenset(a for a, _ in rows)
    return None if None in agent_ids else agent_ids


def _agents(agent_ids: frozenset[int] | None) -> QuerySet:
    if agent_ids is None:
        return agent_model().objects.all()
    return agent_model().objects.filter(pk__in=agent_ids)


def agents_visible_to(user) -> QuerySet:
    """The agents a user may see at all: the scope of every list."""
    return _agents(_agent_ids(_grant_rows(user)))


def agent_ids_where(user, capability: Capability | str) -> frozenset[int] | None:
    """The ids of the agents on which the user holds a capability; None when it is every agent."""
    return _agent_ids([(a, caps) for a, caps in _grant_rows(user) if capability in caps])


def agents_where(user, capability: Capability | str) -> QuerySet:
    """The agents on which the user holds a capability (for filtering querysets)."""
    return _agents(agent_ids_where(user, capability))


def role_names(user, agent=None) -> list[str]:
    """Names of the user's roles (on an agent, or everywhere), e.g. "operator@assistant_lite"."""
    return Grant.objects.role_names(user, agent)


# --- outcome kinds: what an environment accepts as outcomes (traces.outcomes) -----------------
# Environments are console-wide, and so is what they accept: declaring, changing and retiring
# an environment's outcome kinds is the environment's admins' (manage_catalog on all agents).
OUTCOME_KINDS_CAPABILITY = Capability.MANAGE_CATALOG


def user_can_manage_outcome_kinds(user) -> bool:
    return user_can(user, OUTCOME_KINDS_CAPABILITY)


def check_user_can_manage_outcome_kinds(user, *, target=None) -> None:
    check_user_can(
        user,
        OUTCOME_KINDS_CAPABILITY,
        target=target,
        message="Declaring outcome kinds needs “Create and edit agents and environments” "
        "on all agents.",
    )


# --- data protection (issue 34.4): redaction rules and erasure by principal (traces.protection)
# An environment's redaction rules are part of what the environment is, so its admins set them
# (manage_catalog on all agents, as outcome kinds). An erasure deletes traces of every agent
# and environment: the same capability, everywhere, and a recent sign-in (a dangerous action).
DATA_PROTECTION_CAPABILITY = Capability.MANAGE_CATALOG


def check_user_can_manage_data_protection(user, *, target=None) -> None:
    check_user_can(
        user,
        DATA_PROTECTION_CAPABILITY,
        target=target,
        message="Redaction rules and erasures need “Create and edit agents and environments” "
        "on all agents.",
    )


# --- standing alerts on context health (issue 35.4, traces.alerts) ------------------------------
# Reading an agent's alert rules, alerts and silences is reading its health (view_traces);
# setting rules and silencing them is the on-call operator's, who may also roll back: the
# rollback capability on that agent.
ALERTS_CAPABILITY = Capability.ROLLBACK


def user_can_manage_alerts(user, agent) -> bool:
    return user_can(user, ALERTS_CAPABILITY, agent)


def check_user_can_manage_alerts(user, agent, *, target=None) -> None:
    check_user_can(
        user,
        ALERTS_CAPABILITY,
        agent,
        target=target,
        message="Alert rules and silences need “Roll back” on this agent.",
    )


# --- enforcement at the edges -------------------------------------------------------------------
# Every url module exports REQUIRED = {url name: capability | PUBLIC | AUTHENTICATED}; the
# access-matrix test reads them all, so an endpoint without a declared rule fails the suite.
PUBLIC = "public"  # no login (login page, health, runtime API with its own token auth)
AUTHENTICATED = "authenticated"  # any logged-in user; the page shows only what they may see


class Everywhere:
    """A rule for console-wide actions (creating roles, managing tokens): the capability
    must be held on ALL agents, i.e. through a grant without an agent.
    Use in REQUIRED and in `requires(Everywhere(Capability.X), agent_kwarg=None)`."""

    def __init__(self, capability: Capability):
        self.capability = capability

    def __str__(self) -> str:
        return f"{self.capability} on all agents"

    def __repr__(self) -> str:
        return f"Everywhere({self.capability!s})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Everywhere) and other.capability == self.capability

    def __hash__(self) -> int:
        return hash(("everywhere", self.capability))


def check_user_can_anywhere(user, capability: Capability | str) -> None:
    """For list pages without an agent in the URL: the capability on at least one agent
    (the list then shows only those agents). Refused with 403 and logged otherwise."""
    if user_can_anywhere(user, capability):
        return
    # Same refusal path (and access-log row) as an agent-less check_user_can.
    check_user_can(user, capability)


def rule_allows(user, rule, agent=None, method: str = "GET") -> bool:
    """Does a REQUIRED rule let this user in? (the access-matrix test and docs use this)
    Agent URLs: the capability on that agent. Agent-less URLs: on at least one agent.
    Everywhere(...): on all agents. A dict gives a rule per HTTP method, e.g.
    {"GET": Capability.VIEW_CONFIG, "POST": Capability.EDIT_DRAFTS}, "*" for the others."""
    if isinstance(rule, dict):
        rule = rule.get(method.upper(), rule.get("*"))
        if rule is None:
            return False  # a method the rule does not name is allowed to nobody
    if rule == PUBLIC:
        return True
    if rule == AUTHENTICATED:
        return bool(user is not None and user.is_authenticated)
    if isinstance(rule, Everywhere):
        return user_can(user, rule.capability)
    if agent is not None:
        return user_can(user, rule, agent)
    return user_can_anywhere(user, rule)


def requires(capability, *, agent_kwarg: str | None = "agent", anywhere: bool = False):
    """View decorator: resolve the agent from the URL (its key in `agent_kwarg`), then
    check the capability — 404 when the agent is unknown or out of scope, 403 when the
    action is forbidden. The agent is passed on as `request.agent`.

    Without an agent in the URL, the capability is needed on all agents (console-wide
    actions; `Everywhere(Capability.X)` says so explicitly) — or, with `anywhere=True`, on
    at least one agent (list pages, which then filter with `agents_where`). Every refusal
    of a logged-in user is written to the access log.

    Works for Django views and inside DRF's @api_view (errors map to the API error shape).
    """

    def decorator(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            agent = None
            if agent_kwarg and agent_kwarg in kwargs:
                agent = agent_model().objects.filter(key=kwargs[agent_kwarg]).first()
                if agent is None:
                    refuse(NotFound("Not found."), user=request.user, capability=capability)
            if isinstance(capability, Everywhere):
                check_user_can(request.user, capability.capability)
            elif agent is None and anywhere:
                check_user_can_anywhere(request.user, capability)
            else:
                check_user_can(request.user, capability, agent)
            request.agent = agent
            return view(request, *args, **kwargs)

        wrapped.required_capability = capability
        return wrapped

    return decorator
