"""Operator API for configuration as code: GET the agent's configuration file, POST one to
plan (dry run) or apply it. Thin: parse, ask the policy, call one service, serialize."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.kernel.limits import check_request_size
from console.kernel.policy import Capability, requires
from strategies.documents.api import ERRORS
from strategies.documents.serializers import ErrorSerializer
from strategies.exchange import selectors, services
from strategies.exchange.format import MAX_FILE_BYTES
from strategies.exchange.serializers import (
    ConfigFileSerializer,
    ConfigImportRequest,
    ConfigImportResponse,
)
from strategies.exchange.views import download

ENVELOPE_BYTES = 8 * 1024


@requires(Capability.VIEW_CONFIG)
def _export(request, agent):
    return download(services.config_export_text(agent=request.agent, actor=request.user), agent)


@extend_schema(
    methods=["GET"],
    operation_id="v1_agents_config_export",
    summary="Export the agent's configuration as one file",
    description="Every document with its frozen versions and open draft, and what is live in "
    "each environment (docs/CONFIG_AS_CODE.md). Byte-stable: sorted keys, 2-space indent. "
    "Recorded in the access log.",
    responses={200: ConfigFileSerializer, **ERRORS},
    tags=["configuration"],
)
@extend_schema(
    methods=["POST"],
    operation_id="v1_agents_config_import",
    summary="Plan (dry run) or apply a configuration file",
    description="A dry run (the default) answers the plan and writes nothing. An apply "
    "carries out that plan in one transaction: new versions (never rewriting frozen ones), "
    "publishes where you may, approval requests where the environment is protected. An "
    "unknown agent is created (needs manage_catalog on all agents). Problems come as 400 "
    "with every finding at its path in the file (e.g. documents[1].versions[0].body."
    "budget.max_input_tokens) and the plan under `plan`; nothing is written.",
    request=ConfigImportRequest,
    responses={
        200: ConfigImportResponse,
        **ERRORS,
        409: OpenApiResponse(
            ErrorSerializer, description="plan_changed: `current` holds the new plan."
        ),
        413: OpenApiResponse(ErrorSerializer, description="File larger than 1 MiB."),
    },
    tags=["configuration"],
)
@api_view(["GET", "POST"])
def config(request, agent):
    if request.method == "GET":
        return _export(request, agent=agent)
    # The policy first (an unknown agent needs manage_catalog), then the size, then the file.
    selectors.config_target(agent_key=agent, actor=request.user)
    check_request_size(request, MAX_FILE_BYTES + ENVELOPE_BYTES, what="A configuration file")
    serializer = ConfigImportRequest(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    if data["dry_run"]:
        plan = services.config_dry_run(agent_key=agent, data=data["file"], actor=request.user)
        return Response({"dry_run": True, "plan": plan.as_dict(), "outcome": None})
    plan, outcome = services.config_apply(
        agent_key=agent, data=data["file"], actor=request.user, expected_plan=data.get("plan")
    )
    return Response({"dry_run": False, "plan": plan.as_dict(), "outcome": outcome.as_dict()})
