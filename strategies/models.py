"""Agents, environments, manifests, documents and their versions.

A document (a task strategy or the agent's context profile) has numbered versions. At most
one version per document is an editable draft; freezing makes it immutable, and a database
trigger (migration 0001) refuses any UPDATE or DELETE of a frozen version.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q


class Agent(models.Model):
    key = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

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
    trace_retention_days = models.PositiveIntegerField(default=30)
    snapshot_retention_days = models.PositiveIntegerField(default=7)

    class Meta:
        ordering = ["position", "key"]

    def __str__(self) -> str:
        return self.key


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


class Document(models.Model):
    class Kind(models.TextChoices):
        STRATEGY = "strategy", "Strategy"
        PROFILE = "profile", "Context profile"

    PROFILE_KEY = "profile"

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="documents")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    key = models.SlugField(
        max_length=100, help_text="Task key for a strategy; 'profile' for the profile."
    )
    name = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent", "kind", "key"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "key"], name="document_unique_key_per_agent"),
            models.CheckConstraint(
                condition=Q(kind="strategy") | Q(key="profile"), name="document_profile_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent.key}/{self.key}"


class Version(models.Model):
    class State(models.TextChoices):
        DRAFT = "draft", "Draft"
        FROZEN = "frozen", "Frozen"

    document = models.ForeignKey(Document, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField()
    state = models.CharField(max_length=10, choices=State.choices, default=State.DRAFT)
    body = models.JSONField()
    content_hash = models.CharField(max_length=64)
    revision = models.PositiveIntegerField(
        default=1, help_text="Draft edit counter for optimistic concurrency."
    )
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    author_label = models.CharField(max_length=200, blank=True)
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    frozen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["document", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["document", "number"], name="version_unique_number"),
            models.UniqueConstraint(
                fields=["document"], condition=Q(state="draft"), name="version_one_open_draft"
            ),
            models.CheckConstraint(
                condition=Q(state="draft", frozen_at__isnull=True)
                | Q(state="frozen", frozen_at__isnull=False),
                name="version_frozen_at_matches_state",
            ),
        ]
        indexes = [models.Index(fields=["document", "state"])]

    def __str__(self) -> str:
        return f"{self.document} v{self.number} ({self.state})"

    @property
    def is_draft(self) -> bool:
        return self.state == self.State.DRAFT


class Release(models.Model):
    """Environment E serves version V of document D. `revision` grows with every change and
    is the condition of every update (publish, approve, rollback): one writer wins."""

    document = models.ForeignKey(Document, on_delete=models.PROTECT, related_name="releases")
    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="releases")
    version = models.ForeignKey(Version, on_delete=models.PROTECT, related_name="releases")
    revision = models.PositiveIntegerField(default=1)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=200, blank=True)

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


class ReleaseEvent(models.Model):
    """Append-only history of a release: every publish, approval applied and rollback."""

    class Action(models.TextChoices):
        PUBLISH = "publish", "Publish"
        APPROVE = "approve", "Approved publish"
        ROLLBACK = "rollback", "Rollback"

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
    occurred_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-occurred_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["release", "revision"], name="release_event_unique_revision"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.release}: {self.action} r{self.revision}"


class ApprovalRequest(models.Model):
    """A publish to a protected environment waiting for a second person. Bound to the
    version's content hash: any change to what would go live voids it."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        VOID = "void", "Void"

    document = models.ForeignKey(
        Document, on_delete=models.PROTECT, related_name="approval_requests"
    )
    environment = models.ForeignKey(
        Environment, on_delete=models.PROTECT, related_name="approval_requests"
    )
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


class RuntimeToken(models.Model):
    """A runtime's credential: one environment, optionally some agents, some capabilities.
    Only the SHA-256 of the secret is stored; the secret is shown once at creation."""

    CAPABILITIES = ("config:read", "manifest:write", "traces:write")
    is_runtime_token = True  # lets the audit log tell a token from a user

    name = models.CharField(max_length=200)
    environment = models.ForeignKey(
        Environment, on_delete=models.PROTECT, related_name="runtime_tokens"
    )
    agents = models.ManyToManyField(
        Agent, blank=True, related_name="runtime_tokens", help_text="Empty: every agent."
    )
    capabilities = ArrayField(models.CharField(max_length=30), default=list)
    prefix = models.CharField(max_length=16, help_text="First characters, to recognise a token.")
    token_hash = models.CharField(max_length=64, unique=True)
    created_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["environment__position", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.environment.key}, {self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


# Models that live beside the code that owns them; imported here so Django always loads them.
from strategies.runtime_config import ConfigPayload  # noqa: E402, F401
from strategies.webhooks import Webhook, WebhookAttempt, WebhookDelivery  # noqa: E402, F401
