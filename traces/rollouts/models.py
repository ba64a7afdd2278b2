"""Rollout counters: per minute, rollout, step and arm, what ingest saw of a staged
rollout's traces — written in the ingest's own transaction, through the health counters'
writer (traces.health.counters.CounterTable), so a stored trace is counted the moment it is
committed. The guards read them (traces.rollouts.selectors.step_evidence). docs/rollout-evidence.md
says what each counter means. Kept as long as the health counters (30 days).
"""

from __future__ import annotations

from django.contrib.postgres.indexes import BrinIndex
from django.db import models

RETENTION_DAYS = 30


def _counts(help_text: str):
    return models.JSONField(default=dict, help_text=help_text)


class RolloutCounterColumns(models.Model):
    """The counters of one row: the same in the minute and the hour tables."""

    # Plain values, no FK: a trace naming an unknown rollout is counted too (as a fault).
    rollout_key = models.CharField(max_length=100, db_collation="C")
    step = models.IntegerField()
    arm = models.CharField(max_length=10, db_collation="C")
    environment_id = models.BigIntegerField()

    traces = models.BigIntegerField(default=0, help_text="Traces counted as evidence.")
    usable = models.BigIntegerField(default=0, help_text="Of them, status ready or degraded.")
    config_fallback = models.BigIntegerField(default=0, help_text="Served from a fallback copy.")
    compared = models.BigIntegerField(
        default=0, help_text="Traces with the other version's decision (shadow status)."
    )
    paired_status = models.BigIntegerField(
        default=0, help_text="New's status not usable while old's is, on the same request."
    )
    paired_required_lost = models.BigIntegerField(
        default=0, help_text="A required item both require: old selected it, new did not."
    )
    paired_tokens = models.BigIntegerField(default=0, help_text="New's tokens > 1.2 × old's.")
    not_fetched = _counts("source → traces where the served version did not fetch it")
    not_fetched_both = _counts("source → traces where neither version had it")
    outcomes = _counts("outcome kind → outcomes reported for the arm's requests")
    outcomes_bad = _counts("outcome kind → of them, the kind's bad value")
    faults = _counts("runtime fault → traces stored but not counted as evidence")

    class Meta:
        abstract = True


class RolloutCounter(RolloutCounterColumns):
    """One minute's counts of one arm of one rollout step. The key in the order the guards
    read it — one (rollout, step), its minutes — is also the ingest's ON CONFLICT target.
    `arm` is blank on a row that holds only faults of traces naming no known arm."""

    pk = models.CompositePrimaryKey("rollout_key", "step", "minute", "arm", "environment_id")
    minute = models.DateTimeField(help_text="occurred_at, truncated to the minute (UTC).")

    class Meta:
        db_table = "rollout_counter"
        indexes = [BrinIndex(fields=["minute"], name="rollout_counter_minute_brin")]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {self.rollout_key} step {self.step} {self.arm}"


class RolloutCounterHour(RolloutCounterColumns):
    """The same counts per hour, written by the same ingest statement: a step that has run
    for days (the paired watch) is read as whole hours here and only the minutes before its
    first whole hour from RolloutCounter (30 days: 720 rows an arm, not 43,200)."""

    pk = models.CompositePrimaryKey("rollout_key", "step", "hour", "arm", "environment_id")
    hour = models.DateTimeField(help_text="occurred_at, truncated to the hour (UTC).")

    class Meta:
        db_table = "rollout_counter_hour"
        indexes = [BrinIndex(fields=["hour"], name="rollout_counter_hour_brin")]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.rollout_key} step {self.step} {self.arm}"


class RolloutSample(models.Model):
    """The first request ids of each paired kind in a rollout step (at most
    evidence.SAMPLE_IDS per kind: the SQL function rollout_samples_add keeps them bounded
    under concurrent batches): the ids a breach shows, to open."""

    pk = models.CompositePrimaryKey("rollout_key", "step")
    rollout_key = models.CharField(max_length=100, db_collation="C")
    step = models.IntegerField()
    request_ids = _counts("paired kind → [request ids], first come")

    class Meta:
        db_table = "rollout_sample"

    def __str__(self) -> str:
        return f"{self.rollout_key} step {self.step}"
