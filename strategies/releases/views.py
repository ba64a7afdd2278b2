"""Release pages: the documents × environments grid, publish / approve / rollback with a
preview of what changes, shadow releases (start, stop, promote), and the history timeline."""

from __future__ import annotations

import json
from datetime import datetime

from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import ngettext
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from console.kernel.errors import ApplicationError, NotFound, ValidationFailed
from console.kernel.policy import (
    Capability,
    agents_where,
    requires,
    rollback_needs_approval,
    user_can,
    user_can_decide_approval,
    user_can_withdraw_approval,
)
from strategies.catalog.models import Environment
from strategies.catalog.selectors import environment_get, environment_list
from strategies.documents.models import Document
from strategies.releases import selectors
from strategies.releases import services as releases
from strategies.releases.models import ApprovalRequest, Rollout
from strategies.releases.plans import ALL_AT_ONCE, CUSTOM, STAGED, TEMPLATE_LABELS, TEMPLATES
from strategies.releases.preview_hook import preview_summary


# --- lookups from the URL (404 for anything unknown) -------------------------------------------------
def _document(agent, key: str) -> Document:
    document = Document.objects.filter(agent=agent, key=key).first()
    if document is None:
        raise NotFound(f"{agent.key} has no document '{key}'.")
    return document


def _environment(key: str) -> Environment:
    return environment_get(key=key)


