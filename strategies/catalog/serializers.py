"""API shapes for agents and environments (onboarding). Requests are strict: an unknown field
is refused (400 at its path), so a typo never silently does nothing. Ranges and key syntax are
the services' (strategies.catalog.services), so the pages and the API refuse alike."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from console.kernel.api_schema import StrictSerializer
from console.kernel.limits import MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS
from console.kernel.reasons import MAX_REASON_CHARS
from strategies.catalog.models import SNAPSHOT_RETENTION_DAYS_DEFAULT, TRACE_RETENTION_DAYS_DEFAULT
from strategies.catalog.services import MAX_POSITION, MAX_RETENTION_DAYS, break_glass_state

KEY_HELP = "Lowercase letters, digits, '-' and '_', at most 100, e.g. bank-uat. Cannot change."
REASON_HELP = "Optional: recorded in the audit log."


# --------------------------------------------------------------------------- requests
class AgentCreateRequest(StrictSerializer):
    key = serializers.CharField(max_length=100, help_text=KEY_HELP + " What runtimes send.")
    name = serializers.CharField(
        max_length=MAX_NAME_CHARS,
        required=False,
        allow_blank=True,
        default="",
        help_text="Default: key.",
    )
    description = serializers.CharField(
        max_length=MAX_DESCRIPTION_CHARS, required=False, allow_blank=True, default=""
    )


class AgentUpdateRequest(StrictSerializer):
    name = serializers.CharField(max_length=MAX_NAME_CHARS, required=False, allow_blank=True)
    description = serializers.CharField(
        max_length=MAX_DESCRIPTION_CHARS, required=False, allow_blank=True
    )
    archived = serializers.BooleanField(
        required=False,
        help_text="true: hide it from lists, the dashboard and pickers (its pages, history "
        "and its runtime's config stay); false: show it again.",
    )
    reason = serializers.CharField(
        max_length=MAX_REASON_CHARS, required=False, allow_blank=True, help_text=REASON_HELP
    )


def _days(**kwargs):
    return serializers.IntegerField(min_value=1, max_value=MAX_RETENTION_DAYS, **kwargs)


class EnvironmentCreateRequest(StrictSerializer):
    key = serializers.CharField(max_length=100, help_text=KEY_HELP + " What tokens name.")
    name = serializers.CharField(
        max_length=MAX_NAME_CHARS,
        required=False,
        allow_blank=True,
        default="",
        help_text="Default: key.",
    )
    position = serializers.IntegerField(
        min_value=0,
        max_value=MAX_POSITION,
        required=False,
        help_text="Promotion order, lower first. Default: after the last one.",
    )
    protected = serializers.BooleanField(
        required=False, default=False, help_text="Publishing needs a second person's approval."
    )
    rollback_needs_approval = serializers.BooleanField(
        required=False,
        default=False,
        help_text="The revert policy: a rollback needs a second person's approval.",
    )
    require_preview = serializers.BooleanField(
        required=False,
        default=False,
        help_text="A publish of a strategy needs a complete impact preview of the same "
        "content, at most 24 hours old.",
    )
    trace_retention_days = _days(required=False, default=TRACE_RETENTION_DAYS_DEFAULT)
    snapshot_retention_days = _days(
        required=False,
        default=SNAPSHOT_RETENTION_DAYS_DEFAULT,
        help_text="At most trace_retention_days.",
    )


class EnvironmentUpdateRequest(StrictSerializer):
    name = serializers.CharField(max_length=MAX_NAME_CHARS, required=False, allow_blank=True)
    position = serializers.IntegerField(min_value=0, max_value=MAX_POSITION, required=False)
    protected = serializers.BooleanField(
        required=False,
        help_text="true → false alone is a break-glass: refused (409 break_glass_required) "
        "without break_glass_reason.",
    )
    rollback_needs_approval = serializers.BooleanField(
        required=False,
        help_text="true → false alone is a break-glass: refused (409 break_glass_required) "
        "without break_glass_reason.",
    )
    require_preview = serializers.BooleanField(
        required=False,
        help_text="A publish of a strategy needs a complete impact preview of the same "
        "content, at most 24 hours old.",
    )
    break_glass_reason = serializers.CharField(
        max_length=MAX_REASON_CHARS,
        required=False,
        allow_blank=True,
        help_text="Why approvals must be switched off here (3 characters or more). Required "
        "to switch protected or rollback_needs_approval off; the change is audited as "
        "environment.break_glass, and what goes live meanwhile is marked unreviewed and is "
        "never a rollback target, until those flags are on again. Not read otherwise.",
    )
    trace_retention_days = _days(required=False, help_text="Applies at the next purge.")
    snapshot_retention_days = _days(
        required=False, help_text="At most trace_retention_days; applies at the next purge."
    )
    archived = serializers.BooleanField(
        required=False,
        help_text="true: hide it from grids and pickers; nothing new can be published there.",
    )
    reason = serializers.CharField(
        max_length=MAX_REASON_CHARS, required=False, allow_blank=True, help_text=REASON_HELP
    )


class DeleteRequest(StrictSerializer):
    reason = serializers.CharField(
        max_length=MAX_REASON_CHARS, required=False, allow_blank=True, help_text=REASON_HELP
    )


class ListQuery(StrictSerializer):
    archived = serializers.BooleanField(
        required=False, default=False, help_text="true: archived ones too."
    )
    limit = serializers.IntegerField(required=False, min_value=0)
    offset = serializers.IntegerField(required=False, min_value=0)


# --------------------------------------------------------------------------- responses
class AgentSerializer(serializers.Serializer):
    key = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    archived = serializers.SerializerMethodField()
    archived_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    documents = serializers.SerializerMethodField()

    def get_archived(self, obj) -> bool:
        return obj.archived_at is not None

    def get_documents(self, obj) -> list[dict]:
        return [{"key": d.key, "kind": d.kind} for d in obj.documents.all()]


class BreakGlassSerializer(serializers.Serializer):
    since = serializers.DateTimeField()
    by = serializers.CharField(help_text="Who switched approvals off.")
    reason = serializers.CharField()
    relaxed = serializers.ListField(
        child=serializers.ChoiceField(choices=["protected", "rollback_needs_approval"]),
        help_text="The approval flags it switched off; switching them on again ends it.",
    )


class EnvironmentSerializer(serializers.Serializer):
    key = serializers.CharField()
    name = serializers.CharField()
    position = serializers.IntegerField()
    protected = serializers.BooleanField()
    rollback_needs_approval = serializers.BooleanField()
    require_preview = serializers.BooleanField()
    trace_retention_days = serializers.IntegerField()
    snapshot_retention_days = serializers.IntegerField()
    archived = serializers.SerializerMethodField()
    archived_at = serializers.DateTimeField(allow_null=True)
    break_glass = serializers.SerializerMethodField(
        help_text="The break-glass in force (approvals switched off by one person), or null."
    )

    def get_archived(self, obj) -> bool:
        return obj.archived_at is not None

    @extend_schema_field(BreakGlassSerializer(allow_null=True))
    def get_break_glass(self, obj) -> dict | None:
        return break_glass_state(obj)
