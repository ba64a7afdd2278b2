"""Approval request pages: the request with a preview of what it changes, approving or
rejecting it (a second person), withdrawing it (the requester)."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_http_methods, require_POST

from console.kernel.errors import ApplicationError, NotFound, ValidationFailed
from console.kernel.policy import (
    Capability,
    requires,
    user_can_decide_approval,
    user_can_withdraw_approval,
)
from console.kernel.wording import RUNTIMES_TAKE_IT
from strategies.releases import selectors
from strategies.releases import services as releases
from strategies.releases.models import ApprovalRequest
from strategies.releases.preview_hook import preview_summary
from strategies.releases.selectors.changes import change_record_latest, requires_change_record
from strategies.releases.services.change_records import change_record_words
from strategies.releases.views.lookups import (
    _overview_url,
    _rollout_url,
    check_danger_confirmed,
    impact_danger,
    version_regressions,
)


# --- approvals -----------------------------------------------------------------------------------------------
def _approval(request, pk):
    approval = selectors.approval_get(agent=request.agent, pk=pk)
    if approval is None:
        raise NotFound("No such approval request.")
    return approval


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


def _approval_impact(request, approval) -> dict | None:
    """The saved impact preview the approval rests on (none for a rollback: it goes back to
    a version that was live)."""
    if approval.kind == ApprovalRequest.Kind.ROLLBACK:
        return None
    return preview_summary(
        user=request.user, version=approval.version, environment=approval.environment
    )


def _approval_context(request, approval, error):
    return {
        "agent": request.agent,
        "approval": approval,
        "preview": selectors.change_preview(
            version=approval.version, environment=approval.environment
        ),
        "impact": (impact := _approval_impact(request, approval)),
        "regressions": None
        if approval.kind == ApprovalRequest.Kind.ROLLBACK
        else version_regressions(request, approval.version),
        "danger": impact_danger(impact),
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
        **_change_record_context(approval),
    }


def _change_record_context(approval) -> dict:
    """The external change record this request also waits for, where the environment asks."""
    env = approval.environment
    if not requires_change_record(env):
        return {"requires_change_record": False}
    record = change_record_latest(
        environment=env, document=approval.document, content_hash=approval.content_hash
    )
    return {
        "requires_change_record": True,
        "environment": env,
        "change_record": record,
        "change_record_words": record and change_record_words(record),
    }


@requires(Capability.APPROVE)
@require_POST
def approval_decide(request, agent, pk):
    approval = _approval(request, pk)
    decision = request.POST.get("decision")
    note = request.POST.get("reason", "").strip()
    try:
        if decision == "approve":
            check_danger_confirmed(request, impact_danger(_approval_impact(request, approval)))
            releases.approval_approve(approval=approval, actor=request.user, note=note)
            held = approval.change_records.filter(state="waiting").first()
            if held is not None:
                messages.success(
                    request,
                    f"Approved: {approval.document.key} v{approval.version.number} goes live in "
                    f"{approval.environment.key} once change record {held.public_id} is "
                    "approved by the change system.",
                )
                return redirect(_overview_url(request.agent))
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
                )
                + f" {RUNTIMES_TAKE_IT}",
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
