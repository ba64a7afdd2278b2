"""Webhooks (docs/runtime-contract.md §4): after a release change commits, POST it to the runtimes.

Deliveries are an outbox: the release service writes one `WebhookDelivery` per registered
webhook in its own transaction, and schedules the Celery task after commit. The task signs
the stored body, POSTs it and records every try (`WebhookAttempt`). A non-2xx answer or a
timeout is retried with exponential backoff, at most `MAX_TRIES` tries in all.

Signing (docs/runtime-api.md §4) follows Standard Webhooks: `webhook-id` (the delivery id, the
same on every try, so receivers can de-duplicate), `webhook-timestamp` (this try's time) and
`webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, so a captured delivery
replayed under another id or later than the receivers' tolerance does not verify. Until
`settings.WEBHOOK_LEGACY_HEADERS_UNTIL` (2027-06-01), unless an operator stops them sooner
(`WEBHOOK_LEGACY_HEADERS=false`), the old headers (`X-Console-Signature` over the body alone)
go along for receivers not updated yet; after it, never (`legacy_headers_until`).

Targets (docs/runtime-api.md §4): the console calls public addresses only, checked at
registration and again at every try; the check, the pinned connection and the deadline are
`strategies.delivery.transport`'s. A redirect is not followed: a 3xx is a failed try.

A try holds no row lock and no transaction while it POSTs: it claims the next try number in
one short transaction (a conditional UPDATE, so of two concurrent tasks one claims and the
other stops), POSTs, then writes the outcome in a second short transaction.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery import current_app
from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import URLValidator
from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from console.kernel.audit import AuditAction, actor_label, audit_record
from console.kernel.errors import Conflict, NotFound, ValidationFailed
from console.kernel.transactions import service_transaction
from console.kernel.writes import update_or_refuse
from strategies.catalog.models import Environment
from strategies.delivery import transport
from strategies.delivery.models import (
    WEBHOOK_EVENT,
    WEBHOOK_EVENTS,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
)

log = logging.getLogger(__name__)

MAX_TRIES = 5
# A claimed try still "in progress" this long after it started was abandoned (its worker
# stopped): the deadline (transport.TRY_DEADLINE_SECONDS) plus room for the two short
# transactions around the POST.
CLAIM_STALE_AFTER_SECONDS = 60.0
EVENT = WEBHOOK_EVENT
DELIVER_TASK = "strategies.deliver_webhook"
FAN_OUT_TASK = "strategies.deliver_webhooks"  # many deliveries in one message (deliveries_send)
# First retry after this many seconds, then doubling (10, 20, 40, 80). Tests shorten it.
RETRY_BASE_SECONDS = float(os.environ.get("WEBHOOK_RETRY_BASE_SECONDS", "10"))
BUSY = "busy"  # another task holds this try: nothing to do (not a delivery status)
IN_PROGRESS = "in progress"
_ABANDONED = "abandoned: the worker stopped during this try"


def new_webhook_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def legacy_headers_until(timestamp: float) -> datetime | None:
    """When the old headers stop, while a try signed at `timestamp` (Unix seconds) still
    carries them; None once it does not: past `WEBHOOK_LEGACY_HEADERS_UNTIL`, or switched off
    by the operator (`WEBHOOK_LEGACY_HEADERS`). The one place that decides (the tries, the
    webhooks page)."""
    until = settings.WEBHOOK_LEGACY_HEADERS_UNTIL
    if settings.WEBHOOK_LEGACY_HEADERS and timestamp < until.timestamp():
        return until
    return None


def signature(secret: str, body: bytes) -> str:
    """The old `X-Console-Signature`: the body alone (replayable; sent during the transition)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def signature_v1(secret: str, delivery_id: str, timestamp: int, body: bytes) -> str:
    """`webhook-signature`: `v1,<base64 HMAC-SHA256 of "id.timestamp.body">` (Standard
    Webhooks; the key is the secret's UTF-8 bytes)."""
    signed = f"{delivery_id}.{timestamp}.".encode() + body
    return (
        "v1,"
        + base64.b64encode(hmac.new(secret.encode(), signed, hashlib.sha256).digest()).decode()
    )


def signed_headers(secret: str, delivery_id: str, event: str, body: bytes, timestamp: int):
    """The headers that sign one try of a delivery, the old ones only while they go along."""
    headers = {
        "webhook-id": delivery_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature_v1(secret, delivery_id, timestamp, body),
    }
    if legacy_headers_until(timestamp) is not None:
        headers["X-Console-Event"] = event
        headers["X-Console-Delivery"] = delivery_id
        headers["X-Console-Signature"] = signature(secret, body)
    return headers


