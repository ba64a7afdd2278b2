"""Shadow releases: start one beside the live version, stop it, promote it."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.kernel.policy import Capability, requires
from strategies.catalog.selectors import environment_get
from strategies.documents import selectors as documents
from strategies.releases import services as releases
from strategies.releases.api.common import TAGS, WRITE_ERRORS, _error, _outcome, _parse
from strategies.releases.serializers import (
    ReleaseOutcomeSerializer,
    ShadowOutcomeSerializer,
    ShadowPromoteRequest,
    ShadowStartRequest,
    ShadowStopRequest,
)
from strategies.releases.services import shadow_state

# --- shadow releases ---------------------------------------------------------------------------------
SHADOW_ERRORS = {
    **WRITE_ERRORS,
    400: _error(
        "Invalid input; `not_a_strategy`, `not_frozen`; `not_publishable`: the runtime cannot "
        "serve the version or does not declare shadow support (a `shadow_unsupported` detail)."
    ),
    409: _error(
        "`shadow_running` (one per document and environment), `no_shadow`, `nothing_live`, "
        "`stale_revision`; `current` holds the shadow as it now stands."
    ),
}


@extend_schema(
    summary="Run a version as shadow beside the live one",
    description="The runtime selects with it on the same requests and reports what it would "
    "have chosen; users get only the live version, so no approval is asked, even in a "
    "protected environment. Checked against the environment's manifest like a publish.",
    request=ShadowStartRequest,
    responses={200: ShadowOutcomeSerializer, **SHADOW_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.VIEW_CONFIG)  # the service checks the right to run shadows here
def shadow_start(request, agent, document, environment):
    data = _parse(request, ShadowStartRequest)
    doc = documents.document_get(agent=request.agent, key=document)
    shadow = releases.shadow_start(
        version=documents.version_get(document=doc, number=data["version"]),
        environment=environment_get(key=environment),
        actor=request.user,
        reason=data["reason"],
        expected_revision=data.get("expected_revision"),
    )
    return Response({"shadow": shadow_state(shadow)})


@extend_schema(
    summary="Stop the shadow, saying why",
    request=ShadowStopRequest,
    responses={200: ShadowOutcomeSerializer, **SHADOW_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.VIEW_CONFIG)  # the service checks the right to run shadows here
def shadow_stop(request, agent, document, environment):
    data = _parse(request, ShadowStopRequest)
    shadow = releases.shadow_stop(
        document=documents.document_get(agent=request.agent, key=document),
        environment=environment_get(key=environment),
        actor=request.user,
        reason=data["reason"],
        expected_revision=data.get("expected_revision"),
    )
    return Response({"shadow": shadow_state(shadow)})


@extend_schema(
    summary="Promote the shadow to live (a publish of its version)",
    description="200 with the release when it is live (the shadow stops); 202 with the "
    "approval request when the environment is protected (the shadow runs on until the "
    "request is approved).",
    request=ShadowPromoteRequest,
    responses={200: ReleaseOutcomeSerializer, 202: ReleaseOutcomeSerializer, **SHADOW_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.VIEW_CONFIG)  # the service checks the right to publish here
def shadow_promote(request, agent, document, environment):
    data = _parse(request, ShadowPromoteRequest)
    outcome = releases.shadow_promote(
        document=documents.document_get(agent=request.agent, key=document),
        environment=environment_get(key=environment),
        actor=request.user,
        reason=data["reason"],
        version=data.get("version"),
        expected_revision=data.get("expected_revision"),
    )
    return _outcome(outcome)
