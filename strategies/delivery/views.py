"""Webhook pages (/releases/webhooks/): register, the delivery log, remove."""

from __future__ import annotations

import time

from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_http_methods, require_POST

from console.kernel.credentials import shows_secret
from console.kernel.errors import ApplicationError, NotFound
from console.kernel.policy import Capability, requires, user_can
from strategies.catalog.selectors import environment_get, environment_list
from strategies.delivery import selectors, webhooks
from strategies.delivery.models import (
    ALERT_FIRED_EVENT,
    ALERT_RESOLVED_EVENT,
    APPROVAL_REQUESTED_EVENT,
    SHADOW_CHANGED_EVENT,
    WEBHOOK_EVENT,
    Webhook,
)

# The events a webhook can hear, with who listens to them (the create form's checkboxes).
EVENT_CHOICES = [
    (WEBHOOK_EVENT, "Release changed (runtimes)"),
    (APPROVAL_REQUESTED_EVENT, "Approval requested (chat, review routing)"),
    (SHADOW_CHANGED_EVENT, "Shadow started or stopped (runtimes that run shadows)"),
    (ALERT_FIRED_EVENT, "Alert fired on context health (on-call)"),
    (ALERT_RESOLVED_EVENT, "Alert resolved (on-call)"),
]


@requires(Capability.MANAGE_TOKENS, agent_kwarg=None)
@shows_secret
@require_http_methods(["GET", "POST"])
def webhook_list(request):
    created, error = None, None
    if request.method == "POST":
        try:
            created = webhooks.webhook_create(
                environment=environment_get(key=request.POST.get("environment", "")),
                url=request.POST.get("url", "").strip(),
                description=request.POST.get("description", "").strip(),
                events=request.POST.getlist("events"),
                actor=request.user,
            )
        except ApplicationError as exc:
            error = exc
    return TemplateResponse(
        request,
        "delivery/webhooks.html",
        {
            "webhooks": selectors.webhooks_list(),
            "created": created,
            "error": error,
            "environments": environment_list(),
            "event_choices": EVENT_CHOICES,
            "events_checked": request.POST.getlist("events") if error else [WEBHOOK_EVENT],
            "legacy_headers_until": webhooks.legacy_headers_until(time.time()),
            "can_manage_runtime_tokens": user_can(request.user, Capability.MANAGE_RUNTIME_TOKENS),
        },
        status=error.status if error else 200,
    )


def _webhook(pk):
    hook = Webhook.objects.select_related("environment").filter(pk=pk).first()
    if hook is None:
        raise NotFound("No such webhook.")
    return hook


@requires(Capability.MANAGE_TOKENS, agent_kwarg=None)
@require_http_methods(["GET"])
def webhook_detail(request, pk):
    hook = _webhook(pk)
    status = request.GET.get("status", "")
    query = request.GET.copy()
    query.pop("page", None)
    return TemplateResponse(
        request,
        "delivery/webhook_detail.html",
        {
            "webhook": hook,
            "page_obj": selectors.deliveries_page(
                webhook=hook, status=status, page=request.GET.get("page", 1)
            ),
            "status": status,
            "querystring": query.urlencode(),
        },
    )


@requires(Capability.MANAGE_TOKENS, agent_kwarg=None)
@require_POST
def webhook_delete(request, pk):
    hook = _webhook(pk)
    webhooks.webhook_delete(webhook=hook, actor=request.user)
    messages.success(request, f"Removed the webhook {hook.url}; its delivery log stays.")
    return redirect("webhook-list")
