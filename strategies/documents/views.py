"""Pages for agents, documents and versions (htmx). Thin: parse, ask the policy
(`@requires`), call one service or selector, render. Fragments live in the page templates
as `{% partialdef %}` blocks and are rendered for htmx requests."""

from __future__ import annotations

from urllib.parse import urlencode

from context_runtime import diff, vocabulary
from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from console.kernel.errors import Conflict, Forbidden, PayloadTooLarge, ValidationFailed
from console.kernel.policy import Capability, check_user_can, requires, user_can, user_can_preview
from strategies.catalog.selectors import environment_list
from strategies.documents import selectors, services
from strategies.documents.forms import (
    NewStrategyForm,
    StrategyFieldsForm,
    errors_by_field,
    parse_json,
    pretty,
    profile_body_from_post,
    starter_body,
)
from strategies.documents.models import Document
from strategies.documents.regression_hook import regression_results

VERSIONS_PER_PAGE = 50

# Tabs of the agent page: (label, url name, agent passed as URL kwarg or as ?agent=, the
# capability that shows it). The other areas' pages are filtered to the agent.
AGENT_TABS = [
    ("Profile", "agent-detail", "kwarg", Capability.VIEW_CONFIG),
    ("Strategies", "agent-strategies", "kwarg", Capability.VIEW_CONFIG),
    ("Releases", "release-overview", "query", Capability.VIEW_CONFIG),
    ("Traces", "trace-list", "query", Capability.VIEW_TRACES),
    ("Alerts", "alerts-page", "kwarg", Capability.VIEW_TRACES),
    ("Access", "access-overview", "query", Capability.MANAGE_GRANTS),
]


def agent_tabs(agent, active: str, user=None) -> list[dict]:
    tabs = []
    for label, name, how, capability in AGENT_TABS:
        if user is not None and not user_can(user, capability, agent):
            continue
        if how == "kwarg":
            url = reverse(name, kwargs={"agent": agent.key})
        else:
            url = f"{reverse(name)}?{urlencode({'agent': agent.key})}"
        tabs.append({"label": label, "url": url, "active": name == active})
    return tabs


def _can(request, capability) -> bool:
    return user_can(request.user, capability, request.agent)


# --------------------------------------------------------------------------- agents


@require_GET
def agent_list(request):
    context = {
        "agents": selectors.agent_list(user=request.user),
        "environments": environment_list(),
    }
    for agent in context["agents"]:
        agent.document_rows = selectors.document_list(agent=agent)
    return TemplateResponse(request, "documents/agent_list.html", context)


def _profile_context(request, *, error=None) -> dict:
    agent = request.agent
    document = selectors.document_get(agent=agent, key=Document.PROFILE_KEY)
    draft = selectors.draft_get(document=document)
    latest = selectors.latest_frozen(document=document)
    shown = draft or latest
    environments = environment_list()
    body = shown.body if shown else {"sections": {}, "switches": {}}
    return {
        "agent": agent,
        "tabs": agent_tabs(agent, "agent-detail", request.user),
        "document": document,
        "draft": draft,
        "latest": latest,
        "shown": shown,
        "environments": environments,
        "grid": selectors.profile_grid(document=document, body=body, environments=environments),
        "present": _present_names(body),
        "can_edit": _can(request, Capability.EDIT_DRAFTS),
        "can_enable_sensitive": _can(request, Capability.ENABLE_SENSITIVE),
        "findings": selectors.document_validate(kind=document.kind, body=body),
        "error": error,
    }


def _present_names(body: dict) -> list[str]:
    names = [
        f"sections.{block}.{key}"
        for block, entries in (body.get("sections") or {}).items()
        if isinstance(entries, dict)
        for key in entries
    ]
    names += [f"switches.{name}" for name in (body.get("switches") or {})]
    return names


