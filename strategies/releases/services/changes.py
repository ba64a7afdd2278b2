"""External change approvals (issue 34 item 1, docs/change-approvals.md): an environment may
require a change record from an outside change-management system before a go-live.

The life of a record: asking to go live where one is needed and none is approved creates it
(`_change_record_request`, inside the go-live's transaction) and, after commit, its request
is POSTed to the change system, signed like the webhooks (Standard Webhooks), retried with
backoff (`change_record_send_try`; the beat relays lost messages). The system answers by a
signed callback (`change_callback_receive`) or the console polls its status URL
(`change_records_poll`); both go through `_change_record_decide`, which refuses what does not
fit (another content, decided already, its window passed) and, on approval, lets the waiting
go-live happen IF the go-live judgement, asked again then, allows it. An unanswered record
waits, visibly, and is never approved; approved records expire at the end of their window.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from console.kernel.audit import AuditAction, SystemActor, actor_label, audit_record
from console.kernel.errors import (
    ApplicationError,
    Conflict,
    NotAuthenticated,
    NotFound,
    ValidationFailed,
)
from console.kernel.transactions import service_transaction
from strategies.catalog.models import Environment
from strategies.delivery import transport
from strategies.delivery.webhooks import new_webhook_secret, signature_v1, webhook_url_check
from strategies.releases.models import ApprovalRequest, ChangeRecord, ChangeSystem, ReleaseEvent
from strategies.releases.selectors.changes import change_records_to_poll
from strategies.releases.selectors.refusals import CHANGE_RECORD_REQUIRED
from strategies.releases.services.change_records import (
    CHANGE_REQUEST_EVENT,
    _change_record_request,
    change_record_state,
    change_records_send,
)
from strategies.releases.services.checks import check_approved_go_live
from strategies.releases.services.move import _release_move
from strategies.releases.services.publish import release_publish
from strategies.releases.services.rollout import rollout_start
from strategies.releases.services.state import _current

log = logging.getLogger(__name__)

CALLBACK_STATUSES = ("approved", "rejected")
SIGNATURE_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")
# The system acting on an answer (the audit's actor): named for how the answer came.
_VIA = {
    "callback": SystemActor("change-system:callback"),
    "poll": SystemActor("change-system:poll"),
}


# --- configuring an environment's change system ---------------------------------------------------
def change_system_configure(
    *,
    environment: Environment,
    actor,
    url: str,
    requires_change_record: bool,
    status_url_template: str = "",
    validity_hours: int = 72,
    rotate_secret: bool = False,
) -> tuple[ChangeSystem, str | None]:
    """Set the environment's change system; returns (system, secret). The secret is new (and
    shown once) when the system is first configured or `rotate_secret` asks; otherwise None.
    Both URLs obey the webhooks' target rules (public addresses unless
    WEBHOOK_ALLOW_PRIVATE_TARGETS), checked before the transaction."""
    url = (url or "").strip()
    status_url_template = (status_url_template or "").strip()
    webhook_url_check(url)
    if status_url_template:
        try:
            sample = status_url_template.format(id="cr-1", change_number="CHG0000001")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValidationFailed(
                "The status URL may use {id} and {change_number} only.",
                details=[{"path": "status_url_template", "code": "invalid", "message": str(exc)}],
            ) from exc
        try:
            webhook_url_check(sample)
        except ValidationFailed as exc:
            exc.details = [{**d, "path": "status_url_template"} for d in exc.details]
            raise
    if isinstance(validity_hours, bool) or not isinstance(validity_hours, int):
        validity_hours = -1
    if not 1 <= validity_hours <= 24 * 90:
        raise ValidationFailed(
            "The validity window is a whole number of hours from 1 to 2160 (90 days).",
            details=[{"path": "validity_hours", "code": "invalid", "message": "1 to 2160 hours"}],
        )
    return _change_system_store(
        environment=environment,
        actor=actor,
        url=url,
        requires_change_record=bool(requires_change_record),
        status_url_template=status_url_template,
        validity_hours=validity_hours,
        rotate_secret=rotate_secret,
    )


def change_system_state(system: ChangeSystem | None) -> dict | None:
    if system is None:
        return None
    return {
        "environment": system.environment.key,
        "requires_change_record": system.requires_change_record,
        "url": system.url,
        "status_url_template": system.status_url_template,
        "validity_hours": system.validity_hours,
        "updated_by": system.updated_by,
        "updated_at": system.updated_at.isoformat() if system.updated_at else None,
    }


@service_transaction(durable=True)
def _change_system_store(*, environment, actor, rotate_secret: bool, **fields):
    system = ChangeSystem.objects.select_for_update().filter(environment=environment).first()
    before = change_system_state(system)
    secret = None
    if system is None:
        secret = new_webhook_secret()
        system = ChangeSystem.objects.create(
            environment=environment, secret=secret, updated_by=actor_label(actor), **fields
        )
    else:
        if rotate_secret:
            secret = new_webhook_secret()
            system.secret = secret
        for name, value in fields.items():
            setattr(system, name, value)
        system.updated_by = actor_label(actor)
        system.save()
    environment._change_system_cache = system
    audit_record(
        actor=actor,
        action=AuditAction.CHANGE_SYSTEM_UPDATE,
        target=environment,
        before=before,
        after={**change_system_state(system), "secret": "rotated" if secret else "unchanged"},
    )
    return system, secret


def change_request_body(record: ChangeRecord) -> bytes:
    """The request as the change system reads it (docs/change-approvals.md, "The request")."""
    callback = reverse("api-change-record-callback", args=[record.pk])
    return json.dumps(
        {
            "event": CHANGE_REQUEST_EVENT,
            "id": record.public_id,
            "callback_url": f"{settings.CONSOLE_PUBLIC_URL.rstrip('/')}{callback}",
            "environment": record.environment.key,
            "agent": record.document.agent.key,
            "document": record.document.key,
            "version": record.version.number,
            "content_hash": record.content_hash,
            "path": record.path,
            "requester": record.requested_by_label,
            "reason": record.reason,
            "diff": record.diff_summary,
            "preview": record.preview_summary or None,
            "requested_at": record.created_at.isoformat(),
            "answer_by": record.valid_until.isoformat() if record.valid_until else None,
        },
        sort_keys=True,
    ).encode()


def signed_headers(secret: str, message_id: str, body: bytes, timestamp: int | None = None):
    """Standard Webhooks headers over `body` (a request, a poll's empty body)."""
    timestamp = int(time.time()) if timestamp is None else timestamp
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature_v1(secret, message_id, timestamp, body),
    }


