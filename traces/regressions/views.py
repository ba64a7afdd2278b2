"""Regression set pages. Thin: parse the form, ask the services and selectors, render. Every
look at kept requests is in the access log; every change is audited by its service."""

from __future__ import annotations

from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console.kernel.errors import ApplicationError, ValidationFailed
from console.kernel.policy import (
    Capability,
    requires,
    user_can,
    user_can_check_regressions,
    user_can_manage_regressions,
)
from strategies.catalog.selectors import environment_list
from strategies.documents.models import Version
from traces import selectors as trace_selectors
from traces.regressions import checks, selectors, services


@require_GET
@requires(Capability.VIEW_TRACES)
def set_list_page(request, agent: str):
    sets = list(selectors.regression_sets(agent=request.agent).prefetch_related("required_in"))
    context = {
        "agent": request.agent,
        "sets": sets,
        "can_manage": user_can_manage_regressions(request.user, request.agent),
    }
    return TemplateResponse(request, "regressions/list.html", context)


def _version_wanted(text: str | None) -> int | None:
    text = (text or "").strip().lstrip("v")
    return int(text) if text.isascii() and text.isdigit() and int(text) > 0 else None


@require_GET
@requires(Capability.VIEW_TRACES)
def set_page(request, agent: str, pk: int):
    """The set's members against what is live in each environment and, with ?version=N,
    against that version: failing decisions side by side."""
    regression_set = selectors.regression_set_get(user=request.user, agent=request.agent, pk=pk)
    version = _version_wanted(request.GET.get("version"))
    context = _set_context(request, regression_set, version)
    return TemplateResponse(request, "regressions/set.html", context)


@require_POST
@requires(Capability.VIEW_TRACES)
def set_require_page(request, agent: str, pk: int):
    """The environments where a version goes live only when it passes the set (admin). A
    refusal shows the page again with the error at the field, nothing saved."""
    regression_set = selectors.regression_set_get(user=request.user, agent=request.agent, pk=pk)
    try:
        services.regression_set_require(
            actor=request.user,
            regression_set=regression_set,
            environments=request.POST.getlist("required_in"),
        )
    except ValidationFailed as exc:
        context = _set_context(request, regression_set, None)
        context.update(require_error=exc, required_keys=request.POST.getlist("required_in"))
        return TemplateResponse(request, "regressions/set.html", context, status=exc.status)
    return HttpResponseRedirect(
        reverse("regression-set-detail", kwargs={"agent": agent, "pk": regression_set.pk})
    )


def _set_context(request, regression_set, version: int | None) -> dict:
    members = list(selectors.members_of(regression_set))
    can_check = user_can_check_regressions(request.user, request.agent)
    columns, error = [], None
    if can_check:
        try:
            columns = selectors.set_page_columns(regression_set=regression_set, version=version)
        except ApplicationError as exc:
            error = exc
    services.regression_look_record(
        actor=request.user,
        regression_set=regression_set,
        agent=request.agent,
        detail={"members": len(members), "checked": [c.label for c in columns]},
    )
    by_member = {}
    for column in columns:
        for result in column.check.results:
            by_member.setdefault(result.key, []).append((column, result))
    rows = [(member, by_member.get(member.pk, [])) for member in members]
    context = {
        "agent": request.agent,
        "set": regression_set,
        "rows": rows,
        "columns": columns,
        "version": version,
        "versions": Version.objects.filter(document=regression_set.document)
        .order_by("-number")
        .values_list("number", "state"),
        "can_check": can_check,
        "can_manage": user_can_manage_regressions(request.user, request.agent),
        "check_error": error,
        "words": checks.expectation_words,
        "can_require": user_can(request.user, Capability.MANAGE_CATALOG, request.agent),
        "environments": environment_list(),
        "required_keys": [e.key for e in regression_set.required_in.all()],
    }
    return context


@require_POST
@requires(Capability.VIEW_TRACES)
def member_remove_page(request, agent: str, pk: int):
    """Remove a request from its set; a refusal (the last request of a required set) shows
    the set's page again with why at the member's row, nothing removed."""
    member = selectors.member_get(agent=request.agent, pk=pk)
    set_id = member.set_id
    try:
        services.member_remove(actor=request.user, member=member)
    except ApplicationError as exc:
        context = _set_context(request, member.set, None)
        context.update(remove_error=exc, remove_member=member.pk)
        return TemplateResponse(request, "regressions/set.html", context, status=exc.status)
    return HttpResponseRedirect(
        reverse("regression-set-detail", kwargs={"agent": agent, "pk": set_id})
    )


