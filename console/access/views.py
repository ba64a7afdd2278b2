"""Pages for admins: who has what (roles, grants), locked sign-ins, the audit log and the
access log.

Thin views: parse input, ask the policy, call a service or a read helper, render.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models import Count, Q
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console.access import group_mappings, services
from console.access.forms import ALL_AGENTS, GrantForm, GroupMappingForm, RoleForm
from console.access.selectors import login_lock_rule, login_locks_current
from console.kernel.errors import ApplicationError, Forbidden, NotFound
from console.kernel.models import Grant, GroupMapping, Role
from console.kernel.policy import (
    CAPABILITY_LABELS,
    Capability,
    Everywhere,
    agents_where,
    capabilities_on,
    check_user_can_grant_role,
    grantable_roles,
    refuse,
    requires,
    user_can,
    user_can_revoke_grant,
)
from console.kernel.sso_providers import sso_buttons
from strategies.catalog.models import Agent

PAGE_SIZE = 50


# --- who has what ---------------------------------------------------------------------------------
def _grants_managed_by(user, agents):
    """Grants on the agents the user manages, plus all-agent grants (which affect them too)."""
    return (
        Grant.objects.filter(Q(agent__in=agents) | Q(agent__isnull=True))
        .select_related("user", "group", "role", "agent", "created_by", "mapping")
        .order_by("user__username", "group__name", "agent__key", "role__name")
    )


def _people_matrix(grants, agents):
    """Rows: each user or group with a grant; columns: "all agents" then each agent;
    cells: the role names held there."""
    rows: dict[tuple[str, str], dict] = {}
    for grant in grants:
        kind, name = ("user", grant.user.username) if grant.user_id else ("group", grant.group.name)
        row = rows.setdefault(
            (kind, name),
            {"kind": kind, "name": name, "cells": {None: []} | {a.pk: [] for a in agents}},
        )
        row["cells"].setdefault(grant.agent_id, []).append(grant.role.name)
    for row in rows.values():
        row["cells"] = [row["cells"][None]] + [row["cells"][a.pk] for a in agents]
    return sorted(rows.values(), key=lambda r: (r["kind"] != "user", r["name"]))


def _roles_matrix(roles):
    return [
        {
            "capability": capability,
            "label": CAPABILITY_LABELS[capability],
            "cells": [capability.value in role.capabilities for role in roles],
        }
        for capability in Capability
    ]


@require_GET
@requires(Capability.MANAGE_GRANTS, agent_kwarg=None, anywhere=True)
def access_overview(request):
    """Who has what: people × agents with their roles, roles × capabilities, and the grants
    the viewer may revoke."""
    agents = list(agents_where(request.user, Capability.MANAGE_GRANTS).order_by("key"))
    only = request.GET.get("agent", "")
    if only:  # one agent's access (linked from the agent's page); unknown = out of scope
        agents = [a for a in agents if a.key == only]
        if not agents:
            refuse(
                NotFound("Not found."),
                user=request.user,
                capability=Capability.MANAGE_GRANTS,
                agent=Agent.objects.filter(key=only).first(),
            )
    grants = list(_grants_managed_by(request.user, agents))
    roles = list(Role.objects.all())
    manages_all = user_can(request.user, Capability.MANAGE_GRANTS)
    for grant in grants:
        # A grant from a group mapping follows the group: not revoked here (see group_mappings).
        grant.revocable = grant.mapping_id is None and user_can_revoke_grant(request.user, grant)
        grant.dialog_id = f"revoke-grant-{grant.pk}"
        who = grant.user.username if grant.user_id else f"group {grant.group.name}"
        where = grant.agent.key if grant.agent_id else "all agents"
        grant.revoke_lines = [
            f"{who} loses the role “{grant.role.name}” on {where}, at once.",
            "It removes: "
            + (", ".join(CAPABILITY_LABELS.get(c, c) for c in grant.role.capabilities) or "nothing")
            + ".",
        ]
    context = {
        "agents": agents,
        "people": _people_matrix(grants, agents),
        "roles": roles,
        "capability_rows": _roles_matrix(roles),
        "grants": grants,
        "manages_roles": manages_all,
        "only_agent": only,
    }
    return TemplateResponse(request, "access/access_overview.html", context)


def _render_role_form(request, form, role=None, status=200):
    return TemplateResponse(
        request, "access/role_form.html", {"form": form, "role": role}, status=status
    )


# Refusals a form shows as a message (403, logged) rather than an error page: the user may
# pick another role or person and try again.
FORM_REFUSALS = ("role_above_own", "self_grant")


def _form_refusal(error: ApplicationError) -> bool:
    return isinstance(error, Forbidden) and error.code in FORM_REFUSALS


def _form_error(form, error: ApplicationError) -> None:
    """Show a service's refusal at the field it names (or at the top of the form)."""
    if error.details:
        for detail in error.details:
            field = detail.get("path") if detail.get("path") in form.fields else None
            form.add_error(field, detail.get("message") or error.message)
    else:
        form.add_error(None, error.message)


