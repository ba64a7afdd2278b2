"""Request and response shapes of the outcomes API (operator: kinds, outcomes of a request)."""

from __future__ import annotations

from rest_framework import serializers

from console.kernel.api_schema import StrictSerializer
from traces.outcomes import rules


def _value():
    return serializers.JSONField(help_text="true/false, an integer, or a label.")


class OutcomeKindOut(serializers.Serializer):
    key = serializers.CharField()
    label = serializers.CharField()
    type = serializers.ChoiceField(choices=list(rules.TYPES))
    rating_min = serializers.IntegerField(allow_null=True)
    rating_max = serializers.IntegerField(allow_null=True)
    choices = serializers.ListField(child=serializers.CharField())
    bad_values = serializers.ListField(
        child=serializers.JSONField(),
        help_text="The values that count towards the kind's rate (e.g. [true] for escalated).",
    )
    rate_label = serializers.CharField(help_text="The rate's name, e.g. escalation rate.")
    retired = serializers.BooleanField()
    created_at = serializers.DateTimeField()


class OutcomeKindCreateRequest(StrictSerializer):
    key = serializers.CharField(max_length=100)
    label = serializers.CharField(max_length=200)
    type = serializers.ChoiceField(choices=list(rules.TYPES))
    rating_min = serializers.IntegerField(required=False, allow_null=True)
    rating_max = serializers.IntegerField(required=False, allow_null=True)
    choices = serializers.ListField(
        child=serializers.CharField(max_length=100),
        required=False,
        max_length=rules.MAX_CHOICES,
    )
    bad_values = serializers.ListField(child=_value(), required=False, max_length=rules.MAX_CHOICES)
    rate_label = serializers.CharField(
        max_length=rules.MAX_RATE_LABEL_CHARS, required=False, allow_blank=True
    )


class OutcomeKindUpdateRequest(StrictSerializer):
    label = serializers.CharField(max_length=200, required=False)
    rating_min = serializers.IntegerField(required=False)
    rating_max = serializers.IntegerField(required=False)
    choices = serializers.ListField(
        child=serializers.CharField(max_length=100), required=False, max_length=rules.MAX_CHOICES
    )
    bad_values = serializers.ListField(child=_value(), required=False, max_length=rules.MAX_CHOICES)
    rate_label = serializers.CharField(
        max_length=rules.MAX_RATE_LABEL_CHARS, required=False, allow_blank=True
    )
    retired = serializers.BooleanField(
        required=False, help_text="true retires it (new reports refused); false restores it."
    )


class OutcomeOut(serializers.Serializer):
    request_id = serializers.CharField()
    environment = serializers.CharField()
    agent = serializers.CharField()
    kind = serializers.CharField()
    kind_label = serializers.CharField()
    type = serializers.ChoiceField(choices=list(rules.TYPES))
    value = _value()
    bad = serializers.BooleanField(help_text="Counts towards the kind's rate.")
    occurred_at = serializers.DateTimeField()
    received_at = serializers.DateTimeField()
    reported_by = serializers.CharField(help_text="The runtime token's name.")


class OutcomeListOut(serializers.Serializer):
    request_id = serializers.CharField()
    outcomes = OutcomeOut(many=True)


class _Duplicate(serializers.Serializer):
    index = serializers.IntegerField()
    request_id = serializers.CharField()
    kind = serializers.CharField()


class _RejectedOutcome(serializers.Serializer):
    index = serializers.IntegerField()
    request_id = serializers.CharField(allow_null=True)
    kind = serializers.CharField(allow_null=True)
    errors = serializers.ListField(child=serializers.DictField())


class OutcomeIngestResponse(serializers.Serializer):
    accepted = serializers.IntegerField(help_text="Outcomes stored and committed.")
    duplicates = _Duplicate(
        many=True,
        help_text="Already stored with the same value (or repeated in the batch): not stored "
        "again, delivered all the same.",
    )
    rejected = _RejectedOutcome(many=True)