@require_GET
@vary_on_headers("HX-Request")
@requires(Capability.VIEW_CONFIG)
def agent_detail(request, agent):
    """The Profile tab: the contextSections grid and the pipeline switches."""
    return TemplateResponse(request, "documents/agent_profile.html", _profile_context(request))


@require_POST
@requires(Capability.EDIT_DRAFTS)
def profile_save(request, agent):
    """Save the grid: into the open draft (with its revision), or open a draft from it."""
    document = selectors.document_get(agent=request.agent, key=Document.PROFILE_KEY)
    draft = selectors.draft_get(document=document)
    base_version = draft or selectors.latest_frozen(document=document)
    base = base_version.body if base_version else {}
    grid = selectors.profile_grid(document=document, body=base, environments=environment_list())
    body = profile_body_from_post(request.POST, base=base, grid=grid)
    revision = request.POST.get("revision", "")
    error = None
    try:
        if draft is None:
            if revision:  # the grid showed a draft that is gone
                raise Conflict(
                    "The draft was frozen or discarded meanwhile.", code="stale_revision"
                )
            services.draft_create(document=document, body=body, actor=request.user)
        elif not revision.isdigit():  # the grid showed a version; someone opened a draft
            raise Conflict(
                f"{draft.author_label} opened draft v{draft.number} meanwhile.",
                code="draft_exists",
            )
        else:
            services.draft_update(
                draft=draft, body=body, revision=int(revision), actor=request.user
            )
    except (Conflict, Forbidden, ValidationFailed) as exc:
        error = exc
    context = _profile_context(request, error=error)
    status = error.status if error else 200
    if request.htmx:
        return TemplateResponse(
            request, "documents/agent_profile.html#profile-grid", context, status=status
        )
    if error is None:
        messages.success(request, "Profile draft saved.")
        return redirect("agent-detail", agent=agent)
    return TemplateResponse(request, "documents/agent_profile.html", context, status=status)


@require_http_methods(["GET", "POST"])
@requires(Capability.VIEW_CONFIG)
def agent_strategies(request, agent):
    """The Strategies tab, with the form to add a strategy (POST needs EDIT_DRAFTS)."""
    form = NewStrategyForm(request.POST or None)
    status = 200
    if request.method == "POST":
        check_user_can(
            request.user,
            Capability.EDIT_DRAFTS,
            request.agent,
            message="You cannot add strategies to this agent.",
        )
        if form.is_valid():
            try:
                document = services.document_create(
                    agent=request.agent,
                    key=form.cleaned_data["key"],
                    name=form.cleaned_data["name"],
                    actor=request.user,
                )
                services.draft_create(
                    document=document,
                    body=starter_body(document.kind),
                    note="New strategy",
                    actor=request.user,
                )
                return redirect("draft-edit", agent=agent, document=document.key)
            except (Conflict, ValidationFailed) as exc:
                form.add_error("key", exc.details[0]["message"] if exc.details else exc.message)
        status = 400
    context = {
        "agent": request.agent,
        "tabs": agent_tabs(request.agent, "agent-strategies", request.user),
        "documents": [
            d for d in selectors.document_list(agent=request.agent) if d.kind == "strategy"
        ],
        "environments": environment_list(),
        "form": form,
        "can_edit": _can(request, Capability.EDIT_DRAFTS),
    }
    return TemplateResponse(request, "documents/agent_strategies.html", context, status=status)


# --------------------------------------------------------------------------- documents, versions


@require_GET
@requires(Capability.VIEW_CONFIG)
def document_detail(request, agent, document):
    doc = selectors.document_get(agent=request.agent, key=document)
    versions = selectors.version_list(document=doc)
    frozen = [v for v in versions if not v.is_draft]
    page = Paginator(versions, VERSIONS_PER_PAGE).get_page(request.GET.get("page"))
    context = {
        "agent": request.agent,
        "document": doc,
        "versions": page.object_list,
        "page_obj": page,
        "draft": next((v for v in versions if v.is_draft), None),
        "latest": frozen[0] if frozen else None,
        "previous": frozen[1] if len(frozen) > 1 else None,
        "environments": environment_list(),
        "can_edit": _can(request, Capability.EDIT_DRAFTS),
        "can_preview": user_can_preview(request.user, request.agent),
    }
    return TemplateResponse(request, "documents/document_detail.html", context)


