"""Agents & environments pages (/catalog/): onboard, edit, archive, unarchive, delete.

Thin: parse a form, ask the policy (`requires`), call one service, render. A refusal keeps
what the person typed and shows the reason once: at its field in a form, or above the lists
(a refused delete names everything that still refers to the agent or environment).
"""

from __future__ import annotations

from functools import partial

from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console.kernel.errors import ApplicationError, Conflict
from console.kernel.policy import Capability, Everywhere, agents_where, requires, user_can
from strategies.catalog import services
from strategies.catalog.forms import AgentForm, EnvironmentForm, show_refusal
from strategies.catalog.selectors import (
    agent_catalog,
    environment_get,
    environment_list,
)
from strategies.catalog.services import (
    agent_delete_refusals,
    agent_state,
    environment_delete_refusals,
    environment_state,
    state_digest,
)

MANAGERS_SOMEWHERE = requires(Capability.MANAGE_CATALOG, agent_kwarg=None, anywhere=True)
MANAGERS_EVERYWHERE = requires(Everywhere(Capability.MANAGE_CATALOG), agent_kwarg=None)


def why_not_deleted(refusals: list[dict]) -> str:
    """The reasons beside a disabled Delete button ("" when it can be deleted)."""
    if not refusals:
        return ""
    return (
        "Cannot be deleted: " + "; ".join(r["message"] for r in refusals) + ". Archive it instead."
    )


def _overview_context(request, *, error=None) -> dict:
    manages_all = user_can(request.user, Capability.MANAGE_CATALOG)
    agents = agent_catalog(agents=agents_where(request.user, Capability.MANAGE_CATALOG))
    environments = environment_list(include_archived=True)
    for agent in agents:
        agent.delete_refused = why_not_deleted(agent_delete_refusals(agent)) if manages_all else ""
    for environment in environments:
        environment.delete_refused = why_not_deleted(environment_delete_refusals(environment))
    return {
        "agents": [a for a in agents if a.archived_at is None],
        "archived_agents": [a for a in agents if a.archived_at is not None],
        "environments": [e for e in environments if e.archived_at is None],
        "archived_environments": [e for e in environments if e.archived_at is not None],
        "manages_all": manages_all,
        "error": error,
    }


@require_GET
@MANAGERS_SOMEWHERE
def overview(request):
    """The agents the user may manage and every environment, archived ones apart."""
    return TemplateResponse(request, "catalog/overview.html", _overview_context(request))


def _refused(request, error: ApplicationError) -> TemplateResponse:
    """The overview again, with the refusal (a delete of something still in use) on top."""
    return TemplateResponse(
        request,
        "catalog/overview.html",
        _overview_context(request, error=error),
        status=error.status,
    )


def _form_saved(request, form, write):
    """On a valid POST, `write(**cleaned_data)` (a service); its refusal lands in the form
    (403 and 404 rise to the error page). Returns what it wrote, or None."""
    if request.method != "POST" or not form.is_valid():
        return None
    try:
        return write(actor=request.user, **form.cleaned_data)
    except ApplicationError as error:
        if error.status in (403, 404):
            raise
        show_refusal(form, error)
        form.refusal_status = error.status  # 400 bad value, 409 taken key or stale form
        return None


def _form_page(request, template: str, form, **context) -> TemplateResponse:
    """The form again, with what was typed and the refusal's status when it was refused."""
    status = getattr(form, "refusal_status", 400) if form.errors else 200
    return TemplateResponse(request, template, {"form": form, **context}, status=status)


def _reason(request) -> str:
    return request.POST.get("reason", "")


# --- agents ----------------------------------------------------------------------------------------
@require_http_methods(["GET", "POST"])
@MANAGERS_EVERYWHERE
def agent_create(request):
    form = AgentForm(request.POST or None)
    agent = _form_saved(request, form, services.agent_create)
    if agent is not None:
        messages.success(
            request,
            f"Agent {agent.key} created. Next: its first strategy, then a runtime token so its "
            "runtime can connect.",
        )
        return redirect("agent-detail", agent=agent.key)
    return _form_page(request, "catalog/agent_form.html", form)


