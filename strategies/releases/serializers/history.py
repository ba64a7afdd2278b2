"""The release history's filter, and one event of it as the API shows it."""

from __future__ import annotations

from rest_framework import serializers

from console.kernel.api_schema import StrictSerializer
from strategies.releases.models import ReleaseEvent


class HistoryFilter(StrictSerializer):
    document = serializers.SlugField(required=False)
    environment = serializers.SlugField(required=False)
    limit = serializers.IntegerField(required=False, min_value=1)
    offset = serializers.IntegerField(required=False, min_value=0)


class ReleaseEventSerializer(serializers.Serializer):
    document = serializers.CharField(source="release.document.key")
    environment = serializers.CharField(source="release.environment.key")
    revision = serializers.IntegerField(
        help_text="The release revision it produced; for shadow_start and shadow_stop the "
        "shadow's revision."
    )
    action = serializers.ChoiceField(choices=ReleaseEvent.Action.values)
    from_version = serializers.SerializerMethodField()
    to_version = serializers.IntegerField(
        source="to_version.number",
        help_text="The version it put live; for shadow_start and shadow_stop the shadow's.",
    )
    actor = serializers.CharField()
    approved_by = serializers.CharField()
    reason = serializers.CharField()
    unreviewed = serializers.BooleanField(
        help_text="Went live without the approval its environment normally requires "
        "(published, or rolled back to, during a break-glass); never a rollback target."
    )
    occurred_at = serializers.DateTimeField()
    change_number = serializers.SerializerMethodField(
        help_text="The external change record it went live on (docs/change-approvals.md)."
    )

    def get_change_number(self, obj) -> str | None:
        records = list(obj.change_records.all())
        return records[0].change_number if records else None

    def get_from_version(self, obj) -> int | None:
        return obj.from_version.number if obj.from_version_id else None
