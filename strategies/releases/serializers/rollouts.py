"""Staged rollout shapes (issue 23): the plan (a template's name or its steps), the start
and action requests, the list's filter, and a rollout with its guards and paired watch."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from console.kernel.api_schema import StrictSerializer
from strategies.releases.models import Rollout
from strategies.releases.serializers.changes import ChangeRecordSerializer
from strategies.releases.serializers.common import REASON_MAX
from strategies.releases.transitions import ROLLOUT_OPERATOR_ACTIONS


# --------------------------------------------------------------------------- staged rollouts
@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "enum": ["staged", "all_at_once"]},
            {
                "type": "array",
                "minItems": 1,
                "maxItems": 20,
                "items": {
                    "type": "object",
                    "properties": {
                        "share": {"type": "number", "minimum": 0, "maximum": 1},
                        "bake_seconds": {"type": "integer", "minimum": 1},
                    },
                    "required": ["share", "bake_seconds"],
                    "additionalProperties": False,
                },
            },
        ]
    }
)
class PlanField(serializers.Field):
    """A template's name, or the steps themselves (judged by the service, each reason at its
    step)."""

    default_error_messages = {
        "invalid": "A template name (staged, all_at_once) or a list of steps."
    }

    def to_internal_value(self, data):
        if isinstance(data, str | list):
            return data
        self.fail("invalid")

    def to_representation(self, value):
        return value


class RolloutStartRequest(StrictSerializer):
    version = serializers.IntegerField(min_value=1, help_text="The frozen version to roll out.")
    plan = PlanField(
        required=False,
        help_text="staged (shadow → 10% → 50% → 100%; the default where protected), "
        "all_at_once (the default elsewhere), or a list of steps {share, bake_seconds}.",
    )
    unit = serializers.ChoiceField(
        choices=["task", "principal"],
        required=False,
        default="task",
        help_text="What keeps its arm across steps: the task, or the principal.",
    )
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=REASON_MAX, default=""
    )


class RolloutActionRequest(StrictSerializer):
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=REASON_MAX,
        default="",
        help_text="Why (recorded in the audit log); required to stop.",
    )


class RolloutFilter(StrictSerializer):
    state = serializers.ChoiceField(choices=Rollout.State.values, required=False)
    document = serializers.SlugField(required=False)
    environment = serializers.SlugField(required=False)
    limit = serializers.IntegerField(required=False, min_value=1)
    offset = serializers.IntegerField(required=False, min_value=0)


class PlanStepSerializer(serializers.Serializer):
    share = serializers.FloatField()
    bake_seconds = serializers.IntegerField()


class GuardStateSerializer(serializers.Serializer):
    name = serializers.CharField()
    label = serializers.CharField(
        default="", help_text="What the guard judges, in words (empty for older evaluations)."
    )
    state = serializers.ChoiceField(choices=["ok", "breach", "insufficient", "pause"])
    message = serializers.CharField(
        help_text="What it saw, in words: the versions by number (the new version (v5), the "
        "current version (v4))."
    )
    statistics = serializers.CharField(
        default="", help_text="The figures behind the message: bounds, thresholds, tests."
    )
    evidence = serializers.DictField()


class RolloutWatchSerializer(serializers.Serializer):
    active = serializers.BooleanField(help_text="The watch runs now.")
    until = serializers.DateTimeField(help_text="When it ends by itself.")
    share = serializers.FloatField(help_text="Units that also run the previous version.")
    step = serializers.IntegerField(help_text="The step the watch's traces report.")
    ended_at = serializers.DateTimeField(allow_null=True)
    warning = serializers.DictField(
        allow_null=True, help_text="The paired guard's breach: message, counts, request ids."
    )


class RolloutSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The rollout id runtimes and traces carry (ro-<n>).")
    agent = serializers.CharField()
    document = serializers.CharField()
    environment = serializers.CharField()
    version = serializers.IntegerField(help_text="The new version.")
    control_version = serializers.IntegerField(help_text="What was live when it started.")
    plan_name = serializers.ChoiceField(choices=["staged", "all_at_once", "custom"])
    plan = PlanStepSerializer(many=True)
    unit = serializers.ChoiceField(choices=Rollout.Unit.values)
    state = serializers.ChoiceField(choices=Rollout.State.values)
    step = serializers.IntegerField(help_text="Index into plan.")
    share = serializers.FloatField(help_text="The share of units served the new version now.")
    bake_seconds = serializers.IntegerField(help_text="This step's bake (doubled once extended).")
    step_started_at = serializers.DateTimeField(allow_null=True)
    step_extended = serializers.BooleanField()
    bake_ends_at = serializers.DateTimeField(allow_null=True)
    guards = GuardStateSerializer(many=True, help_text="The guards' last evaluation.")
    guards_at = serializers.DateTimeField(allow_null=True)
    evidence = serializers.DictField(help_text="What a guard saw when it paused or ended it.")
    reason = serializers.CharField()
    end_reason = serializers.CharField()
    started_by = serializers.CharField()
    started_at = serializers.DateTimeField(allow_null=True)
    ended_by = serializers.CharField()
    ended_at = serializers.DateTimeField(allow_null=True)
    revision = serializers.IntegerField(help_text="Grows with every change (in the config ETag).")
    approval = serializers.IntegerField(
        allow_null=True, help_text="The approval request of its plan, where protected."
    )
    actions = serializers.ListField(
        child=serializers.ChoiceField(choices=list(ROLLOUT_OPERATOR_ACTIONS)),
        help_text="What its state allows an operator to do now (the one state table; the "
        "caller's rights are asked when an action is taken).",
    )
    watch = RolloutWatchSerializer(
        allow_null=True,
        help_text="The paired watch after completion (null: none was set, e.g. watch off).",
    )


class RolloutOutcomeSerializer(serializers.Serializer):
    rollout = RolloutSerializer(required=False)
    change_record = ChangeRecordSerializer(
        required=False, help_text="202: the start waits for the external change system."
    )
