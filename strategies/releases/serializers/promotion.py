"""Promotion shapes: the request, and each document's outcome."""

from __future__ import annotations

from rest_framework import serializers

from console.kernel.api_schema import StrictSerializer
from strategies.releases.serializers.changes import ChangeRecordSerializer
from strategies.releases.serializers.common import REASON_MAX, ApprovalSerializer, ReleaseSerializer


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


class PromotionItemSerializer(serializers.Serializer):
    document = serializers.CharField()
    outcome = serializers.ChoiceField(choices=["published", "requested", "unchanged"])
    from_version = serializers.IntegerField(allow_null=True, help_text="Live in the target before.")
    to_version = serializers.IntegerField(allow_null=True, help_text="Live in the source.")
    note = serializers.CharField()
    release = ReleaseSerializer(allow_null=True)
    approval = ApprovalSerializer(allow_null=True)
    change_record = ChangeRecordSerializer(
        allow_null=True, required=False, help_text="Requested: the external change record."
    )


class PromotionSerializer(serializers.Serializer):
    source = serializers.CharField()
    target = serializers.CharField()
    results = PromotionItemSerializer(many=True)
