"""Runtime token pages (/releases/tokens/): list, create (the secret shown once), revoke; and
the runtimes of an agent (/releases/<agent>/runtimes/): who serves what."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from console.kernel.credentials import shows_secret
from console.kernel.errors import ApplicationError, NotFound
from console.kernel.policy import Capability, requires, user_can
from strategies.catalog.models import Agent
from strategies.catalog.selectors import environment_get, environment_list
from strategies.runtime.instances import MINIMUM_SDK_VERSION
from strategies.runtime.models import RuntimeToken
from strategies.runtime.selectors import agents_named, runtimes_of_agent, tokens_list
from strategies.runtime.tokens import runtime_token_create, runtime_token_revoke


@requires(Capability.MANAGE_RUNTIME_TOKENS, agent_kwarg=None)
@shows_secret
@require_http_methods(["GET", "POST"])
def tokens(request):
    """List and create runtime tokens; a new token's secret is shown on this response only."""
    created, error = None, None
    if request.method == "POST":
        try:
            environment = environment_get(key=request.POST.get("environment", ""))
            keys = request.POST.getlist("agents")
            agents = agents_named(keys)
            created = runtime_token_create(
                name=request.POST.get("name", ""),
                environment=environment,
                capabilities=request.POST.getlist("capabilities"),
                all_agents=not keys,  # the form's "none ticked" is every agent
                agents=agents,
                actor=request.user,
            )
        except ApplicationError as exc:
            error = exc
    return TemplateResponse(
        request,
        "runtime/tokens.html",
        {
            "tokens": tokens_list(),
            "created": created,
            "error": error,
            "environments": environment_list(),
            "agents": Agent.objects.filter(archived_at__isnull=True).order_by("key"),
            # A refused form comes back as it was typed (UX.md); a fresh one reads config.
            "typed": {
                "name": request.POST.get("name", ""),
                "environment": request.POST.get("environment", ""),
                "capabilities": request.POST.getlist("capabilities"),
                "agents": request.POST.getlist("agents"),
            }
            if error
            else {"capabilities": ["config:read"]},
            "chosen_environment": request.GET.get("environment", ""),
            "capabilities": RuntimeToken.CAPABILITIES,
            "can_manage_webhooks": user_can(request.user, Capability.MANAGE_TOKENS),
        },
        status=error.status if error else 200,
    )


@requires(Capability.MANAGE_RUNTIME_TOKENS, agent_kwarg=None)
@require_POST
def token_revoke(request, pk):
    token = RuntimeToken.objects.filter(pk=pk).first()
    if token is None:
        raise NotFound("No such runtime token.")
    runtime_token_revoke(
        token=token, actor=request.user, reason=request.POST.get("reason", "").strip()
    )
    messages.success(request, f"Revoked {token.name} ({token.prefix}…). It stops working now.")
    return redirect("token-list")


@requires(Capability.VIEW_CONFIG)
@vary_on_headers("HX-Request")
@require_http_methods(["GET"])
def instances(request, agent):
    """Who serves what: the agent's runtimes per environment, against what is live there —
    counted, with the first few listed; `?environment=` pages through one environment's.
    htmx asks for the card alone (the releases page refreshes it every few seconds)."""
    key = request.GET.get("environment")
    environment = environment_get(key=key) if key is not None else None
    template = "runtime/instances.html" + ("#card" if request.htmx else "")
    return TemplateResponse(
        request,
        template,
        {
            "agent": request.agent,
            "environments": runtimes_of_agent(
                agent=request.agent, environment=environment, page=request.GET.get("page", 1)
            ),
            "paged": environment,
            "minimum_sdk": MINIMUM_SDK_VERSION,
        },
    )
