"""Operator API for agents and environments (/api/v1/agents/, /api/v1/environments/). Thin:
size limit, strict serializer, the policy, one service, serialize. Errors in the one shape:
400 bad input (unknown fields, invalid keys), 403/404 per policy, 409 a taken key or a
refused delete (with every reason), 413 an oversize body."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.access.api import OperatorPagination, paginated
from console.kernel.api_schema import ErrorSerializer
from console.kernel.errors import NotFound
from console.kernel.limits import check_request_size
from console.kernel.policy import Capability, check_user_can, refuse
from strategies.catalog import services
from strategies.catalog.models import Agent
from strategies.catalog.selectors import agent_list as agent_list_of
from strategies.catalog.selectors import agent_with_documents, environment_get, environment_list
from strategies.catalog.serializers import (
    AgentCreateRequest,
    AgentSerializer,
    AgentUpdateRequest,
    DeleteRequest,
    EnvironmentCreateRequest,
    EnvironmentSerializer,
    EnvironmentUpdateRequest,
    ListQuery,
)

# An agent or environment request is a handful of short fields.
CATALOG_REQUEST_BYTES = 16 * 1024

ERRORS = {
    400: OpenApiResponse(ErrorSerializer, description="Unknown fields, invalid key or values."),
    403: OpenApiResponse(ErrorSerializer, description="Not allowed."),
    404: OpenApiResponse(ErrorSerializer, description="Unknown, or outside your scope."),
}
WRITE_ERRORS = {
    **ERRORS,
    409: OpenApiResponse(
        ErrorSerializer, description="The key is taken, or the delete is refused (reasons)."
    ),
    413: OpenApiResponse(ErrorSerializer, description="Body larger than 16 KiB."),
}
TAGS = ["catalog"]


def _parse(request, serializer_class, data=None) -> dict:
    """Size limit first (nothing parsed for an oversize body), then the strict serializer."""
    check_request_size(request, CATALOG_REQUEST_BYTES, what="An agent or environment request")
    serializer = serializer_class(data=request.data if data is None else data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _page(request, items, serializer_class) -> Response:
    paginator = OperatorPagination()
    page = paginator.paginate_queryset(items, request)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)


def _agent(request, key: str, capability: Capability) -> Agent:
    """The agent of the URL, archived or not: 404 when unknown or out of scope, 403 when the
    capability is missing (both in the access log)."""
    agent = Agent.objects.filter(key=key).first()
    if agent is None:
        refuse(NotFound("Not found."), user=request.user, capability=capability)
    check_user_can(request.user, capability, agent)
    return agent


def _agent_out(agent: Agent) -> dict:
    return AgentSerializer(agent_with_documents(agent=agent)).data


def _delete_reason(request) -> str:
    # Clients that send no body with DELETE may give the reason as ?reason=.
    data = _parse(request, DeleteRequest, request.data or request.query_params)
    return data.get("reason", "")


# --- agents ----------------------------------------------------------------------------------------
@extend_schema(
    methods=["GET"],
    operation_id="v1_agents_list",  # a page, not a bare list: named as the list it is
    summary="List agents you can see (archived ones with ?archived=true)",
    parameters=[ListQuery],
    responses={200: paginated(AgentSerializer), 400: ERRORS[400]},
    tags=TAGS,
)
@extend_schema(
    methods=["POST"],
    summary="Onboard an agent (manage_catalog on all agents); its profile comes with it",
    request=AgentCreateRequest,
    responses={201: AgentSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["GET", "POST"])
def agent_list(request):
    if request.method == "POST":
        data = _parse(request, AgentCreateRequest)
        agent = services.agent_create(actor=request.user, **data)
        return Response(_agent_out(agent), status=201)
    query = _parse(request, ListQuery, request.query_params)
    agents = agent_list_of(user=request.user, include_archived=query["archived"])
    return _page(request, agents, AgentSerializer)


@extend_schema(
    methods=["GET"],
    summary="One agent (archived ones too)",
    responses={200: AgentSerializer, **ERRORS},
    tags=TAGS,
)
@extend_schema(
    methods=["PATCH"],
    summary="Rename, describe, archive (archived: true) or unarchive an agent",
    request=AgentUpdateRequest,
    responses={200: AgentSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@extend_schema(
    methods=["DELETE"],
    summary="Delete an agent made by mistake (409 with the reasons once it has history)",
    request=DeleteRequest,
    responses={204: None, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["GET", "PATCH", "DELETE"])
def agent_detail(request, agent):
    if request.method == "GET":
        return Response(_agent_out(_agent(request, agent, Capability.VIEW_CONFIG)))
    target = _agent(request, agent, Capability.MANAGE_CATALOG)
    if request.method == "PATCH":
        data = _parse(request, AgentUpdateRequest)
        updated = services.agent_update(agent=target, actor=request.user, **data)
        return Response(_agent_out(updated))
    services.agent_delete(agent=target, actor=request.user, reason=_delete_reason(request))
    return Response(status=204)


# --- environments ----------------------------------------------------------------------------------
@extend_schema(
    methods=["GET"],
    operation_id="v1_environments_list",  # a page, not a bare list
    summary="List environments in promotion order (archived ones with ?archived=true)",
    parameters=[ListQuery],
    responses={200: paginated(EnvironmentSerializer), 400: ERRORS[400]},
    tags=TAGS,
)
@extend_schema(
    methods=["POST"],
    summary="Add an environment (manage_catalog on all agents)",
    request=EnvironmentCreateRequest,
    responses={201: EnvironmentSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["GET", "POST"])
def environment_list_api(request):
    if request.method == "POST":
        data = _parse(request, EnvironmentCreateRequest)
        environment = services.environment_create(actor=request.user, **data)
        return Response(EnvironmentSerializer(environment).data, status=201)
    query = _parse(request, ListQuery, request.query_params)
    environments = environment_list(include_archived=query["archived"])
    return _page(request, environments, EnvironmentSerializer)


@extend_schema(
    methods=["GET"],
    summary="One environment (archived ones too)",
    responses={200: EnvironmentSerializer, **ERRORS},
    tags=TAGS,
)
@extend_schema(
    methods=["PATCH"],
    summary="Change an environment: name, order, protection, revert policy, retention "
    "(applies at the next purge), archived",
    description="Switching approvals off (`protected` or `rollback_needs_approval` true → "
    "false) lets one person put a version live alone: it is refused with 409 "
    "`break_glass_required` (the flags in `details`, nothing saved) unless "
    "`break_glass_reason` is given. Then it is a break-glass: audited as "
    "`environment.break_glass`, shown in `break_glass` until those flags are on again "
    "(`environment.break_glass_end`), and every version that goes live there meanwhile "
    "without the usual approval is marked `unreviewed` and is never a rollback target.",
    request=EnvironmentUpdateRequest,
    responses={
        200: EnvironmentSerializer,
        **WRITE_ERRORS,
        409: OpenApiResponse(
            ErrorSerializer,
            description="`break_glass_required`: approvals switched off without "
            "`break_glass_reason`; `stale_state`: someone changed it since you read it.",
        ),
    },
    tags=TAGS,
)
@extend_schema(
    methods=["DELETE"],
    summary="Delete an environment added by mistake (409 with the reasons once it has history)",
    request=DeleteRequest,
    responses={204: None, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["GET", "PATCH", "DELETE"])
def environment_detail(request, environment):
    target = environment_get(key=environment)
    if request.method == "GET":
        return Response(EnvironmentSerializer(target).data)
    if request.method == "PATCH":
        data = _parse(request, EnvironmentUpdateRequest)
        updated = services.environment_update(environment=target, actor=request.user, **data)
        return Response(EnvironmentSerializer(updated).data)
    services.environment_delete(
        environment=target, actor=request.user, reason=_delete_reason(request)
    )
    return Response(status=204)
