"""Health counters: per minute, agent, environment, document, version and arm (the live
selection or the shadow's), what ingest saw — written in the ingest's own transaction
(traces.health.counters), so a stored trace is counted the moment it is committed.

The maps are jsonb {key: count}, added with the SQL function `health_counts_add` (migration
0001); each minute's counts are added to its hour's row too (HealthCounterHour) by the same
statement. Kept 30 days (`health.purge_expired`); the traces' hourly rollups stay for the
dashboard's charts. docs/version-health.md says what each counter means.
"""

from __future__ import annotations

from django.contrib.postgres.indexes import BrinIndex
from django.db import models
from django.db.models import Value

RETENTION_DAYS = 30


class Arm(models.TextChoices):
    LIVE = "live", "Live"
    SHADOW = "shadow", "Shadow"


def _counts(help_text: str):
    return models.JSONField(default=dict, help_text=help_text)


class CounterColumns(models.Model):
    """The counters of one row: the same in the minute and the hour tables."""

    # Plain ids, no FK checks: one upsert per batch should not pay a trigger per row.
    agent_id = models.BigIntegerField()
    environment_id = models.BigIntegerField()
    document = models.CharField(max_length=100, db_collation="C")
    version = models.IntegerField()
    arm = models.CharField(max_length=6, choices=Arm.choices, db_collation="C")

    traces = models.BigIntegerField(default=0)
    failures = models.BigIntegerField(
        default=0, help_text="Traces that failed: neither ready nor degraded."
    )
    statuses = _counts("status → traces")
    degraded = _counts("degradation handler → traces")
    required_missing = _counts(
        "'source:reason_code' → traces with a required item of that source not selected"
    )
    config_fallback = _counts("config resolution → traces served from a fallback copy")
    tokens_sum = models.FloatField(default=0)
    tokens_count = models.BigIntegerField(default=0)
    tokens_hist = _counts("k → traces whose input estimate v has int(v).bit_length() == k")
    # The shadow arm only: agreement with the live selection of the same requests.
    compared = models.BigIntegerField(default=0)
    same_status = models.BigIntegerField(default=0)
    same_selected = models.BigIntegerField(default=0)
    required_kept = _counts("source → traces whose live-selected required items all stayed")
    required_lost = _counts("source → traces where the shadow dropped a live-selected required")
    token_delta_sum = models.FloatField(default=0)
    token_delta_count = models.BigIntegerField(default=0)
    # The shadow arm only, paired on the same requests: the shadow's verdicts compare these,
    # never the live version's rates over other requests (traces.health.counters.metric_keys).
    # A database default too: a writer that names no such column (an older one) adds '{}'.
    paired_worse = models.JSONField(
        default=dict,
        db_default=Value({}, output_field=models.JSONField()),
        help_text="metric → compared requests where the shadow had it and live not",
    )
    paired_better = models.JSONField(
        default=dict,
        db_default=Value({}, output_field=models.JSONField()),
        help_text="metric → compared requests where live had it and the shadow not",
    )
    # Reported after the fact for a request (traces.health.counters.outcome_writes).
    outcomes = _counts("'kind:value' → outcomes reported for the live version's requests")
    faults = _counts("runtime fault → traces (e.g. a shadow version never released there)")

    class Meta:
        abstract = True


class HealthCounter(CounterColumns):
    """One minute's counts. The key in the order the pages read it — one (agent,
    environment, document), a range of minutes — is also the ingest's ON CONFLICT target."""

    pk = models.CompositePrimaryKey(
        "agent_id", "environment_id", "document", "minute", "version", "arm"
    )
    minute = models.DateTimeField(help_text="occurred_at, truncated to the minute (UTC).")

    class Meta:
        db_table = "health_counter"
        indexes = [BrinIndex(fields=["minute"], name="health_counter_minute_brin")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(arm__in=["live", "shadow"]), name="health_counter_arm"
            )
        ]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {self.document} v{self.version} {self.arm}"


class HealthCounterHour(CounterColumns):
    """The same counts per hour, written by the same ingest statement: the pages read whole
    hours here and only the minutes at a window's edges from HealthCounter (a week is 168
    rows, not 10,080)."""

    pk = models.CompositePrimaryKey(
        "agent_id", "environment_id", "document", "hour", "version", "arm"
    )
    hour = models.DateTimeField(help_text="occurred_at, truncated to the hour (UTC).")

    class Meta:
        db_table = "health_counter_hour"
        indexes = [BrinIndex(fields=["hour"], name="health_counter_hour_brin")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(arm__in=["live", "shadow"]), name="health_counter_hour_arm"
            )
        ]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.document} v{self.version} {self.arm}"
