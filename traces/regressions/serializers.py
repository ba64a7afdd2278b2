"""Request and response shapes of the regression sets API."""

from __future__ import annotations

from rest_framework import serializers

from console.kernel.api_schema import StrictSerializer
from traces.regressions import checks
from traces.regressions.models import MAX_RETENTION_DAYS


class RegressionSetOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    strategy = serializers.CharField()
    description = serializers.CharField()
    retention_days = serializers.IntegerField()
    keep_reason = serializers.CharField()
    revision = serializers.IntegerField()
    members = serializers.IntegerField(help_text="How many requests it keeps.")
    created_at = serializers.DateTimeField()


class RegressionSetCreateRequest(StrictSerializer):
    # Lengths and emptiness are judged by the service (one set of messages for pages and API).
    name = serializers.CharField(allow_blank=True, trim_whitespace=False)
    strategy = serializers.CharField(help_text="The key of one of the agent's strategies.")
    description = serializers.CharField(required=False, allow_blank=True, default="")
    retention_days = serializers.IntegerField(
        required=False,
        default=365,
        help_text=f"How long each member is kept after it was added (1 to {MAX_RETENTION_DAYS}).",
    )
    keep_reason = serializers.CharField(
        allow_blank=True, help_text="Why these requests are kept beyond trace retention."
    )


class RegressionSetUpdateRequest(StrictSerializer):
    revision = serializers.IntegerField(help_text="The revision you read (409 when stale).")
    name = serializers.CharField(required=False, allow_blank=True)
    description = serializers.CharField(required=False, allow_blank=True)
    retention_days = serializers.IntegerField(required=False)
    keep_reason = serializers.CharField(required=False, allow_blank=True)


class ExpectationSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=list(checks.KINDS))
    item = serializers.CharField(required=False, help_text="item_selected: an item id or bundle.")
    source = serializers.CharField(required=False, help_text="source_not_excluded")
    reason = serializers.CharField(
        required=False, allow_blank=True, help_text="source_not_excluded: a reason code (optional)"
    )
    statuses = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="status_in"
    )
    tokens = serializers.IntegerField(required=False, help_text="input_tokens_at_most")
    version = serializers.IntegerField(required=False, help_text="same_as_recorded")


class MemberAddRequest(StrictSerializer):
    request_id = serializers.CharField(max_length=200, trim_whitespace=False)
    environment = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="When the id is in several."
    )
    # Judged whole by the one validator (checks.expectations_findings), findings at their path.
    expectations = serializers.JSONField(
        help_text="A list of expectations (at least one); see ExpectationSerializer's kinds."
    )
    note = serializers.CharField(allow_blank=True, help_text="A ticket reference.")


class MemberOut(serializers.Serializer):
    id = serializers.IntegerField()
    set = serializers.IntegerField()
    request_id = serializers.CharField()
    environment = serializers.CharField()
    occurred_at = serializers.DateTimeField()
    strategy_version = serializers.IntegerField()
    status = serializers.CharField(help_text="As recorded.")
    expectations = ExpectationSerializer(many=True)
    note = serializers.CharField()
    added_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()


class CheckRequest(StrictSerializer):
    strategy = serializers.CharField(
        required=False, help_text="The strategy to check (with body or version)."
    )
    body = serializers.JSONField(required=False, help_text="A strategy body (e.g. a draft).")
    version = serializers.IntegerField(required=False, help_text="A version of the strategy.")
    file = serializers.CharField(
        required=False,
        help_text="A configuration file's text (config as code): each strategy's draft, or "
        "its newest version, is checked against the agent's sets of that strategy.",
    )
    sets = serializers.ListField(
        child=serializers.IntegerField(), required=False, help_text="Only these sets."
    )
    output = serializers.ChoiceField(
        choices=["json", "junit"],
        default="json",
        help_text="junit: the answer is JUnit XML (application/xml) for a CI job — a test "
        "suite per set, a case per member and expectation, a failure naming what was decided.",
    )


class DecisionOut(serializers.Serializer):
    item = serializers.CharField()
    source = serializers.CharField()
    recorded = serializers.CharField()
    checked = serializers.CharField()


class ExpectationResultOut(serializers.Serializer):
    expectation = serializers.DictField()
    words = serializers.CharField()
    outcome = serializers.ChoiceField(choices=list(checks.OUTCOMES))
    message = serializers.CharField()
    decisions = DecisionOut(many=True)


class MemberResultOut(serializers.Serializer):
    member = serializers.IntegerField()
    request_id = serializers.CharField()
    environment = serializers.CharField()
    outcome = serializers.ChoiceField(choices=list(checks.OUTCOMES))
    recorded_status = serializers.CharField()
    status = serializers.CharField(allow_null=True)
    input_tokens = serializers.IntegerField(allow_null=True)
    why_not_checkable = serializers.CharField(allow_null=True)
    expectations = ExpectationResultOut(many=True)


class TotalsOut(serializers.Serializer):
    passed = serializers.IntegerField()
    failed = serializers.IntegerField()
    not_checkable = serializers.IntegerField()


class SetCheckOut(serializers.Serializer):
    set = serializers.IntegerField()
    name = serializers.CharField()
    strategy = serializers.CharField()
    checked = serializers.CharField(help_text="What was checked: v3, the body, a file's draft.")
    outcome = serializers.ChoiceField(
        choices=list(checks.SET_OUTCOMES),
        help_text="empty: the set has no member left (removed or expired): it checks nothing, "
        "and a set required somewhere refuses go-live there.",
    )
    totals = TotalsOut()
    members = MemberResultOut(many=True)


class CheckOut(serializers.Serializer):
    outcome = serializers.ChoiceField(
        choices=list(checks.SET_OUTCOMES),
        help_text="failed when any member failed; not_checkable when none failed but some "
        "could not be judged; empty when a set has no member left; passed otherwise.",
    )
    sets = SetCheckOut(many=True)


class RequiredInRequest(StrictSerializer):
    environments = serializers.ListField(
        child=serializers.CharField(),
        allow_empty=True,
        max_length=100,
        help_text="Environment keys where a version goes live only when it passes the set "
        "(publish, approval, rollout start); empty: required nowhere.",
    )


class RequiredInOut(serializers.Serializer):
    set = serializers.IntegerField()
    required_in = serializers.ListField(child=serializers.CharField())