def _int(value, name: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ValidationFailed(f"{name} must be a whole number.") from exc


def _version(document: Document, number) -> object:
    number = _int(number, "version")
    version = (
        document.versions.filter(number=number).first()
        if number
        else document.versions.order_by("-number").first()
    )
    if version is None:
        raise NotFound(
            f"{document.key} has no version {number}."
            if number
            else f"{document.key} has no versions yet."
        )
    return version


def _overview_url(agent) -> str:
    return f"{reverse('release-overview')}?agent={agent.key}"


def _approval(request, pk):
    approval = selectors.approval_get(agent=request.agent, pk=pk)
    if approval is None:
        raise NotFound("No such approval request.")
    return approval


# --- what the publish and rollback pages share ----------------------------------------------------
def _asked_version(request):
    """The version chosen on a publish or rollback page: the form's on POST, the version
    picker's (?version=) on GET."""
    source = request.POST if request.method == "POST" else request.GET
    return source.get("version")


def _confirmed(request) -> dict:
    """What the confirm dialog sends with every release move: the reason (kept in the history
    and the audit log) and the release revision the person saw (a stale one gets 409)."""
    return {
        "reason": request.POST.get("reason", "").strip(),
        "expected_revision": _int(request.POST.get("revision"), "revision"),
    }


def _page_or_preview(request, template: str, context: dict, error) -> TemplateResponse:
    """The whole page, or only its #preview partial when htmx asks for another version's
    preview (GET); with the refusal's status when a POST was refused."""
    if request.htmx and request.method == "GET":
        template += "#preview"
    return TemplateResponse(request, template, context, status=error.status if error else 200)


# --- overview ------------------------------------------------------------------------------------------
@require_http_methods(["GET"])
def overview(request):
    """Per agent where the user may view configuration: documents × environments (sg-test →
    bank-uat → prod), live versions, pending approvals and the actions this user may take."""
    visible = list(agents_where(request.user, Capability.VIEW_CONFIG).order_by("key"))
    chosen = request.GET.get("agent", "")
    # Archived agents leave the picker and the full list; their own tab (?agent=) still shows.
    listed = [a for a in visible if a.archived_at is None or a.key == chosen]
    agents = [a for a in visible if a.key == chosen] if chosen else listed
    grids = [
        (
            agent,
            selectors.release_grid(user=request.user, agent=agent),
            selectors.promotion_pairs(user=request.user, agent=agent),
        )
        for agent in agents
    ]
    return TemplateResponse(
        request,
        "releases/overview.html",
        {
            "grids": grids,
            "visible_agents": listed,
            "chosen": chosen,
            "environments": environment_list(),
            "pending": selectors.pending_approvals(agents=agents),
            "can_manage_tokens": user_can(request.user, Capability.MANAGE_TOKENS),
        },
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
    error = None
    if request.method == "POST":
        try:
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
                messages.success(request, f"{doc.key} v{version.number} is live in {env.key}.")
            return redirect(_overview_url(request.agent))
    preview = selectors.change_preview(version=version, environment=env)
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
        # The saved impact preview of this version here (traces.previews, through the hook).
        "impact": preview_summary(user=request.user, version=version, environment=env),
        "error": error,
        # A refused publish shows the form again with what the person typed.
        "reason": request.POST.get("reason", "") if request.method == "POST" else "",
        "can_enable_sensitive": user_can(request.user, Capability.ENABLE_SENSITIVE, request.agent),
    }
    return _page_or_preview(request, "releases/publish.html", context, error)


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
                f"{env.key} is back on {doc.key} v{target.number}. Runtimes connected to the "
                "config stream take it within a second, polling ones at their next poll: the "
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


# --- approvals -----------------------------------------------------------------------------------------------
@requires(Capability.VIEW_CONFIG)
@require_http_methods(["GET"])
def approval_detail(request, agent, pk):
    approval = _approval(request, pk)
    return TemplateResponse(
        request, "releases/approval.html", _approval_context(request, approval, error=None)
    )


def _approval_refused(request, pk, error):
    """The approval page again (as it now stands) with the refusal and its status."""
    approval = selectors.approval_get(agent=request.agent, pk=pk)
    return TemplateResponse(
        request,
        "releases/approval.html",
        _approval_context(request, approval, error=error),
        status=error.status,
    )


def _verb(approval) -> str:
    """What the request asks for, as a verb: "publish" or "roll back to"."""
    return "roll back to" if approval.kind == ApprovalRequest.Kind.ROLLBACK else "publish"


def _approval_context(request, approval, error):
    return {
        "agent": request.agent,
        "approval": approval,
        "preview": selectors.change_preview(
            version=approval.version, environment=approval.environment
        ),
        "impact": None
        if approval.kind == ApprovalRequest.Kind.ROLLBACK
        else preview_summary(
            user=request.user, version=approval.version, environment=approval.environment
        ),
        "can_decide": user_can_decide_approval(request.user, approval),
        "is_requester": approval.requested_by_id == request.user.pk,
        "can_withdraw": user_can_withdraw_approval(request.user, approval),
        "is_rollback": approval.kind == ApprovalRequest.Kind.ROLLBACK,
        "withdraw_lines": [
            f"The request to {_verb(approval)} {approval.document.key} "
            f"v{approval.version.number} in {approval.environment.key} is withdrawn: "
            "approvers no longer see it.",
            f"What is live in {approval.environment.key} does not change.",
        ],
        "error": error,
    }


@requires(Capability.APPROVE)
@require_POST
def approval_decide(request, agent, pk):
    approval = _approval(request, pk)
    decision = request.POST.get("decision")
    note = request.POST.get("reason", "").strip()
    try:
        if decision == "approve":
            releases.approval_approve(approval=approval, actor=request.user, note=note)
            if approval.kind == ApprovalRequest.Kind.ROLLOUT:
                messages.success(
                    request,
                    f"Approved: {approval.rollout.key} runs — v{approval.version.number} of "
                    f"{approval.document.key} rolls out in {approval.environment.key}.",
                )
                return redirect(_rollout_url(approval.rollout))
            messages.success(
                request,
                f"Approved: {approval.document.key} v{approval.version.number} is live in "
                f"{approval.environment.key}"
                + (
                    " again (rolled back)."
                    if approval.kind == ApprovalRequest.Kind.ROLLBACK
                    else "."
                ),
            )
        elif decision == "reject":
            releases.approval_reject(approval=approval, actor=request.user, note=note)
            messages.info(
                request,
                f"Rejected the {approval.kind} of {approval.document.key} "
                f"v{approval.version.number}.",
            )
        else:
            raise ValidationFailed("Choose approve or reject.")
    except ApplicationError as exc:
        return _approval_refused(request, pk, exc)
    return redirect(_overview_url(request.agent))


@requires(Capability.VIEW_CONFIG)
@require_POST
def approval_withdraw(request, agent, pk):
    """The requester withdraws their own pending request, with a reason (audited)."""
    approval = _approval(request, pk)
    try:
        releases.approval_withdraw(
            approval=approval, actor=request.user, reason=request.POST.get("reason", "")
        )
    except ApplicationError as exc:
        return _approval_refused(request, pk, exc)
    messages.info(
        request,
        f"Withdrawn: the {approval.kind} of {approval.document.key} v{approval.version.number} "
        f"in {approval.environment.key} no longer waits for approval.",
    )
    return redirect(_overview_url(request.agent))


# --- history ------------------------------------------------------------------------------------------------
@requires(Capability.VIEW_CONFIG)
@require_http_methods(["GET"])
def history(request, agent):
    document_key = request.GET.get("document", "")
    environment_key = request.GET.get("environment", "")
    page = selectors.history_page(
        agent=request.agent,
        document_key=document_key,
        environment_key=environment_key,
        page=request.GET.get("page", 1),
    )
    query = request.GET.copy()
    query.pop("page", None)
    return TemplateResponse(
        request,
        "releases/history.html",
        {
            "agent": request.agent,
            "page_obj": page,
            "querystring": query.urlencode(),
            "documents": Document.objects.filter(agent=request.agent).order_by("kind", "key"),
            "environments": environment_list(),
            "document_key": document_key,
            "environment_key": environment_key,
        },
    )


# --- promotion ------------------------------------------------------------------------------------------
@requires(Capability.VIEW_CONFIG)
@require_http_methods(["GET", "POST"])
def promote(request, agent):
    """GET: what "publish to the target what is live in the source" would change, per
    document (one, or all of the agent's), with the checks against the target runtime;
    POST: do it, all or nothing (the service checks the publish rights)."""
    source_of = request.POST if request.method == "POST" else request.GET
    pairs = selectors.promotion_pairs(user=request.user, agent=request.agent)
    envs = environment_list()
    default_source, default_target = pairs[-1] if pairs else (envs[0], envs[-1])
    source = _environment(source_of.get("source") or default_source.key)
    target = _environment(source_of.get("target") or default_target.key)
    document_key = source_of.get("document", "")
    documents = [_document(request.agent, document_key)] if document_key else None
    error = None
    if request.method == "POST":
        try:
            outcome = releases.release_promote(
                agent=request.agent,
                source=source,
                target=target,
                documents=documents,
                actor=request.user,
                reason=request.POST.get("reason", ""),
            )
        except ApplicationError as exc:
            error = exc
        else:
            messages.success(request, _promotion_message(outcome))
            return redirect(_overview_url(request.agent))
    rows = selectors.promotion_preview(
        agent=request.agent, source=source, target=target, documents=documents
    )
    changing = [row for row in rows if row.changes]
    context = {
        "agent": request.agent,
        "source": source,
        "target": target,
        "document_key": document_key,
        "rows": rows,
        "changing": changing,
        "blocked": [row for row in changing if row.preview.blocking or row.pending],
        "error": error,
        "reason": request.POST.get("reason", "") if request.method == "POST" else "",
    }
    return TemplateResponse(
        request, "releases/promote.html", context, status=error.status if error else 200
    )


def _promotion_message(outcome) -> str:
    """E.g. "Promoted bank-uat → prod: 2 wait for approval (a v3, b v2); 1 unchanged."."""

    def listed(items) -> str:
        return ", ".join(f"{i.document.key} v{i.to_version}" for i in items)

    parts = []
    if outcome.published:
        parts.append(f"{len(outcome.published)} live now ({listed(outcome.published)})")
    if outcome.requested:
        waiting = ngettext("waits", "wait", len(outcome.requested))
        parts.append(
            f"{len(outcome.requested)} {waiting} for approval ({listed(outcome.requested)})"
        )
    unchanged = len(outcome.items) - len(outcome.published) - len(outcome.requested)
    if unchanged:
        parts.append(f"{unchanged} unchanged")
    return f"Promoted {outcome.source.key} → {outcome.target.key}: " + "; ".join(parts) + "."


# --- staged rollouts (issue 23) ---------------------------------------------------------------------
ROLLOUT_ACTIONS = releases.ROLLOUT_OPERATOR_ACTIONS
ROLLOUT_DONE = {
    "pause": "is paused: runtimes keep its share, the guards no longer move it on",
    "resume": "runs again; its step's bake starts now",
    "advance": "moved on",
    "finish": "is finished: the new version is live",
    "stop": "is stopped: runtimes serve the live version alone again",
}


def _rollout(request, pk: int):
    rollout = selectors.rollout_get(agent=request.agent, key=f"ro-{pk}")
    if rollout is None:
        raise NotFound(f"{request.agent.key} has no rollout ro-{pk}.")
    return rollout


def _rollout_url(rollout) -> str:
    return reverse("rollout-page", args=[rollout.document.agent.key, rollout.pk])


def _plan_chart(rollout) -> dict:
    """The plan as a step chart (share over the bakes, drawn with SVG attributes): one bar
    per step, its state (done, now, next) and where it starts on the time axis."""
    bars, start = [], 0
    total = sum(int(step["bake_seconds"]) for step in rollout.plan) or 1
    for index, step in enumerate(rollout.plan):
        bake = int(step["bake_seconds"])
        if index < rollout.step or rollout.state == rollout.State.COMPLETED:
            state = "done"
        elif index == rollout.step and rollout.active:
            state = "now"
        else:
            state = "next"
        bars.append(
            {
                "index": index,
                "number": index + 1,
                "x": start,
                "width": bake,
                "height": max(int(round(float(step["share"]) * 100)), 2),
                "y": 100 - max(int(round(float(step["share"]) * 100)), 2),
                "percent": int(round(float(step["share"]) * 100)),
                "minutes": round(bake / 60, 1),
                "state": state,
            }
        )
        start += bake
    return {"bars": bars, "total": total}


def _rollout_context(request, rollout, *, error=None) -> dict:
    now = timezone.now()
    baking = rollout.state in rollout.SERVED_STATES and rollout.step_started_at is not None
    elapsed = int((now - rollout.step_started_at).total_seconds()) if baking else None
    guards = [
        {
            **guard,
            "label": guard.get("name", "").replace("_", " "),
            "request_ids": selectors.evidence_request_ids(guard.get("evidence")),
        }
        for guard in rollout.guards or []
    ]
    return {
        "agent": request.agent,
        "rollout": rollout,
        "elapsed": elapsed,
        "elapsed_minutes": round(elapsed / 60, 1) if elapsed is not None else None,
        "bake_minutes": round(rollout.bake_seconds / 60, 1),
        "bake_left": max(rollout.bake_seconds - elapsed, 0) if elapsed is not None else None,
        "guards": guards,
        "evidence_ids": selectors.evidence_request_ids(rollout.evidence),
        "chart": _plan_chart(rollout),
        "actions": selectors.rollout_actions(user=request.user, rollout=rollout),
        "can_view_traces": user_can(request.user, Capability.VIEW_TRACES, request.agent),
        "approval": rollout.approvals.order_by("-id").first(),
        # The revision the page was opened at: the polled status says when it moved on.
        "seen": _int(request.GET.get("seen"), "seen") or rollout.revision,
        "log": [
            {**entry, "when": datetime.fromisoformat(entry["at"])}
            for entry in reversed(rollout.log or [])
        ],
        "error": error,
        "can_watch_rollback": rollout.watching
        and user_can(request.user, Capability.ROLLBACK, request.agent),
    }


@requires(Capability.VIEW_CONFIG)
@vary_on_headers("HX-Request")
@require_http_methods(["GET"])
def rollout_page(request, agent, pk):
    """A staged rollout: its step and share, the bake, each guard's state, the evidence of
    what paused or ended it, the plan, and the actions the person may take. htmx polls the
    status part every few seconds while it is active."""
    rollout = _rollout(request, pk)
    template = "releases/rollout.html"
    if request.htmx:
        template += "#status"
    return TemplateResponse(request, template, _rollout_context(request, rollout))


@require_http_methods(["GET"])
def rollout_by_key(request, key):
    """/rollouts/<id>/ (the id runtimes and traces carry): to its page, when the person may
    see its agent; otherwise it does not exist."""
    rollout = (
        Rollout.objects.filter(
            key=key, document__agent__in=agents_where(request.user, Capability.VIEW_CONFIG)
        )
        .select_related("document__agent")
        .first()
    )
    if rollout is None:
        raise NotFound(f"No rollout {key}.")
    return redirect(_rollout_url(rollout))


@requires(Capability.VIEW_CONFIG)
@require_POST
def rollout_act(request, agent, pk, action):
    """Pause, resume, advance, finish or stop (the service checks the rights: publishing
    here, or rolling back for a stop); a refusal shows the page again with why."""
    rollout = _rollout(request, pk)
    try:
        rollout = ROLLOUT_ACTIONS[action](
            rollout=rollout, actor=request.user, reason=request.POST.get("reason", "")
        )
    except ApplicationError as exc:
        context = _rollout_context(request, _rollout(request, pk), error=exc)
        return TemplateResponse(request, "releases/rollout.html", context, status=exc.status)
    messages.success(request, f"{rollout.key} {ROLLOUT_DONE[action]}.")
    return redirect(_rollout_url(rollout))


@requires(Capability.ROLLBACK)
@require_POST
def rollout_watch_rollback(request, agent, pk):
    """One click from a watch warning (the release row, the dashboard, the rollout page): the
    ordinary rollback to the version the rollout replaced, with the warning's evidence — or,
    where the revert policy asks, the request for it. A refusal shows the rollout page with
    why; success goes back where the click came from."""
    rollout = _rollout(request, pk)
    try:
        outcome = releases.rollout_watch_rollback(rollout=rollout, actor=request.user)
    except ApplicationError as exc:
        context = _rollout_context(request, _rollout(request, pk), error=exc)
        return TemplateResponse(request, "releases/rollout.html", context, status=exc.status)
    control = f"{rollout.document.key} v{rollout.control_version.number}"
    if outcome.approval is not None:
        messages.success(request, f"Rollback to {control} requested: it waits for approval.")
    else:
        messages.success(
            request, f"Rolled back: {control} is live in {rollout.environment.key} again."
        )
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, {request.get_host()}, request.is_secure()):
        back = _rollout_url(rollout)
    return redirect(back)


