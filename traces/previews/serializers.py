"""Shapes of the impact preview API (/api/v1/previews/)."""

from __future__ import annotations

from rest_framework import serializers

from console.kernel.api_schema import StrictSerializer
from traces.previews.models import Preview


class PreviewRequest(StrictSerializer):
    agent = serializers.SlugField(max_length=100)
    document = serializers.SlugField(max_length=100, help_text="The strategy's key.")
    version = serializers.IntegerField(min_value=1, help_text="A version number (a draft too).")
    environment = serializers.SlugField(
        max_length=100, help_text="Its live version is the baseline; its traces are replayed."
    )
    window_start = serializers.DateTimeField(
        required=False, help_text="Default: 7 days before window_end."
    )
    window_end = serializers.DateTimeField(
        required=False, help_text="Default: now, to the minute; never after now."
    )


class PreviewSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    agent = serializers.CharField()
    document = serializers.CharField()
    version = serializers.IntegerField()
    content_hash = serializers.CharField()
    live_version = serializers.IntegerField()
    environment = serializers.CharField()
    window_start = serializers.DateTimeField()
    window_end = serializers.DateTimeField()
    engine = serializers.CharField()
    state = serializers.ChoiceField(
        choices=Preview.State.values,
        help_text="A running preview whose worker stopped answering is reported failed.",
    )
    traces_done = serializers.IntegerField()
    traces_total = serializers.IntegerField()
    covered_until = serializers.DateTimeField(allow_null=True)
    failure = serializers.CharField(allow_blank=True)
    waiting = serializers.CharField(
        allow_blank=True,
        help_text="Why a queued preview is not picked up (no worker runs); empty otherwise.",
    )
    requested_by = serializers.CharField()
    requested_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    reused = serializers.BooleanField(required=False)
    report = serializers.JSONField(
        allow_null=True,
        help_text="Once complete: fidelity, not_previewable, status_matrix, sources, "
        "conflicts, over_budget, tokens (withheld: only fidelity and not_previewable, when "
        "the replay reproduced fewer than 99.9 % of the recorded decisions). docs/previews.md.",
    )


def preview_state(
    preview: Preview, *, state: str, failure: str, waiting: str = "", reused: bool | None = None
):
    data = {
        "id": preview.pk,
        "agent": preview.agent.key,
        "document": preview.document.key,
        "version": preview.version_number,
        "content_hash": preview.content_hash,
        "live_version": preview.live_version_number,
        "environment": preview.environment.key,
        "window_start": preview.window_start,
        "window_end": preview.window_end,
        "engine": preview.engine,
        "state": state,
        "traces_done": preview.traces_done,
        "traces_total": preview.traces_total,
        "covered_until": preview.covered_until,
        "failure": failure,
        "waiting": waiting,
        "requested_by": preview.requested_by_label,
        "requested_at": preview.requested_at,
        "finished_at": preview.finished_at,
        "report": preview.report if state == Preview.State.COMPLETE else None,
    }
    if reused is not None:
        data["reused"] = reused
    return PreviewSerializer(data).data