def retry_delay(tries_done: int) -> float:
    return settings.CHANGE_RECORD_RETRY_BASE_SECONDS * (2 ** max(tries_done - 1, 0))


def change_record_send_try(*, record_id: int) -> str:
    """One try of a record's request: claim it (a conditional UPDATE of the try counter, so
    of two tasks one sends), POST it signed with nothing open, record the outcome. Returns
    "delivered", "retry" (a later try is due), "failed" (no try left) or "done"."""
    with transaction.atomic():
        record = (
            ChangeRecord.objects.select_related(
                "environment__change_system", "document__agent", "version"
            )
            .filter(pk=record_id, state=ChangeRecord.State.WAITING, delivered_at__isnull=True)
            .first()
        )
        if record is None:
            return "done"
        claimed = ChangeRecord.objects.filter(pk=record.pk, tries=record.tries).update(
            tries=F("tries") + 1,
            next_try_at=timezone.now() + timedelta(seconds=retry_delay(record.tries + 1) + 60),
        )
        if not claimed:
            return "done"
    system = record.environment.change_system
    body = change_request_body(record)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "context-console-change-requests/1",
        **signed_headers(system.secret, f"{record.public_id}.request", body),
        "Connection": "close",
    }
    error, final = "", False
    try:
        answer = transport.post(system.url, body, headers)
        if not 200 <= answer.status < 300:
            error = f"HTTP {answer.status}"
    except transport.TargetRefused as exc:
        error, final = f"refused: {exc}", True
    except (transport.TargetUnresolved, transport.PostFailed) as exc:
        error = str(exc)
    return _send_outcome(record, error=error[:500], final=final)


@service_transaction(durable=True)
def _send_outcome(record: ChangeRecord, *, error: str, final: bool) -> str:
    tries = record.tries + 1
    waiting = ChangeRecord.objects.filter(pk=record.pk, state=ChangeRecord.State.WAITING)
    if not error:
        waiting.update(delivered_at=timezone.now(), last_error="", next_try_at=None)
        return "delivered"
    if final or tries >= settings.CHANGE_RECORD_MAX_TRIES:
        if waiting.update(state=ChangeRecord.State.FAILED, last_error=error, next_try_at=None):
            record.refresh_from_db()
            audit_record(
                actor=SystemActor("change-system"),
                action=AuditAction.CHANGE_RECORD_DELIVERY_FAIL,
                target=record,
                agent=record.document.agent,
                after=change_record_state(record),
            )
        return "failed"
    waiting.update(last_error=error)
    if tries == 1:  # said once, not at every try: the page shows the count and last error
        audit_record(
            actor=SystemActor("change-system"),
            action=AuditAction.CHANGE_RECORD_DELIVERY_FAIL,
            target=record,
            agent=record.document.agent,
            after={"id": record.public_id, "tries": tries, "last_error": error, "retrying": True},
        )
    return "retry"