@require_http_methods(["GET", "POST"])
@requires(Capability.MANAGE_CATALOG)
def agent_edit(request, agent):
    agent = request.agent
    initial = {
        "name": agent.name,
        "description": agent.description,
        "loaded": state_digest(agent_state(agent)),
    }
    form = AgentForm(request.POST or None, initial=initial, editing=True)
    if _form_saved(request, form, partial(services.agent_update, agent=agent)) is not None:
        messages.success(request, f"Agent {agent.key} saved.")
        return redirect("catalog")
    return _form_page(
        request,
        "catalog/agent_form.html",
        form,
        agent=agent,
        manages_all=user_can(request.user, Capability.MANAGE_CATALOG),
        delete_refused=why_not_deleted(agent_delete_refusals(agent)),
    )


@require_POST
@requires(Capability.MANAGE_CATALOG)
def agent_archive(request, agent):
    services.agent_archive(agent=request.agent, actor=request.user, reason=_reason(request))
    messages.success(
        request,
        f"Agent {agent} archived: it left the lists, the dashboard and the pickers. Its pages "
        "and history stay; its runtime keeps its configuration.",
    )
    return redirect("catalog")


@require_POST
@requires(Capability.MANAGE_CATALOG)
def agent_unarchive(request, agent):
    services.agent_unarchive(agent=request.agent, actor=request.user, reason=_reason(request))
    messages.success(request, f"Agent {agent} is back in the lists.")
    return redirect("catalog")


@require_POST
@requires(Everywhere(Capability.MANAGE_CATALOG))
def agent_delete(request, agent):
    try:
        services.agent_delete(agent=request.agent, actor=request.user, reason=_reason(request))
    except Conflict as error:
        return _refused(request, error)
    messages.success(request, f"Agent {agent} deleted.")
    return redirect("catalog")


# --- environments ----------------------------------------------------------------------------------
@require_http_methods(["GET", "POST"])
@MANAGERS_EVERYWHERE
def environment_create(request):
    form = EnvironmentForm(request.POST or None)
    environment = _form_saved(request, form, services.environment_create)
    if environment is not None:
        messages.success(
            request,
            f"Environment {environment.key} created. Its runtime reports its manifest when it "
            "starts: create a runtime token for it.",
        )
        return redirect("catalog")
    return _form_page(request, "catalog/environment_form.html", form)


@require_http_methods(["GET", "POST"])
@MANAGERS_EVERYWHERE
def environment_edit(request, environment):
    environment = environment_get(key=environment)
    initial = environment_state(environment)
    initial["loaded"] = state_digest(initial)
    form = EnvironmentForm(request.POST or None, initial=initial, editing=True)
    saved = _form_saved(
        request, form, partial(services.environment_update, environment=environment)
    )
    if saved is not None:
        messages.success(request, f"Environment {environment.key} saved.")
        return redirect("catalog")
    return _form_page(
        request,
        "catalog/environment_form.html",
        form,
        environment=environment,
        delete_refused=why_not_deleted(environment_delete_refusals(environment)),
    )


@require_POST
@MANAGERS_EVERYWHERE
def environment_archive(request, environment):
    services.environment_archive(
        environment=environment_get(key=environment), actor=request.user, reason=_reason(request)
    )
    messages.success(
        request,
        f"Environment {environment} archived: it left the grids and pickers and takes no new "
        "publishes. What is live there stays live.",
    )
    return redirect("catalog")


@require_POST
@MANAGERS_EVERYWHERE
def environment_unarchive(request, environment):
    services.environment_unarchive(
        environment=environment_get(key=environment), actor=request.user, reason=_reason(request)
    )
    messages.success(request, f"Environment {environment} is back in the grids and pickers.")
    return redirect("catalog")


@require_POST
@MANAGERS_EVERYWHERE
def environment_delete(request, environment):
    try:
        services.environment_delete(
            environment=environment_get(key=environment),
            actor=request.user,
            reason=_reason(request),
        )
    except Conflict as error:
        return _refused(request, error)
    messages.success(request, f"Environment {environment} deleted.")
    return redirect("catalog")
