"""Staged rollout pages (issue 23): starting one; its page with the step, the bake, the
guards and the evidence; the operator's actions; and the one-click rollback from a paired
watch's warning."""

from __future__ import annotations

import json
from datetime import datetime

from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from console.kernel.errors import ApplicationError, NotFound, ValidationFailed
from console.kernel.policy import Capability, agents_where, requires, user_can
from strategies.releases import selectors
from strategies.releases import services as releases
from strategies.releases.models import ChangeRecord, Rollout, ScheduledGoLive
from strategies.releases.plans import ALL_AT_ONCE, CUSTOM, STAGED, TEMPLATE_LABELS, TEMPLATES
from strategies.releases.preview_hook import preview_summary
from strategies.releases.services.changes import rollout_start_or_ask
from strategies.releases.transitions import rollout_allows
from strategies.releases.views.lookups import (
    _document,
    _environment,
    _int,
    _overview_url,
    _page_or_preview,
    _rollout_url,
    check_danger_confirmed,
    guards_danger,
    impact_danger,
    version_regressions,
)
from strategies.releases.views.scheduling import (
    schedule_context,
    schedule_from_form,
    time_typed_for_now,
    wants_schedule,
)
from strategies.releases.views.shadows import _shadow_version

# --- staged rollouts (issue 23) ---------------------------------------------------------------------
ROLLOUT_ACTIONS = releases.ROLLOUT_OPERATOR_ACTIONS
# The operators' actions that move a larger share live: they rest on the step's guards.
MOVES_ON = ("advance", "finish")
ROLLOUT_DONE = {
    "pause": "is paused: runtimes keep its share, the guards no longer move it on",
    "resume": "runs again; its step's bake starts now",
    "advance": "moved on",
    "finish": "is finished: the new version is live",
    "stop": "is stopped: runtimes serve the live version alone again",
}


# The timeline's words for the actions a rollout's log records (its audit rows say the same
# with AuditAction's labels).
TIMELINE_WORDS = {
    "start": "started",
    "approve": "plan approved",
    "pause": "paused",
    "resume": "resumed",
    "step": "moved on",
    "extend": "bake extended (too little data)",
    "complete": "finished",
    "stop": "stopped",
    "rollback": "rolled back by a guard",
    "watch_warn": "paired watch warned",
    "watch_end": "paired watch ended",
}
# A guard's state in words (its label comes with its result: traces.rollouts.guards.LABELS).
GUARD_STATE_WORDS = {
    "ok": "fine",
    "breach": "worse: rolls back",
    "insufficient": "too little data yet",
    "pause": "needs a person",
}
# How an ended rollout ended, in the words of its page.
ENDED_HOW = {
    Rollout.State.COMPLETED: "Finished",
    Rollout.State.STOPPED: "Stopped",
    Rollout.State.ROLLED_BACK: "Rolled back",
}


def _guard_label(result: dict) -> str:
    """A guard's label as its evaluation recorded it; a name for one recorded before."""
    return result.get("label") or result.get("name", "").replace("_", " ")


def _ending(rollout) -> dict | None:
    """For an ended rollout: how it ended and at which step and share (numbered from 1, as
    everywhere people read), and what is live now — nothing is split any more; None while
    it is active."""
    if rollout.active or rollout.state not in ENDED_HOW:
        return None
    live = selectors.live_release(document=rollout.document, environment=rollout.environment)
    return {
        "how": ENDED_HOW[rollout.state],
        "step": rollout.step + 1,
        "steps": len(rollout.plan),
        "percent": round(rollout.share * 100),
        "live_number": live.version.number if live else None,
    }


def _rollout(request, pk: int):
    rollout = selectors.rollout_get(agent=request.agent, key=f"ro-{pk}")
    if rollout is None:
        raise NotFound(f"{request.agent.key} has no rollout ro-{pk}.")
    return rollout


def _plan_chart(rollout) -> dict:
    """The plan as a step chart (share over the bakes, drawn with SVG attributes): one bar
    per step, its state (done, now, next) and where it starts on the time axis."""
    bars, start = [], 0
    total = sum(int(step["bake_seconds"]) for step in rollout.plan) or 1
    for index, step in enumerate(rollout.plan):
        bake = int(step["bake_seconds"])
        if index < rollout.step or (index == rollout.step and rollout.state == "completed"):
            state = "done"
        elif index == rollout.step:
            state = "now" if rollout.active else "ended"
        else:
            state = "next" if rollout.active else "skipped"
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


def _request_ids(facts, shown: bool) -> dict:
    """A guard's request ids to open (`request_ids`), or only how many (`requests_hidden`)."""
    ids = selectors.evidence_request_ids(facts)
    return (
        {"request_ids": ids, "requests_hidden": 0}
        if shown
        else {"request_ids": [], "requests_hidden": len(ids)}
    )


