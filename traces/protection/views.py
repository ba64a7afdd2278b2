"""Data protection pages (docs/data-protection.md): an environment's redaction rules with a
preview box, and erasure by principal with its receipts. Thin: parse the form, call one
service, render; a refusal keeps what was typed and shows each reason at its field."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_http_methods, require_POST

from console.kernel.errors import ApplicationError
from console.kernel.policy import Capability, Everywhere, requires
from strategies.catalog.selectors import environment_get
from traces.outcomes.views import _error_details  # the same refusal → field errors
from traces.protection import selectors, services
from traces.redaction import detectors, rules

ADMINS = requires(Everywhere(Capability.MANAGE_CATALOG), agent_kwarg=None)


@require_http_methods(["GET", "POST"])
@ADMINS
def rules_page(request, environment):
    environment = environment_get(key=environment)
    values, errors, status = {"detector": "card", "action": "redact"}, [], 200
    if request.method == "POST":
        values = {k: (request.POST.get(k) or "").strip() for k in ("detector", "key", "action")}
        values["pattern"] = request.POST.get("pattern") or ""
        try:
            rule = rules.redaction_rule_add(environment=environment, actor=request.user, **values)
        except ApplicationError as error:
            errors, status = _error_details(error), error.status
        else:
            messages.success(request, f"{environment.key}: rule {rule.key} applies from now on.")
            return redirect("data-protection-rules", environment=environment.key)
    context = {
        "environment": environment,
        "rules": selectors.redaction_rules(environment=environment),
        "detectors": list(detectors.DETECTOR_LABELS.items()),
        "values": values,
        "errors": errors,
        "max_rules": rules.MAX_RULES_PER_ENVIRONMENT,
    }
    return TemplateResponse(request, "protection/rules.html", context, status=status)


@require_POST
@ADMINS
def rule_remove(request, environment, rule):
    environment = environment_get(key=environment)
    key = rule
    rule = selectors.redaction_rule_get(environment=environment, key=key)
    rules.redaction_rule_remove(rule=rule, actor=request.user)
    messages.success(request, f"{environment.key}: rule {key} removed; it no longer applies.")
    return redirect("data-protection-rules", environment=environment.key)


@require_POST
@ADMINS
def rules_preview(request, environment):
    environment = environment_get(key=environment)
    text = (request.POST.get("text") or "")[:2000]
    redacted, counts, refused = rules.rules_preview(environment, text)
    context = {"text": text, "redacted": redacted, "counts": counts, "refused": refused}
    return TemplateResponse(request, "protection/_preview.html", context)


@require_http_methods(["GET", "POST"])
@ADMINS
def erasures_page(request):
    values, errors, status = {}, [], 200
    if request.method == "POST":
        values = {k: (request.POST.get(k) or "").strip() for k in ("principal", "reference")}
        try:
            erasure = services.principal_erase(actor=request.user, **values)
        except ApplicationError as error:
            errors, status = _error_details(error), error.status
        else:
            messages.success(
                request,
                f"Erased: {erasure.counts['traces_trace']} trace(s) and what belonged to them. "
                "Download the receipt below.",
            )
            return redirect("data-protection-erasure", pk=erasure.pk)
    context = {"erasures": selectors.erasures(), "values": values, "errors": errors}
    return TemplateResponse(request, "protection/erasures.html", context, status=status)


@require_http_methods(["GET"])
@ADMINS
def erasure_page(request, pk):
    erasure = selectors.erasure_get(pk=pk)
    context = {"erasure": erasure, "receipt": services.erasure_receipt(erasure)}
    return TemplateResponse(request, "protection/erasure.html", context)


@require_http_methods(["GET"])
@ADMINS
def erasure_receipt(request, pk):
    erasure = selectors.erasure_get(pk=pk)
    body = json.dumps(services.erasure_receipt(erasure), indent=2)
    response = HttpResponse(body, content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="erasure-{erasure.pk}-receipt.json"'
    return response