@require_http_methods(["GET", "POST"])
@requires(Everywhere(Capability.MANAGE_GRANTS), agent_kwarg=None)
def role_create(request):
    form = RoleForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            role = services.role_create(actor=request.user, **form.cleaned_data)
        except ApplicationError as error:
            if error.status in (403, 404) and not _form_refusal(error):
                raise
            _form_error(form, error)
            return _render_role_form(request, form, status=error.status)
        else:
            messages.success(request, f"Role “{role.name}” created.")
            return redirect("access-overview")
    return _render_role_form(request, form, status=400 if form.errors else 200)


@require_http_methods(["GET", "POST"])
@requires(Everywhere(Capability.MANAGE_GRANTS), agent_kwarg=None)
def role_edit(request, pk: int):
    role = Role.objects.filter(pk=pk).first()
    if role is None:
        raise NotFound("No such role.")
    initial = {
        "name": role.name,
        "description": role.description,
        "capabilities": role.capabilities,
    }
    form = RoleForm(request.POST or None, initial=initial)
    if role.is_standard:
        form.fields["name"].disabled = True
    if request.method == "POST" and form.is_valid():
        try:
            services.role_update(actor=request.user, role=role, **form.cleaned_data)
        except ApplicationError as error:
            if error.status in (403, 404) and not _form_refusal(error):
                raise
            _form_error(form, error)
            return _render_role_form(request, form, role, status=error.status)
        else:
            messages.success(request, f"Role “{role.name}” saved.")
            return redirect("access-overview")
    return _render_role_form(request, form, role, status=400 if form.errors else 200)


def _agent_choices(user) -> list[tuple[str, str]]:
    """One agent at a time first (the narrow grant is the default); "all agents", the broadest
    scope, last and in words that say so. Archived agents are not offered (README)."""
    agents = agents_where(user, Capability.MANAGE_GRANTS).filter(archived_at__isnull=True)
    choices = [(a.key, a.key) for a in agents.order_by("key")]
    if user_can(user, Capability.MANAGE_GRANTS):
        choices.append((ALL_AGENTS, "All agents (also agents added later)"))
    return choices


USER_PICK_LIMIT = 100  # the picker lists at most this many matches; typing narrows them


@require_http_methods(["GET", "POST"])
@requires(Capability.MANAGE_GRANTS, agent_kwarg=None, anywhere=True)
def grant_create(request):
    agent_choices = _agent_choices(request.user)
    form = GrantForm(
        request.POST or None,
        initial={
            "agent": request.GET.get("agent") or (agent_choices[0][0] if agent_choices else ""),
            "username": request.GET.get("user") or request.GET.get("username", ""),
        },
        agent_choices=agent_choices,
        roles=_roles_offered(request.user, agent_choices),
    )
    preview = None
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        # A forged agent is refused (404, logged) before anything is shown or written; a role
        # above the user's own there, or a grant to themselves, is told on the form (403).
        try:
            check_user_can_grant_role(
                request.user,
                data["role"],
                data["agent"],
                to_user=data["username"],
                to_group=data["group"],
            )
        except Forbidden as error:
            if not _form_refusal(error):
                raise
            return _grant_refused(request, form, error)
        if "confirm" not in request.POST or "edit" in request.POST:
            preview = None if "edit" in request.POST else _grant_preview(data)
            context = {"form": form, "preview": preview, **_user_picker(request)}
            return TemplateResponse(request, "access/grant_form.html", context)
        try:
            grant = services.grant_create(
                actor=request.user,
                role=data["role"],
                agent=data["agent"],
                user=data["username"],
                group=data["group"],
                reason=data["reason"],
            )
        except ApplicationError as error:
            if _form_refusal(error):
                return _grant_refused(request, form, error)
            if error.status in (403, 404):
                raise
            _form_error(form, error)
        else:
            messages.success(request, f"Granted: {grant}.")
            return redirect("access-overview")
    context = {"form": form, "preview": preview, **_user_picker(request)}
    return TemplateResponse(
        request, "access/grant_form.html", context, status=400 if form.errors else 200
    )


