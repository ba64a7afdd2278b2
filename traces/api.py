"""Trace API views: the runtime's batch ingest and the operator's read API."""

from __future__ import annotations

from context_runtime import wire
from context_runtime.findings import Finding
from django.http import JsonResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import (
    api_view,
    parser_classes,
)
from rest_framework.parsers import BaseParser
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from console.access.api import OperatorPagination, paginated
from console.kernel.api_schema import ErrorDetailSerializer, ErrorSerializer
from console.kernel.audit import AccessAction
from console.kernel.errors import ValidationFailed
from console.kernel.limits import read_limited_body
from console.kernel.standby import lag_tolerant
from strategies.runtime.authentication import runtime_view
from traces import ingest, replay, selectors, services
from traces.filters import TraceFilters

# --- runtime: POST /api/v1/runtime/traces -------------------------------------------------------


class _RawJSON(BaseParser):
    """Declares application/json for the schema; the view reads the bytes itself."""

    media_type = "application/json"


class _Rejected(serializers.Serializer):
    index = serializers.IntegerField()
    request_id = serializers.CharField(allow_null=True)
    errors = ErrorDetailSerializer(many=True)


class IngestResponse(serializers.Serializer):
    accepted = serializers.IntegerField(help_text="Traces stored and committed.")
    duplicates = serializers.ListField(
        child=serializers.CharField(),
        help_text=(
            "request_ids already stored in this environment (or repeated in the batch) by a "
            "runtime within this token's scope; not stored again."
        ),
    )
    rejected = _Rejected(many=True)
    snapshots_dropped = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text=(
            "request_ids of accepted traces whose snapshot was not stored: the strategy "
            'version the trace names does not say "snapshot": {"allowed": true}. '
            "Present only when there is at least one."
        ),
    )


@extend_schema(
    operation_id="runtime_traces_ingest",
    summary="Report a batch of selection traces",
    description=(
        f"Up to {wire.MAX_TRACES_PER_BATCH} traces and {wire.MAX_BATCH_BYTES} bytes per "
        f"request (413 beyond), at most {wire.MAX_CANDIDATES_PER_TRACE} candidates per trace. "
        "Invalid traces are rejected one by one with errors at paths relative to the trace; "
        "a request_id already stored in the environment is a duplicate (request ids are "
        "unique per environment). 200 means every accepted trace is committed. The "
        "environment is the token's; a snapshot is kept only when the trace's strategy "
        "version allows it. See docs/runtime-contract.md §3."
    ),
    tags=["runtime"],
    request={"application/json": ingest.batch_json_schema()},
    responses={
        200: IngestResponse,
        400: OpenApiResponse(ErrorSerializer, description="Malformed JSON or batch shape."),
        401: OpenApiResponse(ErrorSerializer, description="Missing, unknown or revoked token."),
        403: OpenApiResponse(ErrorSerializer, description="Token without traces:write."),
        413: OpenApiResponse(ErrorSerializer, description="Body over the byte limit."),
    },
)
@runtime_view(["POST"], capability="traces:write")
@parser_classes([_RawJSON])
def runtime_traces_ingest(request):
    identity = request.user
    body = read_limited_body(
        request, wire.MAX_BATCH_BYTES, what="A trace batch", advice="Split it."
    )
    try:
        batch = ingest.parse_batch(body)
    except ingest.BatchRefused as exc:
        raise ValidationFailed(
            exc.message,
            code=exc.code,
            details=[{"path": exc.path, "code": exc.code, "message": exc.message}],
        ) from exc
    result = services.trace_batch_store(identity=identity, batch=batch)
    # Bypass DRF's renderer: the response is small, but this endpoint is hot.
    return JsonResponse(result.as_dict())


# --- operator API: /api/v1/traces ---------------------------------------------------------------


