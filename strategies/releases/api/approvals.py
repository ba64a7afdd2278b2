"""Approval requests on the agents the caller sees: the list, one request, approve, reject
and withdraw."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.access.api import paginated
from console.kernel.errors import NotFound
from console.kernel.policy import Capability, agents_where, refuse, requires
from strategies.releases import selectors
from strategies.releases import services as releases
from strategies.releases.api.common import READ_ERRORS, TAGS, WRITE_ERRORS, _page, _parse, _query
from strategies.releases.serializers import (
    ApprovalDecisionSerializer,
    ApprovalFilter,
    ApprovalSerializer,
    ApproveRequest,
    RejectRequest,
    WithdrawRequest,
)
from strategies.releases.services import approval_state, release_state

# --- approvals ---------------------------------------------------------------------------------------
VIEWERS = requires(Capability.VIEW_CONFIG, agent_kwarg=None, anywhere=True)
APPROVERS = requires(Capability.APPROVE, agent_kwarg=None, anywhere=True)


def _approval(request, pk: int):
    """The request when its agent is one the caller sees; otherwise it does not exist."""
    approval = selectors.approval_in_scope(
        agents=agents_where(request.user, Capability.VIEW_CONFIG), pk=pk
    )
    if approval is None:
        refuse(
            NotFound("No such approval request."),
            user=request.user,
            capability=Capability.VIEW_CONFIG,
        )
    return approval


@extend_schema(
    operation_id="v1_approvals_list",  # a page: named as the list it is
    summary="Approval requests on the agents you can see, newest first",
    parameters=[ApprovalFilter],
    responses={200: paginated(ApprovalSerializer), **READ_ERRORS},
    tags=TAGS,
)
@api_view(["GET"])
@VIEWERS
def approval_list(request):
    params = _query(request, ApprovalFilter)
    approvals = selectors.approval_list(
        agents=agents_where(request.user, Capability.VIEW_CONFIG),
        status=params.get("status", ""),
        agent_key=params.get("agent", ""),
        environment_key=params.get("environment", ""),
    )
    return _page(request, approvals, approval_state)


@extend_schema(
    summary="One approval request",
    responses={200: ApprovalSerializer, **READ_ERRORS},
    tags=TAGS,
)
@api_view(["GET"])
@VIEWERS
def approval_detail(request, pk: int):
    return Response(approval_state(_approval(request, pk)))


@extend_schema(
    summary="Approve a request (not your own): the version goes live",
    request=ApproveRequest,
    responses={200: ApprovalDecisionSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@APPROVERS
def approval_approve(request, pk: int):
    data = _parse(request, ApproveRequest)
    approval = _approval(request, pk)
    release = releases.approval_approve(
        approval=approval, actor=request.user, note=data.get("note", "")
    )
    approval.refresh_from_db()
    return Response({"approval": approval_state(approval), "release": release_state(release)})


@extend_schema(
    summary="Reject a request (not your own), saying why",
    request=RejectRequest,
    responses={200: ApprovalDecisionSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@APPROVERS
def approval_reject(request, pk: int):
    data = _parse(request, RejectRequest)
    approval = releases.approval_reject(
        approval=_approval(request, pk), actor=request.user, note=data["note"]
    )
    return Response({"approval": approval_state(approval)})


@extend_schema(
    summary="Withdraw your own pending request, saying why",
    request=WithdrawRequest,
    responses={200: ApprovalDecisionSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@VIEWERS
def approval_withdraw(request, pk: int):
    data = _parse(request, WithdrawRequest)
    approval = releases.approval_withdraw(
        approval=_approval(request, pk), actor=request.user, reason=data["reason"]
    )
    return Response({"approval": approval_state(approval)})
