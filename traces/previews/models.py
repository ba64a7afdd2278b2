"""Impact previews: a strategy version replayed on an environment's retained traces of a
window, against what is live there (docs/previews.md)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Preview(models.Model):
    """One preview, bound to (content hash, environment, window, engine): a second request
    for the same inputs reuses it (while it runs or once it is complete)."""

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        COMPLETE = "complete", "Complete"
        CANCELLED = "cancelled", "Cancelled"
        FAILED = "failed", "Failed"

    agent = models.ForeignKey("strategies.Agent", on_delete=models.CASCADE, related_name="+")
    environment = models.ForeignKey(
        "strategies.Environment", on_delete=models.CASCADE, related_name="+"
    )
    document = models.ForeignKey("strategies.Document", on_delete=models.CASCADE, related_name="+")
    # The version asked about; the preview is bound to its content (a draft may change or go).
    version = models.ForeignKey(
        "strategies.Version", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    version_number = models.PositiveIntegerField()
    content_hash = models.CharField(max_length=64)
    body = models.JSONField(help_text="The previewed body, as it was when asked.")
    live_version_number = models.PositiveIntegerField()
    live_content_hash = models.CharField(max_length=64)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    engine = models.CharField(max_length=100)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_by_label = models.CharField(max_length=200, blank=True)
    requested_at = models.DateTimeField(default=timezone.now)
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    cancel_requested = models.BooleanField(default=False)
    traces_total = models.PositiveIntegerField(default=0)
    traces_done = models.PositiveIntegerField(default=0)
    sampled = models.BooleanField(default=False)
    # The time of the last trace replayed: with traces_done, what a cancelled or failed
    # preview covered.
    covered_until = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    failure = models.CharField(max_length=500, blank=True)
    report = models.JSONField(null=True, blank=True)
    # Run as this many shard tasks (trace id modulo shards), merged by the last to finish.
    shard_count = models.PositiveSmallIntegerField(default=1)
    # {status: traces} counted once at request: every shard samples with the same thresholds.
    window_by_status = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]
        indexes = [
            models.Index(
                fields=["document", "environment", "content_hash", "-requested_at"],
                name="preview_inputs",
            )
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(traces_done__lte=models.F("traces_total")),
                name="preview_done_within_total",
            ),
            models.CheckConstraint(
                condition=models.Q(window_start__lt=models.F("window_end")),
                name="preview_window_ordered",
            ),
        ]

    def __str__(self) -> str:
        return f"preview {self.pk}: v{self.version_number} in {self.environment_id}"


class PreviewShard(models.Model):
    """One shard of a preview's run: the traces whose id is `index` modulo the preview's
    `shard_count`. The preview's progress, heartbeat and coverage are sums and minima of its
    shards', written under the preview row's lock."""

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"  # replayed its traces; `partial` waits for the merge
        STOPPED = "stopped", "Stopped"  # cancelled, or the preview failed elsewhere
        FAILED = "failed", "Failed"

    preview = models.ForeignKey(Preview, on_delete=models.CASCADE, related_name="shards")
    index = models.PositiveSmallIntegerField()
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    done = models.PositiveIntegerField(default=0)
    covered_until = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # `report.Replay.state()` of a finished shard, until the last one merges (then cleared).
    partial = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["preview", "index"]
        constraints = [
            models.UniqueConstraint(fields=["preview", "index"], name="preview_shard_once")
        ]

    def __str__(self) -> str:
        return f"preview {self.preview_id} shard {self.index}"
