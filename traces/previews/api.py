"""Operator API for impact previews: ask for one, read it (state, progress, report), cancel
it. Thin: parse strictly, call the same services and selectors as the pages."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.health import work_waits_because
from console.kernel.api_schema import ErrorSerializer
from console.kernel.errors import NotFound
from console.kernel.limits import check_request_size
from console.kernel.policy import Capability, check_user_can_preview, requires
from strategies.catalog.models import Agent
from strategies.catalog.selectors import environment_get
from strategies.documents.models import Document
from traces.previews import selectors, services
from traces.previews.models import Preview
from traces.previews.serializers import PreviewRequest, PreviewSerializer, preview_state

TAGS = ["previews"]
BODY_LIMIT = 16 * 1024


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


READ_ERRORS = {
    403: _error("You may not see this agent's traces or configuration."),
    404: _error("Unknown, or outside your scope."),
}


def _out(preview, reused=None) -> dict:
    state = selectors.effective_state(preview)
    return preview_state(
        preview,
        state=state,
        failure=selectors.failure_words(preview),
        waiting=(work_waits_because() or "") if state == Preview.State.QUEUED else "",
        reused=reused,
    )


@extend_schema(
    operation_id="previews_create",
    summary="Ask for an impact preview of a strategy version in an environment",
    description="Replays the environment's retained traces of the window (default: the last 7 "
    "days, at most 100,000, stratified by status beyond) with what is live there and with "
    "this version, as a background task. 202 with the new preview; 200 with the one already "
    "complete or running for the same inputs (`reused`).",
    request=PreviewRequest,
    responses={
        200: PreviewSerializer,
        202: PreviewSerializer,
        400: _error(
            "Invalid input; `no_live_version`, `not_publishable` (the environment's runtime "
            "cannot serve it: details), `window_beyond_retention`, `invalid_window`, "
            "`no_traces`, `not_a_strategy`."
        ),
        413: _error("Body larger than 16 KiB."),
        **READ_ERRORS,
    },
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.VIEW_TRACES, agent_kwarg=None, anywhere=True)
def preview_create(request):
    check_request_size(request, BODY_LIMIT, what="A preview request")
    serializer = PreviewRequest(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    agent = Agent.objects.filter(key=data["agent"]).first()
    if agent is None:
        raise NotFound("Not found.")
    document = Document.objects.filter(agent=agent, key=data["document"]).first()
    version = document.versions.filter(number=data["version"]).first() if document else None
    if version is None:
        # Out of scope and unknown look alike: the policy is asked first.
        check_user_can_preview(request.user, agent)
        raise NotFound(f"{data['agent']} has no version {data['version']} of {data['document']}.")
    preview, reused = services.preview_request(
        actor=request.user,
        version=version,
        environment=environment_get(key=data["environment"]),
        window_start=data.get("window_start"),
        window_end=data.get("window_end"),
    )
    return Response(_out(preview, reused), status=200 if reused else 202)


@extend_schema(
    operation_id="previews_retrieve",
    summary="One impact preview: state, progress and, once complete, its report",
    responses={200: PreviewSerializer, **READ_ERRORS},
    tags=TAGS,
)
@api_view(["GET"])
@requires(Capability.VIEW_TRACES, agent_kwarg=None, anywhere=True)
def preview_detail(request, pk: int):
    preview = selectors.preview_get(user=request.user, pk=pk)
    services.preview_viewed(actor=request.user, preview=preview, detail={"api": True})
    return Response(_out(preview))


@extend_schema(
    operation_id="previews_cancel",
    summary="Cancel a queued or running impact preview",
    request=None,
    responses={
        200: PreviewSerializer,
        409: _error("`preview_finished`: it is already complete, cancelled or failed."),
        **READ_ERRORS,
    },
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.VIEW_TRACES, agent_kwarg=None, anywhere=True)
def preview_cancel(request, pk: int):
    preview = selectors.preview_get(user=request.user, pk=pk)
    return Response(_out(services.preview_cancel(actor=request.user, preview=preview)))
