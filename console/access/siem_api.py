"""Operator API of the SIEM streaming (/api/v1/siem-destinations/; docs/siem.md).

Thin: parse, ask the policy (MANAGE_GRANTS on all agents here; the service also wants
VIEW_AUDIT on all agents), call a service of console.access.siem, answer. The credential is
write-only: an answer says whether there is one (`has_token`), never what it is.
"""

from __future__ import annotations

from django.utils.translation import ngettext
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.access import siem
from console.kernel.api_schema import ErrorSerializer
from console.kernel.errors import NotFound, ValidationFailed
from console.kernel.limits import check_request_size
from console.kernel.models import SiemDestination
from console.kernel.policy import Capability, Everywhere, requires

REQUEST_BYTES = 32 * 1024  # a CA certificate or two
ERRORS = {
    400: OpenApiResponse(ErrorSerializer, description="validation_failed (also: unknown fields)"),
    403: OpenApiResponse(ErrorSerializer, description="forbidden"),
    404: OpenApiResponse(ErrorSerializer, description="not_found"),
    409: OpenApiResponse(ErrorSerializer, description="conflict (a destination of that name)"),
    413: OpenApiResponse(ErrorSerializer, description="payload_too_large (over 32 KiB)"),
}
SIEM_ADMINS = requires(Everywhere(Capability.MANAGE_GRANTS), agent_kwarg=None)


class SiemBacklogSerializer(serializers.Serializer):
    chain = serializers.CharField(help_text="audit or access")
    behind = serializers.IntegerField(help_text="Rows the sink has not accepted yet.")
    oldest = serializers.DateTimeField(
        allow_null=True, help_text="When the oldest of them was written."
    )
    age_seconds = serializers.FloatField(allow_null=True)
    sent = serializers.IntegerField(help_text="Events the sink accepted so far.")


class SiemDestinationSerializer(serializers.ModelSerializer):
    has_token = serializers.SerializerMethodField()
    has_ca_certificate = serializers.SerializerMethodField()
    backlog = serializers.SerializerMethodField()

    class Meta:
        model = SiemDestination
        fields = [
            "id",
            "name",
            "protocol",
            "url",
            "has_token",
            "has_ca_certificate",
            "status",
            "paused_reason",
            "paused_at",
            "last_error",
            "last_error_at",
            "last_success_at",
            "failures",
            "backlog",
            "created_by",
            "created_at",
        ]

    def get_has_token(self, obj) -> bool:
        return bool(obj.credential_encrypted)

    def get_has_ca_certificate(self, obj) -> bool:
        return bool(obj.ca_certificate)

    @extend_schema_field(SiemBacklogSerializer(many=True))
    def get_backlog(self, obj) -> list:
        return SiemBacklogSerializer(siem.backlog(obj), many=True).data


class SiemDestinationCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=siem.NAME_MAX)
    protocol = serializers.CharField(help_text="syslog, splunk_hec or otlp_http")
    url = serializers.CharField(
        max_length=500,
        help_text="syslog: tcp://host:port or tcp+tls://host:port; splunk_hec: the collector's "
        "URL (…/services/collector/event); otlp_http: the logs URL (…/v1/logs).",
    )
    token = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        write_only=True,
        help_text="splunk_hec: the HEC token (required); otlp_http: a bearer token (optional). "
        "Stored encrypted, never shown again.",
    )
    ca_certificate = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="tcp+tls:// syslog only: the PEM CA the receiver's certificate must chain to "
        "(default: the system's trust store).",
    )


class SiemDestinationUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=siem.NAME_MAX, required=False)
    url = serializers.CharField(max_length=500, required=False)
    token = serializers.CharField(required=False, allow_blank=True, write_only=True)
    ca_certificate = serializers.CharField(required=False, allow_blank=True)
    status = serializers.ChoiceField(
        choices=SiemDestination.Status.values,
        required=False,
        help_text="paused: stop streaming (the backlog grows); active: resume (a destination "
        "the sink paused stays paused until this).",
    )
    reason = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="Why you pause (audited)."
    )


