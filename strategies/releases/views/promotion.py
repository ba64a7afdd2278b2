"""The promotion page: publish to one environment what is live in another, for one document
or all of an agent's, with what it would change."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.utils.translation import ngettext
from django.views.decorators.http import require_http_methods

from console.kernel.errors import ApplicationError
from console.kernel.policy import Capability, requires
from console.kernel.wording import RUNTIMES_TAKE_IT
from strategies.catalog.selectors import environment_list
from strategies.releases import selectors
from strategies.releases import services as releases
from strategies.releases.preview_hook import preview_summary
from strategies.releases.views.lookups import (
    _document,
    _environment,
    _overview_url,
    check_danger_confirmed,
    dangers_joined,
    impact_danger,
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
    rows = selectors.promotion_preview(
        agent=request.agent, source=source, target=target, documents=documents
    )
    changing = [row for row in rows if row.changes]
    # What the promotion rests on: each changing version's saved preview in the target.
    for row in changing:
        row.impact = preview_summary(
            user=request.user, version=row.preview.version, environment=target
        )
    danger = dangers_joined([impact_danger(row.impact) for row in changing])
    if request.method == "POST":
        try:
            check_danger_confirmed(request, danger)
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
    context = {
        "agent": request.agent,
        "source": source,
        "target": target,
        "document_key": document_key,
        "rows": rows,
        "changing": changing,
        "danger": danger,
        "blocked": [row for row in changing if row.preview.blocking or row.pending],
        "error": error,
        "reason": request.POST.get("reason", "") if request.method == "POST" else "",
        "runtimes_take_it": RUNTIMES_TAKE_IT,
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
    text = f"Promoted {outcome.source.key} → {outcome.target.key}: " + "; ".join(parts) + "."
    return f"{text} {RUNTIMES_TAKE_IT}" if outcome.published else text
