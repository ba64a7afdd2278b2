"""API shapes for releases, approvals and promotions. Requests are strict: unknown fields
are refused so a typo never silently does nothing."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from console.kernel.api_schema import StrictSerializer
from strategies.releases.models import ApprovalRequest, ReleaseEvent, Rollout

REASON_MAX = 2000


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


class ApproveRequest(StrictSerializer):
    note = serializers.CharField(required=False, allow_blank=True, max_length=REASON_MAX)


class RejectRequest(StrictSerializer):
    note = serializers.CharField(max_length=REASON_MAX, help_text="Why (the requester reads it).")


class WithdrawRequest(StrictSerializer):
    reason = serializers.CharField(max_length=REASON_MAX)


class PromoteRequest(StrictSerializer):
    source = serializers.SlugField(help_text="Publish what is live here …")
    target = serializers.SlugField(help_text="… to here.")
    documents = serializers.ListField(
        child=serializers.SlugField(),
        required=False,
        allow_empty=False,
        max_length=200,
        help_text="Document keys; all of the agent's when left out.",
    )
    reason = serializers.CharField(max_length=REASON_MAX)


class ApprovalFilter(StrictSerializer):
    status = serializers.ChoiceField(choices=ApprovalRequest.Status.values, required=False)
    agent = serializers.SlugField(required=False)
    environment = serializers.SlugField(required=False)
    limit = serializers.IntegerField(required=False, min_value=1)
    offset = serializers.IntegerField(required=False, min_value=0)


class HistoryFilter(StrictSerializer):
    document = serializers.SlugField(required=False)
    environment = serializers.SlugField(required=False)
    limit = serializers.IntegerField(required=False, min_value=1)
    offset = serializers.IntegerField(required=False, min_value=0)


# --------------------------------------------------------------------------- responses
class ReleaseSerializer(serializers.Serializer):
    document = serializers.CharField()
    environment = serializers.CharField()
    version = serializers.IntegerField()
    revision = serializers.IntegerField()
    updated_by = serializers.CharField()
    updated_at = serializers.DateTimeField(allow_null=True)
    unreviewed = serializers.BooleanField(
        help_text="What is live went live without the approval its environment normally "
        "requires (during a break-glass)."
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


class ShadowOutcomeSerializer(serializers.Serializer):
    shadow = ShadowSerializer()


class ApprovalSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=ApprovalRequest.Kind.values)
    agent = serializers.CharField()
    document = serializers.CharField()
    environment = serializers.CharField()
    version = serializers.IntegerField()
    content_hash = serializers.CharField()
    base_revision = serializers.IntegerField(help_text="The release revision it is bound to.")
    status = serializers.ChoiceField(choices=ApprovalRequest.Status.values)
    requested_by = serializers.CharField()
    requested_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField()
    decided_by = serializers.CharField(allow_null=True)
    decided_at = serializers.DateTimeField(allow_null=True)
    decision_note = serializers.CharField()
    rollout = serializers.CharField(
        allow_null=True, help_text="kind rollout: the staged rollout whose plan it approves."
    )


class ReleaseOutcomeSerializer(serializers.Serializer):
    release = ReleaseSerializer(required=False, help_text="200: what is live now.")
    approval = ApprovalSerializer(required=False, help_text="202: the request that waits.")


class ApprovalDecisionSerializer(serializers.Serializer):
    approval = ApprovalSerializer()
    release = ReleaseSerializer(required=False, help_text="Approve: what is live now.")


class DocumentReleasesSerializer(serializers.Serializer):
    key = serializers.CharField()
    kind = serializers.CharField()
    latest_version = serializers.IntegerField(allow_null=True)
    releases = serializers.DictField(
        child=ReleaseSerializer(allow_null=True),
        help_text="Per environment key: what is live there (null: nothing).",
    )
    shadows = serializers.DictField(
        child=ShadowSerializer(allow_null=True),
        help_text="Per environment key: the shadow running beside the live version (null: none).",
    )


class ReleaseEnvironmentSerializer(serializers.Serializer):
    key = serializers.CharField()
    name = serializers.CharField()
    position = serializers.IntegerField()
    protected = serializers.BooleanField()
    rollback_needs_approval = serializers.BooleanField()


class AgentReleasesSerializer(serializers.Serializer):
    agent = serializers.CharField()
    environments = ReleaseEnvironmentSerializer(many=True)
    documents = DocumentReleasesSerializer(many=True)
    pending = ApprovalSerializer(many=True)


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

    def get_from_version(self, obj) -> int | None:
        return obj.from_version.number if obj.from_version_id else None


class PromotionItemSerializer(serializers.Serializer):
    document = serializers.CharField()
    outcome = serializers.ChoiceField(choices=["published", "requested", "unchanged"])
    from_version = serializers.IntegerField(allow_null=True, help_text="Live in the target before.")
    to_version = serializers.IntegerField(allow_null=True, help_text="Live in the source.")
    note = serializers.CharField()
    release = ReleaseSerializer(allow_null=True)
    approval = ApprovalSerializer(allow_null=True)


class PromotionSerializer(serializers.Serializer):
    source = serializers.CharField()
    target = serializers.CharField()
    results = PromotionItemSerializer(many=True)


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
    state = serializers.ChoiceField(choices=["ok", "breach", "insufficient", "pause"])
    message = serializers.CharField()
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
    watch = RolloutWatchSerializer(
        allow_null=True,
        help_text="The paired watch after completion (null: none was set, e.g. watch off).",
    )


class RolloutOutcomeSerializer(serializers.Serializer):
    rollout = RolloutSerializer()
