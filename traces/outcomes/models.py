"""Outcomes: how a request turned out, reported after the fact (docs/runtime-contract.md §3b).

An environment declares the kinds of outcome it accepts (`OutcomeKind`: a flag, a rating in a
range, or a label from a bounded list, and which values count as bad so a rate can say
"escalation rate"); runtimes and the application report one value per (request, kind)
(`Outcome`), kept as long as the environment keeps its traces.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class OutcomeKind(models.Model):
    class Type(models.TextChoices):
        FLAG = "flag", "Flag (true / false)"
        RATING = "rating", "Rating (a whole number in a range)"
        LABEL = "label", "Label (one of a list)"

    environment = models.ForeignKey(
        "strategies.Environment", on_delete=models.CASCADE, related_name="outcome_kinds"
    )
    key = models.CharField(max_length=100, help_text="What runtimes send, e.g. escalated.")
    label = models.CharField(max_length=200, help_text="What people read, e.g. Escalated.")
    type = models.CharField(max_length=10, choices=Type.choices)
    # rating: the declared range (inclusive); label: the declared choices.
    rating_min = models.IntegerField(null=True, blank=True)
    rating_max = models.IntegerField(null=True, blank=True)
    choices = models.JSONField(default=list, blank=True)
    # The values that count as bad (a rate of them is shown): [true] for escalated, [false]
    # for task_completed, [1, 2] for a rating, ["other"] for a label. Empty: none is bad.
    bad_values = models.JSONField(default=list, blank=True)
    rate_label = models.CharField(
        max_length=100, blank=True, help_text="The rate's name, e.g. escalation rate."
    )
    created_at = models.DateTimeField(default=timezone.now)
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["environment__position", "key"]
        constraints = [
            models.UniqueConstraint(fields=["environment", "key"], name="outcome_kind_once"),
            models.CheckConstraint(
                condition=models.Q(type__in=["flag", "rating", "label"]), name="outcome_kind_type"
            ),
            models.CheckConstraint(
                condition=~models.Q(type="rating")
                | models.Q(
                    rating_min__isnull=False,
                    rating_max__isnull=False,
                    rating_min__lt=models.F("rating_max"),
                ),
                name="outcome_kind_rating_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.environment_id})"

    @property
    def is_active(self) -> bool:
        return self.retired_at is None


class Outcome(models.Model):
    """One value of one kind for one request of one environment: reported once (a repeat
    with the same value is a duplicate, another value is refused; the first one stays)."""

    environment = models.ForeignKey(
        "strategies.Environment", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    agent = models.ForeignKey("strategies.Agent", on_delete=models.CASCADE, related_name="+")
    # As traces.Trace.request_id: byte-wise, exact matches only.
    request_id = models.CharField(max_length=200, db_collation="C")
    kind = models.ForeignKey(OutcomeKind, on_delete=models.CASCADE, related_name="outcomes")
    value = models.JSONField(help_text="true/false, an integer, or one of the kind's choices.")
    occurred_at = models.DateTimeField(help_text="When it happened, as reported.")
    received_at = models.DateTimeField(default=timezone.now)
    # The runtime token that reported it: its id, and its name as it was (tokens are revoked,
    # not deleted; the name stays readable without a join).
    reported_by_token_id = models.BigIntegerField(null=True, blank=True)
    reported_by = models.CharField(max_length=200, blank=True)
    # When the health counters counted it on its trace's version: at once when the trace is
    # stored already, else by `outcomes.count_pending` once the trace arrives.
    counted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["occurred_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["environment", "request_id", "kind"], name="outcome_once_per_kind"
            )
        ]
        indexes = [
            # Retention deletes by environment and age; health reads the newest.
            models.Index(fields=["environment", "occurred_at"], name="outcome_env_time"),
            models.Index(fields=["received_at"], name="outcome_received"),
            models.Index(
                fields=["received_at"],
                condition=models.Q(counted_at__isnull=True),
                name="outcome_uncounted",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.request_id} {self.kind_id}={self.value!r}"
