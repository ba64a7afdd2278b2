"""Agents, environments and the manifests their runtimes report."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

# What a new environment keeps unless its admin says otherwise: traces for a month, snapshots
# (full requests, sensitive) for a week. The form, the API and environment_create start from
# these; the migrations keep the literal they were made with.
TRACE_RETENTION_DAYS_DEFAULT = 30
SNAPSHOT_RETENTION_DAYS_DEFAULT = 7


class Agent(models.Model):
    key = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Archived: hidden from lists and pickers, kept with its history (deleting is refused
    # once it has releases or traces).
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["key"]

    def __str__(self) -> str:
        return self.key


class Environment(models.Model):
    key = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200)
    position = models.PositiveSmallIntegerField(help_text="Promotion order: lower first.")
    protected = models.BooleanField(
        default=False, help_text="Publishing needs a second person's approval."
    )
    trace_retention_days = models.PositiveIntegerField(default=TRACE_RETENTION_DAYS_DEFAULT)
    snapshot_retention_days = models.PositiveIntegerField(default=SNAPSHOT_RETENTION_DAYS_DEFAULT)
    # The revert policy. Off by default: a rollback is the emergency action and must be
    # fast. On: a rollback here is a request bound to its target version, like a publish.
    rollback_needs_approval = models.BooleanField(
        default=False, help_text="A rollback needs a second person's approval."
    )
    # A publish of a strategy here needs a complete impact preview of the same content, at
    # most 24 h old (traces.previews; judged in releases.selectors.body_publish_refusals).
    require_preview = models.BooleanField(
        default=False, help_text="A publish needs a recent impact preview of the same content."
    )
    # The guards of a staged rollout here (issue 23, docs/rollouts.md): the paired guard's
    # threshold (the share of requests where the new version is worse on the same inputs), the
    # requests it takes for "a required item lost", the traces per arm and step below which
    # a step has too little data, what then happens once the step was extended, and whether
    # a guard's rollback needs a person (then the rollout pauses and asks instead).
    guard_paired_threshold = models.FloatField(
        default=0.005, help_text="Paired guard: breach above this share of worse requests."
    )
    guard_required_lost_min = models.PositiveIntegerField(
        default=3, help_text="Paired guard: requests that lost a required item before a breach."
    )
    guard_min_traces = models.PositiveIntegerField(
        default=100, help_text="Traces per arm and step below which a step lacks data."
    )

    class OnInsufficientData(models.TextChoices):
        PAUSE = "pause", "Pause"
        ROLLBACK = "rollback", "Roll back"
        PROCEED = "proceed", "Proceed"

    on_insufficient_data = models.CharField(
        max_length=10,
        choices=OnInsufficientData.choices,
        default=OnInsufficientData.PAUSE,
        help_text="A step still short of data after its extension: pause, roll back or proceed.",
    )
    guard_rollbacks_need_approval = models.BooleanField(
        default=False,
        help_text="A guard's rollback pauses the rollout and asks a person instead.",
    )
    # After a rollout completes, the paired watch (issue 23 item 4): the previous version
    # runs as shadow on this share of units for ROLLOUTS_WATCH_DAYS; 0 turns the watch off.
    watch_share = models.FloatField(
        default=0.1,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Paired watch after a rollout: share of units that also run the previous "
        "version as shadow (0: no watch).",
    )
    archived_at = models.DateTimeField(null=True, blank=True)
    # Break-glass: one admin switched approvals off here (`protected`, or the revert policy)
    # with a reason instead of a second person. While `break_glass_at` is set, what goes
    # live here without the approval the environment normally requires is marked unreviewed
    # (Release.unreviewed, ReleaseEvent.unreviewed); switching the relaxed flags back on ends it.
    break_glass_at = models.DateTimeField(null=True, blank=True)
    break_glass_by = models.CharField(max_length=200, blank=True)
    break_glass_reason = models.TextField(blank=True)
    break_glass_relaxed = models.JSONField(
        default=list, blank=True, help_text="The flags the break-glass switched off."
    )

    class Meta:
        ordering = ["position", "key"]

    def __str__(self) -> str:
        return self.key

    @property
    def in_break_glass(self) -> bool:
        return self.break_glass_at is not None

    def relaxed_by_break_glass(self, flag: str) -> bool:
        """`flag` ("protected" or "rollback_needs_approval") is off here by a break-glass."""
        return self.in_break_glass and flag in (self.break_glass_relaxed or [])


class Manifest(models.Model):
    """What the runtime in one environment implements (reported by the runtime)."""

    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="manifests")
    version = models.PositiveIntegerField()
    runtime = models.CharField(
        max_length=200, blank=True, help_text="Runtime build, e.g. bank-assistant 2026.11.3"
    )
    # Which process reported it (the SDK's `X-Runtime-Instance`, as in its heartbeats): with
    # `runtime`, `reported_by` (the token) and `created_at`, the pages say who reported what.
    instance = models.CharField(max_length=200, blank=True, help_text="e.g. host:pid")
    body = models.JSONField(help_text="Wire form: providers, tools, handlers, sections, switches.")
    content_hash = models.CharField(max_length=64)
    reported_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["environment", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["environment", "version"], name="manifest_unique_version"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.environment.key} manifest v{self.version}"
