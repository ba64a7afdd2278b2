"""Standing alerts on context health (docs/alerts.md): rules per agent and environment on the
health counters (traces.health), the alerts they fired (kept as history, resolved or not) and
silences. What a rule means and how it is judged is decided in one place, `rules.py`."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class Comparison(models.TextChoices):
    ABOVE = "above", "above"
    BELOW = "below", "below"


class Level(models.TextChoices):
    """A rule's standing: ok, or the level of its open alert."""

    OK = "ok", "OK"
    WARNING = "warning", "Warning"
    ALERT = "alert", "Alert"
    NO_DATA = "no_data", "No traffic"
    # Too little traffic in the window to judge (below `min_traffic`), or never evaluated.
    UNKNOWN = "unknown", "Not judged"


FIRING_LEVELS = (Level.WARNING, Level.ALERT, Level.NO_DATA)


class AlertRule(models.Model):
    """One standing rule: `metric` over the last `window_minutes`, compared with a warning and
    an alert threshold (or with its 7-day baseline), and a no-data rule."""

    agent = models.ForeignKey("strategies.Agent", on_delete=models.PROTECT, related_name="+")
    environment = models.ForeignKey(
        "strategies.Environment", on_delete=models.PROTECT, related_name="+"
    )
    name = models.CharField(max_length=100)
    metric = models.CharField(max_length=40, help_text="One of traces.alerts.rules.METRICS.")
    comparison = models.CharField(max_length=5, choices=Comparison.choices)
    warning_threshold = models.FloatField(
        null=True, blank=True, help_text="A rate as a fraction (0.02 = 2 %); empty: no warning."
    )
    alert_threshold = models.FloatField(help_text="A rate as a fraction, or traces per minute.")
    window_minutes = models.PositiveSmallIntegerField(default=10)
    min_traffic = models.PositiveIntegerField(
        default=20, help_text="Fewer traces (or reports) in the window: not judged."
    )
    baseline = models.BooleanField(
        default=False,
        help_text="Thresholds are fractions of the metric's 7-day baseline, not absolute.",
    )
    no_data_minutes = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="No trace for this long: a no-data alert."
    )
    enabled = models.BooleanField(default=True)
    revision = models.PositiveIntegerField(default=1)
    level = models.CharField(max_length=10, choices=Level.choices, default=Level.UNKNOWN)
    level_since = models.DateTimeField(null=True, blank=True)
    created_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "alerts_rule"
        ordering = ["environment__position", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "environment", "name"], name="alerts_rule_unique_name"
            ),
            models.CheckConstraint(
                condition=Q(window_minutes__gte=1, window_minutes__lte=1440),
                name="alerts_rule_window",
            ),
            models.CheckConstraint(
                condition=Q(alert_threshold__gte=0)
                & (Q(warning_threshold__isnull=True) | Q(warning_threshold__gte=0)),
                name="alerts_rule_thresholds",
            ),
            models.CheckConstraint(
                condition=Q(no_data_minutes__isnull=True)
                | Q(no_data_minutes__gte=1, no_data_minutes__lte=1440),
                name="alerts_rule_no_data",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.environment_id})"


class Alert(models.Model):
    """An alert a rule fired: open until its rule is back to ok, then kept as history."""

    rule = models.ForeignKey(AlertRule, on_delete=models.PROTECT, related_name="alerts")
    agent = models.ForeignKey("strategies.Agent", on_delete=models.PROTECT, related_name="+")
    environment = models.ForeignKey(
        "strategies.Environment", on_delete=models.PROTECT, related_name="+"
    )
    level = models.CharField(
        max_length=10, choices=Level.choices, help_text="The highest level it reached."
    )
    current_level = models.CharField(max_length=10, choices=Level.choices)
    fired_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_because = models.CharField(max_length=200, blank=True)
    value = models.FloatField(null=True, help_text="The metric's value when it fired.")
    threshold = models.FloatField(null=True, help_text="The threshold it crossed (absolute).")
    baseline = models.FloatField(null=True, blank=True)
    traffic = models.BigIntegerField(default=0, help_text="Traces (or reports) in the window.")
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    document = models.CharField(
        max_length=100, blank=True, help_text="The strategy its sample requests used."
    )
    request_ids = models.JSONField(default=list, help_text="A few requests behind the value.")
    changes = models.JSONField(default=list, help_text="[{at, level, value}], oldest first.")
    silenced = models.BooleanField(default=False, help_text="Fired under a silence: not sent.")
    notified_level = models.CharField(
        max_length=10,
        blank=True,
        default="",
        db_default="",
        help_text="The level last sent (alert.fired), 'ok' once resolved was sent; '' never.",
    )
    held = models.BooleanField(
        default=False,
        db_default=False,
        help_text="A silence held back a change: what is owed is sent once it ends.",
    )

    class Meta:
        db_table = "alerts_alert"
        ordering = ["-fired_at", "-id"]
        indexes = [
            models.Index(fields=["agent", "-fired_at"], name="alerts_alert_agent_time"),
            # Each tick reads the held alerts: few, so a partial index keeps that one probe.
            models.Index(fields=["rule"], condition=Q(held=True), name="alerts_alert_held"),
        ]
        constraints = [
            # One open alert per rule: the evaluator's transitions rely on it.
            models.UniqueConstraint(
                fields=["rule"], condition=Q(resolved_at__isnull=True), name="alerts_alert_one_open"
            ),
            models.CheckConstraint(
                condition=Q(level__in=["warning", "alert", "no_data"])
                & Q(current_level__in=["warning", "alert", "no_data"]),
                name="alerts_alert_level",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.rule_id} {self.level} at {self.fired_at:%Y-%m-%d %H:%M}"

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None


class Silence(models.Model):
    """No delivery for the alerts of a rule, or of an agent (in one environment or all),
    until `ends_at`. Alerts are still recorded, marked silenced; what a silence held back is
    sent once it ends (rules.owed)."""

    agent = models.ForeignKey("strategies.Agent", on_delete=models.PROTECT, related_name="+")
    environment = models.ForeignKey(
        "strategies.Environment",
        on_delete=models.PROTECT,
        related_name="+",
        null=True,
        blank=True,
        help_text="Empty: every environment.",
    )
    rule = models.ForeignKey(
        AlertRule, on_delete=models.PROTECT, related_name="silences", null=True, blank=True
    )
    reason = models.CharField(max_length=500)
    ends_at = models.DateTimeField()
    created_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    lifted_at = models.DateTimeField(null=True, blank=True)
    lifted_by = models.CharField(max_length=200, blank=True)

    class Meta:
        db_table = "alerts_silence"
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=~Q(reason=""), name="alerts_silence_reason"),
        ]

    def __str__(self) -> str:
        return f"silence {self.pk} until {self.ends_at:%Y-%m-%d %H:%M}"
