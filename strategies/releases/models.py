"""Releases (environment E serves version V of document D), their history and approval
requests."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

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
    # Set by every move (`_release_move`): when what is live went live.
    updated_at = models.DateTimeField(default=timezone.now)
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
    # Went live inside a freeze window or outside the change hours, let through by a freeze
    # break-glass (FreezeBreakGlass): the history says so beside the version.
    # db_default: a writer that does not know the column yet (an older web process during a
    # rolling deploy, a raw INSERT) still writes a row, marked false.
    freeze_break_glass = models.BooleanField(default=False, db_default=False)
    # Now, unless a recorded history is being loaded (the demo's releases of days ago): the
    # service appends it in time order (`_release_move`'s `at`); the row stays append-only.
    occurred_at = models.DateTimeField(default=timezone.now)

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


class RolloutQuerySet(models.QuerySet):
    def active(self):
        return self.filter(state__in=Rollout.ACTIVE_STATES)

    def watching(self):
        """Completed rollouts whose paired watch has not ended (the beat ends it on time)."""
        return self.filter(
            state=Rollout.State.COMPLETED, watch_until__isnull=False, watch_ended_at__isnull=True
        )


class Rollout(models.Model):
    """A staged rollout of a new version of a strategy in an environment (issue 23): step by
    step a growing share of units is served `version` instead of `control_version` (what was
    live when it started), the other arm running as shadow on the same request, while the
    guards watch. It ends completed (the new version published live), rolled back (by a
    guard), or stopped (by a person, or by a manual publish or rollback there). At most one is
    active per document × environment. `revision` grows with every change and counts in the
    config ETag (rows are never deleted, so the sum never goes down)."""

    class State(models.TextChoices):
        AWAITING_APPROVAL = "awaiting_approval", "Waits for approval"
        RUNNING = "running", "Running"
        PAUSED = "paused", "Paused"
        COMPLETED = "completed", "Completed"
        ROLLED_BACK = "rolled_back", "Rolled back"
        STOPPED = "stopped", "Stopped"

    class Unit(models.TextChoices):
        TASK = "task", "Task"
        PRINCIPAL = "principal", "Principal"

    ACTIVE_STATES = (State.AWAITING_APPROVAL, State.RUNNING, State.PAUSED)
    # What the runtime applies: a paused rollout holds its share (Argo's pause).
    SERVED_STATES = (State.RUNNING, State.PAUSED)

    key = models.CharField(max_length=40, unique=True, help_text="Public id, e.g. ro-7.")
    document = models.ForeignKey(Document, on_delete=models.PROTECT, related_name="rollouts")
    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="rollouts")
    version = models.ForeignKey(
        Version, on_delete=models.PROTECT, related_name="rollouts", help_text="The new version."
    )
    control_version = models.ForeignKey(
        Version, on_delete=models.PROTECT, related_name="+", help_text="Live when it started."
    )
    plan_name = models.CharField(max_length=20, default="staged")
    plan = models.JSONField(help_text="Steps: [{share, bake_seconds}].")
    plan_hash = models.CharField(max_length=64)
    unit = models.CharField(max_length=20, choices=Unit.choices, default=Unit.TASK)
    state = models.CharField(max_length=20, choices=State.choices)
    step = models.PositiveSmallIntegerField(default=0)
    step_started_at = models.DateTimeField(null=True, blank=True)
    step_extended = models.BooleanField(default=False)
    guards = models.JSONField(default=list, blank=True, help_text="The last guard evaluation.")
    guards_at = models.DateTimeField(null=True, blank=True)
    evidence = models.JSONField(
        default=dict, blank=True, help_text="What a guard saw when it paused or ended it."
    )
    reason = models.TextField(blank=True, help_text="Why it started.")
    end_reason = models.TextField(blank=True, help_text="Why it paused or ended.")
    started_by = models.CharField(max_length=200)
    started_at = models.DateTimeField(auto_now_add=True)
    ended_by = models.CharField(max_length=200, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    revision = models.PositiveIntegerField(default=1)
    # Its steps and actions as the page's timeline shows them: [{at, action, actor, step,
    # reason}] (the audit log is the record; this is its readable summary).
    log = models.JSONField(default=list, blank=True)
    # The paired watch after completion (issue 23 item 4): until `watch_until` a share of
    # units still runs the previous version (control_version) as shadow beside the new, live
    # one; the paired guard's breach then warns (`watch_warning`: its evidence) and offers a
    # one-click rollback, never rolls back by itself. Ended early by a manual publish or
    # rollback, by a new rollout there, or on time by the beat (`watch_ended_at`).
    watch_until = models.DateTimeField(null=True, blank=True)
    watch_share = models.FloatField(default=0.0)
    watch_ended_at = models.DateTimeField(null=True, blank=True)
    watch_warning = models.JSONField(
        default=dict, blank=True, help_text="The paired guard's breach during the watch."
    )
    updated_at = models.DateTimeField(auto_now=True)

    objects = RolloutQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["document", "environment"],
                condition=Q(state__in=["awaiting_approval", "running", "paused"]),
                name="rollout_one_active_per_target",
            ),
            models.CheckConstraint(
                condition=Q(state__in=["awaiting_approval", "running", "paused"])
                | Q(ended_at__isnull=False),
                name="rollout_ended_when_finished",
            ),
            models.CheckConstraint(
                condition=Q(watch_until__isnull=True)
                | Q(state="completed", watch_share__gt=0, watch_share__lte=1),
                name="rollout_watch_after_completion",
            ),
        ]

    def __str__(self) -> str:
        return (
            f"{self.key}: {self.document} v{self.version.number} in {self.environment.key} "
            f"({self.state})"
        )

    @property
    def active(self) -> bool:
        return self.state in self.ACTIVE_STATES

    @property
    def current_step(self) -> dict:
        return self.plan[min(self.step, len(self.plan) - 1)]

    @property
    def share(self) -> float:
        return float(self.current_step["share"])

    @property
    def bake_seconds(self) -> int:
        """This step's bake, doubled once it was extended for lack of data."""
        bake = int(self.current_step["bake_seconds"])
        return bake * 2 if self.step_extended else bake

    @property
    def is_last_step(self) -> bool:
        return self.step >= len(self.plan) - 1

    @property
    def watching(self) -> bool:
        """In its paired watch: completed, a watch set and not ended yet."""
        return (
            self.state == self.State.COMPLETED
            and self.watch_until is not None
            and self.watch_ended_at is None
        )

    @property
    def watch_step(self) -> int:
        """The step the watch's traces report: one past the plan's last (its own counters)."""
        return len(self.plan)


