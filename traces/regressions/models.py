"""Regression sets: requests that once went wrong, kept with what they must decide from now on.

A set belongs to one agent and one of its strategies. A member is one request (by request id
and environment) with its snapshot — what a replay needs, never a body — and its
expectations; it outlives its trace (trace retention) and is kept for the set's own retention,
for the reason the set gives.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

MAX_RETENTION_DAYS = 3650


class RegressionSet(models.Model):
    agent = models.ForeignKey("strategies.Agent", on_delete=models.CASCADE, related_name="+")
    document = models.ForeignKey(
        "strategies.Document",
        on_delete=models.CASCADE,
        related_name="+",
        help_text="The strategy whose versions the set checks.",
    )
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    retention_days = models.PositiveIntegerField(
        default=365, help_text="How long a member is kept after it was added."
    )
    keep_reason = models.TextField(
        help_text="Why requests are kept beyond trace retention (e.g. the incident process)."
    )
    required_in = models.ManyToManyField(
        "strategies.Environment",
        blank=True,
        related_name="+",
        help_text="Environments where a version goes live only when it passes this set (the "
        "go-live judgement asks; an empty set cannot be required).",
    )
    revision = models.PositiveIntegerField(default=1, help_text="Bumped by every edit.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "name"], name="regression_set_name_per_agent"),
            models.CheckConstraint(
                condition=Q(retention_days__gte=1, retention_days__lte=MAX_RETENTION_DAYS),
                name="regression_set_retention_in_range",
            ),
            models.CheckConstraint(
                condition=~Q(keep_reason=""), name="regression_set_keeps_for_a_reason"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Member(models.Model):
    """One request of a set: its snapshot (checks.py) and its expectations."""

    set = models.ForeignKey(RegressionSet, on_delete=models.CASCADE, related_name="members")
    request_id = models.CharField(max_length=200, db_collation="C")
    environment_key = models.CharField(max_length=100)
    occurred_at = models.DateTimeField(help_text="When the request was made.")
    strategy_version = models.PositiveIntegerField(help_text="The version the request used.")
    snapshot = models.JSONField(help_text="What a replay needs: never a body.")
    expectations = models.JSONField()
    note = models.CharField(max_length=500, help_text="A ticket reference.")
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    added_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(help_text="Added + the set's retention.")

    class Meta:
        ordering = ["-added_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["set", "environment_key", "request_id"],
                name="regression_member_once_per_set",
            ),
            models.CheckConstraint(condition=~Q(note=""), name="regression_member_has_note"),
        ]
        indexes = [models.Index(fields=["expires_at"], name="regression_member_expiry")]

    def __str__(self) -> str:
        return f"{self.request_id} ({self.environment_key})"
