"""Shapes of the alerts API (OpenAPI via drf-spectacular). Types are checked here; what a
value may be (ranges, warning before alert) is judged once, in rules.rule_check."""

from __future__ import annotations

from rest_framework import serializers

from console.kernel.api_schema import StrictSerializer
from traces.alerts import rules
from traces.alerts.models import Level

THRESHOLD_HELP = (
    "A rate as a fraction (0.02 = 2 %), a share of the 7-day baseline with `baseline`, or "
    "traces per minute for the `traffic` metric."
)


class AlertRuleRequest(StrictSerializer):
    environment = serializers.SlugField(help_text="The environment's key (on creation only).")
    name = serializers.CharField(max_length=100)
    metric = serializers.ChoiceField(choices=list(rules.METRICS))
    comparison = serializers.ChoiceField(choices=list(rules.COMPARISONS))
    warning_threshold = serializers.FloatField(
        required=False, allow_null=True, help_text=THRESHOLD_HELP + " Optional."
    )
    alert_threshold = serializers.FloatField(help_text=THRESHOLD_HELP)
    window_minutes = serializers.IntegerField(default=10, help_text="1 to 1440.")
    min_traffic = serializers.IntegerField(
        default=20, help_text="Fewer traces (or reports) in the window: not judged."
    )
    baseline = serializers.BooleanField(default=False)
    no_data_minutes = serializers.IntegerField(
        required=False, allow_null=True, help_text="No trace for this long: a no-data alert."
    )
    enabled = serializers.BooleanField(default=True)


class AlertRuleUpdateRequest(AlertRuleRequest):
    revision = serializers.IntegerField(
        required=False, help_text="The revision you read: a stale one is refused (409)."
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields.pop("environment")
        for field in self.fields.values():
            field.required = False
            field.default = serializers.empty


class AlertRuleOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    environment = serializers.CharField()
    metric = serializers.CharField()
    comparison = serializers.CharField()
    warning_threshold = serializers.FloatField(allow_null=True)
    alert_threshold = serializers.FloatField()
    window_minutes = serializers.IntegerField()
    min_traffic = serializers.IntegerField()
    baseline = serializers.BooleanField()
    no_data_minutes = serializers.IntegerField(allow_null=True)
    enabled = serializers.BooleanField()
    revision = serializers.IntegerField()
    level = serializers.ChoiceField(choices=Level.values, help_text="Its standing now.")
    level_since = serializers.DateTimeField(allow_null=True)


class AlertLinksOut(serializers.Serializer):
    health = serializers.CharField(allow_null=True, help_text="The version health page.")
    traces = serializers.CharField(help_text="The traces of the window (and status).")
    requests = serializers.ListField(child=serializers.CharField())
    alert = serializers.CharField()


class AlertOut(serializers.Serializer):
    id = serializers.IntegerField()
    rule = serializers.IntegerField()
    rule_name = serializers.CharField()
    environment = serializers.CharField()
    level = serializers.CharField(help_text="The highest level it reached.")
    current_level = serializers.CharField()
    fired_at = serializers.DateTimeField()
    resolved_at = serializers.DateTimeField(allow_null=True)
    resolved_because = serializers.CharField()
    value = serializers.FloatField(allow_null=True)
    threshold = serializers.FloatField(allow_null=True)
    baseline = serializers.FloatField(allow_null=True)
    traffic = serializers.IntegerField()
    window_start = serializers.DateTimeField()
    window_end = serializers.DateTimeField()
    request_ids = serializers.ListField(child=serializers.CharField())
    changes = serializers.ListField(child=serializers.DictField())
    silenced = serializers.BooleanField()
    notified_level = serializers.CharField(
        help_text="The level last sent to the webhooks ('ok': its resolve; '': never sent)."
    )
    held = serializers.BooleanField(
        help_text="A silence holds a change back: what is owed is sent when it ends."
    )
    links = AlertLinksOut()


class AlertSilenceRequest(StrictSerializer):
    rule = serializers.IntegerField(
        required=False, allow_null=True, help_text="One rule; else all."
    )
    environment = serializers.SlugField(required=False, allow_blank=True, help_text="Else all.")
    reason = serializers.CharField(max_length=500, allow_blank=True, help_text="Required.")
    ends_at = serializers.DateTimeField(help_text="In the future, at most 30 days ahead.")


class AlertSilenceOut(serializers.Serializer):
    id = serializers.IntegerField()
    environment = serializers.CharField(allow_null=True)
    rule = serializers.IntegerField(allow_null=True)
    reason = serializers.CharField()
    ends_at = serializers.CharField()
    created_by = serializers.CharField()
    lifted_at = serializers.CharField(allow_null=True)