def _expectations(post) -> list[dict]:
    """The form's ticked expectations, as the API takes them."""
    found = []
    if post.get("want_item"):
        found.append({"kind": checks.ITEM_SELECTED, "item": post.get("item", "")})
    if post.get("want_source"):
        found.append(
            {
                "kind": checks.SOURCE_NOT_EXCLUDED,
                "source": post.get("source", ""),
                "reason": post.get("reason", ""),
            }
        )
    if post.get("want_status"):
        found.append({"kind": checks.STATUS_IN, "statuses": post.getlist("statuses")})
    if post.get("want_tokens"):
        tokens = post.get("tokens", "")
        found.append(
            {
                "kind": checks.INPUT_TOKENS_AT_MOST,
                "tokens": int(tokens) if tokens.isascii() and tokens.isdigit() else tokens,
            }
        )
    if post.get("want_same"):
        version = post.get("same_version", "")
        found.append(
            {
                "kind": checks.SAME_AS_RECORDED,
                "version": int(version) if version.isascii() and version.isdigit() else version,
            }
        )
    return found


@require_POST
def trace_keep(request, request_id: str):
    """The trace page's form: keep this request in a set (an existing one, or a new one made
    in the same step), with the ticked expectations and a note. Refused: the form again with
    what was typed and each error at its field, nothing saved."""
    trace = trace_selectors.trace_get_visible(
        user=request.user,
        request_id=request_id,
        environment=(request.POST.get("environment") or "").strip(),
    )
    post = request.POST
    expectations = _expectations(post)
    try:
        member = services.trace_keep(
            actor=request.user,
            trace=trace,
            set_id=post.get("set", ""),
            new_set={
                "name": post.get("new_name", ""),
                "keep_reason": post.get("keep_reason", ""),
                "retention_days": post.get("retention_days", ""),
            },
            expectations=expectations,
            note=post.get("note", ""),
        )
    except ApplicationError as exc:
        context = {
            "trace": trace,
            "card": selectors.keep_card(user=request.user, trace=trace),
            "form": post,
            "error": exc,
        }
        return TemplateResponse(request, "regressions/keep_page.html", context, status=exc.status)
    return HttpResponseRedirect(
        reverse("regression-set-detail", kwargs={"agent": trace.agent.key, "pk": member.set_id})
    )


@require_http_methods(["GET", "POST"])
@requires(Capability.VIEW_TRACES)
def grow_page(request, agent: str):
    """ "Add these requests to a set": a saved search's requests (the trace list's filters,
    or the trace page's pattern card) kept in a set of their strategy with the same
    expectations and note. Refused: the form again with each error at its field."""
    # The search stays in the address (the form posts back to it).
    grow = selectors.grow_search(user=request.user, agent=request.agent, query=request.GET)
    context = {
        "agent": request.agent,
        "grow": grow,
        "can_manage": user_can_manage_regressions(request.user, request.agent),
        "form": request.POST,
        "statuses": selectors.wire.STATUSES,
        "reasons": selectors.wire.REASON_CODES,
    }
    services.regression_look_record(
        actor=request.user,
        regression_set=None,
        agent=request.agent,
        detail={"search": grow.filters.as_dict(), "requests": len(grow.traces)},
    )
    if request.method == "POST":
        try:
            regression_set = _grow_set(request, grow)
            grown = services.members_grow(
                actor=request.user,
                regression_set=regression_set,
                traces=grow.traces,
                expectations=_expectations(request.POST),
                note=request.POST.get("note", ""),
            )
        except ApplicationError as exc:
            context["error"] = exc
            return TemplateResponse(request, "regressions/grow.html", context, status=exc.status)
        context.update(grown=grown, grown_set=regression_set)
    return TemplateResponse(request, "regressions/grow.html", context)


def _grow_set(request, grow):
    """The chosen set, of the search's strategy; otherwise an error at `set`."""
    chosen = next(
        (s for s in grow.sets if str(s.pk) == (request.POST.get("set") or "").strip()), None
    )
    if chosen is None:
        raise ValidationFailed(
            "Choose a set of the strategy the search names.",
            details=[
                {"path": "set", "code": "required", "message": "Choose one of the sets listed."}
            ],
        )
    return chosen


def _int_or_none(text) -> int | None:
    text = (text or "").strip()
    return int(text) if text.isascii() and text.isdigit() else None
