"""Agents, environments and the manifests their runtimes report."""

from __future__ import annotations

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