class CandidateOut(serializers.Serializer):
    id = serializers.CharField(source="item_id")
    source = serializers.CharField()
    version = serializers.CharField()
    size = serializers.IntegerField(allow_null=True)
    required = serializers.BooleanField()
    bundle = serializers.CharField()
    decision = serializers.CharField()
    reason = serializers.CharField()
    outcome = serializers.ChoiceField(choices=list(wire.OUTCOMES), allow_null=True)
    relevance = serializers.FloatField(allow_null=True)
    depends_on = serializers.ListField(child=serializers.CharField())
    conflicts_with = serializers.ListField(child=serializers.CharField())
    note = serializers.CharField()
    provider_bundle = serializers.CharField(
        allow_null=True,
        help_text="The provider's own bundle (bundle is the group the engine decided); "
        "null from runtimes that send no replay fields.",
    )
    reason_code = serializers.ChoiceField(
        choices=list(wire.REASON_CODES),
        allow_null=True,
        help_text="Why, from a closed list; null from runtimes that send no replay fields.",
    )


class SelectionOut(serializers.Serializer):
    """What the engine was asked besides the strategy and the candidates, and which engine
    answered (docs/runtime-contract.md §3)."""

    engine = serializers.CharField(help_text='e.g. "context_runtime 0.2.0 rules 1a2b3c4d5e6f"')
    fixed_input_tokens = serializers.IntegerField(allow_null=True)
    relevance_threshold = serializers.FloatField(allow_null=True)
    context_window = serializers.IntegerField(
        allow_null=True, help_text="The context_window given to select()."
    )
    max_input_tokens = serializers.IntegerField(
        allow_null=True, help_text="The call's own cap given to select()."
    )


class TraceSummaryOut(serializers.Serializer):
    request_id = serializers.CharField()
    agent = serializers.CharField(source="agent.key")
    environment = serializers.CharField(source="environment.key")
    occurred_at = serializers.DateTimeField()
    strategy = serializers.CharField()
    strategy_version = serializers.IntegerField(allow_null=True)
    status = serializers.CharField()
    degradation = serializers.CharField()


class ShadowDifferenceOut(serializers.Serializer):
    index = serializers.IntegerField(
        help_text="The candidate's position in the trace's `candidates`."
    )
    decision = serializers.ChoiceField(
        choices=list(wire.SHADOW_DECISIONS),
        help_text="The shadow's decision; not_requested: the shadow version does not read "
        "this source.",
    )
    reason_code = serializers.ChoiceField(choices=list(wire.SHADOW_REASON_CODES), allow_null=True)
    required = serializers.BooleanField(help_text="Whether the shadow's strategy requires it.")


class ShadowOut(serializers.Serializer):
    """The shadow block as the runtime sent it (docs/runtime-contract.md §3); the fields after
    `selected` come from runtimes with context_runtime 0.3.0 or later."""

    version = serializers.IntegerField()
    status = serializers.ChoiceField(choices=list(wire.STATUSES), allow_null=True)
    selected = serializers.ListField(child=serializers.CharField())
    degradation = serializers.CharField(allow_null=True, required=False)
    used_tokens = serializers.IntegerField(
        allow_null=True, required=False, help_text="The shadow's input estimate, in tokens."
    )
    differences = ShadowDifferenceOut(many=True, required=False)
    differences_total = serializers.IntegerField(allow_null=True, required=False)
    sources_not_fetched = serializers.ListField(child=serializers.CharField(), required=False)


class OtelOut(serializers.Serializer):
    trace_id = serializers.RegexField(wire.OTEL_TRACE_ID_PATTERN, help_text=wire.OTEL_TRACE_ID_RULE)
    span_id = serializers.RegexField(wire.OTEL_SPAN_ID_PATTERN, help_text=wire.OTEL_SPAN_ID_RULE)


