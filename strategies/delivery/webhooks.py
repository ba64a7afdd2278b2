"""Webhooks (docs/runtime-contract.md §4): after a release change commits, POST it to the runtimes.

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

from celery import current_app
from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import URLValidator
from django.db import transaction
from django.utils import timezone

from console.audit import actor_label, audit_record
from console.errors import NotFound, ValidationFailed
from console.policy import service_transaction
from console.writes import update_or_refuse
from strategies.catalog.models import Environment
from strategies.delivery.models import WEBHOOK_EVENT, Webhook, WebhookAttempt, WebhookDelivery

MAX_TRIES = 5
TIMEOUT_SECONDS = 5
EVENT = WEBHOOK_EVENT
DELIVER_TASK = "strategies.deliver_webhook"
# First retry after this many seconds, then doubling (10, 20, 40, 80). Tests shorten it.
RETRY_BASE_SECONDS = float(os.environ.get("WEBHOOK_RETRY_BASE_SECONDS", "10"))


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
    """Queue one try of each delivery (the task is named, so this module needs no task import)."""
    # The queue is read at send time so a test can point it at its own worker.
    queue = getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", None)
    for delivery_id in delivery_ids:
        current_app.send_task(DELIVER_TASK, args=(delivery_id,), queue=queue)


# --- registering and removing webhooks -------------------------------------------------------
@service_transaction
def webhook_create(*, environment: Environment, url: str, description: str = "", actor):
    """Register a URL; returns (webhook, secret). The secret is shown once."""
    try:
        URLValidator(schemes=["http", "https"])(url)
    except DjangoValidationError as exc:
        raise ValidationFailed(
            "Enter a full http(s) URL, e.g. https://runtime.example.com/hooks/console.",
            details=[{"path": "url", "code": "invalid", "message": "not an http(s) URL"}],
        ) from exc
    secret = new_webhook_secret()
    hook = Webhook.objects.create(
        environment=environment,
        url=url,
        description=description[:200],
        secret=secret,
        created_by=actor_label(actor),
    )
    audit_record(
        actor=actor,
        action="webhook.create",
        target=hook,
        after={"environment": environment.key, "url": url, "description": description},
    )
    return hook, secret


@service_transaction
def webhook_delete(*, webhook, actor) -> None:
    """Stop deliveries; the webhook and its delivery log stay for the record."""
    update_or_refuse(
        Webhook.objects.filter(pk=webhook.pk, deleted_at__isnull=True),
        lambda: NotFound("This webhook does not exist or was already removed."),
        deleted_at=timezone.now(),
    )
    audit_record(
        actor=actor,
        action="webhook.delete",
        target=webhook,
        before={"environment": webhook.environment.key, "url": webhook.url},
    )
