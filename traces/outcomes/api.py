"""Outcome API views: the runtime's batch report, and the operator's kinds and reads."""

from __future__ import annotations

import msgspec
from context_runtime import wire
from django.http import JsonResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.decorators import api_view, parser_classes
from rest_framework.parsers import BaseParser
from rest_framework.response import Response

from console.kernel.api_schema import ErrorSerializer
from console.kernel.audit import AccessAction, access_record
from console.kernel.errors import ValidationFailed
from console.kernel.limits import check_request_size, read_limited_body
from console.kernel.policy import (
    Capability,
    check_user_can_anywhere,
    check_user_can_manage_outcome_kinds,
)
from strategies.catalog.selectors import environment_get
from strategies.runtime.authentication import runtime_view
from traces.outcomes import ingest, rules, selectors, services
from traces.outcomes.serializers import (
    OutcomeIngestResponse,
    OutcomeKindCreateRequest,
    OutcomeKindOut,
    OutcomeKindUpdateRequest,
    OutcomeListOut,
)

MAX_OUTCOME_BATCH_BYTES = wire.MAX_OUTCOME_BATCH_BYTES
# Both may report outcomes: a runtime reports its own requests' with the token it already
# has; outcomes:write alone is for the application, which must not write traces.
OUTCOME_CAPABILITIES = ("outcomes:write", "traces:write")
KIND_REQUEST_BYTES = 16 * 1024


class _RawJSON(BaseParser):
    """Declares application/json for the schema; the view reads the bytes itself."""

    media_type = "application/json"


def _openapi(node):
    """msgspec's JSON Schema → OpenAPI 3.0: a null variant becomes `nullable`, titles go."""
    if isinstance(node, dict):
        variants = node.get("anyOf", [])
        if {"type": "null"} in variants:
            rest = [v for v in variants if v != {"type": "null"}]
            merged = _openapi(rest[0]) if len(rest) == 1 else {"anyOf": _openapi(rest)}
            return {**merged, "nullable": True}
        return {k: _openapi(v) for k, v in node.items() if k != "title" and v != []}
    if isinstance(node, list):
        return [_openapi(v) for v in node]
    return node


def batch_json_schema() -> dict:
    """The batch's JSON Schema, from the struct that validates each outcome."""
    (_,), definitions = msgspec.json.schema_components([wire.Outcome])
    return {
        "type": "object",
        "required": ["outcomes"],
        "properties": {
            "outcomes": {
                "type": "array",
                "maxItems": wire.MAX_OUTCOMES_PER_BATCH,
                "items": _openapi(definitions["Outcome"]),
            }
        },
    }


@extend_schema(
    operation_id="runtime_outcomes_report",
    summary="Report a batch of outcomes (after the fact)",
    description=(
        f"Up to {wire.MAX_OUTCOMES_PER_BATCH} outcomes and {MAX_OUTCOME_BATCH_BYTES} bytes per "
        "request (413 beyond); the token needs outcomes:write or traces:write. Each outcome "
        "names a request id, a kind the token's environment declares and its value. One "
        "value per (request, kind): a repeat with the same value is a duplicate (accepted, "
        "stored once), another value is rejected for that item and the first is kept. An "
        "outcome may arrive before its trace, and late, within the environment's trace "
        "retention. Invalid outcomes are rejected one by one; 200 means every accepted one "
        "is committed. See docs/runtime-contract.md §3b."
    ),
    tags=["runtime"],
    request={"application/json": batch_json_schema()},
    responses={
        200: OutcomeIngestResponse,
        400: OpenApiResponse(ErrorSerializer, description="Malformed JSON or batch shape."),
        401: OpenApiResponse(ErrorSerializer, description="Missing, unknown or revoked token."),
        403: OpenApiResponse(
            ErrorSerializer, description="Token without outcomes:write or traces:write."
        ),
        413: OpenApiResponse(ErrorSerializer, description="Body over the byte limit."),
    },
)
@runtime_view(["POST"], capability=OUTCOME_CAPABILITIES)
@parser_classes([_RawJSON])
def runtime_outcomes_report(request):
    body = read_limited_body(
        request, MAX_OUTCOME_BATCH_BYTES, what="An outcome batch", advice="Split it."
    )
    try:
        batch = ingest.parse_outcomes(body)
    except ingest.BatchRefused as exc:
        raise ValidationFailed(
            exc.message,
            code=exc.code,
            details=[{"path": exc.path, "code": exc.code, "message": exc.message}],
        ) from exc
    result = services.outcome_batch_store(identity=request.user, batch=batch)
    return JsonResponse(result.as_dict())


# --- operator API: the kinds an environment declares --------------------------------------------
def _kind_out(kind) -> dict:
    return {
        **services.kind_spec(kind).as_dict(),
        "retired": kind.retired_at is not None,
        "created_at": kind.created_at,
    }


def _spec(data: dict, base: rules.KindSpec | None = None) -> rules.KindSpec:
    fields = base.as_dict() if base else {}
    fields.update({k: v for k, v in data.items() if k != "retired"})
    fields["choices"] = tuple(fields.get("choices") or ())
    fields["bad_values"] = tuple(fields.get("bad_values") or ())
    return rules.KindSpec(**{k: fields.get(k) for k in rules.KindSpec.__dataclass_fields__})