class TraceOut(serializers.Serializer):
    """The trace as the runtime reported it (references and reasons only; no snapshot)."""

    request_id = serializers.CharField()
    agent = serializers.CharField()
    environment = serializers.CharField()
    occurred_at = serializers.DateTimeField()
    received_at = serializers.DateTimeField()
    documents = serializers.DictField(child=serializers.IntegerField())
    strategy = serializers.CharField()
    config_fallback = serializers.BooleanField()
    config_resolution = serializers.ChoiceField(
        choices=list(wire.RESOLUTIONS), allow_null=True, help_text="Where the config came from."
    )
    config_age_seconds = serializers.FloatField(allow_null=True)
    task = serializers.DictField()
    principal = serializers.CharField()
    model = serializers.DictField()
    status = serializers.CharField()
    degradation = serializers.CharField(allow_null=True)
    budget = serializers.DictField()
    input_estimate = serializers.DictField(allow_null=True)
    sources = serializers.ListField(child=serializers.DictField())
    candidates = CandidateOut(many=True)
    shadow = ShadowOut(allow_null=True)
    selection = SelectionOut(
        allow_null=True,
        help_text="Null when the runtime sent no replay fields (older runtimes): such a trace "
        "cannot be replayed.",
    )
    candidates_truncated = serializers.BooleanField(
        help_text="True when the request had more candidates than a trace holds: `candidates` "
        "are the ones that matter most, `candidate_counts` counts them all."
    )
    candidate_counts = serializers.DictField(
        child=serializers.IntegerField(),
        allow_null=True,
        help_text="Decision → candidates, all of them (sent with a truncated trace).",
    )
    input_errors = serializers.ListField(
        child=serializers.DictField(),
        allow_null=True,
        help_text="Status input_refused: the engine's findings {path, code, message, source, "
        "item}, at most 20.",
    )
    input_errors_total = serializers.IntegerField(allow_null=True)
    sections = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        allow_null=True,
        help_text="The contextSections rendered into the request: keys per block, never values.",
    )
    otel = OtelOut(
        allow_null=True,
        help_text="The OpenTelemetry span the runtime assembled the request in; null when it "
        "recorded none.",
    )
    has_snapshot = serializers.BooleanField()
    redactions = serializers.DictField(
        child=serializers.IntegerField(),
        allow_null=True,
        help_text="Values the environment's redaction rules replaced at ingest, per rule "
        "(docs/data-protection.md); null when none.",
    )


class TraceListPagination(OperatorPagination):
    """Offset/limit pages of a trace listing (`selectors.trace_listing`), which counts up to
    its cap: `count` is exact up to it; past it `count_capped` is true, `count` is the cap + 1
    and `next` goes on while pages come back full, down to MAX_DEPTH traces. Counting tens
    of millions of rows for a page is not worth its seconds, nor is reading a million keys to
    skip them: past that depth, narrow the time window (`until`) instead."""

    MAX_DEPTH = selectors.LIST_COUNT_CAP  # as deep as the plain list counts

    def paginate_queryset(self, listing, request, view=None):
        self.request = request
        self.limit = self.get_limit(request)
        self.offset = self.get_offset(request)
        self.count = listing.count
        self.capped = listing.capped
        if self.offset >= self.MAX_DEPTH:
            raise ValidationFailed(
                f"Pages reach {self.MAX_DEPTH:,} traces deep. To go further, narrow the window: "
                "until = the occurred_at of the last trace you have.",
                details=[Finding("offset", "too_deep", f"must be below {self.MAX_DEPTH:,}")],
            )
        # An exact count past the offset means nothing is there; a capped one says nothing.
        beyond = not self.capped and self.offset >= self.count
        rows = [] if beyond else listing.rows_at(self.offset, self.limit)
        self.full_page = len(rows) == self.limit
        return rows

    def get_next_link(self):
        if not self.capped:
            return super().get_next_link()
        if not self.full_page or self.offset + self.limit >= self.MAX_DEPTH:
            return None
        url = replace_query_param(
            self.request.build_absolute_uri(), self.limit_query_param, self.limit
        )
        return replace_query_param(url, self.offset_query_param, self.offset + self.limit)

    def get_paginated_response(self, data):
        response = super().get_paginated_response(data)
        response.data["count_capped"] = self.capped
        return response


