"""Publish and rollback requests (a version number, or "draft" for the open draft)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from console.kernel.api_schema import StrictSerializer
from strategies.releases.serializers.common import REASON_MAX


# --------------------------------------------------------------------------- requests
@extend_schema_field(
    {"oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "enum": ["draft"]}]}
)
class VersionField(serializers.Field):
    """A version number, or "draft" for the open draft (frozen before it goes anywhere)."""

    default_error_messages = {"invalid": 'A version number (1 or more) or "draft".'}

    def to_internal_value(self, data):
        if data == "draft":
            return data
        if isinstance(data, bool) or not isinstance(data, int) or data < 1:
            self.fail("invalid")
        return data

    def to_representation(self, value):
        return value


class PublishRequest(StrictSerializer):
    version = VersionField(help_text='The version number to publish, or "draft".')
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=REASON_MAX, default=""
    )
    expected_revision = serializers.IntegerField(
        required=False,
        min_value=0,
        help_text="The release revision you saw (0: nothing live); a stale one gets 409.",
    )


class RollbackRequest(StrictSerializer):
    version = serializers.IntegerField(min_value=1, help_text="An earlier live version.")
    reason = serializers.CharField(max_length=REASON_MAX)
    expected_revision = serializers.IntegerField(required=False, min_value=0)
