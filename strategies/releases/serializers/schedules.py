"""Scheduled go-lives and an environment's calendar (freeze windows, change hours, the freeze
break-glass), as the API takes and shows them."""

from __future__ import annotations

from rest_framework import serializers

from console.kernel.api_schema import StrictSerializer
from strategies.releases.models import ScheduledGoLive
from strategies.releases.serializers.common import REASON_MAX

# Named in the schema (SPECTACULAR_SETTINGS' ENUM_NAME_OVERRIDES): ScheduleKindEnum, …StateEnum.
SCHEDULE_KINDS = ScheduledGoLive.Kind.values
SCHEDULE_STATES = ScheduledGoLive.State.values


class ScheduleRequest(StrictSerializer):
    version = serializers.IntegerField(min_value=1)
    run_at = serializers.DateTimeField(help_text="When, with its offset (ISO 8601).")
    kind = serializers.ChoiceField(choices=SCHEDULE_KINDS, default="publish")
    plan = serializers.JSONField(
        required=False, help_text="A rollout start's plan: a template's name or its steps."
    )
    unit = serializers.CharField(required=False, default="task", max_length=20)
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=REASON_MAX, default=""
    )


class ScheduleCancelRequest(StrictSerializer):
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=REASON_MAX, default=""
    )


class ScheduleSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    agent = serializers.CharField()
    document = serializers.CharField()
    environment = serializers.CharField()
    version = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=SCHEDULE_KINDS)
    plan = serializers.JSONField(allow_null=True)
    unit = serializers.CharField(allow_null=True)
    run_at = serializers.DateTimeField()
    reason = serializers.CharField()
    requested_by = serializers.CharField()
    state = serializers.ChoiceField(choices=SCHEDULE_STATES)
    outcome_code = serializers.CharField(
        help_text="live, approval_required, rollout_started, "
        "or the refusal's code (frozen, forbidden, …)."
    )
    outcome = serializers.CharField()
    finished_at = serializers.DateTimeField(allow_null=True)
    cancelled_by = serializers.CharField()
    release_event = serializers.IntegerField(allow_null=True)
    approval = serializers.IntegerField(allow_null=True)
    rollout = serializers.CharField(allow_null=True)


class FreezeWindowRequest(StrictSerializer):
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    reason = serializers.CharField(max_length=REASON_MAX)


class FreezeWindowSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    environment = serializers.CharField()
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    reason = serializers.CharField()
    created_by = serializers.CharField()


class ChangeHoursRequest(StrictSerializer):
    days = serializers.ListField(
        child=serializers.IntegerField(),
        max_length=7,
        help_text="0 Monday … 6 Sunday; empty: changes at any time.",
    )
    opens_at = serializers.CharField(required=False, max_length=8, help_text="HH:MM local")
    closes_at = serializers.CharField(
        required=False, max_length=8, help_text="HH:MM local; at or before opens_at: next day"
    )
    time_zone = serializers.CharField(required=False, default="UTC", max_length=64)


class ChangeHoursSerializer(serializers.Serializer):
    days = serializers.ListField(child=serializers.IntegerField())
    opens_at = serializers.CharField(allow_null=True)
    closes_at = serializers.CharField(allow_null=True)
    time_zone = serializers.CharField(allow_null=True)
    words = serializers.CharField(required=False)


class FreezeBreakGlassRequest(StrictSerializer):
    reason = serializers.CharField(max_length=REASON_MAX)
    minutes = serializers.IntegerField(help_text="How long it lasts (bounded by a setting).")


class FreezeBreakGlassSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    environment = serializers.CharField()
    reason = serializers.CharField()
    started_by = serializers.CharField()
    started_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)


class CalendarSerializer(serializers.Serializer):
    environment = serializers.CharField()
    frozen_until = serializers.DateTimeField(allow_null=True)
    freeze_reason = serializers.CharField()
    hours_open = serializers.BooleanField()
    hours_next_open = serializers.DateTimeField(allow_null=True)
    change_hours = ChangeHoursSerializer()
    freeze_windows = FreezeWindowSerializer(many=True)
    break_glass = FreezeBreakGlassSerializer(allow_null=True)