def retry_delay(tries_done: int) -> float:
    """Seconds to wait before the next try, after `tries_done` failed ones (exponential)."""
    return RETRY_BASE_SECONDS * (2 ** (tries_done - 1))


@dataclass(frozen=True)
class TryOutcome:
    ok: bool
    status_code: int | None = None
    error: str = ""
    final: bool = False  # no later try can do better (a refused target)
    duration_ms: int = 0


def post_once(delivery: WebhookDelivery) -> TryOutcome:
    """One try: POST the stored body, signed, through the transport (which checks the
    target and keeps the deadline). Touches no database; ok = a 2xx answer in time."""
    body = bytes(delivery.body)
    webhook = delivery.webhook
    clock = time.monotonic()

    def outcome(**fields) -> TryOutcome:
        fields["error"] = fields.get("error", "")[:500]
        return TryOutcome(duration_ms=int((time.monotonic() - clock) * 1000), **fields)

    headers = {
        "Content-Type": "application/json",
        "User-Agent": "context-console-webhooks/1",
        # Signed at each try: its timestamp is this try's, so a retry is not refused as old.
        **signed_headers(
            webhook.secret, str(delivery.delivery_id), delivery.event, body, int(time.time())
        ),
        "Connection": "close",
    }
    try:
        answer = transport.post(webhook.url, body, headers)
    except transport.TargetRefused as exc:
        log.warning("webhook %s: target refused: %s", webhook.pk, exc)
        return outcome(ok=False, error=f"refused: {exc}", final=True)
    except (transport.TargetUnresolved, transport.PostFailed) as exc:
        return outcome(ok=False, error=str(exc))
    status, location = answer.status, answer.location
    if 300 <= status < 400:
        log.warning("webhook %s: HTTP %s redirect to %r not followed", webhook.pk, status, location)
        return outcome(
            ok=False,
            status_code=status,
            error=f"HTTP {status}: redirect to {location or '(no Location)'} not followed",
        )
    ok = 200 <= status < 300
    return outcome(ok=ok, status_code=status, error="" if ok else f"HTTP {status}")


# --- a try: claim, POST with nothing open, record -------------------------------------------------
def _in_progress(claimant: str) -> str:
    return f"{IN_PROGRESS} (task {claimant or '?'})"


def _delivery_claim(delivery_id: int, claimant: str):
    """Claim the next try in one short transaction: (delivery, attempt) or (status, tries).

    The claim is a conditional UPDATE of the try counter: of two tasks that read the same
    counter one claims, the other finds no row and stops. A try still in progress belongs to
    its task; it is taken over only by the same task (its worker died, the message came
    back) or once it is older than any try can be (`CLAIM_STALE_AFTER_SECONDS`).
    """
    with transaction.atomic():
        delivery = WebhookDelivery.objects.select_related("webhook").filter(pk=delivery_id).first()
        if delivery is None:  # e.g. a message that outlived its database (tests, restores)
            return "missing", 0
        if delivery.status != WebhookDelivery.Status.PENDING:
            return delivery.status, delivery.tries
        current = (
            WebhookAttempt.objects.filter(
                delivery=delivery, number=delivery.tries, error__startswith=IN_PROGRESS
            ).first()
            if delivery.tries
            else None
        )
        if current is not None:
            mine = bool(claimant) and current.error == _in_progress(claimant)
            stale = current.started_at < timezone.now() - timedelta(
                seconds=CLAIM_STALE_AFTER_SECONDS
            )
            if not (mine or stale):
                return BUSY, delivery.tries
        claimed = WebhookDelivery.objects.filter(
            pk=delivery.pk, status=WebhookDelivery.Status.PENDING, tries=delivery.tries
        ).update(tries=F("tries") + 1)
        if not claimed:
            return BUSY, delivery.tries
        if current is not None:
            WebhookAttempt.objects.filter(pk=current.pk, error=current.error).update(
                error=_ABANDONED
            )
        delivery.tries += 1
        attempt = WebhookAttempt.objects.create(
            delivery=delivery,
            number=delivery.tries,
            started_at=timezone.now(),
            error=_in_progress(claimant),
        )
        return delivery, attempt


def _outcome_record(delivery: WebhookDelivery, attempt: WebhookAttempt, outcome: TryOutcome):
    """Write a try's outcome in one short transaction; returns (status, tries)."""
    with transaction.atomic():
        WebhookAttempt.objects.filter(pk=attempt.pk).update(
            status_code=outcome.status_code,
            error=outcome.error,
            ok=outcome.ok,
            duration_ms=outcome.duration_ms,
        )
        pending = WebhookDelivery.objects.filter(
            pk=delivery.pk, status=WebhookDelivery.Status.PENDING
        )
        if outcome.ok:
            pending.update(status=WebhookDelivery.Status.DELIVERED, finished_at=timezone.now())
        elif (
            outcome.final
            or attempt.number >= MAX_TRIES
            or not Webhook.objects.filter(pk=delivery.webhook_id, deleted_at__isnull=True).exists()
        ):
            pending.filter(tries=attempt.number).update(
                status=WebhookDelivery.Status.FAILED, finished_at=timezone.now()
            )
        status, tries = WebhookDelivery.objects.values_list("status", "tries").get(pk=delivery.pk)
    if status == WebhookDelivery.Status.PENDING and tries != attempt.number:
        return BUSY, tries  # a later try was claimed meanwhile: its task goes on
    return status, tries


