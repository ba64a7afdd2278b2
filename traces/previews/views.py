"""Impact preview pages: ask for one (version, environment, window), watch its progress (htmx
polls every second; without JavaScript the page says to reload), cancel it, read its report,
and see one trace's two selections side by side. Thin: parse, ask the policy, call one
service or selector, render."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from console.health import work_waits_because
from console.kernel.errors import ApplicationError, NotFound, ValidationFailed
from console.kernel.policy import Capability, check_user_can_preview, requires
from strategies.catalog.selectors import environment_get, environment_list
from strategies.documents.models import Document
from traces.previews import selectors, services
from traces.previews.models import Preview
from traces.regressions import selectors as regression_selectors

WINDOW_DAYS = (1, 3, 7, 14, 30)


def _document(agent, key: str) -> Document:
    document = Document.objects.filter(agent=agent, key=key, kind=Document.Kind.STRATEGY).first()
    if document is None:
        raise NotFound(f"{agent.key} has no strategy '{key}'.")
    return document


def _preview(request, pk: int) -> Preview:
    preview = selectors.preview_get(user=request.user, pk=pk)
    if preview.agent_id != request.agent.pk:
        raise NotFound("No such preview.")
    return preview


@requires(Capability.VIEW_TRACES)
@require_http_methods(["GET", "POST"])
def preview_new(request, agent, document):
    """GET: choose a version, an environment and a window; POST: ask for the preview."""
    check_user_can_preview(request.user, request.agent)
    doc = _document(request.agent, document)
    versions = list(doc.versions.order_by("-number"))
    source = request.POST if request.method == "POST" else request.GET
    chosen = {
        "version": source.get("version") or (str(versions[0].number) if versions else ""),
        "environment": source.get("environment", ""),
        "days": source.get("days", "7"),
    }
    error = None
    if request.method == "POST":
        try:
            version = next((v for v in versions if str(v.number) == chosen["version"]), None)
            if version is None:
                raise ValidationFailed(f"{doc.key} has no version {chosen['version']}.")
            environment = environment_get(key=chosen["environment"])
            days = int(chosen["days"]) if chosen["days"].isdigit() else 7
            start, end = services.default_window()
            preview, reused = services.preview_request(
                actor=request.user,
                version=version,
                environment=environment,
                window_start=end - timedelta(days=days),
                window_end=end,
            )
        except ApplicationError as exc:
            error = exc
        else:
            if reused:
                messages.info(request, "The same preview was asked for already: here it is.")
            return redirect("preview-detail", agent=request.agent.key, pk=preview.pk)
    context = {
        "agent": request.agent,
        "document": doc,
        "versions": versions,
        "environments": environment_list(),
        "window_days": WINDOW_DAYS,
        "chosen": chosen,
        "error": error,
        "recent": Preview.objects.filter(document=doc).select_related("environment")[:10],
    }
    return TemplateResponse(
        request, "previews/new.html", context, status=error.status if error else 200
    )


def _detail_context(request, preview: Preview) -> dict:
    state = selectors.effective_state(preview)
    return {
        "agent": request.agent,
        "preview": preview,
        "state": state,
        "finished": selectors.is_finished(preview),
        "percent": selectors.progress_percent(preview),
        "failure": selectors.failure_words(preview),
        "waiting": (work_waits_because() or "") if state == Preview.State.QUEUED else "",
        "coverage": selectors.coverage_words(preview),
        "view": selectors.report_view(preview.report) if state == Preview.State.COMPLETE else None,
        "days": max(1, round((preview.window_end - preview.window_start) / timedelta(days=1))),
        "now": timezone.now(),
        # The version's result against each regression set of the strategy (issue 35).
        "regressions": regression_selectors.body_results(
            user=request.user,
            agent=request.agent,
            document_key=preview.document.key,
            body=preview.body,
            label=f"v{preview.version_number}",
        )
        if state == Preview.State.COMPLETE
        else None,
    }


@requires(Capability.VIEW_TRACES)
@vary_on_headers("HX-Request")
@require_http_methods(["GET"])
def preview_detail(request, agent, pk):
    """The preview: its progress while it runs (htmx polls the #preview-body partial every
    second until it is finished), then its report."""
    preview = _preview(request, pk)
    context = _detail_context(request, preview)
    if not request.htmx or context["finished"]:
        # A look at the report (request ids) is in the access log: the page, and the poll
        # that brings the finished report into it.
        services.preview_viewed(actor=request.user, preview=preview)
    template = "previews/detail.html"
    if request.htmx:
        template += "#preview-body"
    return TemplateResponse(request, template, context)


@requires(Capability.VIEW_TRACES)
@require_POST
def preview_cancel(request, agent, pk):
    preview = _preview(request, pk)
    try:
        services.preview_cancel(actor=request.user, preview=preview)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, "Cancelled: the preview stops at its next batch.")
    return redirect(reverse("preview-detail", kwargs={"agent": request.agent.key, "pk": pk}))


@requires(Capability.VIEW_TRACES)
@require_http_methods(["GET"])
def preview_sidebyside(request, agent, pk, request_id):
    """One trace of the window replayed with the live version and the previewed one."""
    preview = _preview(request, pk)
    pair = selectors.preview_side_by_side(preview=preview, request_id=request_id)
    services.preview_viewed(actor=request.user, preview=preview, detail={"request_id": request_id})
    return TemplateResponse(
        request,
        "previews/side_by_side.html",
        {"agent": request.agent, "preview": preview, "pair": pair},
    )
