"""Releases (environment E serves version V of document D), their history and approval
requests."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from console.kernel.guards import append_only_triggers
from strategies.catalog.models import Environment
from strategies.documents.models import Document, Version


class Release(models.Model):
    """Environment E serves version V of document D. `revision` grows with every change and
    is the condition of every update (publish, approve, rollback): one writer wins."""

    document = models.ForeignKey(Document, on_delete=models.PROTECT, related_name="releases")
    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="releases")
    version = models.ForeignKey(Version, on_delete=models.PROTECT, related_name="releases")
    revision = models.PositiveIntegerField(default=1)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=200, blank=True)
    # What is live went live without the approval its environment normally requires (during
    # a break-glass): as its last ReleaseEvent says, kept here so every list reads it free.
    unreviewed = models.BooleanField(default=False)

    class Meta:
        ordering = ["document", "environment__position"]
        constraints = [
            models.UniqueConstraint(
                fields=["document", "environment"], name="release_unique_target"
            ),
        ]

    def __str__(self) -> str:
        return (
            f"{self.document} @ {self.environment.key} = v{self.version.number} (r{self.revision})"
        )


class ReleaseEventQuerySet(models.QuerySet):
    def moves(self):
        """The events that moved what is live (not a shadow's start or stop): what rollback
        targets and unreviewed versions are read from."""
        return self.filter(action__in=ReleaseEvent.LIVE_ACTIONS)


class ReleaseEvent(models.Model):
    """Append-only history of a release: every publish, approval applied and rollback, and
    every start and stop of a shadow beside it (`to_version`: the shadow's version; `revision`:
    the shadow's revision it produced)."""

    class Action(models.TextChoices):
        PUBLISH = "publish", "Publish"
        APPROVE = "approve", "Approved publish"
        ROLLBACK = "rollback", "Rollback"
        SHADOW_START = "shadow_start", "Shadow started"
        SHADOW_STOP = "shadow_stop", "Shadow stopped"

    LIVE_ACTIONS = (Action.PUBLISH, Action.APPROVE, Action.ROLLBACK)
    SHADOW_ACTIONS = (Action.SHADOW_START, Action.SHADOW_STOP)

    release = models.ForeignKey(Release, on_delete=models.PROTECT, related_name="events")
    revision = models.PositiveIntegerField(help_text="The release revision this event produced.")
    action = models.CharField(max_length=20, choices=Action.choices)
    from_version = models.ForeignKey(
        Version, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    to_version = models.ForeignKey(Version, on_delete=models.PROTECT, related_name="+")
    actor = models.CharField(max_length=200)
    approved_by = models.CharField(max_length=200, blank=True)
    reason = models.TextField(blank=True)
    # Went live without the approval the environment normally requires: published (or rolled
    # back to) while a break-glass had switched that approval off. Never a rollback target.
    unreviewed = models.BooleanField(default=False)
    occurred_at = models.DateTimeField(auto_now_add=True)

    objects = ReleaseEventQuerySet.as_manager()

    class Meta:
        ordering = ["-occurred_at", "-id"]
        constraints = [
            # One event per revision of the release pointer, and one per revision of its
            # shadow (two counters, one history).
            models.UniqueConstraint(
                fields=["release", "revision"],
                condition=Q(action__in=["publish", "approve", "rollback"]),
                name="release_event_unique_revision",
            ),
            models.UniqueConstraint(
                fields=["release", "revision"],
                condition=Q(action__in=["shadow_start", "shadow_stop"]),
                name="release_event_unique_shadow_revision",
            ),
        ]
        # Append-only in the database: no session setting switches these off (see Guard).
        triggers = append_only_triggers()

    def __str__(self) -> str:
        return f"{self.release}: {self.action} r{self.revision}"


class ShadowRelease(models.Model):
    """Environment E runs version V of strategy D as shadow beside what is live there: the
    runtime selects with it on the same requests, reports what it would have chosen, and
    serves only the live one. At most one per document × environment: the row stays when the
    shadow stops (`version` null), so its `revision` only grows — it is part of the config
    ETag's revision sum, which must never go down — and is the condition of every change."""

    document = models.ForeignKey(Document, on_delete=models.PROTECT, related_name="shadows")
    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="shadows")
    version = models.ForeignKey(
        Version,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="shadows",
        help_text="The version running as shadow; empty when none runs.",
    )
    revision = models.PositiveIntegerField(default=1)
    started_by = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["document", "environment__position"]
        constraints = [
            models.UniqueConstraint(
                fields=["document", "environment"], name="shadow_release_unique_target"
            ),
            models.CheckConstraint(
                condition=Q(version__isnull=True, started_at__isnull=True)
                | Q(version__isnull=False, started_at__isnull=False),
                name="shadow_release_started_when_running",
            ),
        ]

    def __str__(self) -> str:
        running = f"v{self.version.number}" if self.version_id else "none"
        return f"{self.document} @ {self.environment.key} shadow = {running} (r{self.revision})"

    @property
    def running(self) -> bool:
        return self.version_id is not None


class ApprovalRequest(models.Model):
    """A publish to a protected environment (or a rollback where the revert policy says so)
    waiting for a second person. Bound to the version's content hash and the release
    revision: any change to what would go live voids it."""

    class Kind(models.TextChoices):
        PUBLISH = "publish", "Publish"
        ROLLBACK = "rollback", "Rollback"  # where the environment's revert policy asks for one

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        VOID = "void", "Void"
        WITHDRAWN = "withdrawn", "Withdrawn"

    document = models.ForeignKey(
        Document, on_delete=models.PROTECT, related_name="approval_requests"
    )
    environment = models.ForeignKey(
        Environment, on_delete=models.PROTECT, related_name="approval_requests"
    )
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.PUBLISH)
    version = models.ForeignKey(Version, on_delete=models.PROTECT, related_name="approval_requests")
    content_hash = models.CharField(max_length=64)
    base_revision = models.PositiveIntegerField(
        default=0, help_text="Release revision when requested (0: none)."
    )
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    reason = models.TextField(blank=True)
    requested_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True)

    class Meta:
        ordering = ["-requested_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["document", "environment"],
                condition=Q(status="pending"),
                name="approval_one_pending_per_target",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.document} v{self.version.number} → {self.environment.key} ({self.status})"
