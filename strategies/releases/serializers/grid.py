"""What is live per document × environment of an agent, as the API shows it."""

from __future__ import annotations

from rest_framework import serializers

from strategies.releases.serializers.common import ApprovalSerializer, ReleaseSerializer
from strategies.releases.serializers.shadow import ShadowSerializer


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
