"""The rollback page: back to a version that was live in the environment before, with a
preview of what changes (or the request for it, where the revert policy asks)."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods
from django.views.decorators.vary import vary_on_headers

from console.kernel.errors import ApplicationError, NotFound, ValidationFailed
from console.kernel.policy import Capability, requires, rollback_needs_approval
from console.kernel.wording import RUNTIMES_TAKE_IT
from strategies.releases import selectors
from strategies.releases import services as releases
from strategies.releases.views.lookups import (
    _asked_version,
    _confirmed,
    _document,
    _environment,
    _int,
    _overview_url,
    _page_or_preview,
)


# --- rollback ---------------------------------------------------------------------------------------------
@requires(Capability.ROLLBACK)
@vary_on_headers("HX-Request")
@require_http_methods(["GET", "POST"])
def rollback(request, agent, document, environment):
    doc = _document(request.agent, document)
    env = _environment(environment)
    release = selectors.live_release(document=doc, environment=env)
    if release is None:
        raise NotFound(
            f"Nothing of {doc.key} is live in {env.key}, so there is nothing to roll back."
        )
    choices = selectors.rollback_choices(release=release)
    error = target = None
    try:
        target = _rollback_target(request, release, choices)
        if request.method == "POST":
            outcome = releases.release_rollback(
                release=release, to_version=target, actor=request.user, **_confirmed(request)
            )
            if outcome.approval:
                messages.success(
                    request,
                    f"The rollback of {doc.key} in {env.key} to v{target.number} waits for "
                    "approval: someone else with the approve permission must approve it.",
                )
                return redirect(
                    reverse("approval-detail", args=[request.agent.key, outcome.approval.pk])
                )
            messages.success(
                request,
                f"{env.key} is back on {doc.key} v{target.number}. {RUNTIMES_TAKE_IT} The "
                "Runtimes card below shows which serve it.",
            )
            return redirect(_overview_url(request.agent))
    except ApplicationError as exc:
        error = exc
    context = {
        "agent": request.agent,
        "document": doc,
        "environment": env,
        "release": release,
        "choices": choices,
        "unreviewed": selectors.unreviewed_versions(release),
        "target": target,
        "needs_approval": rollback_needs_approval(env),
        "pending": selectors.pending_for(document=doc, environment=env),
        "preview": selectors.change_preview(version=target, environment=env) if target else None,
        "error": error,
        "runtimes_take_it": RUNTIMES_TAKE_IT,
    }
    return _page_or_preview(request, "releases/rollback.html", context, error)


def _rollback_target(request, release, choices):
    """The version asked for, as it is: never another one in its place (400 for an unknown
    one or one that is not a rollback target). On the page without a choice, the newest
    earlier release is preselected (None: there is none); a POST must name its version."""
    document = release.document
    number = _int(_asked_version(request), "version")
    if number is None:
        if request.method == "POST":
            raise ValidationFailed(
                "Choose the version to roll back to.",
                code="version_required",
                details=[{"path": "version", "code": "required", "message": "Choose a version."}],
            )
        return choices[0] if choices else None
    version = document.versions.filter(number=number).first()
    if version is None:
        raise ValidationFailed(
            f"{document.key} has no version {number}: nothing was rolled back.",
            code="unknown_version",
            details=[{"path": "version", "code": "does_not_exist", "message": f"No v{number}."}],
        )
    # Also checked by the service, in its transaction; here so the page shows no preview of it.
    releases.check_rollback_target(release=release, to_version=version)
    return version