def delivery_try(*, delivery_id: int, claimant: str = "") -> tuple[str, int]:
    """Make the next try of a delivery; returns (status, tries so far). `claimant` names the
    task (its id): a redelivered message may take over its own unfinished try.

    Status `BUSY`: another task holds the try (or made a later one); the caller stops — that
    task schedules whatever comes next. No lock and no transaction is open during the POST.
    """
    claim = _delivery_claim(delivery_id, claimant)
    if isinstance(claim[0], str):
        return claim
    delivery, attempt = claim
    outcome = post_once(delivery)
    return _outcome_record(delivery, attempt, outcome)


def deliveries_create(*, environment, payload: bytes, event: str = WEBHOOK_EVENT) -> list[int]:
    """Outbox rows for every active webhook of the environment that hears `event` (its
    `events`; webhooks registered before events existed hear release.changed only), inside
    the caller's transaction; the caller schedules `deliveries_send` after commit."""
    return deliveries_create_many([(environment.pk, event, payload)])[0]


def deliveries_create_many(items: list[tuple[int, str, bytes]]) -> list[list[int]]:
    """`deliveries_create` for many bodies at once — (environment id, event, payload) each:
    one read of the webhooks, one INSERT of every outbox row. Returns each item's row ids,
    in order; the caller schedules one `deliveries_send` of them all after commit."""
    if not items:
        return []
    hooks = Webhook.objects.filter(
        environment_id__in={environment_id for environment_id, _, _ in items},
        deleted_at__isnull=True,
    ).only("pk", "environment_id", "events")
    hearing: dict[tuple[int, str], list] = {}
    for hook in hooks.order_by("pk"):
        for event in hook.events:
            hearing.setdefault((hook.environment_id, event), []).append(hook)
    rows, owner = [], []
    for i, (environment_id, event, payload) in enumerate(items):
        for hook in hearing.get((environment_id, event), ()):
            rows.append(WebhookDelivery(webhook=hook, event=event, body=payload))
            owner.append(i)
    out: list[list[int]] = [[] for _ in items]
    for i, row in zip(owner, WebhookDelivery.objects.bulk_create(rows), strict=True):
        out[i].append(row.pk)
    return out


def deliveries_send(delivery_ids: list[int]) -> None:
    """Queue one try of each delivery (the task is named, so this module needs no task import).
    Many at once (an alert tick firing dozens) go as one message, `FAN_OUT_TASK`, which a
    worker turns into one try message each: the sender pays one broker round trip, not one
    per delivery. A lost message is queued again by the relay (the outbox row is the truth)."""
    if len(delivery_ids) > 1:
        current_app.send_task(FAN_OUT_TASK, args=(list(delivery_ids),), queue=_queue())
    else:
        deliveries_send_each(delivery_ids)


def deliveries_send_each(delivery_ids: list[int]) -> None:
    """One try message per delivery, through one producer (one broker connection)."""
    queue = _queue()
    with current_app.producer_or_acquire() as producer:
        for delivery_id in delivery_ids:
            current_app.send_task(DELIVER_TASK, args=(delivery_id,), queue=queue, producer=producer)


def _queue() -> str | None:
    # The queue is read at send time so a test can point it at its own worker.
    return getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", None)


# A pending delivery whose next try is this much overdue lost its message; the relay queues it.
RELAY_GRACE = timedelta(minutes=2)


def deliveries_relay(*, grace: timedelta = RELAY_GRACE, send=deliveries_send) -> int:
    """Queue again every pending delivery whose next try is overdue by more than `grace`:
    its message was lost (the broker failed at commit or at a retry, a worker died holding
    it). The outbox row is the truth; a message that turns up late finds the try claimed or
    done (see `_delivery_claim`). Returns how many were queued. Run by beat."""
    now = timezone.now()
    due = []
    pending = (
        WebhookDelivery.objects.filter(status=WebhookDelivery.Status.PENDING)
        .annotate(last_try=Max("attempts__started_at"))
        .order_by("pk")
        .values_list("pk", "tries", "created_at", "last_try")
    )
    for pk, tries, created_at, last_try in pending:
        if tries == 0 or last_try is None:
            expected = created_at  # queued after commit: runs at once
        else:  # the retry after the last try, or the takeover of a try whose worker died
            wait = (
                max(retry_delay(tries), CLAIM_STALE_AFTER_SECONDS) + transport.TRY_DEADLINE_SECONDS
            )
            expected = last_try + timedelta(seconds=wait)
        if expected + grace <= now:
            due.append(pk)
    if due:
        log.warning("relaying %d webhook deliveries whose message was lost", len(due))
        send(due)
    return len(due)


