"""The publish page: choose a version, see what it changes against what is live and the
checks against the target runtime, then publish (or ask for approval where protected) now,
or schedule it for a time (views.scheduling)."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods
from django.views.decorators.vary import vary_on_headers

from console.kernel.errors import ApplicationError
from console.kernel.policy import Capability, requires, user_can
from console.kernel.wording import RUNTIMES_TAKE_IT
from strategies.releases import selectors
from strategies.releases import services as releases
from strategies.releases.models import ScheduledGoLive
from strategies.releases.preview_hook import preview_summary
from strategies.releases.selectors.changes import change_record_latest, requires_change_record
from strategies.releases.services.change_records import change_record_words
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
from strategies.releases.views.scheduling import (
    schedule_context,
    schedule_from_form,
    time_typed_for_now,
    wants_schedule,
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
    error = schedule_error = None
    if wants_schedule(request):
        try:
            check_danger_confirmed(request, impact_danger(impact))
        except ApplicationError as exc:
            error = exc
        else:
            try:
                schedule_from_form(
                    request, version=version, environment=env, kind=ScheduledGoLive.Kind.PUBLISH
                )
            except ApplicationError as exc:
                schedule_error = exc  # shown at the time field
            else:
                return redirect(_overview_url(request.agent))
    elif typed := time_typed_for_now(request):
        schedule_error = typed  # a time typed, then the go-live-now button: nothing done
    elif request.method == "POST":
        try:
            check_danger_confirmed(request, impact_danger(impact))
            outcome = releases.release_publish(
                version=version, environment=env, actor=request.user, **_confirmed(request)
            )
        except ApplicationError as exc:
            error = exc
        else:
            if outcome.change_record is not None:
                record = outcome.change_record
                also = " and a second person's approval" if outcome.approval else ""
                messages.success(
                    request,
                    f"{doc.key} v{version.number} waits for change record {record.public_id} "
                    f"from {env.key}'s change system{also}; it goes live once approved.",
                )
                return redirect(
                    reverse("release-publish", args=[request.agent.key, doc.key, env.key])
                    + f"?version={version.number}"
                )
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
    change_record = (
        change_record_latest(environment=env, document=doc, content_hash=version.content_hash)
        if requires_change_record(env)
        else None
    )
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
        "requires_change_record": requires_change_record(env),
        "change_record": change_record,
        "change_record_words": change_record and change_record_words(change_record),
        # A refused publish shows the form again with what the person typed.
        "reason": request.POST.get("reason", "") if request.method == "POST" else "",
        "can_enable_sensitive": user_can(request.user, Capability.ENABLE_SENSITIVE, request.agent),
        "runtimes_take_it": RUNTIMES_TAKE_IT,
        **schedule_context(request, env, error=schedule_error),
    }
    return _page_or_preview(request, "releases/publish.html", context, error or schedule_error)