@extend_schema(
    methods=["GET"],
    operation_id="outcome_kinds_list",
    summary="The outcome kinds an environment declares",
    responses={200: OutcomeKindOut(many=True), 404: OpenApiResponse(ErrorSerializer)},
    tags=["outcomes"],
)
@extend_schema(
    methods=["POST"],
    operation_id="outcome_kinds_declare",
    summary="Declare an outcome kind (admins)",
    description=f"At most {rules.MAX_KINDS_PER_ENVIRONMENT} active kinds per environment. Audited.",
    request=OutcomeKindCreateRequest,
    responses={
        201: OutcomeKindOut,
        400: OpenApiResponse(ErrorSerializer, description="Invalid declaration."),
        403: OpenApiResponse(ErrorSerializer),
        404: OpenApiResponse(ErrorSerializer),
        409: OpenApiResponse(ErrorSerializer, description="The key is declared already."),
    },
    tags=["outcomes"],
)
@api_view(["GET", "POST"])
def outcome_kinds(request, environment: str):
    env = environment_get(key=environment)
    if request.method == "GET":
        return Response([_kind_out(k) for k in selectors.outcome_kinds(environment=env)])
    check_request_size(request, KIND_REQUEST_BYTES, what="An outcome kind")
    serializer = OutcomeKindCreateRequest(data=request.data)
    serializer.is_valid(raise_exception=True)
    kind = services.outcome_kind_declare(
        environment=env, spec=_spec(serializer.validated_data), actor=request.user
    )
    return Response(_kind_out(kind), status=201)


@extend_schema(
    methods=["PATCH"],
    operation_id="outcome_kinds_update",
    summary="Change, retire or restore an outcome kind (admins)",
    description="Key and type stay; a rating's range may only widen and labels only be added "
    "(stored outcomes stay valid). `retired: true` refuses new reports of it. Audited.",
    request=OutcomeKindUpdateRequest,
    responses={
        200: OutcomeKindOut,
        400: OpenApiResponse(ErrorSerializer),
        403: OpenApiResponse(ErrorSerializer),
        404: OpenApiResponse(ErrorSerializer),
    },
    tags=["outcomes"],
)
@extend_schema(
    methods=["GET"],
    operation_id="outcome_kinds_retrieve",
    responses={200: OutcomeKindOut, 404: OpenApiResponse(ErrorSerializer)},
    tags=["outcomes"],
)
@api_view(["GET", "PATCH"])
def outcome_kind_detail(request, environment: str, kind: str):
    kind = services.outcome_kind_get(environment=environment_get(key=environment), key=kind)
    if request.method == "GET":
        return Response(_kind_out(kind))
    # Asked first: a PATCH that changes nothing is still a change only admins may try.
    check_user_can_manage_outcome_kinds(request.user, target=services.kind_target(kind))
    check_request_size(request, KIND_REQUEST_BYTES, what="An outcome kind")
    serializer = OutcomeKindUpdateRequest(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    changes = {k: v for k, v in data.items() if k != "retired"}
    if changes:
        kind = services.outcome_kind_update(
            kind=kind, spec=_spec(changes, services.kind_spec(kind)), actor=request.user
        )
    if "retired" in data:
        kind = services.outcome_kind_retire(kind=kind, actor=request.user, retired=data["retired"])
    return Response(_kind_out(kind))


# --- operator API: the outcomes of a request ----------------------------------------------------
@extend_schema(
    operation_id="outcomes_of_request",
    summary="The outcomes reported for a request id",
    description="In every environment you may see, or the one named; only agents whose traces "
    "you may view. Each look is written to the access log (`outcome.view`).",
    parameters=[
        OpenApiParameter("request_id", str, required=True),
        OpenApiParameter("environment", str, description="environment key (optional)"),
    ],
    responses={
        200: OutcomeListOut,
        400: OpenApiResponse(ErrorSerializer, description="No request_id."),
        403: OpenApiResponse(ErrorSerializer),
        404: OpenApiResponse(ErrorSerializer, description="Unknown environment."),
    },
    tags=["outcomes"],
)
@api_view(["GET"])
def outcomes_of_request(request):
    check_user_can_anywhere(request.user, Capability.VIEW_TRACES)
    request_id = (request.query_params.get("request_id") or "").strip()
    if not request_id or len(request_id) > wire.MAX_REQUEST_ID_CHARS:
        raise ValidationFailed(
            "Name the request: ?request_id=…",
            details=[{"path": "request_id", "code": "required", "message": wire.REQUEST_ID_RULE}],
        )
    environment = (request.query_params.get("environment") or "").strip()
    rows = selectors.outcomes_visible(
        user=request.user, request_id=request_id, environment=environment
    )
    access_record(
        actor=request.user,
        action=AccessAction.OUTCOME_VIEW,
        target=("trace", request_id, request_id),
        detail={"environment": environment, "found": len(rows), "api": True},
    )
    return Response({"request_id": request_id, "outcomes": [r.as_dict() for r in rows]})
