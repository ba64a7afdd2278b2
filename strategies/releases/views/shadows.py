"""Shadow release pages: start a shadow beside the live version, stop it, promote it."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from console.kernel.errors import ApplicationError, ValidationFailed
from console.kernel.policy import Capability, requires
from strategies.documents.models import Document
from strategies.releases import selectors
from strategies.releases import services as releases
from strategies.releases.preview_hook import preview_summary
from strategies.releases.views.lookups import (
    _asked_version,
    _confirmed,
    _document,
    _environment,
    _int,
    _overview_url,
    _page_or_preview,
    check_danger_confirmed,
    impact_danger,
)


# --- shadow releases ------------------------------------------------------------------------------------
def _shadow_version(document: Document, request):
    """The version chosen to run as shadow: the form's on POST (required), ?version= on GET,
    else the newest frozen one (None: there is none)."""
    number = _int(_asked_version(request), "version")
    if number is None:
        if request.method == "POST":
            raise ValidationFailed(
                "Choose the version to run as shadow.",
                code="version_required",
                details=[{"path": "version", "code": "required", "message": "Choose a version."}],
            )
        frozen = selectors.frozen_versions(document=document)
        return frozen[0] if frozen else None
    version = document.versions.filter(number=number).first()
    if version is None:
        raise ValidationFailed(
            f"{document.key} has no version {number}: no shadow was started.",
            code="unknown_version",
            details=[{"path": "version", "code": "does_not_exist", "message": f"No v{number}."}],
        )
    return version


def _promote_impact(request, cell) -> dict | None:
    """The saved impact preview of the running shadow's version here, or None."""
    if cell.shadow is None or not cell.shadow.running:
        return None
    return preview_summary(
        user=request.user, version=cell.shadow.version, environment=cell.environment
    )


def _promote_danger(request, doc, env) -> dict | None:
    cell = selectors.release_cell(user=request.user, document=doc, environment=env)
    return impact_danger(_promote_impact(request, cell))


def _shadow_page(request, doc, env, *, error=None, version=None) -> TemplateResponse:
    """The shadow page of document × environment: the shadow running there with its stop
    and promote actions, or the form to start one with the check of the chosen version."""
    cell = selectors.release_cell(user=request.user, document=doc, environment=env)
    if version is None and error is None:
        version = _shadow_version(doc, request)
    elif version is None:
        frozen = selectors.frozen_versions(document=doc)
        version = frozen[0] if frozen else None
    context = {
        "agent": request.agent,
        "document": doc,
        "environment": env,
        "cell": cell,
        "version": version,
        "versions": selectors.frozen_versions(document=doc),
        "preview": selectors.shadow_preview(version=version, environment=env, actor=request.user)
        if version
        else None,
        "error": error,
        "shadow_page": True,
        # What promoting the running shadow rests on: its version's saved impact preview.
        "promote_impact": (impact := _promote_impact(request, cell)),
        "promote_danger": impact_danger(impact),
        "reason": request.POST.get("reason", "") if request.method == "POST" else "",
    }
    return _page_or_preview(request, "releases/shadow.html", context, error)


@requires(Capability.VIEW_CONFIG)
@vary_on_headers("HX-Request")
@require_http_methods(["GET", "POST"])
def shadow(request, agent, document, environment):
    """GET: the shadow here, or choose a frozen version and see how it differs from live and
    the check against the runtime; POST: start it (no approval: users see nothing of it)."""
    doc = _document(request.agent, document)
    env = _environment(environment)
    if request.method == "GET":
        return _shadow_page(request, doc, env)
    version = None
    try:
        version = _shadow_version(doc, request)
        started = releases.shadow_start(
            version=version, environment=env, actor=request.user, **_confirmed(request)
        )
    except ApplicationError as exc:
        return _shadow_page(request, doc, env, error=exc, version=version)
    messages.success(
        request,
        f"{doc.key} v{started.version.number} runs as shadow in {env.key}. Runtimes take it with their next "
        "configuration; users still get only the live version.",
    )
    return redirect(_overview_url(request.agent))


@requires(Capability.VIEW_CONFIG)
@require_POST
def shadow_stop(request, agent, document, environment):
    doc = _document(request.agent, document)
    env = _environment(environment)
    try:
        releases.shadow_stop(
            document=doc, environment=env, actor=request.user, **_confirmed(request)
        )
    except ApplicationError as exc:
        return _shadow_page(request, doc, env, error=exc)
    messages.info(request, f"The shadow of {doc.key} in {env.key} is stopped.")
    return redirect(_overview_url(request.agent))


@requires(Capability.VIEW_CONFIG)
@require_POST
def shadow_promote(request, agent, document, environment):
    """A publish of the shadow's version (in a protected environment, a request)."""
    doc = _document(request.agent, document)
    env = _environment(environment)
    try:
        check_danger_confirmed(request, _promote_danger(request, doc, env))
        outcome = releases.shadow_promote(
            document=doc,
            environment=env,
            actor=request.user,
            version=_int(request.POST.get("version"), "version"),
            **_confirmed(request),
        )
    except ApplicationError as exc:
        return _shadow_page(request, doc, env, error=exc)
    if outcome.approval:
        number = outcome.approval.version.number
        messages.success(
            request,
            f"{doc.key} v{number} waits for approval in {env.key}: someone else with the "
            "approve permission must approve it. The shadow runs on until then.",
        )
    else:
        number = outcome.release.version.number
        messages.success(
            request, f"{doc.key} v{number} is live in {env.key}; its shadow is stopped."
        )
    return redirect(_overview_url(request.agent))
