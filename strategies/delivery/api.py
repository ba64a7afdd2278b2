"""Operator API for webhooks (/api/v1/webhooks/): list, register (the signing secret shown
once), read with a summary of recent deliveries, remove. Console-wide: MANAGE_TOKENS on all
agents, as on the webhook page. Thin: parse strictly, call strategies.delivery.webhooks
(which checks the URL against internal addresses and audits), serialize — never the secret
after creation.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.kernel.api_schema import ErrorSerializer, StrictSerializer
from console.kernel.credentials import shows_secret
from console.kernel.errors import NotFound
from console.kernel.policy import Capability, Everywhere, requires
from strategies.catalog.models import Environment
from strategies.delivery import selectors, webhooks
from strategies.delivery.models import WEBHOOK_EVENT, WEBHOOK_EVENTS, Webhook
from strategies.documents.serializers import KeyField, parse_strict

REQUEST_BYTES = 16 * 1024
RECENT_DELIVERIES = 10
MANAGERS = requires(Everywhere(Capability.MANAGE_TOKENS), agent_kwarg=None)

ERRORS = {
    400: OpenApiResponse(
        ErrorSerializer, description="Malformed or invalid input (an internal URL, with why)."
    ),
    403: OpenApiResponse(ErrorSerializer, description="Needs manage_tokens on all agents."),
}
NOT_FOUND = {404: OpenApiResponse(ErrorSerializer, description="No such webhook (or removed).")}


# --- shapes -----------------------------------------------------------------------------------------
class WebhookSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    environment = serializers.CharField(source="environment.key")
    url = serializers.URLField()
    description = serializers.CharField()
    events = serializers.ListField(child=serializers.ChoiceField(choices=WEBHOOK_EVENTS))
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    deleted_at = serializers.DateTimeField(allow_null=True, help_text="Set once removed.")
    is_active = serializers.BooleanField()


class WebhookListRowSerializer(WebhookSerializer):
    delivered = serializers.IntegerField()
    failed = serializers.IntegerField()


class WebhookListSerializer(serializers.Serializer):
    results = WebhookListRowSerializer(many=True)


class WebhookCreatedSerializer(WebhookSerializer):
    secret = serializers.CharField(help_text="The signing secret; in this answer only.")


class DeliverySerializer(serializers.Serializer):
    delivery_id = serializers.UUIDField()
    event = serializers.CharField()
    status = serializers.CharField()
    tries = serializers.IntegerField()
    summary = serializers.SerializerMethodField(help_text="The change it announces.")
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)

    def get_summary(self, obj) -> str:
        # `summary` reads a release.changed body; another event's body may not have its
        # fields: then the event's name says what it was.
        try:
            return obj.summary
        except (KeyError, TypeError, ValueError):
            return obj.event


class DeliveriesSummarySerializer(serializers.Serializer):
    counts = serializers.DictField(
        child=serializers.IntegerField(), help_text="pending, delivered, failed"
    )
    recent = DeliverySerializer(many=True, help_text=f"The last {RECENT_DELIVERIES}.")


class WebhookDetailSerializer(WebhookSerializer):
    deliveries = DeliveriesSummarySerializer()


class WebhookCreateRequest(StrictSerializer):
    environment = KeyField(queryset=Environment.objects.all(), help_text="Environment key.")
    url = serializers.CharField(max_length=500, help_text="A public http(s) address.")
    description = serializers.CharField(
        max_length=200, required=False, allow_blank=True, default=""
    )
    events = serializers.ListField(
        child=serializers.CharField(max_length=40),
        required=False,
        max_length=len(WEBHOOK_EVENTS),
        help_text=f"Any of {', '.join(WEBHOOK_EVENTS)}; default [{WEBHOOK_EVENT!r}].",
    )


# --- helpers ----------------------------------------------------------------------------------------
def _webhook(pk: int, *, active: bool = False) -> Webhook:
    hooks = Webhook.objects.select_related("environment").filter(pk=pk)
    hook = (hooks.filter(deleted_at__isnull=True) if active else hooks).first()
    if hook is None:
        raise NotFound("No such webhook." if not active else "No such webhook, or removed.")
    return hook


# --- endpoints --------------------------------------------------------------------------------------
@extend_schema(
    methods=["GET"],
    operation_id="v1_webhooks_list",
    summary="List webhooks with their delivered and failed counts (never their secrets)",
    responses={200: WebhookListSerializer, 403: ERRORS[403]},
    tags=["webhooks"],
)
@extend_schema(
    methods=["POST"],
    operation_id="v1_webhooks_create",
    summary="Register a webhook for an environment; the signing secret is in this answer only",
    request=WebhookCreateRequest,
    responses={
        201: WebhookCreatedSerializer,
        **ERRORS,
        409: OpenApiResponse(ErrorSerializer, description="This URL is already registered there."),
        413: OpenApiResponse(ErrorSerializer, description="Request larger than 16 KiB."),
    },
    tags=["webhooks"],
)
@shows_secret
@api_view(["GET", "POST"])
@MANAGERS
def webhook_list(request):
    if request.method == "POST":
        data = parse_strict(
            request, WebhookCreateRequest, limit=REQUEST_BYTES, what="A webhook request"
        )
        hook, secret = webhooks.webhook_create(
            environment=data["environment"],
            url=data["url"].strip(),
            description=data["description"].strip(),
            events=data.get("events"),
            actor=request.user,
        )
        return Response({**WebhookSerializer(hook).data, "secret": secret}, status=201)
    return Response(
        {"results": WebhookListRowSerializer(selectors.webhooks_list(), many=True).data}
    )


@extend_schema(
    methods=["GET"],
    operation_id="v1_webhooks_retrieve",
    summary="One webhook, with its delivery counts and most recent deliveries",
    responses={200: WebhookDetailSerializer, 403: ERRORS[403], **NOT_FOUND},
    tags=["webhooks"],
)
@extend_schema(
    methods=["DELETE"],
    operation_id="v1_webhooks_destroy",
    summary="Remove a webhook: deliveries stop, its delivery log stays",
    request=None,
    responses={204: None, 403: ERRORS[403], **NOT_FOUND},
    tags=["webhooks"],
)
@api_view(["GET", "DELETE"])
@MANAGERS
def webhook_detail(request, pk: int):
    if request.method == "DELETE":
        webhooks.webhook_delete(webhook=_webhook(pk, active=True), actor=request.user)
        return Response(status=204)
    hook = _webhook(pk)
    deliveries = {
        "counts": selectors.delivery_counts(webhook=hook),
        "recent": DeliverySerializer(
            selectors.deliveries_recent(webhook=hook, limit=RECENT_DELIVERIES), many=True
        ).data,
    }
    return Response({**WebhookSerializer(hook).data, "deliveries": deliveries})