@require_GET
@requires(Capability.VIEW_CONFIG)
def version_detail(request, agent, document, number):
    doc = selectors.document_get(agent=request.agent, key=document)
    version = selectors.version_get(document=doc, number=number)
    live = [env for env, v in selectors.live_versions(document=doc).items() if v.pk == version.pk]
    context = {
        "agent": request.agent,
        "document": doc,
        "version": version,
        "live_in": live,
        "unreviewed_in": selectors.unreviewed_in(document=doc, version=version),
        "json": pretty(version.body, doc.kind),
        "changes": selectors.version_diff(document=doc, before=version.parent, after=version),
        "before_label": f"v{version.parent.number}" if version.parent else "",
        "after_label": f"v{version.number}",
        "can_edit": _can(request, Capability.EDIT_DRAFTS),
        "has_draft": selectors.draft_get(document=doc) is not None,
        "runtime_checks": [
            selectors.document_validate(kind=doc.kind, body=version.body, environment=env)
            for env in environment_list()
        ],
    }
    return TemplateResponse(request, "documents/version_detail.html", context)


@require_GET
@requires(Capability.VIEW_CONFIG)
def version_compare(request, agent, document):
    """Any two versions side by side, field by field (?a=1&b=3)."""
    doc = selectors.document_get(agent=request.agent, key=document)
    versions = selectors.version_list(document=doc)
    numbers = [v.number for v in versions]
    a = _pick(request.GET.get("a"), numbers, fallback=numbers[1] if len(numbers) > 1 else None)
    b = _pick(request.GET.get("b"), numbers, fallback=numbers[0] if numbers else None)
    before = next((v for v in versions if v.number == a), None)
    after = next((v for v in versions if v.number == b), None)
    context = {
        "agent": request.agent,
        "document": doc,
        "versions": versions,
        "a": a,
        "b": b,
        "before": before,
        "after": after,
        "changes": selectors.version_diff(document=doc, before=before, after=after)
        if before and after
        else [],
        "before_label": f"v{a}",
        "after_label": f"v{b}",
    }
    return TemplateResponse(request, "documents/version_compare.html", context)


def _pick(value, numbers: list[int], fallback):
    return int(value) if value and value.isdigit() and int(value) in numbers else fallback


# --------------------------------------------------------------------------- drafts


@require_POST
@requires(Capability.EDIT_DRAFTS)
def draft_create(request, agent, document):
    """Open a draft from a version (`from`) or the latest one."""
    doc = selectors.document_get(agent=request.agent, key=document)
    source = request.POST.get("from", "")
    base = (
        selectors.version_get(document=doc, number=source)
        if source
        else selectors.latest_frozen(document=doc)
    )
    try:
        services.draft_create(
            document=doc,
            body=base.body if base else starter_body(doc.kind),
            parent=base,
            note=request.POST.get("note", ""),
            actor=request.user,
        )
    except Conflict as exc:
        messages.info(request, f"{exc.message} Continue it here.")
    return redirect("draft-edit", agent=agent, document=document)


def _editor_body(request, doc, draft):
    """(body, JSON finding, which half was edited) from an editor POST.

    The JSON half holds every field; the structured half overrides the fields it knows
    (strategies only). As-you-type requests say which half was typed in (`edited`); a plain
    save without JavaScript uses the fields only if they differ from the saved draft."""
    body, problem = parse_json(request.POST.get("json", ""))
    if doc.kind != vocabulary.STRATEGY:
        return body, problem, "json"
    if not any(name in request.POST for name in StrategyFieldsForm.base_fields):
        return body, problem, "json"
    form = StrategyFieldsForm(request.POST, initial=StrategyFieldsForm.initial_from(draft.body))
    form.is_valid()
    edited = request.POST.get("edited") or ("form" if form.has_changed() else "json")
    if edited != "form":
        return body, problem, "json"
    return form.body_over(body if problem is None else draft.body), problem, "form"


