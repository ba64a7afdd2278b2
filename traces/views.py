"""Trace pages: search by request_id, list with filters, one trace, its export and snapshot.

Every look (page view, search, list, export, snapshot) is written to the access log. A trace
of an agent the user may not investigate answers exactly like a missing one. A request_id is
unique per environment: when the user may see it in several, they choose (`?environment=`).
"""

from __future__ import annotations

import json
from datetime import timedelta

from context_runtime.wire import DECISIONS, STATUSES
from django.http import HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from console.kernel.audit import AccessAction
from console.kernel.errors import ApplicationError
from console.kernel.policy import Capability, agents_where
from console.kernel.standby import lag_tolerant
from strategies.catalog.models import Environment
from traces import replay, selectors, services
from traces.filters import TraceFilters


@lag_tolerant
@require_GET
def trace_search(request):
    """A pasted request_id, trimmed and matched exactly: straight to the trace, or a choice
    when the user may see it in several environments."""
    selectors.trace_access_check(request.user)
    text = (request.GET.get("q") or "").strip()
    if not text:
        return TemplateResponse(request, "traces/search.html", {"q": ""})
    environment = (request.GET.get("environment") or "").strip()
    matches = selectors.trace_find(user=request.user, text=text, environment=environment)
    if len(matches) > 1:
        return _choose(request, text, matches)
    trace = matches[0] if matches else None
    # No exact match: close ones the user may see (another case, another environment).
    near = [] if trace else selectors.trace_near_matches(user=request.user, text=text)
    detail = {"q": text[:200], "found": trace is not None}
    if near:
        detail["suggested"] = [f"{t.request_id} ({t.environment.key})" for t in near]
    services.trace_look_record(
        actor=request.user, action=AccessAction.TRACE_SEARCH, trace=trace, detail=detail
    )
    if trace is not None:
        url = reverse("trace-detail", kwargs={"request_id": trace.request_id})
        if environment:
            url += "?" + urlencode({"environment": environment})
        return HttpResponseRedirect(url)
    context = {
        "q": text,
        "environment": environment,
        "not_found": True,
        "suggestions": [(t, selectors.trace_links(t)["detail"]) for t in near],
    }
    return TemplateResponse(request, "traces/search.html", context, status=404)


def _choose(request, request_id: str, matches) -> TemplateResponse:
    """The request_id exists in several environments the user may see: list them."""
    services.trace_look_record(
        actor=request.user,
        action=AccessAction.TRACE_SEARCH,
        detail={
            "q": request_id[:200],
            "found": True,
            "environments": [trace.environment.key for trace in matches],
        },
    )
    context = {
        "q": request_id,
        "matches": [(trace, selectors.trace_links(trace)["detail"]) for trace in matches],
    }
    return TemplateResponse(request, "traces/search.html", context)


def _visible(request, request_id: str):
    """The trace the URL names; `?environment=` picks one of several (else TraceAmbiguous)."""
    return selectors.trace_get_visible(
        user=request.user,
        request_id=request_id,
        environment=(request.GET.get("environment") or "").strip(),
    )


@lag_tolerant
@require_GET
@vary_on_headers("HX-Request")
def trace_list(request):
    selectors.trace_access_check(request.user)
    filters = TraceFilters.from_query(request.GET)
    page = selectors.trace_page_of(
        user=request.user, filters=filters, page_number=request.GET.get("page")
    )
    services.trace_look_record(
        actor=request.user, action=AccessAction.TRACE_LIST, detail={"filters": filters.as_dict()}
    )
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "page_obj": page,
        "traces": page.object_list,
        "filters": filters,
        "active_filters": filters.as_dict(),
        "querystring": query.urlencode(),
        "agents": agents_where(request.user, Capability.VIEW_TRACES),
        "environments": Environment.objects.all(),
        "statuses": STATUSES,
        "last_day": selectors.status_counts_last_day(user=request.user),
        "last_day_since": timezone.now() - timedelta(hours=24),
        "decisions": DECISIONS,
    }
    return TemplateResponse(request, "traces/list.html", context)


@lag_tolerant
@require_GET
def trace_detail(request, request_id: str):
    try:
        trace = _visible(request, request_id)
    except selectors.TraceAmbiguous as ambiguous:
        return _choose(request, request_id, ambiguous.matches)
    services.trace_look_record(actor=request.user, action=AccessAction.TRACE_VIEW, trace=trace)
    context = selectors.trace_page_context(user=request.user, trace=trace)
    context["replay_card"] = replay.replay_card(user=request.user, trace=trace)
    return TemplateResponse(request, "traces/detail.html", context)


@lag_tolerant
@require_GET
@vary_on_headers("HX-Request")
def trace_replay(request, request_id: str):
    """Re-run the engine on the trace's candidates with a version of its strategy (the
    recorded one, what is live now, a draft): the Replay card's answer — the result fragment
    for htmx (the form stays), a page with the whole card without JavaScript. Read-only;
    each replay is in the access log."""
    trace = _visible(request, request_id)
    wanted = (request.GET.get("version") or "").strip()
    context = {"trace": trace, "links": selectors.trace_links(trace)}
    if not request.htmx:  # the whole card, its form showing the version chosen
        selected = int(wanted) if wanted.isascii() and wanted.isdigit() else None
        context["replay_card"] = replay.replay_card(
            user=request.user, trace=trace, selected=selected
        )
    try:
        result = replay.trace_replay(user=request.user, trace=trace, version=wanted)
    except ApplicationError as exc:
        context["replay_error"] = exc
        status = exc.status
    else:
        services.trace_look_record(
            actor=request.user,
            action=AccessAction.TRACE_REPLAY,
            trace=trace,
            detail=replay.replay_detail(result),
        )
        context["replayed"] = result
        status = 200
    template = "traces/detail.html#replay_output" if request.htmx else "traces/replay_page.html"
    return TemplateResponse(request, template, context, status=status)


@lag_tolerant
@require_GET
def trace_export(request, request_id: str):
    """The trace as JSON (references and reasons; the snapshot is never exported)."""
    try:
        trace = _visible(request, request_id)
    except selectors.TraceAmbiguous as ambiguous:
        return _choose(request, request_id, ambiguous.matches)
    services.trace_look_record(actor=request.user, action=AccessAction.TRACE_EXPORT, trace=trace)
    response = JsonResponse(selectors.trace_export(trace), json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="trace-{trace.pk}.json"'
    return response


@require_POST
def trace_snapshot(request, request_id: str):
    """Decrypt and show the snapshot: needs the capability and a typed reason, logged.
    The form names the environment; without it, an id in several answers 409."""
    trace = _visible(request, request_id)
    context = {
        "trace": trace,
        "links": selectors.trace_links(trace),
        "snapshot": selectors.snapshot_state(user=request.user, trace=trace),
    }
    try:
        revealed = services.snapshot_reveal(
            user=request.user, trace=trace, reason=request.POST.get("reason", "")
        )
    except ApplicationError as exc:
        context["snapshot_error"] = exc
        status = exc.status
    else:
        context["revealed"] = revealed
        context["pretty"] = _pretty(revealed.text)
        status = 200
    template = "traces/detail.html#snapshot" if request.htmx else "traces/snapshot_page.html"
    return TemplateResponse(request, template, context, status=status)


def _pretty(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text
