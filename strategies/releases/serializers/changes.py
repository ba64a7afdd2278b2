"""A change record as the API shows it (docs/change-approvals.md)."""

from __future__ import annotations

from rest_framework import serializers

from strategies.releases.models import ChangeRecord


class ChangeDeliverySerializer(serializers.Serializer):
    status = serializers.CharField(help_text="delivered, not delivered yet, not sent")
    tries = serializers.IntegerField()
    last_error = serializers.CharField()
    delivered_at = serializers.CharField(allow_null=True)


class ChangeRecordSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="cr-<number>")
    environment = serializers.CharField()
    agent = serializers.CharField()
    document = serializers.CharField()
    version = serializers.IntegerField()
    content_hash = serializers.CharField()
    path = serializers.ChoiceField(choices=ChangeRecord.Path.values)
    state = serializers.ChoiceField(choices=ChangeRecord.State.values)
    change_number = serializers.CharField()
    comment = serializers.CharField()
    requested_by = serializers.CharField()
    requested_at = serializers.CharField()
    decided_by = serializers.CharField(help_text="callback or poll")
    decided_at = serializers.CharField(allow_null=True)
    valid_until = serializers.CharField(allow_null=True)
    approval = serializers.IntegerField(allow_null=True)
    delivery = ChangeDeliverySerializer()
    go_live_refused = serializers.CharField()
    release_revision = serializers.IntegerField(allow_null=True)
