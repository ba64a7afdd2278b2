"""What releases deliver to runtimes: the rendered config payload each one fetches, and the
webhooks (with their delivery log) that tell them a release changed."""

from __future__ import annotations

import json
import uuid

from django.contrib.postgres.fields import ArrayField
from django.db import models

WEBHOOK_EVENT = "release.changed"
APPROVAL_REQUESTED_EVENT = "approval.requested"
# A shadow started or stopped: the payload's `shadow` changed, nothing users see did.
SHADOW_CHANGED_EVENT = "shadow.changed"
# A standing alert on context health fired (or rose a level) / resolved (traces.alerts).
ALERT_FIRED_EVENT = "alert.fired"
ALERT_RESOLVED_EVENT = "alert.resolved"
# A go-live scheduled for a time ran: went live (or asked for approval), or was refused.
SCHEDULE_ENDED_EVENT = "schedule.ended"
WEBHOOK_EVENTS = (
    WEBHOOK_EVENT,
    APPROVAL_REQUESTED_EVENT,
    SHADOW_CHANGED_EVENT,
    ALERT_FIRED_EVENT,
    ALERT_RESOLVED_EVENT,
    SCHEDULE_ENDED_EVENT,
)


def default_webhook_events() -> list[str]:
    # Migration 0008 names this function (Django keeps a callable default by reference) and
    # filled existing webhooks with it: keep it, and keep release.changed in what it returns.
    return [WEBHOOK_EVENT]


class ConfigPayload(models.Model):
    """The rendered config of one agent in one environment (the durable copy of the cache)."""

    agent = models.ForeignKey("strategies.Agent", on_delete=models.CASCADE, related_name="+")
    environment = models.ForeignKey(
        "strategies.Environment", on_delete=models.CASCADE, related_name="+"
    )
    revision_sum = models.PositiveIntegerField(default=0)
    etag = models.CharField(max_length=40, blank=True)
    body = models.BinaryField(default=b"")
    rendered_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = "strategies"
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "environment"], name="config_payload_unique_target"
            ),
        ]

    def __str__(self) -> str:
        return f"config {self.agent_id}@{self.environment_id} {self.etag}"


class Webhook(models.Model):
    """A runtime's URL that hears about release changes in one environment."""

    environment = models.ForeignKey(
        "strategies.Environment", on_delete=models.PROTECT, related_name="+"
    )
    url = models.URLField(max_length=500)
    description = models.CharField(max_length=200, blank=True)
    events = ArrayField(
        models.CharField(max_length=40),
        default=default_webhook_events,
        help_text="Which events it hears: release.changed (runtimes), approval.requested (chat), "
        "shadow.changed (runtimes that run shadows).",
    )
    # Kept to sign deliveries (HMAC needs it); shown once at creation, never again.
    secret = models.CharField(max_length=100)
    created_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "strategies"
        ordering = ["environment__position", "url"]

    def __str__(self) -> str:
        return f"{self.environment.key} → {self.url}"

    @property
    def is_active(self) -> bool:
        return self.deleted_at is None


class WebhookDelivery(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"

    webhook = models.ForeignKey(Webhook, on_delete=models.PROTECT, related_name="deliveries")
    delivery_id = models.UUIDField(default=uuid.uuid4, unique=True)
    event = models.CharField(max_length=50, default=WEBHOOK_EVENT)
    body = models.BinaryField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    tries = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "strategies"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"delivery {self.delivery_id} ({self.status})"

    @property
    def body_text(self) -> str:
        return bytes(self.body).decode()

    @property
    def summary(self) -> str:
        """The change it announces, e.g. "after_sales_consultation v2 → v3 (publish)", or the
        request it announces."""

        event = json.loads(self.body_text)
        if event.get("event") == APPROVAL_REQUESTED_EVENT:
            return (
                f"{event['agent']} / {event['document']} v{event['version']} → "
                f"{event['environment']} waits for approval ({event['kind']})"
            )
        if event.get("event") in (ALERT_FIRED_EVENT, ALERT_RESOLVED_EVENT):
            state = "resolved" if event["event"] == ALERT_RESOLVED_EVENT else event["level"]
            return f"{event['agent']} / {event['environment']} {event['rule']['name']}: {state}"
        if event.get("event") == SCHEDULE_ENDED_EVENT:
            return (
                f"{event['agent']} / {event['document']} v{event['version']} → "
                f"{event['environment']} scheduled {event['kind']}: {event['state']}"
            )
        if event.get("event") == SHADOW_CHANGED_EVENT:
            return (
                f"{event['agent']} / {event['document']} shadow v{event['version']} "
                f"({event['action']})"
            )
        start = f"v{event['from_version']} → " if event.get("from_version") else ""
        return f"{event['agent']} / {event['document']} {start}v{event['to_version']} ({event['action']})"


class WebhookAttempt(models.Model):
    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveSmallIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField(default=0)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    ok = models.BooleanField(default=False)

    class Meta:
        app_label = "strategies"
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="webhook_attempt_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.delivery_id} try {self.number}"
