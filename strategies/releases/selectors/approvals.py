"""Approval requests: those waiting (the overview and the dashboard), one of an agent's, and
the operator API's lists."""

from __future__ import annotations

from strategies.releases.models import ApprovalRequest


def pending_approvals(*, agents) -> list[ApprovalRequest]:
    return list(
        ApprovalRequest.objects.filter(
            document__agent__in=agents, status=ApprovalRequest.Status.PENDING
        )
        .select_related("document__agent", "environment", "version", "requested_by")
        .order_by("-requested_at")
    )


def approval_get(*, agent, pk: int) -> ApprovalRequest | None:
    return (
        ApprovalRequest.objects.select_related(
            "document__agent", "environment", "version", "requested_by", "decided_by"
        )
        .filter(pk=pk, document__agent=agent)
        .first()
    )


# --- the operator API's approval lists -------------------------------------------------------
def approval_list(*, agents, status: str = "", agent_key: str = "", environment_key: str = ""):
    """Approval requests on `agents` (the caller's scope), newest first, filtered."""
    approvals = ApprovalRequest.objects.filter(document__agent__in=agents).select_related(
        "document__agent", "environment", "version", "requested_by", "decided_by"
    )
    if status:
        approvals = approvals.filter(status=status)
    if agent_key:
        approvals = approvals.filter(document__agent__key=agent_key)
    if environment_key:
        approvals = approvals.filter(environment__key=environment_key)
    return approvals.order_by("-requested_at", "-id")


def approval_in_scope(*, agents, pk: int) -> ApprovalRequest | None:
    """The request with this id when its agent is among `agents`; else None (404)."""
    return approval_list(agents=agents).filter(pk=pk).first()