class ApprovalRequest(models.Model):
    """A publish to a protected environment (or a rollback where the revert policy says so)
    waiting for a second person. Bound to the version's content hash and the release
    revision: any change to what would go live voids it."""

    class Kind(models.TextChoices):
        PUBLISH = "publish", "Publish"
        ROLLBACK = "rollback", "Rollback"  # where the environment's revert policy asks for one
        ROLLOUT = "rollout", "Staged rollout"  # the whole plan, approved once (issue 23)

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
    # A staged rollout's request: the plan it approves (bound by the rollout's plan_hash).
    rollout = models.ForeignKey(
        Rollout, null=True, blank=True, on_delete=models.PROTECT, related_name="approvals"
    )
    content_hash = models.CharField(max_length=64)
    base_revision = models.PositiveIntegerField(
        default=0, help_text="Release revision when requested (0: none)."
    )
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    reason = models.TextField(blank=True)
    requested_at = models.DateTimeField(default=timezone.now)
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


class ChangeSystem(models.Model):
    """The external change-management system an environment asks before a go-live (issue 34
    item 1, docs/change-approvals.md): where the console POSTs its change requests, where it
    polls their status, the secret that signs both ways, and how long an approval stays usable.
    While `requires_change_record` is on, a publish, an approval's decision and a rollout's
    start there need an approved, unexpired ChangeRecord of the same content (the go-live
    judgement asks it)."""

    environment = models.OneToOneField(
        Environment, on_delete=models.PROTECT, related_name="change_system"
    )
    requires_change_record = models.BooleanField(
        default=False, help_text="A go-live here needs an approved external change record."
    )
    url = models.URLField(max_length=500, help_text="Where change requests are POSTed.")
    # `{id}` and `{change_number}` are filled in; empty: the system only calls back.
    status_url_template = models.CharField(max_length=500, blank=True)
    # Signs the requests and polls, and verifies the callbacks; shown once, never again.
    secret = models.CharField(max_length=100)
    validity_hours = models.PositiveIntegerField(
        default=72, help_text="Hours an approval stays usable after it is given."
    )
    updated_by = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(validity_hours__gte=1), name="change_system_validity_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.environment.key} change system → {self.url}"


