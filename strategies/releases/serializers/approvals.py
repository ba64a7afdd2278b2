"""Approval request shapes: approve, reject and withdraw, the list's filter, and a
decision's outcome."""

from __future__ import annotations

from rest_framework import serializers

from console.kernel.api_schema import StrictSerializer
from strategies.releases.models import ApprovalRequest
from strategies.releases.serializers.common import REASON_MAX, ApprovalSerializer, ReleaseSerializer


class ApproveRequest(StrictSerializer):
    note = serializers.CharField(required=False, allow_blank=True, max_length=REASON_MAX)


class RejectRequest(StrictSerializer):
    note = serializers.CharField(max_length=REASON_MAX, help_text="Why (the requester reads it).")


class WithdrawRequest(StrictSerializer):
    reason = serializers.CharField(max_length=REASON_MAX)


class ApprovalFilter(StrictSerializer):
    status = serializers.ChoiceField(choices=ApprovalRequest.Status.values, required=False)
    agent = serializers.SlugField(required=False)
    environment = serializers.SlugField(required=False)
    limit = serializers.IntegerField(required=False, min_value=1)
    offset = serializers.IntegerField(required=False, min_value=0)


class ApprovalDecisionSerializer(serializers.Serializer):
    approval = ApprovalSerializer()
    release = ReleaseSerializer(required=False, help_text="Approve: what is live now.")
