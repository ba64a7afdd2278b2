"""The one permission policy: may this user do this on this agent?

Deny by default. Capabilities come only from grants: (user or one of the user's groups) ×
role × (one agent, or all agents). `is_superuser` grants nothing here; Django admin is the
audited break-glass path. Views, API views, selectors and templates all ask this module.

Two styles, as in airlock: `user_can(...)` returns a bool; `check_user_can(...)` raises —
`NotFound` when the agent is not visible to the user at all (it must look like it does not
exist), `Forbidden` when it is visible but the capability is missing.
"""

from __future__ import annotations

from enum import StrEnum
from functools import wraps

from django.db.models import Q, QuerySet

from console.errors import Forbidden, NotFound


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
    MANAGE_TOKENS = "manage_tokens"


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
    Capability.MANAGE_TOKENS: "Manage runtime tokens and webhooks",
}

# The standard roles created by migration (console 0002). Any other role starts empty.
STANDARD_ROLES: dict[str, tuple[str, list[Capability]]] = {
    "viewer": ("Reads configuration.", [Capability.VIEW_CONFIG]),
    "support": (
        "Investigates answers by request_id.",
        [Capability.VIEW_CONFIG, Capability.VIEW_TRACES],
    ),
    "operator": (
        "Edits and publishes strategies and profiles.",
        [
            Capability.VIEW_CONFIG,
            Capability.EDIT_DRAFTS,
            Capability.PUBLISH,
            Capability.REQUEST_PROTECTED_PUBLISH,
            Capability.VIEW_TRACES,
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
    from console.models import Grant

    rows = [
        (agent_id, frozenset(caps))
        for agent_id, caps in Grant.objects.filter(
            Q(user=user) | Q(group__in=user.groups.all())
        ).values_list("agent_id", "role__capabilities")
    ]
    setattr(user, _CACHE_ATTR, rows)
    return rows


def forget_cached_grants(user) -> None:
    """Call after changing a user's grants within the same request."""
    if hasattr(user, _CACHE_ATTR):
        delattr(user, _CACHE_ATTR)


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


def check_user_can(user, capability: Capability | str, agent=None) -> None:
    """Raise NotFound when the agent is out of the user's scope, Forbidden when the action is."""
    if agent is not None and not user_sees_agent(user, agent):
        raise NotFound("Not found.")
    if not user_can(user, capability, agent):
        raise Forbidden(f"You do not have the '{capability}' permission here.")


def agents_visible_to(user) -> QuerySet:
    """The agents a user may see at all: the scope of every list."""
    from strategies.models import Agent

    rows = _grant_rows(user)
    if any(a is None for a, _ in rows):
        return Agent.objects.all()
    return Agent.objects.filter(pk__in={a for a, _ in rows})


def agents_where(user, capability: Capability | str) -> QuerySet:
    """The agents on which the user holds a capability (for filtering querysets)."""
    from strategies.models import Agent

    rows = [(a, caps) for a, caps in _grant_rows(user) if capability in caps]
    if any(a is None for a, _ in rows):
        return Agent.objects.all()
    return Agent.objects.filter(pk__in={a for a, _ in rows})


def role_names(user, agent=None) -> list[str]:
    """Names of the user's roles (on an agent, or everywhere): recorded with each audit row."""
    from console.models import Grant

    if user is None or not user.is_authenticated:
        return []
    grants = Grant.objects.filter(Q(user=user) | Q(group__in=user.groups.all()))
    if agent is not None:
        grants = grants.filter(Q(agent=agent) | Q(agent__isnull=True))
    return sorted(
        {
            f"{name}@{agent_key or '*'}"
            for name, agent_key in grants.values_list("role__name", "agent__key")
        }
    )


# --- enforcement at the edges -------------------------------------------------------------------
# Every url module exports REQUIRED = {url name: capability | PUBLIC | AUTHENTICATED}; the
# access-matrix test reads them all, so an endpoint without a declared rule fails the suite.
PUBLIC = "public"  # no login (login page, health, runtime API with its own token auth)
AUTHENTICATED = "authenticated"  # any logged-in user; the page shows only what they may see


def requires(capability: Capability | str, *, agent_kwarg: str | None = "agent"):
    """View decorator: resolve the agent from the URL (its key in `agent_kwarg`), then
    check the capability — 404 when the agent is unknown or out of scope, 403 when the
    action is forbidden. The agent is passed on as `request.agent`.

    Works for Django views and inside DRF's @api_view (errors map to the API error shape).
    """

    def decorator(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            from strategies.models import Agent

            agent = None
            if agent_kwarg and agent_kwarg in kwargs:
                agent = Agent.objects.filter(key=kwargs[agent_kwarg]).first()
                if agent is None or not user_sees_agent(request.user, agent):
                    raise NotFound("Not found.")
            check_user_can(request.user, capability, agent)
            request.agent = agent
            return view(request, *args, **kwargs)

        wrapped.required_capability = capability
        return wrapped

    return decorator