class ChangeRecord(models.Model):
    """One change request sent to an environment's change system for one content going live
    there, and its answer. Bound to the content hash and, once approved, to a validity window:
    only an approved, unexpired record of the same content lets the go-live judgement pass.
    A system that never answers leaves it waiting (with its delivery tries), never approved."""

    class State(models.TextChoices):
        WAITING = "waiting", "Waiting for the change system"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        EXPIRED = "expired", "Expired"
        FAILED = "failed", "Could not be sent"

    class Path(models.TextChoices):
        PUBLISH = "publish", "Publish"
        ROLLOUT_START = "rollout_start", "Staged rollout start"
        PROMOTION = "promotion", "Promotion"
        IMPORT = "import", "Import"

    DECIDED_STATES = (State.APPROVED, State.REJECTED, State.EXPIRED, State.FAILED)

    environment = models.ForeignKey(
        Environment, on_delete=models.PROTECT, related_name="change_records"
    )
    document = models.ForeignKey(Document, on_delete=models.PROTECT, related_name="change_records")
    version = models.ForeignKey(Version, on_delete=models.PROTECT, related_name="change_records")
    content_hash = models.CharField(max_length=64)
    path = models.CharField(max_length=20, choices=Path.choices, default=Path.PUBLISH)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+"
    )
    requested_by_label = models.CharField(max_length=200, blank=True)
    reason = models.TextField(blank=True)
    # The protected environment's approval request of the same go-live: both must hold.
    approval = models.ForeignKey(
        ApprovalRequest,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="change_records",
    )
    # What the go-live waiting on this record does once approved (e.g. a rollout's plan).
    go_live = models.JSONField(default=dict, blank=True)
    diff_summary = models.JSONField(default=dict, blank=True)
    preview_summary = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=20, choices=State.choices, default=State.WAITING)
    change_number = models.CharField(max_length=100, blank=True)
    comment = models.TextField(blank=True)
    decided_by = models.CharField(max_length=20, blank=True, help_text="callback or poll")
    decided_at = models.DateTimeField(null=True, blank=True)
    valid_until = models.DateTimeField(null=True, blank=True)
    # The outbox: the request is sent after commit and retried with backoff.
    tries = models.PositiveSmallIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    next_try_at = models.DateTimeField(null=True, blank=True)
    polled_at = models.DateTimeField(null=True, blank=True)
    # The waiting go-live, asked again at the approval: what it said when it could not happen.
    go_live_refused = models.TextField(blank=True)
    # The release event that went live on this record (its change number in the history).
    release_event = models.ForeignKey(
        ReleaseEvent, null=True, blank=True, on_delete=models.PROTECT, related_name="change_records"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # One request waits per content × environment: asking again shows the same one.
            models.UniqueConstraint(
                fields=["environment", "document", "content_hash"],
                condition=Q(state="waiting"),
                name="change_record_one_waiting_per_content",
            ),
            models.CheckConstraint(
                condition=~Q(state="approved") | Q(valid_until__isnull=False),
                name="change_record_approved_has_window",
            ),
        ]
        indexes = [models.Index(fields=["environment", "content_hash", "state"])]

    def __str__(self) -> str:
        number = f" {self.change_number}" if self.change_number else ""
        return f"change record #{self.pk}{number} ({self.state})"

    @property
    def public_id(self) -> str:
        return f"cr-{self.pk}"