def change_record_tries(record_id: int) -> int:
    return ChangeRecord.objects.filter(pk=record_id).values_list("tries", flat=True).first() or 0


def change_records_relay() -> int:
    """Queue again the undelivered waiting records whose next try is overdue (a lost message
    or a worker that stopped). Run by beat."""
    due = list(
        ChangeRecord.objects.filter(
            state=ChangeRecord.State.WAITING,
            delivered_at__isnull=True,
            next_try_at__lt=timezone.now(),
        ).values_list("pk", flat=True)
    )
    if due:
        change_records_send(due)
    return len(due)


# --- the answer: a callback, or a poll -------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    status: str
    change_number: str
    content_hash: str
    comment: str


def _answer_parse(body: bytes) -> Answer:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationFailed("The body is not JSON.", code="invalid_body") from exc
    if not isinstance(data, dict):
        raise ValidationFailed("The body is a JSON object.", code="invalid_body")
    details = []
    status = data.get("status")
    if status not in CALLBACK_STATUSES:
        details.append({"path": "status", "code": "invalid_choice", "message": "approved|rejected"})
    for name in ("change_number", "content_hash"):
        value = data.get(name)
        if not isinstance(value, str) or not value.strip() or len(value) > 100:
            details.append({"path": name, "code": "required", "message": "a text (1-100)"})
    comment = data.get("comment", "")
    if not isinstance(comment, str) or len(comment) > 2000:
        details.append({"path": "comment", "code": "invalid", "message": "a text up to 2000"})
    if details:
        raise ValidationFailed("The answer is incomplete or wrong.", details=details)
    return Answer(status, data["change_number"].strip(), data["content_hash"].strip(), comment)


def _signature_check(secret: str, headers, body: bytes) -> None:
    """Standard Webhooks verification of an answer (a callback's request, a poll's answer):
    the timestamp within the tolerance (no replay of an old answer), and one of the `v1,`
    signatures over "id.timestamp.body", compared in constant time."""
    message_id = headers.get("webhook-id", "")
    stamp = headers.get("webhook-timestamp", "")
    given = headers.get("webhook-signature", "")
    if not (message_id and stamp and given):
        raise NotAuthenticated(
            "The answer is not signed: webhook-id, webhook-timestamp and webhook-signature "
            "are required.",
            code="signature_missing",
        )
    try:
        timestamp = int(stamp)
    except ValueError as exc:
        raise NotAuthenticated("webhook-timestamp is not a number.", code="bad_timestamp") from exc
    if abs(time.time() - timestamp) > settings.CHANGE_CALLBACK_TOLERANCE_SECONDS:
        raise NotAuthenticated(
            "The answer's timestamp is outside the tolerance "
            f"({settings.CHANGE_CALLBACK_TOLERANCE_SECONDS} s): sign it again, now.",
            code="stale_timestamp",
        )
    expected = signature_v1(secret, message_id, timestamp, body)
    if not any(hmac.compare_digest(expected, part) for part in given.split()):
        raise NotAuthenticated("The answer's signature does not verify.", code="bad_signature")


def change_callback_receive(*, record_id: int, headers, body: bytes) -> ChangeRecord:
    """The change system's signed answer. Refused (4xx, nothing changed, audited as a refused
    answer): an unknown record, a missing or wrong signature, a stale timestamp, a body that
    is not an answer, another content hash, a record decided already or past its window."""
    record = (
        ChangeRecord.objects.select_related("environment__change_system", "document__agent")
        .filter(pk=record_id)
        .first()
    )
    try:
        # Unsigned callers learn nothing, not even whether the record exists.
        if not all(headers.get(h) for h in SIGNATURE_HEADERS):
            raise NotAuthenticated(
                "The callback is not signed: webhook-id, webhook-timestamp and "
                "webhook-signature are required.",
                code="signature_missing",
            )
        if record is None:
            raise NotFound("No such change record.", code="not_found")
        _signature_check(record.environment.change_system.secret, headers, body)
        answer = _answer_parse(body)
        decided = _change_record_decide(record_id=record.pk, answer=answer, via="callback")
    except ApplicationError as exc:
        if record is not None:
            _answer_refused(record, via="callback", error=exc)
        raise
    change_record_go_live(record_id=decided.pk, via="callback")
    decided.refresh_from_db()
    return decided