class TraceListPage(paginated(TraceSummaryOut)):
    count = serializers.IntegerField(
        help_text=f"Matching traces, exact up to {selectors.LIST_COUNT_CAP:,} "
        f"({selectors.CANDIDATE_COUNT_CAP:,} with a candidate filter); past that the cap + 1, "
        "with count_capped true."
    )
    count_capped = serializers.BooleanField(
        help_text="More traces match than were counted; page on with next, or narrow since/until."
    )


FILTER_PARAMETERS = [
    OpenApiParameter(name, str, description=text)
    for name, text in TraceFilters.PARAMETER_HELP.items()
]


@extend_schema(
    operation_id="traces_list",
    summary="List traces (newest first)",
    parameters=[
        *FILTER_PARAMETERS,
        OpenApiParameter("limit", int, description="traces per page: 50 unless given, at most 200"),
        OpenApiParameter(
            "offset", int, description=f"traces to skip: below {TraceListPagination.MAX_DEPTH:,}"
        ),
    ],
    responses={
        200: TraceListPage,
        400: OpenApiResponse(
            ErrorSerializer,
            description=f"A filter is not valid, or offset is {TraceListPagination.MAX_DEPTH:,} "
            "or more.",
        ),
        403: OpenApiResponse(ErrorSerializer, description="forbidden"),
    },
    tags=["traces"],
)
@lag_tolerant
@api_view(["GET"])
def trace_list(request):
    selectors.trace_access_check(request.user)
    filters = TraceFilters.from_query(request.query_params)
    if filters.errors:
        raise ValidationFailed(
            "Some filters are not valid.",
            details=[
                {"path": name, "code": "invalid", "message": message}
                for name, message in filters.errors.items()
            ],
        )
    listing = selectors.trace_listing(user=request.user, filters=filters)
    services.trace_look_record(
        actor=request.user,
        action=AccessAction.TRACE_LIST,
        detail={"filters": filters.as_dict(), "api": True},
    )
    paginator = TraceListPagination()  # at most OperatorPagination.max_limit rows
    page = paginator.paginate_queryset(listing, request)
    return paginator.get_paginated_response(TraceSummaryOut(page, many=True).data)


@extend_schema(
    operation_id="traces_retrieve",
    summary="One trace by request_id",
    description=(
        "A request_id is unique per environment: when the same id exists in several "
        "environments you may see, name one with `environment` (else 409 `ambiguous`, whose "
        "details list the environments)."
    ),
    parameters=[
        OpenApiParameter(
            "environment", str, description="environment key, when the id is in several"
        )
    ],
    responses={
        200: TraceOut,
        404: OpenApiResponse(ErrorSerializer),
        409: OpenApiResponse(ErrorSerializer, description="In several environments."),
    },
    tags=["traces"],
)
@lag_tolerant
@api_view(["GET"])
def trace_detail(request, request_id: str):
    trace = selectors.trace_get_visible(
        user=request.user,
        request_id=request_id,
        environment=(request.query_params.get("environment") or "").strip(),
    )
    services.trace_look_record(
        actor=request.user, action=AccessAction.TRACE_VIEW, trace=trace, detail={"api": True}
    )
    return Response(selectors.trace_export(trace))


# --- operator API: GET /api/v1/traces/<request_id>/replay ----------------------------------------


class ReplayDecisionOut(serializers.Serializer):
    decision = serializers.ChoiceField(
        choices=list(wire.SHADOW_DECISIONS),
        help_text="not_requested: the version does not read this source (its provider would "
        "not be asked).",
    )
    reason_code = serializers.ChoiceField(choices=list(wire.SHADOW_REASON_CODES), allow_null=True)
    reason = serializers.CharField()
    required = serializers.BooleanField()
    bundle = serializers.CharField(allow_null=True, help_text="The group the engine decided.")


class ReplayCandidateOut(serializers.Serializer):
    position = serializers.IntegerField()
    id = serializers.CharField()
    source = serializers.CharField()
    size = serializers.IntegerField(allow_null=True)
    recorded = ReplayDecisionOut()
    replayed = ReplayDecisionOut()
    changed = serializers.BooleanField(
        help_text="Decision, reason code, required or group differ from the record."
    )


