"""Operator API for runtime tokens (/api/v1/runtime-tokens/): list, create (the secret shown
once), read, revoke. Console-wide: MANAGE_RUNTIME_TOKENS on all agents, as on the token page;
a personal token with that capability in its scope can script onboarding.

Not the runtime API (strategies.runtime.api, which runtimes call with their token). Thin:
parse strictly, call strategies.runtime.tokens (which audits), serialize — never a hash.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.kernel.api_schema import ErrorSerializer, StrictSerializer
from console.kernel.credentials import shows_secret
from console.kernel.errors import NotFound, ValidationFailed
from console.kernel.policy import Capability, Everywhere, agents_where, requires
from strategies.catalog.models import Agent, Environment
from strategies.documents.serializers import KeyField, parse_strict
from strategies.runtime.instances import LISTED_FOR_HOURS, MINIMUM_SDK_VERSION, sdk_supported
from strategies.runtime.models import RuntimeToken
from strategies.runtime.selectors import UNAUTHORIZED, runtime_instances_list, tokens_list
from strategies.runtime.tokens import runtime_token_create, runtime_token_revoke

# A token request is a name, an environment, a few capabilities and agent keys.
REQUEST_BYTES = 16 * 1024
MANAGERS = requires(Everywhere(Capability.MANAGE_RUNTIME_TOKENS), agent_kwarg=None)

ERRORS = {
    400: OpenApiResponse(ErrorSerializer, description="Malformed or invalid input."),
    403: OpenApiResponse(
        ErrorSerializer,
        description="Needs manage_runtime_tokens on all agents (for a personal token: in its "
        "scope, for every agent).",
    ),
}
NOT_FOUND = {404: OpenApiResponse(ErrorSerializer, description="No such runtime token.")}
TOO_LARGE = {413: OpenApiResponse(ErrorSerializer, description="Request larger than 16 KiB.")}


# --- shapes -----------------------------------------------------------------------------------------
class RuntimeTokenSerializer(serializers.Serializer):
    """A token as the page shows it: never its hash, never its secret."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    environment = serializers.CharField(source="environment.key")
    all_agents = serializers.BooleanField(help_text="Every agent; otherwise only `agents`.")
    agents = serializers.SerializerMethodField(
        help_text="Agent keys it covers when not all_agents ([]: none, e.g. all deleted)."
    )
    capabilities = serializers.ListField(child=serializers.CharField())
    prefix = serializers.CharField(help_text="The secret's first characters, to recognise it.")
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    is_active = serializers.BooleanField()

    def get_agents(self, obj) -> list[str]:
        return sorted(a.key for a in obj.agents.all())


class RuntimeTokenCreatedSerializer(RuntimeTokenSerializer):
    secret = serializers.CharField(help_text="Shown in this answer only; only its hash is kept.")


class RuntimeTokenListSerializer(serializers.Serializer):
    results = RuntimeTokenSerializer(many=True)


class RuntimeTokenCreateRequest(StrictSerializer):
    name = serializers.CharField(max_length=200, help_text="Which runtime uses it.")
    environment = KeyField(queryset=Environment.objects.all(), help_text="Environment key.")
    # Checked by the service, which names the choices (a ChoiceField's enum would clash in
    # the schema with the roles' capabilities).
    capabilities = serializers.ListField(
        child=serializers.CharField(max_length=30),
        max_length=len(RuntimeToken.CAPABILITIES),
        help_text="Any of " + ", ".join(RuntimeToken.CAPABILITIES) + "; at least one.",
    )
    all_agents = serializers.BooleanField(
        required=False,
        help_text="Every agent, now and later. Omitted: true when no agents are given.",
    )
    agents = KeyField(
        queryset=Agent.objects.all(),
        many=True,
        required=False,
        default=list,
        help_text="Agent keys; omit or [] (with all_agents omitted or true) for every agent.",
    )

    def validate(self, attrs):
        # Omitted, all_agents is what the API always meant: no agents given, every agent.
        attrs.setdefault("all_agents", not attrs.get("agents"))
        return attrs


class RuntimeTokenRevokeRequest(StrictSerializer):
    reason = serializers.CharField(min_length=3, max_length=500, help_text="For the audit log.")


# --- helpers ----------------------------------------------------------------------------------------
def _parse(request, serializer_class) -> dict:
    return parse_strict(request, serializer_class, limit=REQUEST_BYTES, what="A token request")


def _token(pk: int) -> RuntimeToken:
    token = (
        RuntimeToken.objects.select_related("environment")
        .prefetch_related("agents")
        .filter(pk=pk)
        .first()
    )
    if token is None:
        raise NotFound("No such runtime token.")
    return token


# --- endpoints --------------------------------------------------------------------------------------
@extend_schema(
    methods=["GET"],
    operation_id="v1_runtime_tokens_list",
    summary="List runtime tokens, active first (never their secrets or hashes)",
    responses={200: RuntimeTokenListSerializer, 403: ERRORS[403]},
    tags=["runtime tokens"],
)
@extend_schema(
    methods=["POST"],
    operation_id="v1_runtime_tokens_create",
    summary="Create a runtime token for one environment; the secret is in this answer only",
    request=RuntimeTokenCreateRequest,
    responses={201: RuntimeTokenCreatedSerializer, **ERRORS, **TOO_LARGE},
    tags=["runtime tokens"],
)
@shows_secret
@api_view(["GET", "POST"])
@MANAGERS
def runtime_token_list(request):
    if request.method == "POST":
        data = _parse(request, RuntimeTokenCreateRequest)
        token, secret = runtime_token_create(actor=request.user, **data)
        body = {**RuntimeTokenSerializer(_token(token.pk)).data, "secret": secret}
        return Response(body, status=201)
    return Response({"results": RuntimeTokenSerializer(tokens_list(), many=True).data})


