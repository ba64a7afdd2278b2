"""Version-health pages: one (agent, environment, document) — the live version against the
one it replaced and against its shadow — and the request ids behind a figure. Thin: ask the
policy, call one selector, render. A list of request ids is a look at traces: access-logged."""

from __future__ import annotations

from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET

from console.kernel.audit import AccessAction, access_record
from console.kernel.policy import Capability, requires
from console.kernel.standby import lag_tolerant
from traces.health import selectors

HOURS_CHOICES = (1, 6, 24, 72, 168)


def hours_asked(request) -> int | None:
    value = (request.GET.get("hours") or "").strip()
    return int(value) if value.isdigit() and int(value) in HOURS_CHOICES else None


@lag_tolerant
@require_GET
@requires(Capability.VIEW_TRACES)
def version_health_page(request, agent, environment, document):
    env, doc = selectors.health_target(
        user=request.user, agent=request.agent, environment_key=environment, document_key=document
    )
    hours = hours_asked(request)
    health = selectors.version_health(
        user=request.user, agent=request.agent, environment=env, document=doc, hours=hours
    )
    context = {
        "health": health,
        "hours": hours,
        "hours_choices": HOURS_CHOICES,
        "fault_words": selectors.shadow_fault_words(health),
    }
    return TemplateResponse(request, "health/version_health.html", context)


def health_requests_looked(*, request, environment, document, filters) -> list:
    """The request ids behind a figure, with the look in the access log (page and API)."""
    rows = selectors.health_requests(
        agent=request.agent, environment=environment, document=document, filters=filters
    )
    access_record(
        actor=request.user,
        action=AccessAction.TRACE_LIST,
        agent=request.agent,
        detail={
            "health": {
                "agent": request.agent.key,
                "environment": environment.key,
                "document": document,
                **filters.as_dict(),
            },
            "shown": len(rows),
        },
    )
    return rows


@lag_tolerant
@require_GET
@requires(Capability.VIEW_TRACES)
def health_requests_page(request, agent, environment, document):
    env, doc = selectors.health_target(
        user=request.user, agent=request.agent, environment_key=environment, document_key=document
    )
    filters = selectors.request_filter_parse(request.GET)
    rows = health_requests_looked(
        request=request, environment=env, document=doc.key, filters=filters
    )
    context = {
        "agent": request.agent,
        "environment": env,
        "document": doc,
        "filters": filters,
        "rows": rows,
        "limit": selectors.REQUEST_IDS_LIMIT,
    }
    return TemplateResponse(request, "health/requests.html", context)
