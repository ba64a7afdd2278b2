"""What several release API shapes share: the reason's limit, a release and an approval
request as the API shows them, and the outcome of a release change (200 or 202)."""

from __future__ import annotations

from rest_framework import serializers

from strategies.releases.models import ApprovalRequest
from strategies.releases.serializers.changes import ChangeRecordSerializer

REASON_MAX = 2000


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
    approval = ApprovalSerializer(
        required=False, allow_null=True, help_text="202: the request that waits."
    )
    change_record = ChangeRecordSerializer(
        required=False, help_text="202: the external change record the go-live waits for."
    )