def _valid(request, serializer_class):
    """Size first (413), then unknown fields (400), then the serializer's own checks."""
    check_request_size(request, REQUEST_BYTES, what="A SIEM destination")
    data = request.data
    if not isinstance(data, dict):
        raise ValidationFailed("Send a JSON object.")
    unknown = sorted(set(data) - set(serializer_class().fields))
    if unknown:
        raise ValidationFailed(
            f"Unknown {ngettext('field', 'fields', len(unknown))}: {', '.join(unknown)}.",
            details=[
                {"path": k, "code": "unknown_field", "message": "Unknown field."} for k in unknown
            ],
        )
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _answer(destination, code=status.HTTP_200_OK) -> Response:
    destination = SiemDestination.objects.prefetch_related("cursors").get(pk=destination.pk)
    return Response(SiemDestinationSerializer(destination).data, status=code)


@extend_schema(
    methods=["GET"],
    summary="List the SIEM destinations, each with its status and backlog per chain",
    responses=SiemDestinationSerializer(many=True),
)
@extend_schema(
    methods=["POST"],
    summary="Add a SIEM destination: the audit and access logs stream to it from their start",
    description="Syslog (RFC 5424 over TCP, octet-counted; TLS with tcp+tls://), Splunk HTTP "
    "Event Collector or OpenTelemetry logs (OTLP/HTTP JSON). The address must be public "
    "unless WEBHOOK_ALLOW_PRIVATE_TARGETS is on. Needs MANAGE_GRANTS and VIEW_AUDIT on all "
    "agents.",
    request=SiemDestinationCreateSerializer,
    responses={201: SiemDestinationSerializer, **ERRORS},
)
@api_view(["GET", "POST"])
@SIEM_ADMINS
def siem_destination_list(request):
    if request.method == "POST":
        data = _valid(request, SiemDestinationCreateSerializer)
        destination = siem.destination_create(actor=request.user, **data)
        return _answer(destination, status.HTTP_201_CREATED)
    siem.check_may_manage(request.user)
    rows = SiemDestination.objects.prefetch_related("cursors")
    return Response(SiemDestinationSerializer(rows, many=True).data)


@extend_schema(
    methods=["GET"],
    summary="A SIEM destination, its status and backlog",
    responses={200: SiemDestinationSerializer, 404: ERRORS[404]},
)
@extend_schema(
    methods=["PATCH"],
    summary="Change a SIEM destination, or pause or resume it (status)",
    request=SiemDestinationUpdateSerializer,
    responses={200: SiemDestinationSerializer, **ERRORS},
)
@extend_schema(
    methods=["DELETE"],
    summary="Remove a SIEM destination (its cursors go; the logs stay)",
    responses={204: None, 403: ERRORS[403], 404: ERRORS[404]},
)
@api_view(["GET", "PATCH", "DELETE"])
@SIEM_ADMINS
def siem_destination_detail(request, pk: int):
    siem.check_may_manage(request.user)
    destination = SiemDestination.objects.filter(pk=pk).first()
    if destination is None:
        raise NotFound("Not found.")
    if request.method == "DELETE":
        siem.destination_delete(actor=request.user, destination=destination)
        return Response(status=status.HTTP_204_NO_CONTENT)
    if request.method == "PATCH":
        data = dict(_valid(request, SiemDestinationUpdateSerializer))
        wanted, reason = data.pop("status", None), data.pop("reason", "")
        if data:
            destination = siem.destination_update(
                actor=request.user, destination=destination, **data
            )
        if wanted == SiemDestination.Status.PAUSED:
            destination = siem.destination_pause(
                actor=request.user, destination=destination, reason=reason
            )
        elif wanted == SiemDestination.Status.ACTIVE:
            destination = siem.destination_resume(actor=request.user, destination=destination)
    return _answer(destination)