def change_records_poll() -> int:
    """Ask each waiting record's status URL (a signed GET) and apply a decision through the
    same checks as a callback, its signature first; "waiting" (or anything not an answer yet)
    leaves it waiting. Returns how many were decided. Run by beat."""
    decided = 0
    for record in change_records_to_poll():
        system = record.environment.change_system
        url = system.status_url_template.format(
            id=record.public_id, change_number=record.change_number
        )
        try:
            answer = transport.get(
                url,
                {
                    "Accept": "application/json",
                    **signed_headers(system.secret, f"{record.public_id}.poll", b""),
                },
            )
        except (transport.TargetRefused, transport.TargetUnresolved, transport.PostFailed) as exc:
            log.warning("change record %s: poll failed: %s", record.public_id, exc)
            ChangeRecord.objects.filter(pk=record.pk).update(polled_at=timezone.now())
            continue
        ChangeRecord.objects.filter(pk=record.pk).update(polled_at=timezone.now())
        if answer.status != 200:
            continue
        try:
            status = json.loads(answer.body).get("status")
        except (ValueError, AttributeError):
            continue
        if status not in CALLBACK_STATUSES:
            continue  # not decided yet
        try:
            # A decision moves a go-live, so it is signed whichever way it comes: a poll's
            # answer like a callback (an unsigned one, from whoever answers at that URL, is
            # refused and audited; the record keeps waiting).
            _signature_check(system.secret, answer.headers, answer.body)
            _change_record_decide(
                record_id=record.pk, answer=_answer_parse(answer.body), via="poll"
            )
        except ApplicationError as exc:
            _answer_refused(record, via="poll", error=exc)
            continue
        decided += 1
        change_record_go_live(record_id=record.pk, via="poll")
    return decided


@service_transaction(durable=True)
def _answer_refused(record: ChangeRecord, *, via: str, error: ApplicationError) -> None:
    """An answer refused changes nothing but is written down: who tried what, and why not."""
    audit_record(
        actor=_VIA[via],
        action=AuditAction.CHANGE_RECORD_REFUSE,
        target=record,
        agent=record.document.agent,
        after={
            "id": record.public_id,
            "via": via,
            "code": getattr(error, "code", ""),
            "reason": str(error),
            "state": record.state,
        },
    )


@service_transaction(durable=True)
def _change_record_decide(*, record_id: int, answer: Answer, via: str) -> ChangeRecord:
    """waiting → approved / rejected, checked against the record; an approval opens its
    validity window and lets the waiting go-live happen if the judgement now allows it."""
    record = (
        ChangeRecord.objects.select_for_update(of=("self",))
        .select_related("environment__change_system", "document__agent", "version", "approval")
        .get(pk=record_id)
    )
    current = {"current": change_record_state(record)}
    if answer.content_hash != record.content_hash:
        raise Conflict(
            "This answer is for another content (content_hash differs from the record's): "
            "nothing changed.",
            code="content_hash_mismatch",
            extra=current,
        )
    if record.state != ChangeRecord.State.WAITING:
        raise Conflict(
            f"This change record is already {record.state}: nothing changed.",
            code="already_decided",
            extra=current,
        )
    now = timezone.now()
    if record.valid_until is not None and record.valid_until <= now:
        raise Conflict(
            "This change record's window has passed: ask again to go live.",
            code="window_expired",
            extra=current,
        )
    approved = answer.status == "approved"
    record.state = ChangeRecord.State.APPROVED if approved else ChangeRecord.State.REJECTED
    record.change_number = answer.change_number
    record.comment = answer.comment
    record.decided_by = via
    record.decided_at = now
    if approved:
        record.valid_until = now + timedelta(hours=record.environment.change_system.validity_hours)
    record.save()
    audit_record(
        actor=_VIA[via],
        action=AuditAction.CHANGE_RECORD_APPROVE if approved else AuditAction.CHANGE_RECORD_REJECT,
        target=record,
        agent=record.document.agent,
        after=change_record_state(record),
    )
    return record