# --- when changes may go live (issue 34 item 2, docs/schedules-and-freezes.md) -----------------
class FreezeWindow(models.Model):
    """Nothing goes live in `environment` from `starts_at` to `ends_at` except a rollback (the
    go-live judgement's `frozen`). Several per environment; they may overlap."""

    environment = models.ForeignKey(
        Environment, on_delete=models.PROTECT, related_name="freeze_windows"
    )
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    reason = models.TextField()
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["starts_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(ends_at__gt=F("starts_at")), name="freeze_window_ends_after_start"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.environment.key} frozen {self.starts_at:%Y-%m-%d %H:%M} → {self.ends_at:%Y-%m-%d %H:%M}"


class ChangeHours(models.Model):
    """When changes may go live in `environment`: on `days` (0 Monday … 6 Sunday) from
    `opens_at` to `closes_at`, local time in `time_zone` (IANA). `closes_at` at or before
    `opens_at` runs past midnight into the next day. No row, or no days: any time."""

    environment = models.OneToOneField(
        Environment, on_delete=models.PROTECT, related_name="change_hours"
    )
    days = ArrayField(models.PositiveSmallIntegerField(), default=list, blank=True)
    opens_at = models.TimeField()
    closes_at = models.TimeField()
    time_zone = models.CharField(max_length=64, default="UTC")
    updated_by = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.environment.key} change hours"


class FreezeBreakGlass(models.Model):
    """One person with the right lets go-lives through a freeze or outside change hours in
    `environment` until `ends_at` (or until ended by hand), saying why: audited, and what goes
    live meanwhile is marked on the release history (`ReleaseEvent.freeze_break_glass`)."""

    environment = models.ForeignKey(
        Environment, on_delete=models.PROTECT, related_name="freeze_break_glasses"
    )
    reason = models.TextField()
    started_by = models.CharField(max_length=200)
    started_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(ends_at__gt=F("started_at")), name="freeze_break_glass_ends_after_start"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.environment.key} freeze break-glass by {self.started_by}"


class ScheduledGoLive(models.Model):
    """A publish or a rollout start asked for a later time (`run_at`). At that time the beat
    task claims it and asks the go-live judgement again, as the requester: it goes live (or,
    protected, becomes an approval request / a plan waiting for approval) through the normal
    service, or ends refused with the reason. Both are audited and notified."""

    class Kind(models.TextChoices):
        PUBLISH = "publish", "Publish"
        ROLLOUT_START = "rollout_start", "Staged rollout start"

    class State(models.TextChoices):
        SCHEDULED = "scheduled", "Scheduled"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        REFUSED = "refused", "Refused"
        CANCELLED = "cancelled", "Cancelled"

    OPEN_STATES = (State.SCHEDULED, State.RUNNING)

    environment = models.ForeignKey(
        Environment, on_delete=models.PROTECT, related_name="scheduled_go_lives"
    )
    document = models.ForeignKey(
        Document, on_delete=models.PROTECT, related_name="scheduled_go_lives"
    )
    version = models.ForeignKey(Version, on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.PUBLISH)
    # A rollout start's plan (a template's name or its steps) and unit.
    plan = models.JSONField(null=True, blank=True)
    unit = models.CharField(max_length=20, blank=True)
    reason = models.TextField(blank=True)
    run_at = models.DateTimeField()
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    state = models.CharField(max_length=20, choices=State.choices, default=State.SCHEDULED)
    # The claim of the worker running it (a new one when a claim is taken over after
    # SCHEDULES_CLAIM_TIMEOUT_SECONDS): only the holder of the current claim may end it.
    claim = models.CharField(max_length=64, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome_code = models.CharField(max_length=50, blank=True)
    outcome = models.TextField(blank=True)
    cancelled_by = models.CharField(max_length=200, blank=True)
    # What it produced: the release event, the approval request or the rollout.
    release_event = models.ForeignKey(
        ReleaseEvent, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    approval = models.ForeignKey(
        "ApprovalRequest", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    rollout = models.ForeignKey(
        Rollout, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["run_at", "id"]
        indexes = [
            models.Index(
                fields=["run_at"],
                condition=Q(state__in=["scheduled", "running"]),
                name="scheduled_golive_open_run_at",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.document} v{self.version.number} → {self.environment.key} at {self.run_at:%Y-%m-%d %H:%M} ({self.state})"