def _field_findings(report) -> dict[str, list[dict]]:
    """Per structured field, its findings with what each one blocks: "save" (the structure)
    or only "publish" (what the chosen environment's runtime lacks); the editor shows them in
    different styles and words."""
    save, publish = errors_by_field(report.errors), errors_by_field(report.manifest_errors)
    return {
        name: [{"message": m, "blocks": "save"} for m in save[name]]
        + [{"message": m, "blocks": "publish"} for m in publish.get(name, [])]
        for name in save
    }


def _editor_context(request, doc, draft, *, body, problem=None, environment_key="", **extra):
    environments = environment_list()
    environment = next((e for e in environments if e.key == environment_key), None)
    report = (
        selectors.document_validate(kind=doc.kind, body=body, environment=environment)
        if problem is None
        else selectors.ValidationReport(errors=[problem])
    )
    return {
        "agent": request.agent,
        "document": doc,
        "draft": draft,
        "body": body,
        "field_errors": _field_findings(report) if doc.kind == vocabulary.STRATEGY else {},
        "fields": StrategyFieldsForm(initial=StrategyFieldsForm.initial_from(body))
        if doc.kind == vocabulary.STRATEGY
        else None,
        "environments": environments,
        "environment": environment,
        "report": report,
        "can_enable_sensitive": _can(request, Capability.ENABLE_SENSITIVE),
        # Each regression set of the strategy, checked with what is typed (issue 35).
        "regression_results": regression_results(
            user=request.user,
            agent=request.agent,
            document_key=doc.key,
            body=body,
            label="the draft",
        )
        if doc.kind == vocabulary.STRATEGY and problem is None and not report.errors
        else None,
        **extra,
    }


@require_http_methods(["GET", "POST"])
@vary_on_headers("HX-Request")
@requires(Capability.EDIT_DRAFTS)
def draft_edit(request, agent, document):
    doc = selectors.document_get(agent=request.agent, key=document)
    draft = selectors.draft_get(document=doc)
    if draft is None:
        messages.info(request, "There is no open draft; open one from a version first.")
        return redirect("document-detail", agent=agent, document=document)
    if request.method == "GET":
        # Default to the first environment in promotion order, so runtime findings show at once.
        environment_key = request.GET.get("environment")
        if environment_key is None:
            first = environment_list()[:1]
            environment_key = first[0].key if first else ""
        context = _editor_context(
            request, doc, draft, body=draft.body, environment_key=environment_key
        )
        context.update(json=pretty(draft.body, doc.kind), revision=draft.revision, note=draft.note)
        return TemplateResponse(request, "documents/draft_edit.html", context)

    environment_key = request.POST.get("environment", "")
    body, problem, _edited = _editor_body(request, doc, draft)
    # "Save mine anyway" after a conflict sends the revision the person has now seen.
    revision = request.POST.get("overwrite") or request.POST.get("revision", "")
    kept = {
        "json": request.POST.get("json", ""),
        "note": request.POST.get("note", ""),
        "revision": request.POST.get("revision", ""),
    }
    if problem is not None:
        error = ValidationFailed(problem["message"], details=[problem])
        context = _editor_context(
            request,
            doc,
            draft,
            body=body,
            problem=problem,
            environment_key=environment_key,
            **kept,
        )
        context["save_error"] = error
        return TemplateResponse(request, "documents/draft_edit.html", context, status=400)
    try:
        services.draft_update(
            draft=draft,
            body=body,
            revision=int(revision) if revision.isdigit() else 0,
            note=kept["note"],
            actor=request.user,
        )
    except Conflict as exc:
        current = selectors.draft_get(document=doc)
        context = _editor_context(
            request, doc, draft, body=body, environment_key=environment_key, **kept
        )
        context.update(
            json=pretty(body, doc.kind),
            conflict=exc,
            current=current,
            current_saved_by=selectors.last_saved_by(version=current) if current else "",
            their_changes=diff.diff_bodies(doc.kind, body, current.body) if current else [],
        )
        return TemplateResponse(request, "documents/draft_edit.html", context, status=409)
    except (Forbidden, ValidationFailed, PayloadTooLarge) as exc:
        context = _editor_context(
            request, doc, draft, body=body, environment_key=environment_key, **kept
        )
        context.update(json=pretty(body, doc.kind), save_error=exc)
        return TemplateResponse(request, "documents/draft_edit.html", context, status=exc.status)
    if request.POST.get("then") == "freeze":
        draft.refresh_from_db()
        services.version_freeze(draft=draft, revision=draft.revision, actor=request.user)
        messages.success(request, f"Version {draft.number} frozen. It can no longer change.")
        return redirect("version-detail", agent=agent, document=document, number=draft.number)
    messages.success(request, f"Draft v{draft.number} saved.")
    url = reverse("draft-edit", kwargs={"agent": agent, "document": document})
    return redirect(f"{url}?environment={environment_key}" if environment_key else url)