def _rollout_plan(request):
    """The plan chosen on the start form: a template's name, or the custom steps (JSON)."""
    source = request.POST if request.method == "POST" else request.GET
    choice = source.get("plan", "")
    if choice == "custom":
        try:
            return json.loads(source.get("steps") or "[]")
        except ValueError as exc:
            raise ValidationFailed(
                "Custom steps are a JSON list of {share, bake_seconds}.",
                code="invalid_plan",
                details=[{"path": "plan", "code": "invalid_plan", "message": "Not JSON."}],
            ) from exc
    return choice or None


@requires(Capability.VIEW_CONFIG)
@vary_on_headers("HX-Request")
@require_http_methods(["GET", "POST"])
def rollout_start(request, agent, document, environment):
    """GET: choose a frozen version, a plan (template or custom steps) and the unit, and see
    the check against the runtime (which must declare split); POST: start it (in a protected
    environment the plan waits for a second person's approval, once)."""
    doc = _document(request.agent, document)
    env = _environment(environment)
    source = request.POST if request.method == "POST" else request.GET
    unit = source.get("unit") or "task"
    error = version = None
    plan = releases.default_plan(env)
    try:
        version = _shadow_version(doc, request)
        plan = _rollout_plan(request) or plan
        if request.method == "POST":
            rollout = releases.rollout_start(
                version=version,
                environment=env,
                actor=request.user,
                plan=plan,
                unit=unit,
                reason=request.POST.get("reason", ""),
            )
            if rollout.state == rollout.State.AWAITING_APPROVAL:
                messages.success(
                    request,
                    f"{rollout.key} waits for approval in {env.key}: someone else with the "
                    "approve permission approves the whole plan, once.",
                )
            else:
                messages.success(
                    request,
                    f"{rollout.key} runs: {int(rollout.share * 100)}% of units get "
                    f"v{rollout.version.number} now.",
                )
            return redirect(_rollout_url(rollout))
    except ApplicationError as exc:
        error = exc
    context = {
        "agent": request.agent,
        "document": doc,
        "environment": env,
        "version": version,
        "versions": selectors.frozen_versions(document=doc),
        "plan": plan if isinstance(plan, str) else "custom",
        "steps": json.dumps(plan) if isinstance(plan, list) else "",
        "templates": PLAN_TEMPLATES,
        "unit": unit,
        "active": selectors.active_rollout(document=doc, environment=env),
        "preview": selectors.rollout_preview(
            version=version, environment=env, actor=request.user, plan=plan, unit=unit
        )
        if version
        else None,
        "error": error,
        "reason": request.POST.get("reason", "") if request.method == "POST" else "",
    }
    return _page_or_preview(request, "releases/rollout_start.html", context, error)


PLAN_TEMPLATES = [
    (name, TEMPLATE_LABELS[name], TEMPLATES.get(name)) for name in (STAGED, ALL_AT_ONCE, CUSTOM)
]