def _roles_offered(user, agent_choices) -> list[Role]:
    """The roles the user may grant on at least one agent the form offers."""
    agents = {a.key: a for a in Agent.objects.filter(key__in=[k for k, _ in agent_choices])}
    scopes = [None if key == ALL_AGENTS else agents[key] for key, _ in agent_choices]
    return grantable_roles(user, Role.objects.order_by("name"), scopes)


def _grant_refused(request, form, error: ApplicationError):
    _form_error(form, error)
    context = {"form": form, "preview": None, **_user_picker(request)}
    return TemplateResponse(request, "access/grant_form.html", context, status=error.status)


def _user_picker(request) -> dict:
    """The users to pick from (`?user_q=` filters them by name or e-mail, as you type), each
    with the roles granted to them directly, in two queries."""
    text = (request.GET.get("user_q") or "").strip()
    users = get_user_model().objects.filter(is_active=True).order_by("username")
    if text:
        users = users.filter(
            Q(username__icontains=text)
            | Q(first_name__icontains=text)
            | Q(last_name__icontains=text)
            | Q(email__icontains=text)
        )
    picked = list(users[: USER_PICK_LIMIT + 1])
    roles: dict[int, set[str]] = {}
    for user_id, role, agent_key in Grant.objects.filter(user__in=picked).values_list(
        "user_id", "role__name", "agent__key"
    ):
        roles.setdefault(user_id, set()).add(
            f"{role} on {agent_key}" if agent_key else f"{role} (all agents)"
        )
    return {
        "users": [(u, ", ".join(sorted(roles.get(u.pk, ())))) for u in picked[:USER_PICK_LIMIT]],
        "users_more": len(picked) > USER_PICK_LIMIT,
        "user_q": text,
        "has_groups": Group.objects.exists(),
    }


def _grant_preview(data) -> list[str]:
    """What the grant will change, in words, for the confirmation step."""

    role, agent, user, group = data["role"], data["agent"], data["username"], data["group"]
    who = user.username if user else f"everyone in group {group.name}"
    where = agent.key if agent else "ALL agents, including agents added later"
    lines = [f"{who} gets the role “{role.name}” on {where}."]
    caps = set(role.capabilities)
    if user is not None:
        held = (
            capabilities_on(user, agent) if agent else {c for c in Capability if user_can(user, c)}
        )
        caps -= set(held)
    labels = [CAPABILITY_LABELS.get(c, c) for c in sorted(caps)]
    if not role.capabilities:
        lines.append(
            "This role has no capabilities yet: the grant changes nothing until some are added."
        )
    elif labels:
        lines.append("New there: " + ", ".join(labels) + ".")
    else:
        lines.append("They already hold every capability of this role there.")
    return lines


@require_POST
@requires(Capability.MANAGE_GRANTS, agent_kwarg=None, anywhere=True)
def grant_revoke(request, pk: int):
    grant = Grant.objects.select_related("agent", "role", "user", "group").filter(pk=pk).first()
    if grant is None:
        raise NotFound("No such grant.")
    label = str(grant)
    try:
        services.grant_revoke(
            actor=request.user, grant=grant, reason=request.POST.get("reason", "")
        )
    except ApplicationError as error:
        if error.status in (403, 404):
            raise
        messages.error(request, error.message)
    else:
        messages.success(request, f"Revoked: {label}.")
    return redirect("access-overview")