def _rollout_context(request, rollout, *, error=None) -> dict:
    now = timezone.now()
    baking = rollout.state in rollout.SERVED_STATES and rollout.step_started_at is not None
    elapsed = int((now - rollout.step_started_at).total_seconds()) if baking else None
    # Request ids (real requests, each with a verdict) only with the right to see the
    # agent's traces, the look then access-logged; otherwise how many there are.
    show_ids = releases.rollout_evidence_look(
        user=request.user, agent=request.agent, rollouts=[rollout]
    )
    guards = [
        {
            **guard,
            "label": _guard_label(guard),
            "state_words": GUARD_STATE_WORDS.get(guard.get("state"), guard.get("state")),
            **_request_ids(guard.get("evidence"), show_ids),
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
        "evidence_ids": _request_ids(rollout.evidence, show_ids),
        "evidence_figures": rollout.evidence
        if show_ids
        else selectors.without_request_ids(rollout.evidence),
        "show_request_ids": show_ids,
        "chart": _plan_chart(rollout),
        "plan_label": rollout.plan_name.replace("_", " "),
        "evidence_label": _guard_label(
            {"name": (rollout.evidence or {}).get("guard", ""), **(rollout.evidence or {})}
        ),
        "actions": selectors.rollout_actions(user=request.user, rollout=rollout),
        # Advancing or finishing by hand rests on the step's guards: a breach, or nothing
        # judged yet, needs a confirmation that names it.
        "move_danger": guards_danger(rollout),
        "approval": rollout.approvals.order_by("-id").first(),
        # The revision the page was opened at: the polled status says when it moved on.
        "seen": _int(request.GET.get("seen"), "seen") or rollout.revision,
        "log": [
            {
                **entry,
                "when": datetime.fromisoformat(entry["at"]),
                "words": TIMELINE_WORDS.get(entry["action"], entry["action"].replace("_", " ")),
            }
            for entry in reversed(rollout.log or [])
        ],
        "ending": _ending(rollout),
        "error": error,
        "can_watch_rollback": rollout_allows(rollout, "watch_rollback")
        and user_can(request.user, Capability.ROLLBACK, request.agent),
        # The regression sets against the version rolled out, as the start page showed them
        # (issue 35): on the whole page only, not on each poll of its status part.
        "regressions": None if request.htmx else version_regressions(request, rollout.version),
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
        if action in MOVES_ON:
            check_danger_confirmed(request, guards_danger(rollout))
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
    error = schedule_error = version = None
    plan = releases.default_plan(env)
    try:
        version = _shadow_version(doc, request)
        plan = _rollout_plan(request) or plan
        if wants_schedule(request):
            check_danger_confirmed(
                request,
                impact_danger(preview_summary(user=request.user, version=version, environment=env)),
            )
            try:
                schedule_from_form(
                    request,
                    version=version,
                    environment=env,
                    kind=ScheduledGoLive.Kind.ROLLOUT_START,
                    plan=plan,
                    unit=unit,
                )
            except ApplicationError as exc:
                schedule_error = exc  # shown at the time field
            else:
                return redirect(_overview_url(request.agent))
        elif typed := time_typed_for_now(request):
            schedule_error = typed
        elif request.method == "POST":
            check_danger_confirmed(
                request,
                impact_danger(preview_summary(user=request.user, version=version, environment=env)),
            )
            rollout = rollout_start_or_ask(
                version=version,
                environment=env,
                actor=request.user,
                plan=plan,
                unit=unit,
                reason=request.POST.get("reason", ""),
            )
            if isinstance(rollout, ChangeRecord):  # waits for the external change system
                messages.success(
                    request,
                    f"The rollout of {doc.key} v{version.number} waits for change record "
                    f"{rollout.public_id} from {env.key}'s change system; it starts once approved.",
                )
                return redirect(_overview_url(request.agent))
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
        "impact": (
            impact := preview_summary(user=request.user, version=version, environment=env)
            if version
            else None
        ),
        "danger": impact_danger(impact),
        "regressions": version_regressions(request, version),
        "error": error,
        "reason": request.POST.get("reason", "") if request.method == "POST" else "",
        **schedule_context(request, env, error=schedule_error),
    }
    return _page_or_preview(
        request, "releases/rollout_start.html", context, error or schedule_error
    )


PLAN_TEMPLATES = [
    (name, TEMPLATE_LABELS[name], TEMPLATES.get(name)) for name in (STAGED, ALL_AT_ONCE, CUSTOM)
]