# --- registering and removing webhooks -------------------------------------------------------
def _url_refused(message: str, code: str, detail: str) -> ValidationFailed:
    return ValidationFailed(message, details=[{"path": "url", "code": code, "message": detail}])


def webhook_url_check(url: str) -> None:
    """Refuse (ValidationFailed on `url`) what the console would not deliver to: not an
    http(s) URL, a host that does not resolve, or an internal address (see the module)."""
    try:
        URLValidator(schemes=["http", "https"])(url)
    except DjangoValidationError as exc:
        raise _url_refused(
            "Enter a full http(s) URL, e.g. https://runtime.example.com/hooks/console.",
            "invalid",
            "not an http(s) URL",
        ) from exc
    try:
        transport.target_resolve(url)
    except transport.TargetRefused as exc:
        raise _url_refused(
            f"The console does not send webhooks to internal addresses: {exc}. Use the "
            "receiver's public address (on-premise receivers: an operator can allow private "
            "addresses with WEBHOOK_ALLOW_PRIVATE_TARGETS=true).",
            "internal_address",
            str(exc),
        ) from exc
    except transport.TargetUnresolved as exc:
        raise _url_refused(
            f"The console cannot resolve this URL's host: {exc}. Check the name, or register "
            "the webhook once it resolves.",
            "unresolvable",
            str(exc),
        ) from exc


def webhook_events_clean(events) -> list[str]:
    """The events a webhook hears, in WEBHOOK_EVENTS order: at least one, each known."""
    if events is None:
        return [WEBHOOK_EVENT]
    chosen = list(events) if isinstance(events, list | tuple) else None
    unknown = [e for e in chosen or [] if e not in WEBHOOK_EVENTS]
    if not chosen or unknown:
        raise ValidationFailed(
            "Choose at least one event among " + ", ".join(WEBHOOK_EVENTS) + ".",
            details=[
                {
                    "path": "events",
                    "code": "invalid_choice" if unknown else "required",
                    "message": f"unknown: {', '.join(map(str, unknown))}"
                    if unknown
                    else "at least one event",
                }
            ],
        )
    return [e for e in WEBHOOK_EVENTS if e in chosen]


def webhook_create(
    *, environment: Environment, url: str, description: str = "", events=None, actor
):
    """Register a URL for some events (release.changed by default); returns (webhook,
    secret). The secret is shown once. The host is resolved and checked before the
    transaction (no lookup while it is open). The same URL twice on one environment is 409."""
    webhook_url_check(url)
    events = webhook_events_clean(events)
    return _webhook_store(
        environment=environment, url=url, description=description, events=events, actor=actor
    )


@service_transaction
def _webhook_store(*, environment: Environment, url: str, description: str, events, actor):
    # Registrations on one environment take turns, so two of the same URL cannot both pass.
    Environment.objects.select_for_update().filter(pk=environment.pk).first()
    existing = Webhook.objects.filter(
        environment=environment, url=url, deleted_at__isnull=True
    ).first()
    if existing is not None:
        raise Conflict(
            f"{url} is already registered for {environment.key}.",
            code="webhook_exists",
            extra={"current": {"id": existing.pk, "events": existing.events}},
        )
    secret = new_webhook_secret()
    hook = Webhook.objects.create(
        environment=environment,
        url=url,
        description=description[:200],
        events=events,
        secret=secret,
        created_by=actor_label(actor),
    )
    audit_record(
        actor=actor,
        action=AuditAction.WEBHOOK_CREATE,
        target=hook,
        after={
            "environment": environment.key,
            "url": url,
            "description": description,
            "events": events,
        },
    )
    return hook, secret


@service_transaction(durable=True)
def webhook_delete(*, webhook, actor) -> None:
    """Stop deliveries; the webhook and its delivery log stay for the record."""
    update_or_refuse(
        Webhook.objects.filter(pk=webhook.pk, deleted_at__isnull=True),
        lambda: NotFound("This webhook does not exist or was already removed."),
        deleted_at=timezone.now(),
    )
    audit_record(
        actor=actor,
        action=AuditAction.WEBHOOK_DELETE,
        target=webhook,
        before={"environment": webhook.environment.key, "url": webhook.url},
    )