# --- the waiting go-live, asked again ----------------------------------------------------------
def change_record_go_live(*, record_id: int, via: str) -> None:
    """What waited on an approved record happens now, in its own transaction after the
    approval's, if the go-live judgement (asked again: rights, four-eyes, preview, the
    runtime) allows it; else the refusal is kept on the record and audited, nothing live."""
    actor = _VIA[via]
    record = (
        ChangeRecord.objects.select_related(
            "environment", "document__agent", "version", "approval", "requested_by"
        )
        .filter(pk=record_id, state=ChangeRecord.State.APPROVED, release_event__isnull=True)
        .first()
    )
    if record is None:
        return
    approval = record.approval
    if approval is not None and approval.status != ApprovalRequest.Status.APPROVED:
        return  # pending: the second person decides; otherwise nothing waits any more
    if approval is None and record.requested_by is None:
        return
    try:
        if approval is not None:
            _approved_request_apply(approval, actor=actor)
        elif record.path == ChangeRecord.Path.ROLLOUT_START:
            rollout_start(
                version=record.version,
                environment=record.environment,
                actor=record.requested_by,
                plan=record.go_live.get("plan", "staged"),
                unit=record.go_live.get("unit", "task"),
                reason=record.reason,
            )
        else:
            _waiting_publish(record)
    except ApplicationError as exc:
        _go_live_refused(record, actor=actor, error=exc)


@service_transaction(durable=True)
def _waiting_publish(record: ChangeRecord) -> None:
    release_publish(
        version=record.version,
        environment=record.environment,
        actor=record.requested_by,
        reason=record.reason,
        change_path=record.path,
    )


@service_transaction(durable=True)
def _approved_request_apply(approval: ApprovalRequest, *, actor) -> None:
    """A second person approved while the change record still waited: the approved publish
    goes live now, judged again at this moment."""
    live = _current(approval.document, approval.environment)
    if (live.revision if live else 0) != approval.base_revision:
        raise Conflict(
            "What is live changed since this request was approved; it must be requested again.",
            code="stale_revision",
        )
    check_approved_go_live(approval=approval, live=live)
    _release_move(
        document=approval.document,
        environment=approval.environment,
        to_version=approval.version,
        action=ReleaseEvent.Action.APPROVE,
        actor=actor,
        actor_label=actor_label(approval.requested_by),
        reason=approval.reason,
        expected_revision=approval.base_revision,
        approval=approval,
    )


@service_transaction(durable=True)
def _go_live_refused(record: ChangeRecord, *, actor, error: ApplicationError) -> None:
    ChangeRecord.objects.filter(pk=record.pk).update(go_live_refused=str(error)[:2000])
    audit_record(
        actor=actor,
        action=AuditAction.CHANGE_RECORD_GO_LIVE_REFUSED,
        target=record,
        agent=record.document.agent,
        after={"id": record.public_id, "code": getattr(error, "code", ""), "reason": str(error)},
    )


# --- the window ends -------------------------------------------------------------------------------
@service_transaction(durable=True)
def change_records_expire() -> int:
    """Approved records past their window, and waiting ones past the time to answer, expire
    (audited); a go-live then asks again. Run by beat."""
    now = timezone.now()
    records = list(
        ChangeRecord.objects.select_for_update()
        .select_related("environment", "document__agent", "version")
        .filter(
            state__in=(ChangeRecord.State.APPROVED, ChangeRecord.State.WAITING),
            valid_until__lte=now,
        )
    )
    for record in records:
        record.state = ChangeRecord.State.EXPIRED
        record.save(update_fields=["state", "updated_at"])
        audit_record(
            actor=SystemActor("change-system"),
            action=AuditAction.CHANGE_RECORD_EXPIRE,
            target=record,
            agent=record.document.agent,
            after=change_record_state(record),
        )
    return len(records)


# --- a rollout's start that needs a change record ---------------------------------------------------
def rollout_start_or_ask(
    *, version, environment, actor, plan="staged", unit: str = "task", reason: str = ""
):
    """Start the rollout; where it waits only for the change system, send the change request
    instead (the rollout starts by itself once approved, asked again then). Returns the
    Rollout, or the ChangeRecord it waits on."""
    try:
        return rollout_start(
            version=version,
            environment=environment,
            actor=actor,
            plan=plan,
            unit=unit,
            reason=reason,
        )
    except Conflict as exc:
        if exc.code != CHANGE_RECORD_REQUIRED:
            raise
    return _rollout_change_request(
        version=version,
        environment=environment,
        actor=actor,
        go_live={"plan": plan, "unit": unit},
        reason=reason,
    )


@service_transaction(durable=True)
def _rollout_change_request(*, version, environment, actor, go_live: dict, reason: str):
    return _change_record_request(
        version=version,
        environment=environment,
        actor=actor,
        path=ChangeRecord.Path.ROLLOUT_START,
        reason=reason,
        go_live=go_live,
    )