class ReplaySideOut(serializers.Serializer):
    status = serializers.ChoiceField(choices=list(wire.STATUSES))
    degradation = serializers.CharField(allow_null=True)
    input_tokens = serializers.IntegerField(allow_null=True)


class ReplayOut(serializers.Serializer):
    """A trace replayed with one version of its strategy: recorded against replayed."""

    request_id = serializers.CharField()
    environment = serializers.CharField()
    strategy = serializers.CharField()
    version = serializers.IntegerField(help_text="The strategy version replayed with.")
    version_state = serializers.ChoiceField(choices=["draft", "frozen"])
    version_kind = serializers.ChoiceField(
        choices=["recorded", "live", "draft", "version"],
        help_text="recorded: the version the trace used; live: what its environment serves "
        "now; draft or version: another one.",
    )
    reproduces = serializers.BooleanField(
        allow_null=True,
        help_text="With the recorded version: whether the console's engine reproduces every "
        "recorded decision (false is a finding: see the two engines). Null for other versions.",
    )
    recorded_engine = serializers.CharField(
        help_text="The engine that made the recorded decisions."
    )
    console_engine = serializers.CharField(help_text="The console's engine, which replayed them.")
    recorded = ReplaySideOut()
    replayed = ReplaySideOut()
    status_changed = serializers.BooleanField()
    changed = serializers.IntegerField(help_text="Candidates whose decision changed.")
    never_requested = serializers.ListField(
        child=serializers.CharField(),
        help_text="Sources this version reads that the recorded version never asked for: "
        "the trace has no candidates of them, so the replay cannot say what they would have "
        "returned (not previewable, never a regression).",
    )
    candidates = ReplayCandidateOut(many=True)


@extend_schema(
    operation_id="traces_replay",
    summary="Replay one trace with a version of its strategy",
    description=(
        "Re-runs the selection engine on the trace's stored candidates with the arguments it "
        "recorded (its `selection` block) and a version of its strategy: `recorded` (the "
        "version it used: the decisions must come out the same, `reproduces`), `live` (what "
        "the trace's environment serves now) or a version number (drafts included). "
        "Read-only; each replay is written to the access log (`trace.replay`). Needs "
        "view_traces and view_config on the trace's agent. A request_id in several "
        "environments needs `environment` (else 409 `ambiguous`)."
    ),
    parameters=[
        OpenApiParameter(
            "environment", str, description="environment key, when the id is in several"
        ),
        OpenApiParameter(
            "version",
            str,
            description="recorded (default), live, or a version number of the trace's strategy",
        ),
    ],
    responses={
        200: ReplayOut,
        400: OpenApiResponse(
            ErrorSerializer,
            description="`version` is not recorded, live or a version number (`bad_version`).",
        ),
        403: OpenApiResponse(ErrorSerializer, description="No view_config on the agent."),
        404: OpenApiResponse(
            ErrorSerializer,
            description="Unknown trace (or out of your scope), unknown version "
            "(`unknown_version`), or nothing live (`nothing_live`).",
        ),
        409: OpenApiResponse(
            ErrorSerializer,
            description="In several environments (`ambiguous`), or not replayable "
            "(`not_replayable`: no strategy, a runtime that sends no replay fields, or a "
            "version that cannot run on these candidates).",
        ),
    },
    tags=["traces"],
)
@lag_tolerant
@api_view(["GET"])
def trace_replay(request, request_id: str):
    trace = selectors.trace_get_visible(
        user=request.user,
        request_id=request_id,
        environment=(request.query_params.get("environment") or "").strip(),
    )
    result = replay.trace_replay(
        user=request.user, trace=trace, version=request.query_params.get("version")
    )
    services.trace_look_record(
        actor=request.user,
        action=AccessAction.TRACE_REPLAY,
        trace=trace,
        detail={**replay.replay_detail(result), "api": True},
    )
    return Response(replay.replay_export(result))
