"""The publish page: choose a version, see what it changes against what is live and the
checks against the target runtime, then publish (or ask for approval where protected)."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods
from django.views.decorators.vary import vary_on_headers

from console.kernel.errors import ApplicationError
from console.kernel.policy import Capability, requires, user_can
from console.kernel.wording import RUNTIMES_TAKE_IT
from strategies.releases import selectors
from strategies.releases import services as releases
from strategies.releases.preview_hook import preview_summary
from strategies.releases.views.lookups import (
    _asked_version,
    _confirmed,
    _document,
    _environment,
    _overview_url,
    _page_or_preview,
    _version,
    check_danger_confirmed,
    impact_danger,
    version_regressions,
)


# --- publish ---------------------------------------------------------------------------------------------
@requires(Capability.VIEW_CONFIG)
@vary_on_headers("HX-Request")
@require_http_methods(["GET", "POST"])
def publish(request, agent, document, environment):
    """GET: choose a version and see the diff against what is live and the validation
    against the target runtime; POST: publish (or request approval in a protected env)."""
    doc = _document(request.agent, document)
    env = _environment(environment)
    version = _version(doc, _asked_version(request))
    # The saved impact preview of this version here (traces.previews, through the hook).
    impact = preview_summary(user=request.user, version=version, environment=env)
    error = None
    if request.method == "POST":
        try:
            check_danger_confirmed(request, impact_danger(impact))
            outcome = releases.release_publish(
                version=version, environment=env, actor=request.user, **_confirmed(request)
            )
        except ApplicationError as exc:
            error = exc
        else:
            if outcome.approval:
                replaced = (
                    f" It replaces your request for v{outcome.replaced.version.number}."
                    if outcome.replaced
                    else ""
                )
                messages.success(
                    request,
                    f"{doc.key} v{version.number} waits for approval in {env.key}: "
                    f"someone else with the approve permission must approve it.{replaced}",
                )
            else:
                messages.success(
                    request, f"{doc.key} v{version.number} is live in {env.key}. {RUNTIMES_TAKE_IT}"
                )
            return redirect(_overview_url(request.agent))
    preview = selectors.change_preview(version=version, environment=env)
    regressions = version_regressions(request, version)
    waiting = selectors.pending_for(document=doc, environment=env) if env.protected else None
    replaces = selectors.replaced_by_new_request(waiting, request.user, version.number)
    context = {
        "agent": request.agent,
        "document": doc,
        "environment": env,
        "version": version,
        # A request already waiting here: the person's own gives way to this one, another's
        # blocks it (the publish judgement's words).
        "replaces_request": waiting if replaces else None,
        "waiting_request": None if replaces else waiting,
        "waiting_message": waiting
        and selectors.waiting_finding(
            pending=waiting, document_key=doc.key, environment=env
        ).message,
        "versions": selectors.publishable_versions(document=doc),
        "preview": preview,
        "impact": impact,
        "regressions": regressions,
        "danger": impact_danger(impact),
        "error": error,
        # A refused publish shows the form again with what the person typed.
        "reason": request.POST.get("reason", "") if request.method == "POST" else "",
        "can_enable_sensitive": user_can(request.user, Capability.ENABLE_SENSITIVE, request.agent),
        "runtimes_take_it": RUNTIMES_TAKE_IT,
    }
    return _page_or_preview(request, "releases/publish.html", context, error)
