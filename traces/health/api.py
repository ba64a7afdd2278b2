"""Operator API for version health: the figures of the version-health page, and the request
ids behind one of them. Thin: the same selectors as the pages; the request ids are a look
at traces (access-logged by the same function as the page)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.kernel.api_schema import ErrorSerializer
from console.kernel.policy import Capability, requires
from console.kernel.standby import lag_tolerant
from traces.health import selectors
from traces.health.views import HOURS_CHOICES, health_requests_looked, hours_asked

TAGS = ["health"]
ERRORS = {
    403: OpenApiResponse(ErrorSerializer, description="You may not view this agent's traces."),
    404: OpenApiResponse(ErrorSerializer, description="Unknown agent, environment or document."),
}


class _RateOut(serializers.Serializer):
    count = serializers.IntegerField()
    total = serializers.IntegerField()
    rate = serializers.FloatField(allow_null=True)
    low = serializers.FloatField(allow_null=True, help_text="Wilson 95% interval, low end.")
    high = serializers.FloatField(allow_null=True, help_text="Wilson 95% interval, high end.")
    verdict = serializers.CharField(
        help_text="Against the column compared with (live: previous; shadow: live): worse, "
        "better, same (95% intervals overlap), unknown, changed (outcomes); blank: none."
    )
    runtime_fault = serializers.BooleanField(
        help_text="A/A: the shadow runs the live version, so a disagreement is a fault."
    )
    requests_url = serializers.CharField(help_text="The page of request ids behind it.")


class _MetricOut(serializers.Serializer):
    group = serializers.ChoiceField(
        choices=["status", "degraded", "required", "config", "outcome", "agreement"]
    )
    key = serializers.CharField()
    label = serializers.CharField()
    cells = serializers.DictField(child=_RateOut(), help_text="column slot → rate")


class _ColumnOut(serializers.Serializer):
    slot = serializers.CharField(help_text="previous, live or shadow:<version>")
    version = serializers.IntegerField()
    arm = serializers.ChoiceField(choices=["live", "shadow"])
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    traces = serializers.IntegerField()
    tokens_p50_at_most = serializers.IntegerField(allow_null=True)
    tokens_p95_at_most = serializers.IntegerField(allow_null=True)
    tokens_mean = serializers.FloatField(allow_null=True)
    token_delta_mean = serializers.FloatField(
        allow_null=True, help_text="Shadow: mean of its tokens minus live's, same requests."
    )
    a_a = serializers.BooleanField(help_text="A shadow of the live version itself.")
    series = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField()),
        help_text="[failed, traces] per bucket from series_start, bucket_minutes apart.",
    )


class _ReleaseOut(serializers.Serializer):
    version = serializers.IntegerField()
    released_at = serializers.DateTimeField()
    released_by = serializers.CharField()
    previous = serializers.IntegerField(allow_null=True)


class VersionHealthOut(serializers.Serializer):
    agent = serializers.CharField()
    environment = serializers.CharField()
    document = serializers.CharField()
    release = _ReleaseOut(allow_null=True)
    window_hours = serializers.FloatField(allow_null=True)
    compared_hours = serializers.CharField(help_text="Which hours are compared, in words.")
    series_start = serializers.DateTimeField(allow_null=True)
    bucket_minutes = serializers.IntegerField(allow_null=True)
    columns = _ColumnOut(many=True)
    metrics = _MetricOut(many=True)
    runtime_faults = serializers.DictField(child=serializers.IntegerField())


COMPARED_HOURS = (
    "The live version over the hours since its release (at most the last 7 days, or the "
    "hours asked for) against the version it replaced over the same number of hours just "
    "before that release; each shadow version over the live version's hours."
)


def version_health_out(health) -> dict:
    release = health.release
    tokens = {slot: rest for slot, *rest in health.tokens}
    return {
        "agent": health.agent.key,
        "environment": health.environment.key,
        "document": health.document,
        "release": None
        if release is None
        else {
            "version": release.version,
            "released_at": release.released_at,
            "released_by": release.released_by,
            "previous": release.previous,
        },
        "window_hours": health.window.total_seconds() / 3600 if health.window else None,
        "compared_hours": COMPARED_HOURS,
        "series_start": health.series_start,
        "bucket_minutes": int(health.bucket.total_seconds() // 60) if health.bucket else None,
        "columns": [
            {
                "slot": c.slot,
                "version": c.version,
                "arm": c.arm,
                "since": c.since,
                "until": c.until,
                "traces": c.traces,
                "tokens_p50_at_most": tokens[c.slot][0],
                "tokens_p95_at_most": tokens[c.slot][1],
                "tokens_mean": tokens[c.slot][2],
                "token_delta_mean": tokens[c.slot][3],
                "a_a": health.is_aa(c),
                "series": [list(b) for b in health.series_counts.get(c.slot, [])],
            }
            for c in health.columns
        ],
        "metrics": [
            {
                "group": m.group,
                "key": m.key,
                "label": m.label,
                "cells": {
                    slot: {
                        **cell.rate.as_dict(),
                        "verdict": cell.verdict,
                        "runtime_fault": cell.fault,
                        "requests_url": cell.link,
                    }
                    for slot, cell in m.cells.items()
                    if cell.rate is not None
                },
            }
            for m in health.metrics
        ],
        "runtime_faults": health.faults,
    }


@extend_schema(
    operation_id="health_version",
    summary="A document's version health in an environment",
    description=COMPARED_HOURS
    + " Rates carry Wilson 95% intervals; counters are written at ingest, so a stored trace "
    "is counted at once.",
    parameters=[
        OpenApiParameter(
            "hours",
            int,
            description="Narrow the window to the last N hours: "
            + ", ".join(map(str, HOURS_CHOICES)),
        )
    ],
    responses={200: VersionHealthOut, **ERRORS},
    tags=TAGS,
)
@lag_tolerant
@api_view(["GET"])
@requires(Capability.VIEW_TRACES)
def version_health(request, agent, environment, document):
    env, doc = selectors.health_target(
        user=request.user, agent=request.agent, environment_key=environment, document_key=document
    )
    health = selectors.version_health(
        user=request.user,
        agent=request.agent,
        environment=env,
        document=doc,
        hours=hours_asked(request),
    )
    return Response(version_health_out(health))


class _RequestOut(serializers.Serializer):
    request_id = serializers.CharField()
    occurred_at = serializers.DateTimeField()
    status = serializers.CharField()
    shadow_status = serializers.CharField(allow_null=True)
    reason_codes = serializers.ListField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="[source, reason code] of the required items not selected.",
    )


class HealthRequestsOut(serializers.Serializer):
    filters = serializers.DictField()
    limit = serializers.IntegerField()
    requests = _RequestOut(many=True)


_FILTERS = [
    OpenApiParameter("version", int, required=True),
    OpenApiParameter("arm", str, required=True, enum=["live", "shadow"]),
    OpenApiParameter("since", str, required=True, description="ISO time with zone"),
    OpenApiParameter("until", str, required=True, description="ISO time with zone"),
    OpenApiParameter("status", str, description="a status, or 'failed'"),
    OpenApiParameter("degradation", str),
    OpenApiParameter("source", str, description="required item of this source not selected"),
    OpenApiParameter("reason_code", str, description="with source; '-' for none given"),
    OpenApiParameter("resolution", str, description="config resolution of a fallback"),
    OpenApiParameter("disagree", bool, description="shadow: where it disagrees with live"),
]


@extend_schema(
    operation_id="health_requests",
    summary="The request ids behind a version-health figure",
    description=f"Newest first, at most {selectors.REQUEST_IDS_LIMIT}. A look at traces: "
    "written to the access log.",
    parameters=_FILTERS,
    responses={
        200: HealthRequestsOut,
        400: OpenApiResponse(ErrorSerializer, description="A filter is missing or invalid."),
        **ERRORS,
    },
    tags=TAGS,
)
@lag_tolerant
@api_view(["GET"])
@requires(Capability.VIEW_TRACES)
def health_requests(request, agent, environment, document):
    env, doc = selectors.health_target(
        user=request.user, agent=request.agent, environment_key=environment, document_key=document
    )
    filters = selectors.request_filter_parse(request.query_params)
    rows = health_requests_looked(
        request=request, environment=env, document=doc.key, filters=filters
    )
    return Response(
        {
            "filters": filters.as_dict(),
            "limit": selectors.REQUEST_IDS_LIMIT,
            "requests": [
                {
                    "request_id": r.request_id,
                    "occurred_at": r.occurred_at,
                    "status": r.status,
                    "shadow_status": r.shadow_status,
                    "reason_codes": [list(pair) for pair in r.reason_codes],
                }
                for r in rows
            ],
        }
    )
