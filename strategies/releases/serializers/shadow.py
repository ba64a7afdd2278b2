"""Shadow release requests (start, stop, promote) and the shadow as the API shows it."""

from __future__ import annotations

from rest_framework import serializers

from console.kernel.api_schema import StrictSerializer
from strategies.releases.serializers.common import REASON_MAX
from strategies.releases.transitions import SHADOW_TRANSITIONS


class ShadowStartRequest(StrictSerializer):
    version = serializers.IntegerField(
        min_value=1, help_text="A frozen version to run as shadow (the live one too: A/A test)."
    )
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=REASON_MAX, default=""
    )
    expected_revision = serializers.IntegerField(
        required=False,
        min_value=0,
        help_text="The shadow revision you saw (0: none was ever started here); a stale one "
        "gets 409.",
    )


class ShadowStopRequest(StrictSerializer):
    reason = serializers.CharField(max_length=REASON_MAX)
    expected_revision = serializers.IntegerField(
        required=False, min_value=0, help_text="The shadow revision you saw."
    )


class ShadowPromoteRequest(StrictSerializer):
    version = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text="The shadow version you saw; when the shadow runs another one, 409.",
    )
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=REASON_MAX, default=""
    )
    expected_revision = serializers.IntegerField(
        required=False,
        min_value=0,
        help_text="The release revision you saw, as for a publish; a stale one gets 409.",
    )


class ShadowSerializer(serializers.Serializer):
    document = serializers.CharField()
    environment = serializers.CharField()
    version = serializers.IntegerField(
        allow_null=True, help_text="The version running as shadow; null when none runs."
    )
    revision = serializers.IntegerField(
        help_text="Grows with every start and stop (0: none was ever started here)."
    )
    started_by = serializers.CharField()
    started_at = serializers.DateTimeField(allow_null=True)
    actions = serializers.ListField(
        child=serializers.ChoiceField(choices=list(SHADOW_TRANSITIONS)),
        help_text="What its state allows now (the one state table): start when none runs, "
        "stop or promote while one runs.",
    )


class ShadowOutcomeSerializer(serializers.Serializer):
    shadow = ShadowSerializer()
