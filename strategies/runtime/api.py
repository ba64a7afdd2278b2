"""The runtime API (docs/runtime-contract.md §1, §2): token-authenticated, no session, no CSRF.

`GET config/<agent>` is the hot path: the token's identity and the pre-rendered payload bytes
come from the process mirror (a Redis GET each on a miss); no database query and no serializer
on a cache hit. A request the mirror can answer does not even reach Django: the dispatcher in
console/wsgi.py calls `config_mirrored`. The serializers below only document the contract in the
OpenAPI schema.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpResponse, HttpResponseNotModified, JsonResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from console.kernel.api_schema import ErrorDetailSerializer, ErrorSerializer
from console.kernel.errors import ApplicationError, NotFound
from strategies.catalog.models import Environment
from strategies.delivery import config as runtime_config
from strategies.runtime.auth import RuntimeIdentity, check_agent_scope
from strategies.runtime.authentication import (
    RuntimeTokenAuthentication,
    etag_matches,
    runtime_view,
)
from strategies.runtime.instances import instance_named, runtime_heartbeat
from strategies.runtime.manifests import manifest_report, manifest_writer_check


# --- schema-only serializers ----------------------------------------------------------------------
class LiveDocumentSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    body = serializers.JSONField(help_text="The document body (docs/runtime-contract.md §5).")


class RuntimeConfigSerializer(serializers.Serializer):
    agent = serializers.CharField()
    environment = serializers.CharField()
    etag = serializers.CharField(help_text='Equal to the ETag header, e.g. "r41-9f2c".')
    profile = LiveDocumentSerializer(allow_null=True)
    strategies = serializers.DictField(child=LiveDocumentSerializer())
    shadow = serializers.DictField(child=LiveDocumentSerializer())


class ManifestSectionSerializer(serializers.Serializer):
    key = serializers.CharField()
    block = serializers.ChoiceField(choices=["user_context", "query_context"])
    sensitive = serializers.BooleanField(required=False, default=False)


class ManifestSerializer(serializers.Serializer):
    runtime = serializers.CharField(required=False, help_text="Runtime build, free text.")
    providers = serializers.ListField(child=serializers.CharField())
    tools = serializers.ListField(child=serializers.CharField())
    handlers = serializers.ListField(child=serializers.CharField())
    sections = ManifestSectionSerializer(many=True)
    switches = serializers.ListField(child=serializers.CharField())


class ManifestWarningSerializer(serializers.Serializer):
    agent = serializers.CharField()
    document = serializers.CharField()
    version = serializers.IntegerField()
    errors = ErrorDetailSerializer(many=True)


class ManifestResultSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    warnings = ManifestWarningSerializer(many=True)


_ERRORS = {
    401: OpenApiResponse(ErrorSerializer, description="Missing, unknown or revoked token."),
    403: OpenApiResponse(ErrorSerializer, description="The token lacks the capability."),
}


# --- §1 live configuration ------------------------------------------------------------------------
def config_response(request, agent: str) -> HttpResponse:
    """The hot path: token and payload from the process mirror (Redis on a miss), no
    database query, no serializer; the database only when Redis lost the payload."""
    identity = RuntimeTokenAuthentication.identify(request, "config:read")
    check_agent_scope(identity, agent)
    entry = runtime_config.cached_config(agent, identity.environment_id)
    if entry is None:
        environment = Environment.objects.get(pk=identity.environment_id)
        entry = runtime_config.config_load(agent_key=agent, environment=environment)
        if entry is None:
            raise NotFound(f"Unknown agent '{agent}'.")
    etag, body = entry
    stream = _stream_header()
    if etag_matches(request.META.get("HTTP_IF_NONE_MATCH", ""), etag):
        return HttpResponseNotModified(headers={"ETag": etag, **dict(stream)})
    return HttpResponse(
        b"" if request.method == "HEAD" else body,
        content_type="application/json",
        headers={"ETag": etag, "Cache-Control": "no-cache", **dict(stream)},
    )


def _stream_header() -> list[tuple[str, str]]:
    """`X-Config-Stream`: where this console's config stream is (docs/runtime-contract.md
    §1a), when one is configured (settings.STREAM_URL)."""
    url = settings.STREAM_URL
    return [("X-Config-Stream", url)] if url else []


_CONTENT_TYPE = ("Content-Type", "application/json")
_NO_CACHE = ("Cache-Control", "no-cache")


@dataclass(frozen=True, slots=True)
class MirroredConfig:
    """What `config_response` answers a token for an agent, from the mirror: the identity it
    authorized (its use noted), the payload and the view's headers. True while the
    mirror's generation is `generation` (no invalidation since: no publish, revocation or
    reconnection) and its clock is before `expires_at` (both entries' lifetime)."""

    identity: RuntimeIdentity
    etag: str
    body: bytes
    headers_200: tuple[tuple[str, str], ...]  # HttpResponse's order
    headers_304: tuple[tuple[str, str], ...]
    generation: int
    expires_at: float


def config_mirrored(
    authorization: str, agent: str
) -> MirroredConfig | tuple[int, list[tuple[str, str]], bytes] | None:
    """`config_response` for the WSGI dispatcher (console/wsgi.py), from this process's
    mirror alone and without Django's request cycle: the answer as a `MirroredConfig`, a
    refusal as (status, headers, body), or None when the mirror cannot answer — no token, a
    token or payload not mirrored — and Django must. Same checks, same bytes (tests/
    integration/test_config_dispatcher.py); the caller adds the headers the middleware adds.
    The use of the token is noted here (`authorize_runtime`), not when a caller answers from
    the result again."""
    # Read before the entries: an invalidation from now on makes the result stale at once.
    generation = runtime_config.mirror.generation
    try:
        found = RuntimeTokenAuthentication.identify_mirrored(authorization, "config:read")
        if found is None:
            return None
        identity, identity_expires_at = found
        check_agent_scope(identity, agent)
    except ApplicationError as exc:
        response = JsonResponse(exc.as_payload(), status=exc.status)
        return exc.status, list(response.items()), response.content
    found = runtime_config.mirrored_config(agent, identity.environment_id)
    if found is None:
        return None
    (etag, body), config_expires_at = found
    stream = _stream_header()
    return MirroredConfig(
        identity=identity,
        etag=etag,
        body=body,
        headers_200=(("ETag", etag), _NO_CACHE, *stream, _CONTENT_TYPE),
        headers_304=(("ETag", etag), *stream),
        generation=generation,
        expires_at=min(identity_expires_at, config_expires_at),
    )


class ConfigView(APIView):
    """GET config/<agent>. Declared as a DRF view for the schema, but `dispatch` serves the
    request directly: DRF's request wrapping and negotiation would cost more than the
    whole lookup (see docs/PERFORMANCE.md)."""

    authentication_classes = [RuntimeTokenAuthentication]
    permission_classes = []

    @extend_schema(
        tags=["runtime"],
        operation_id="runtime_config_retrieve",
        summary="Live configuration of an agent in the token's environment",
        description="Every live strategy and the profile of the agent in the token's "
        "environment, with their version numbers, as one JSON document. Strong ETag; send it "
        "back as If-None-Match to get 304 while nothing changed (docs/runtime-contract.md §1).",
        parameters=[
            OpenApiParameter(
                "If-None-Match",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="The ETag you hold; 304 when it is still current.",
            )
        ],
        responses={
            200: RuntimeConfigSerializer,
            304: OpenApiResponse(description="Not modified: your ETag is current."),
            **_ERRORS,
            404: OpenApiResponse(
                ErrorSerializer, description="Unknown agent, or outside the token's scope."
            ),
        },
    )
    def get(self, request, agent: str):
        return config_response(request, agent)

    def dispatch(self, request, *args, **kwargs):
        try:
            if request.method not in ("GET", "HEAD"):
                return JsonResponse(
                    {"error": {"code": "method_not_allowed", "message": "Use GET.", "details": []}},
                    status=405,
                    headers={"Allow": "GET, HEAD"},
                )
            return config_response(request, kwargs["agent"])
        except ApplicationError as exc:
            return JsonResponse(exc.as_payload(), status=exc.status)


config = login_not_required(ConfigView.as_view())


# --- §2 manifest --------------------------------------------------------------------------------------
@extend_schema(
    tags=["runtime"],
    operation_id="runtime_manifest_update",
    summary="Report what the runtime of the token's environment implements",
    description="A manifest describes the whole environment, so the token must hold "
    "`manifest:write` and cover every agent (a token limited to some agents gets 403). A "
    "manifest that would leave a live version unservable is refused (409) and the one stored "
    "stays. `X-Runtime-Instance` (optional) names the reporting process, as in heartbeats.",
    parameters=[
        OpenApiParameter(
            "X-Runtime-Instance",
            str,
            OpenApiParameter.HEADER,
            description="The reporting process's own id (host:pid), shown with the manifest.",
        )
    ],
    request=ManifestSerializer,
    responses={
        200: ManifestResultSerializer,
        400: OpenApiResponse(ErrorSerializer, description="Malformed manifest."),
        **_ERRORS,
        403: OpenApiResponse(
            ErrorSerializer,
            description="The token lacks the capability, or is limited to some agents.",
        ),
        409: OpenApiResponse(
            ErrorSerializer,
            description="`manifest_breaks_live`: the runtime could not serve what is live in "
            "its environment; `details` names each finding, `live` lists the versions as "
            "`warnings` does. Not retried: nothing was stored.",
        ),
    },
)
@runtime_view(["PUT"], capability="manifest:write")
def manifest(request):
    identity = request.user
    manifest_writer_check(identity)  # before the body is read: the answer does not depend on it
    environment = Environment.objects.get(pk=identity.environment_id)
    report = manifest_report(
        environment=environment,
        body=request.data,
        actor=identity,
        instance=instance_named(request.headers.get("X-Runtime-Instance")),
    )
    return Response({"version": report.manifest.version, "warnings": report.warnings})


# --- §2a heartbeat: who serves what -------------------------------------------------------------
class HeartbeatAgentSerializer(serializers.Serializer):
    etag = serializers.CharField(max_length=100, help_text="The config ETag served.")
    documents = serializers.DictField(
        child=serializers.IntegerField(), help_text='Versions served, e.g. {"profile": 7}.'
    )
    resolution = serializers.CharField(
        max_length=20, required=False, help_text="fresh, cached, stale, unauthorized…"
    )


class HeartbeatSerializer(serializers.Serializer):
    instance = serializers.CharField(max_length=200, help_text="The runtime process's own id.")
    sdk_version = serializers.CharField(max_length=50, required=False)
    runtime = serializers.CharField(max_length=200, required=False)
    transport = serializers.ChoiceField(choices=["stream", "poll", "stopped"], required=False)
    agents = serializers.DictField(child=HeartbeatAgentSerializer())


class HeartbeatResultSerializer(serializers.Serializer):
    recorded = serializers.IntegerField()
    heartbeat_seconds = serializers.IntegerField()
    minimum_sdk_version = serializers.CharField()
    sdk_supported = serializers.BooleanField(allow_null=True)


@extend_schema(
    tags=["runtime"],
    operation_id="runtime_heartbeat_create",
    summary="Report which configuration this runtime process serves",
    description="Sent by the SDK every `heartbeat_seconds` and after every configuration "
    "change: the process's id, SDK version, transport and, per agent, the ETag and document "
    "versions it serves. The releases page shows them (docs/runtime-contract.md §2a).",
    request=HeartbeatSerializer,
    responses={
        200: HeartbeatResultSerializer,
        400: OpenApiResponse(ErrorSerializer, description="Malformed heartbeat."),
        **_ERRORS,
        404: OpenApiResponse(
            ErrorSerializer, description="An agent unknown, or outside the token's scope."
        ),
        409: OpenApiResponse(
            ErrorSerializer,
            description="`instance_taken`: another token reports this instance (nothing recorded).",
        ),
        429: OpenApiResponse(
            ErrorSerializer,
            description="`too_many_instances`: the token has RUNTIME_INSTANCES_PER_TOKEN live "
            "instances already.",
        ),
    },
)
@runtime_view(["POST"], capability="config:read")
def heartbeat(request):
    return Response(runtime_heartbeat(identity=request.user, body=request.data))
