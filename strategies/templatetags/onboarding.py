"""Template tags for a new agent's pages: what to do next, and how to connect a runtime.

`{% agent_onboarding agent %}` (the agent page frame) shows the next steps an agent still
lacks — its first strategy, a runtime that reported its manifest, a first trace — and
nothing once it has them all. `{% connect_runtime agent=… environment=… %}` is the SDK snippet
with this console's address filled in (the traces list's empty state uses it too). Both ask
the policy, so a button is shown only to whoever may use it.
"""

from __future__ import annotations

from django import template
from django.urls import reverse
from django.utils.http import urlencode

from console.ingest_server import ingest_url_seen_from
from console.kernel.policy import Capability, user_can, user_sees_agent
from strategies.catalog.models import Agent
from strategies.runtime.selectors import agent_onboarding as onboarding_of

register = template.Library()


def _tokens_url(user, environment=None) -> str:
    """The runtime tokens page (preset to the environment), for whoever may create one."""
    if not user_can(user, Capability.MANAGE_RUNTIME_TOKENS):
        return ""
    url = reverse("token-list")
    return f"{url}?{urlencode({'environment': environment.key})}" if environment else url


def _connect(context, agent_key: str, environment=None) -> dict:
    request = context["request"]
    return {
        "console_url": request.build_absolute_uri("/"),
        "agent_key": agent_key,
        "environment": environment,
        "tokens_url": _tokens_url(request.user, environment),
        # the ingest server, when the console runs one apart (docs/runtime-contract.md §3)
        "ingest_url": ingest_url_seen_from(request.build_absolute_uri("/")),
    }


@register.inclusion_tag("catalog/_onboarding.html", takes_context=True)
def agent_onboarding(context, agent: Agent) -> dict:
    user = context["request"].user
    onboarding = onboarding_of(agent=agent)
    first_missing = (onboarding.environments_without_manifest or onboarding.environments or [None])[
        0
    ]
    return {
        "onboarding": onboarding,
        "agent": agent,
        "can_edit": user_can(user, Capability.EDIT_DRAFTS, agent),
        "strategies_url": reverse("agent-strategies", kwargs={"agent": agent.key}),
        "missing": [
            (environment, _tokens_url(user, environment))
            for environment in onboarding.environments_without_manifest
        ],
        "can_view_traces": user_can(user, Capability.VIEW_TRACES, agent),
        "traces_url": f"{reverse('trace-list')}?{urlencode({'agent': agent.key})}",
        **_connect(context, agent.key, first_missing),
    }


@register.inclusion_tag("catalog/_connect_runtime.html", takes_context=True)
def connect_runtime(context, agent: str = "") -> dict:
    """The snippet for `agent` (a key), or with a placeholder when it is not one the user
    can see."""
    known = Agent.objects.filter(key=agent).first() if agent else None
    if known is not None and not user_sees_agent(context["request"].user, known):
        known = None
    return _connect(context, known.key if known else "")
