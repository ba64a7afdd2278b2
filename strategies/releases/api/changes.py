"""External change approvals (docs/change-approvals.md): an environment's change system
(read, set — its signing secret shown once), the change records on the agents the caller
sees, and the change system's signed callback (no session: the signature over the raw body
with the environment's secret is its authentication)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from console.kernel.api_schema import ErrorSerializer, StrictSerializer
from console.kernel.credentials import shows_secret
from console.kernel.errors import NotFound, PayloadTooLarge
from console.kernel.policy import Capability, Everywhere, agents_where, refuse, requires
from strategies.catalog.models import Environment
from strategies.documents.serializers import parse_strict
from strategies.releases.api.common import READ_ERRORS
from strategies.releases.models import ChangeRecord
from strategies.releases.selectors.changes import change_records_for, change_system_of
from strategies.releases.serializers.changes import ChangeRecordSerializer
from strategies.releases.services.change_records import change_record_state
from strategies.releases.services.changes import (
    change_callback_receive,
    change_system_configure,
    change_system_state,
)

CALLBACK_BYTES = 16 * 1024
ADMINS = requires(Everywhere(Capability.MANAGE_CATALOG), agent_kwarg=None)
VIEWERS = requires(Capability.VIEW_CONFIG, agent_kwarg=None, anywhere=True)


# --- shapes -----------------------------------------------------------------------------------------
class ChangeSystemSerializer(serializers.Serializer):
    environment = serializers.CharField()
    requires_change_record = serializers.BooleanField()
    url = serializers.CharField()
    status_url_template = serializers.CharField(help_text="{id}, {change_number}; may be empty.")
    validity_hours = serializers.IntegerField()
    updated_by = serializers.CharField()
    updated_at = serializers.DateTimeField(allow_null=True)


class ChangeSystemSetSerializer(ChangeSystemSerializer):
    secret = serializers.CharField(
        allow_null=True, help_text="The signing secret: in this answer only, when new or rotated."
    )


class ChangeSystemRequest(StrictSerializer):
    requires_change_record = serializers.BooleanField()
    url = serializers.CharField(max_length=500, help_text="A public http(s) address.")
    status_url_template = serializers.CharField(
        max_length=500, required=False, allow_blank=True, default=""
    )
    validity_hours = serializers.IntegerField(required=False, default=72)
    rotate_secret = serializers.BooleanField(required=False, default=False)


class ChangeRecordListSerializer(serializers.Serializer):
    results = ChangeRecordSerializer(many=True)


class ChangeCallbackRequest(serializers.Serializer):
    status = serializers.ChoiceField(choices=["approved", "rejected"])
    change_number = serializers.CharField(max_length=100)
    content_hash = serializers.CharField(max_length=64)
    comment = serializers.CharField(required=False, allow_blank=True, max_length=2000)


def _environment(key: str) -> Environment:
    environment = Environment.objects.filter(key=key).first()
    if environment is None:
        raise NotFound("No such environment.")
    return environment


# --- endpoints --------------------------------------------------------------------------------------
@extend_schema(
    methods=["GET"],
    operation_id="v1_environments_change_system_retrieve",
    summary="The environment's change system (never its secret)",
    responses={200: ChangeSystemSerializer, **READ_ERRORS},
    tags=["change approvals"],
)
@extend_schema(
    methods=["PUT"],
    operation_id="v1_environments_change_system_update",
    summary="Set the environment's change system; a new secret is in this answer only",
    request=ChangeSystemRequest,
    responses={
        200: ChangeSystemSetSerializer,
        400: OpenApiResponse(ErrorSerializer, description="Invalid input (an internal URL)."),
        403: OpenApiResponse(ErrorSerializer, description="Needs manage_catalog on all agents."),
        404: OpenApiResponse(ErrorSerializer, description="No such environment."),
    },
    tags=["change approvals"],
)
@shows_secret
@api_view(["GET", "PUT"])
@ADMINS
def change_system(request, environment: str):
    env = _environment(environment)
    if request.method == "PUT":
        data = parse_strict(
            request, ChangeSystemRequest, limit=CALLBACK_BYTES, what="A change system"
        )
        system, secret = change_system_configure(environment=env, actor=request.user, **data)
        return Response({**change_system_state(system), "secret": secret})
    system = change_system_of(env)
    if system is None:
        raise NotFound(f"{env.key} has no change system.")
    return Response(change_system_state(system))


@extend_schema(
    operation_id="v1_change_records_list",
    summary="Change records on the agents you can see, newest first (the last 50)",
    responses={200: ChangeRecordListSerializer, **READ_ERRORS},
    tags=["change approvals"],
)
@api_view(["GET"])
@VIEWERS
def change_record_list(request):
    records = change_records_for(agents=agents_where(request.user, Capability.VIEW_CONFIG))
    return Response({"results": [change_record_state(r) for r in records]})


@extend_schema(
    operation_id="v1_change_records_retrieve",
    summary="One change record: its state, change number, window and delivery",
    responses={200: ChangeRecordSerializer, **READ_ERRORS},
    tags=["change approvals"],
)
@api_view(["GET"])
@VIEWERS
def change_record_detail(request, pk: int):
    record = (
        ChangeRecord.objects.select_related("environment", "document__agent", "version")
        .filter(pk=pk, document__agent__in=agents_where(request.user, Capability.VIEW_CONFIG))
        .first()
    )
    if record is None:
        refuse(
            NotFound("No such change record."), user=request.user, capability=Capability.VIEW_CONFIG
        )
    return Response(change_record_state(record))


@extend_schema(
    operation_id="v1_change_records_callback",
    summary="The change system's answer, signed (Standard Webhooks headers)",
    description="Authenticated by `webhook-signature` over `webhook-id.webhook-timestamp.body` "
    "with the environment's change-system secret, the timestamp within the tolerance. A wrong "
    "or missing signature (401), another content hash, a record already decided or past its "
    "window (409), or an unknown record (404) changes nothing.",
    request=ChangeCallbackRequest,
    responses={
        200: ChangeRecordSerializer,
        400: OpenApiResponse(ErrorSerializer, description="Not an answer."),
        401: OpenApiResponse(ErrorSerializer, description="Signature missing, wrong or stale."),
        404: OpenApiResponse(ErrorSerializer, description="No such change record."),
        409: OpenApiResponse(
            ErrorSerializer, description="Another content, decided already, or window passed."
        ),
        413: OpenApiResponse(ErrorSerializer, description="Body larger than 16 KiB."),
    },
    auth=[],
    tags=["change approvals"],
)
@api_view(["POST"])
@authentication_classes([])
@permission_classes([AllowAny])
def change_record_callback(request, pk: int):
    body = request._request.body  # the raw bytes the signature covers
    if len(body) > CALLBACK_BYTES:
        raise PayloadTooLarge("The answer is larger than 16 KiB.")
    record = change_callback_receive(record_id=pk, headers=request.headers, body=body)
    return Response(change_record_state(record))