def _open_draft(request, document: str, *, missing: str, code: str | None = None):
    """(document, its open draft) for an action on the draft; 409 with `missing` when the
    draft was frozen or discarded since the page was loaded."""
    doc = selectors.document_get(agent=request.agent, key=document)
    draft = selectors.draft_get(document=doc)
    if draft is None:
        raise Conflict(missing, code=code)
    return doc, draft


def _back_to_profile(request, doc) -> bool:
    """The profile grid's Freeze and Discard buttons send next=profile to come back to it."""
    return doc.kind == vocabulary.PROFILE and request.POST.get("next") == "profile"


@require_POST
@requires(Capability.EDIT_DRAFTS)
def draft_validate(request, agent, document):
    """As-you-type: findings at their paths, and the other half of the editor brought in
    line with what was typed (htmx out-of-band swap)."""
    doc, draft = _open_draft(
        request, document, missing="The draft was frozen or discarded meanwhile; reload the page."
    )
    body, problem, edited = _editor_body(request, doc, draft)
    context = _editor_context(
        request,
        doc,
        draft,
        body=body,
        problem=problem,
        environment_key=request.POST.get("environment", ""),
    )
    context.update(
        edited=edited, json=pretty(body, doc.kind) if problem is None else None, oob=True
    )
    return TemplateResponse(request, "documents/draft_edit.html#validation-response", context)


@require_POST
@requires(Capability.EDIT_DRAFTS)
def draft_freeze(request, agent, document):
    doc, draft = _open_draft(
        request, document, missing="There is no open draft to freeze.", code="no_draft"
    )
    revision = request.POST.get("revision", "")
    frozen = services.version_freeze(
        draft=draft,
        revision=int(revision) if revision.isdigit() else None,
        note=request.POST.get("note") or None,
        actor=request.user,
    )
    messages.success(request, f"Version {frozen.number} frozen. It can no longer change.")
    if _back_to_profile(request, doc):
        return redirect("agent-detail", agent=agent)
    return redirect("version-detail", agent=agent, document=document, number=frozen.number)


@require_POST
@requires(Capability.EDIT_DRAFTS)
def draft_discard(request, agent, document):
    doc, draft = _open_draft(
        request, document, missing="There is no open draft to discard.", code="no_draft"
    )
    services.draft_discard(draft=draft, actor=request.user)
    messages.success(request, f"Draft v{draft.number} discarded.")
    if _back_to_profile(request, doc):
        return redirect("agent-detail", agent=agent)
    return redirect("document-detail", agent=agent, document=document)
