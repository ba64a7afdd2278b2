"""Pages for configuration as code: download an agent's configuration, and import one with a
dry run first. Thin: parse, ask the policy (`@requires`), call one service or selector,
render."""

from __future__ import annotations

from django.http import HttpResponse
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET, require_http_methods

from console.kernel.errors import Conflict, NotFound, PayloadTooLarge, ValidationFailed
from console.kernel.limits import too_large
from console.kernel.policy import Capability, requires
from strategies.documents.views import agent_tabs
from strategies.exchange import services
from strategies.exchange.format import MAX_FILE_BYTES, file_parse_text, file_text
from strategies.exchange.forms import ConfigUploadForm


def download(text: str, agent_key: str) -> HttpResponse:
    """The file as a download named after the agent (the page and the API answer alike)."""
    response = HttpResponse(text, content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{agent_key}.config.json"'
    return response


@require_GET
@requires(Capability.VIEW_CONFIG)
def config_export(request, agent):
    return download(services.config_export_text(agent=request.agent, actor=request.user), agent)


def _context(request, **extra) -> dict:
    return {
        "agent": request.agent,
        "tabs": agent_tabs(request.agent, "", request.user),
        "max_bytes": MAX_FILE_BYTES,
        "can_edit": True,  # the page needs edit_drafts
        **extra,
    }


def _render(request, status=200, **extra):
    return TemplateResponse(
        request, "exchange/import.html", _context(request, **extra), status=status
    )


@require_http_methods(["GET", "POST"])
@requires(Capability.EDIT_DRAFTS)
def config_import(request, agent):
    """GET: the form. POST: the dry run of the file (nothing written), with the Apply button
    bound to the plan; POST with `apply`: carry out exactly that plan."""
    if request.method == "GET":
        return _render(request, form=ConfigUploadForm())
    if "apply" in request.POST:
        return _apply(request, agent)
    form = ConfigUploadForm(request.POST, request.FILES)
    if not form.is_valid():
        return _render(request, status=400, form=form)
    try:
        data = file_parse_text(form.content())
        plan = services.config_dry_run(agent_key=agent, data=data, actor=request.user)
    except (ValidationFailed, PayloadTooLarge) as exc:
        plan = exc.extra.get("plan")
        return _render(request, status=exc.status, form=form, error=exc, plan=plan)
    return _render(
        request, form=form, plan=plan.as_dict(), content=file_text(data), plan_hash=plan.plan_hash
    )


def _apply(request, agent):
    content = request.POST.get("content", "")
    form = ConfigUploadForm()
    try:
        if len(content.encode()) > MAX_FILE_BYTES:
            raise too_large("The configuration file", MAX_FILE_BYTES)
        data = file_parse_text(content)
        plan, outcome = services.config_apply(
            agent_key=agent,
            data=data,
            actor=request.user,
            expected_plan=request.POST.get("plan", ""),
        )
    except Conflict as exc:  # the file or the console changed: show the new plan to review
        current = exc.extra.get("current") if exc.code == "plan_changed" else None
        return _render(
            request,
            status=409,
            form=form,
            error=exc,
            plan=current,
            content=content,
            plan_hash=(current or {}).get("plan", ""),
        )
    except (ValidationFailed, PayloadTooLarge, NotFound) as exc:
        return _render(request, status=exc.status, form=form, error=exc, plan=exc.extra.get("plan"))
    return _render(request, form=form, plan=plan.as_dict(), outcome=outcome.as_dict(), applied=True)