@extend_schema(
    operation_id="v1_runtime_tokens_retrieve",
    summary="One runtime token",
    responses={200: RuntimeTokenSerializer, 403: ERRORS[403], **NOT_FOUND},
    tags=["runtime tokens"],
)
@api_view(["GET"])
@MANAGERS
def runtime_token_detail(request, pk: int):
    return Response(RuntimeTokenSerializer(_token(pk)).data)


@extend_schema(
    operation_id="v1_runtime_tokens_revoke",
    summary="Revoke a runtime token at once (its runtime gets 401 from the next request)",
    request=RuntimeTokenRevokeRequest,
    responses={
        200: RuntimeTokenSerializer,
        **ERRORS,
        **NOT_FOUND,
        409: OpenApiResponse(ErrorSerializer, description="Already revoked."),
        **TOO_LARGE,
    },
    tags=["runtime tokens"],
)
@api_view(["POST"])
@MANAGERS
def runtime_token_revoke_view(request, pk: int):
    token = _token(pk)
    data = _parse(request, RuntimeTokenRevokeRequest)
    runtime_token_revoke(token=token, actor=request.user, reason=data["reason"])
    return Response(RuntimeTokenSerializer(_token(pk)).data)


# --- who serves what: the runtimes that report (GET /api/v1/runtimes/) ---------------------------
class RuntimeInstanceSerializer(serializers.Serializer):
    instance = serializers.CharField(help_text="The runtime process's own id.")
    agent = serializers.CharField(source="agent.key")
    environment = serializers.CharField(source="environment.key")
    sdk_version = serializers.CharField()
    sdk_supported = serializers.SerializerMethodField()
    runtime = serializers.CharField()
    transport = serializers.CharField(help_text="stream or poll")
    resolution = serializers.SerializerMethodField(
        help_text="fresh, stale, unauthorized…: its last heartbeat's, and `unauthorized` as "
        "soon as its token is revoked."
    )
    etag = serializers.CharField(help_text="The config ETag it serves.")
    documents = serializers.DictField(child=serializers.IntegerField())
    serving_since = serializers.DateTimeField()
    first_seen = serializers.DateTimeField()
    last_seen = serializers.DateTimeField()
    token = serializers.SerializerMethodField(help_text="{id, name, revoked} of the token used.")

    def get_sdk_supported(self, obj) -> bool | None:
        return sdk_supported(obj.sdk_version)

    def get_resolution(self, obj) -> str:
        if obj.token is not None and not obj.token.is_active:
            return UNAUTHORIZED
        return obj.resolution

    def get_token(self, obj) -> dict | None:
        if obj.token is None:
            return None
        return {"id": obj.token.pk, "name": obj.token.name, "revoked": not obj.token.is_active}


class RuntimeInstanceListSerializer(serializers.Serializer):
    results = RuntimeInstanceSerializer(many=True)
    minimum_sdk_version = serializers.CharField()


@extend_schema(
    tags=["runtime-tokens"],
    operation_id="runtimes_list",
    summary="Runtimes that reported what they serve (who serves what)",
    description="Runtime processes heard in the last 24 hours, newest first, for the agents "
    "you may view the configuration of; `?agent=` and `?environment=` filter.",
    parameters=[
        OpenApiParameter("agent", str, description="Agent key."),
        OpenApiParameter("environment", str, description="Environment key."),
    ],
    responses={
        200: RuntimeInstanceListSerializer,
        400: OpenApiResponse(ErrorSerializer, description="Unknown filter."),
        403: OpenApiResponse(ErrorSerializer, description="No view_config anywhere."),
        404: OpenApiResponse(ErrorSerializer, description="Unknown agent or environment."),
    },
)
@api_view(["GET"])
@requires(Capability.VIEW_CONFIG, agent_kwarg=None, anywhere=True)
def runtimes_list(request):
    unknown = sorted(set(request.query_params) - {"agent", "environment"})
    if unknown:
        raise ValidationFailed(f"Unknown filter {unknown[0]}.")
    agents = agents_where(request.user, Capability.VIEW_CONFIG)
    if key := request.query_params.get("agent"):
        agents = agents.filter(key=key)
        if not agents.exists():
            raise NotFound(f"Unknown agent '{key}'.")
    environment = None
    if key := request.query_params.get("environment"):
        environment = Environment.objects.filter(key=key).first()
        if environment is None:
            raise NotFound(f"Unknown environment '{key}'.")
    since = timezone.now() - timedelta(hours=LISTED_FOR_HOURS)
    items = runtime_instances_list(agents=agents, environment=environment).filter(
        last_seen__gte=since
    )[:1000]
    return Response(
        {
            "results": RuntimeInstanceSerializer(items, many=True).data,
            "minimum_sdk_version": MINIMUM_SDK_VERSION,
        }
    )
