"""Webhooks (RUNTIME_API §4): after a release change commits, POST it to the runtimes.

Deliveries are an outbox: the release service writes one `WebhookDelivery` per registered
webhook in its own transaction, and schedules the Celery task after commit. The task signs
the stored body, POSTs it and records every try (`WebhookAttempt`). A non-2xx answer or a
timeout is retried with exponential backoff, at most `MAX_TRIES` tries in all. The delivery
id travels as `X-Console-Delivery`: the same on every try, so receivers can de-duplicate.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
import urllib.error
import urllib.request
import uuid

from django.db import models
from django.utils import timezone

MAX_TRIES = 5
TIMEOUT_SECONDS = 5
EVENT = "release.changed"
# First retry after this many seconds, then doubling (10, 20, 40, 80). Tests shorten it.
RETRY_BASE_SECONDS = float(os.environ.get("WEBHOOK_RETRY_BASE_SECONDS", "10"))


class Webhook(models.Model):
    """A runtime's URL that hears about release changes in one environment."""

    environment = models.ForeignKey(
        "strategies.Environment", on_delete=models.PROTECT, related_name="+"
    )
    url = models.URLField(max_length=500)
    description = models.CharField(max_length=200, blank=True)
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
    event = models.CharField(max_length=50, default=EVENT)
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
        """The change it announces, e.g. "after_sales_consultation v2 → v3 (publish)"."""
        import json

        event = json.loads(self.body_text)
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


def new_webhook_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def retry_delay(tries_done: int) -> float:
    """Seconds to wait before the next try, after `tries_done` failed ones (exponential)."""
    return RETRY_BASE_SECONDS * (2 ** (tries_done - 1))


def post_once(delivery: WebhookDelivery) -> WebhookAttempt:
    """One try: POST the stored body, record the attempt (ok = a 2xx answer in time)."""
    body = bytes(delivery.body)
    webhook = delivery.webhook
    # webhook_create admits only http(s) URLs.
    request = urllib.request.Request(  # noqa: S310
        webhook.url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "context-console-webhooks/1",
            "X-Console-Event": delivery.event,
            "X-Console-Delivery": str(delivery.delivery_id),
            "X-Console-Signature": signature(webhook.secret, body),
        },
    )
    started, clock = timezone.now(), time.monotonic()
    status_code, error = None, ""
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310
            status_code = response.status
    except urllib.error.HTTPError as exc:
        status_code, error = exc.code, f"HTTP {exc.code}"
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        error = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"[:500]
    return WebhookAttempt(
        delivery=delivery,
        number=delivery.tries + 1,
        started_at=started,
        duration_ms=int((time.monotonic() - clock) * 1000),
        status_code=status_code,
        error=error,
        ok=status_code is not None and 200 <= status_code < 300,
    )


def delivery_try(*, delivery_id: int) -> tuple[str, int]:
    """Make the next try of a delivery; returns (status, tries so far).

    The row lock is held during the POST so a duplicate task (a redelivered message) waits
    and then sees the outcome instead of posting twice.
    """
    from django.db import transaction

    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update(of=("self",))
            .select_related("webhook")
            .filter(pk=delivery_id)
            .first()
        )
        if delivery is None:  # e.g. a message that outlived its database (tests, restores)
            return "missing", 0
        if delivery.status != WebhookDelivery.Status.PENDING:
            return delivery.status, delivery.tries
        attempt = post_once(delivery)
        attempt.save()
        delivery.tries = attempt.number
        if attempt.ok:
            delivery.status = WebhookDelivery.Status.DELIVERED
        elif delivery.tries >= MAX_TRIES or not delivery.webhook.is_active:
            delivery.status = WebhookDelivery.Status.FAILED
        if delivery.status != WebhookDelivery.Status.PENDING:
            delivery.finished_at = timezone.now()
        delivery.save(update_fields=["tries", "status", "finished_at"])
        return delivery.status, delivery.tries


def deliveries_create(*, environment, payload: bytes) -> list[int]:
    """Outbox rows for every active webhook of the environment (inside the caller's
    transaction); the caller schedules `deliveries_send` after commit."""
    hooks = Webhook.objects.filter(environment=environment, deleted_at__isnull=True)
    rows = WebhookDelivery.objects.bulk_create(
        [WebhookDelivery(webhook=hook, body=payload) for hook in hooks]
    )
    return [row.pk for row in rows]


def deliveries_send(delivery_ids: list[int]) -> None:
    from django.conf import settings

    from strategies.tasks import deliver_webhook

    # The queue is read at send time so a test can point it at its own worker.
    queue = getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", None)
    for delivery_id in delivery_ids:
        deliver_webhook.apply_async((delivery_id,), queue=queue)