# --- locked sign-ins ------------------------------------------------------------------------------
@require_GET
@requires(Everywhere(Capability.MANAGE_GRANTS), agent_kwarg=None)
def login_lock_list(request):
    """Usernames locked out of sign-in from one address (django-axes), each with Unlock."""
    locks = login_locks_current()
    for n, lock in enumerate(locks):
        where = lock["ip_address"] or "an unknown address"
        lock["dialog_id"] = f"unlock-{n}"
        lock["hidden"] = [("username", lock["username"]), ("ip_address", lock["ip_address"] or "")]
        lock["unlock_lines"] = [
            f"{lock['username']} can sign in from {where} again at once; "
            f"the {lock['failures']} failed sign-ins from there are forgotten.",
            "Other addresses are not affected.",
        ]
    return TemplateResponse(
        request, "access/login_lock_list.html", {"locks": locks, "rule": login_lock_rule()}
    )


@require_POST
@requires(Everywhere(Capability.MANAGE_GRANTS), agent_kwarg=None)
def login_lock_clear(request):
    username = request.POST.get("username", "")
    ip_address = request.POST.get("ip_address", "") or None
    try:
        services.login_lock_clear(
            username=username,
            ip_address=ip_address,
            actor=request.user,
            reason=request.POST.get("reason", ""),
        )
    except ApplicationError as error:
        if error.status in (403, 404):
            raise
        messages.error(request, error.message)
    else:
        where = ip_address or "an unknown address"
        messages.success(request, f"Unlocked: {username} can sign in from {where} again.")
    return redirect("login-lock-list")


# --- groups at an identity provider → roles ---------------------------------------------------------
def _provider_choices() -> list[tuple[str, str]]:
    return [(p.key, p.name) for p in sso_buttons()]


def _mapping_rows(mappings) -> list[GroupMapping]:
    names = dict(_provider_choices())
    rows = list(mappings)
    for mapping in rows:
        mapping.provider_name = names.get(mapping.provider, mapping.provider)
        mapping.agent_keys = sorted(a.key for a in mapping.agents.all())
        mapping.dialog_id = f"remove-mapping-{mapping.pk}"
        where = "all agents" if mapping.all_agents else ", ".join(mapping.agent_keys)
        mapping.remove_lines = [
            f"The {mapping.grant_count} grant{'s' if mapping.grant_count != 1 else ''} it made "
            f"(“{mapping.role_name}” on {where}) end at once.",
            f"Members of {mapping.group} no longer get this role at sign-in.",
        ]
    return rows


@require_http_methods(["GET", "POST"])
@requires(Everywhere(Capability.MANAGE_GRANTS), agent_kwarg=None)
def group_mapping_list(request):
    """The mappings of providers' groups to roles, and a form to add one."""
    form = GroupMappingForm(request.POST or None, providers=_provider_choices())
    status = 200
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            try:
                mapping = group_mappings.group_mapping_create(
                    actor=request.user,
                    provider=data["provider"],
                    group=data["group"],
                    role=data["role"],
                    agents=list(data["agents"]),
                    all_agents=data["all_agents"],
                    reason=data["reason"],
                )
            except ApplicationError as error:
                if error.status in (403, 404) and not _form_refusal(error):
                    raise
                _form_error(form, error)
                status = error.status
            else:
                messages.success(
                    request, f"Mapped: {mapping}. It applies at each member's next sign-in."
                )
                return redirect("group-mapping-list")
        else:
            status = 400
    mappings = (
        GroupMapping.objects.select_related("role")
        .prefetch_related("agents")
        .annotate(grant_count=Count("grants"))
    )
    context = {"form": form, "mappings": _mapping_rows(mappings), "providers": _provider_choices()}
    return TemplateResponse(request, "access/group_mapping_list.html", context, status=status)


@require_POST
@requires(Everywhere(Capability.MANAGE_GRANTS), agent_kwarg=None)
def group_mapping_delete(request, pk: int):
    mapping = GroupMapping.objects.filter(pk=pk).first()
    if mapping is None:
        raise NotFound("No such mapping.")
    label = str(mapping)
    try:
        removed = group_mappings.group_mapping_delete(
            actor=request.user, mapping=mapping, reason=request.POST.get("reason", "")
        )
    except ApplicationError as error:
        if error.status in (403, 404) and not _form_refusal(error):
            raise
        messages.error(request, error.message)
    else:
        messages.success(
            request, f"Removed: {label} ({removed} grant{'s' if removed != 1 else ''} ended)."
        )
    return redirect("group-mapping-list")
