"""The audit and access logs streamed to a SIEM (issue 34 item 3; docs/siem.md).

An admin configures destinations (`destination_create`, `destination_update`,
`destination_pause`, `destination_resume`, `destination_delete`: one transaction and one audit
row each; the credential is stored encrypted, never shown again, never in the audit). The
`console.siem_drain` task (beat, every SIEM_DRAIN_SECONDS) sends each active destination what it
has not accepted yet (`destination_drain`):

- per chain (audit, access), the rows after the destination's cursor in id order — rows commit
  in id order (the chains' writers' lock), so nothing below the cursor can appear later — and
  the chain's checkpoints placed after the row they anchor;
- a batch at a time; the cursor advances only after the sink accepted the batch, in a
  transaction of its own that does nothing else (a conditional UPDATE: of two drains, one
  advances). A sink that is down, a worker killed mid-batch: the batch goes again, so events
  arrive at least once, each with a stable id (`audit:<id>`, `access:<id>`,
  `audit-checkpoint:<id>`) for the SIEM to de-duplicate;
- a sink that refuses the credential (401/403), whose TLS certificate does not verify or whose
  address the SSRF rules now refuse pauses the destination (audited, actor `system:siem`) until
  an admin resumes it; the backlog (rows behind, age of the oldest) grows meanwhile and shows on
  the page, the API and /healthz.

Who: MANAGE_GRANTS on all agents (console-wide security configuration, like group mappings)
and VIEW_AUDIT on all agents (a destination receives every row of both logs, unfiltered).
"""

from __future__ import annotations

import logging
import ssl
import time
from dataclasses import dataclass
from datetime import datetime

from celery import current_app
from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import URLValidator
from django.db import connection, transaction
from django.db.models import F, Min
from django.utils import timezone

from console.access import siem_sinks
from console.kernel.audit import AuditAction, SystemActor, actor_label, audit_record
from console.kernel.errors import Conflict, NotFound, ValidationFailed
from console.kernel.models import (
    AccessLogEntry,
    AuditRecord,
    ChainCheckpoint,
    SiemCursor,
    SiemDestination,
)
from console.kernel.policy import Capability, check_user_can
from console.kernel.transactions import service_transaction
from strategies.delivery import transport
from traces import crypto

log = logging.getLogger(__name__)

CHAINS = {"audit": AuditRecord, "access": AccessLogEntry}
DRAIN_TASK = "console.siem_drain"
NAME_MAX = 100
TOKEN_MAX = 500
PROTOCOLS = tuple(SiemDestination.Protocol.values)
_LOCK_KEY = 7_201_100  # pg_try_advisory_lock(_LOCK_KEY, destination id): one drain at a time
SYSTEM = SystemActor("system:siem")


def _refused(path: str, code: str, message: str, detail: str = "") -> ValidationFailed:
    return ValidationFailed(
        message, details=[{"path": path, "code": code, "message": detail or message}]
    )


# --- who may ----------------------------------------------------------------------------------
def check_may_manage(actor) -> None:
    check_user_can(actor, Capability.MANAGE_GRANTS)
    check_user_can(actor, Capability.VIEW_AUDIT)


# --- input ----------------------------------------------------------------------------------------
def _name_clean(name) -> str:
    name = str(name or "").strip()
    if not name or len(name) > NAME_MAX:
        raise _refused("name", "required", f"Name the destination (1 to {NAME_MAX} characters).")
    return name


def _protocol_clean(protocol) -> str:
    if protocol not in PROTOCOLS:
        raise _refused(
            "protocol",
            "invalid_choice",
            f"Unknown protocol {protocol!r}: choose one of {', '.join(PROTOCOLS)}.",
        )
    return protocol


def _address_check(resolve, target: str) -> None:
    try:
        resolve()
    except transport.TargetRefused as exc:
        raise _refused(
            "url",
            "internal_address",
            f"The console does not stream to internal addresses: {exc}. Use the receiver's "
            "public address (on-premise receivers: an operator can allow private addresses "
            "with WEBHOOK_ALLOW_PRIVATE_TARGETS=true).",
            str(exc),
        ) from exc
    except transport.TargetUnresolved as exc:
        raise _refused(
            "url",
            "unresolvable",
            f"The console cannot resolve {target}: {exc}. Check the name.",
            str(exc),
        ) from exc


def _url_clean(protocol: str, url) -> str:
    """The address, checked as the webhooks' are (the SSRF rules) before anything is saved."""
    url = str(url or "").strip()
    if protocol == SiemDestination.Protocol.SYSLOG:
        try:
            host, port, _tls = siem_sinks.syslog_address(url)
        except ValueError as exc:
            raise _refused(
                "url", "invalid", f"Enter the syslog receiver as tcp+tls://host:port: {exc}."
            ) from exc
        _address_check(lambda: transport.host_resolve(host, port), host)
        return url
    try:
        URLValidator(schemes=["http", "https"])(url)
    except DjangoValidationError as exc:
        example = (
            "https://splunk.example.com:8088/services/collector/event"
            if protocol == SiemDestination.Protocol.SPLUNK_HEC
            else "https://otel.example.com:4318/v1/logs"
        )
        raise _refused(
            "url", "invalid", f"Enter a full http(s) URL, e.g. {example}.", "not an http(s) URL"
        ) from exc
    _address_check(lambda: transport.target_resolve(url), url)
    return url


def _ca_clean(protocol: str, url: str, ca_certificate) -> str:
    ca = str(ca_certificate or "").strip()
    if not ca:
        return ""
    if protocol != SiemDestination.Protocol.SYSLOG or not url.startswith("tcp+tls://"):
        raise _refused(
            "ca_certificate",
            "not_applicable",
            "A CA certificate applies to a TLS syslog receiver (tcp+tls://) only.",
        )
    try:
        siem_sinks.tls_context(ca)
    except (ssl.SSLError, ValueError) as exc:
        raise _refused(
            "ca_certificate", "invalid", "The CA certificate is not a PEM certificate.", str(exc)
        ) from exc
    return ca


def _token_clean(protocol: str, token, *, required: bool) -> str:
    token = str(token or "").strip()
    if len(token) > TOKEN_MAX or any(c in token for c in "\r\n"):
        raise _refused("token", "invalid", f"The token is one line of at most {TOKEN_MAX}.")
    if protocol == SiemDestination.Protocol.SYSLOG and token:
        raise _refused(
            "token",
            "not_applicable",
            "Syslog has no token: the receiver trusts the connection (use tcp+tls://).",
        )
    if required and protocol == SiemDestination.Protocol.SPLUNK_HEC and not token:
        raise _refused("token", "required", "Give the HTTP Event Collector's token.")
    return token


def _encrypt(token: str) -> bytes | None:
    return crypto.encrypt(token.encode()) if token else None


def destination_state(destination: SiemDestination) -> dict:
    """What the audit says of a destination: never its credential, only whether it has one."""
    return {
        "name": destination.name,
        "protocol": destination.protocol,
        "url": destination.url,
        "ca_certificate": "set" if destination.ca_certificate else "",
        "credential": "set" if destination.credential_encrypted else "",
        "status": destination.status,
    }


def _kick() -> None:
    """Drain soon (after commit): a new or resumed destination starts at once."""
    queue = getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", None)
    transaction.on_commit(lambda: current_app.send_task(DRAIN_TASK, queue=queue))


# --- the admin's writes --------------------------------------------------------------------------
def destination_create(
    *, actor, name, protocol, url, token="", ca_certificate=""
) -> SiemDestination:
    """Add a destination (streaming at once, from the start of both logs). Every input is
    checked, the address resolved, before the transaction opens: a refusal saves nothing."""
    check_may_manage(actor)
    name = _name_clean(name)
    protocol = _protocol_clean(protocol)
    url = _url_clean(protocol, url)
    ca = _ca_clean(protocol, url, ca_certificate)
    token = _token_clean(protocol, token, required=True)
    return _destination_store(
        actor=actor, name=name, protocol=protocol, url=url, token=token, ca=ca
    )


@service_transaction(durable=True)
def _destination_store(*, actor, name, protocol, url, token, ca) -> SiemDestination:
    if SiemDestination.objects.filter(name=name).exists():
        raise Conflict(f"A destination named {name} exists already.", code="destination_exists")
    destination = SiemDestination.objects.create(
        name=name,
        protocol=protocol,
        url=url,
        ca_certificate=ca,
        credential_encrypted=_encrypt(token),
        created_by=actor_label(actor),
    )
    SiemCursor.objects.bulk_create(
        [SiemCursor(destination=destination, chain=chain) for chain in CHAINS]
    )
    audit_record(
        actor=actor,
        action=AuditAction.SIEM_DESTINATION_CREATE,
        target=destination,
        after=destination_state(destination),
    )
    _kick()
    return destination


_UNSET = object()


def destination_update(
    *, actor, destination, name=_UNSET, url=_UNSET, token=_UNSET, ca_certificate=_UNSET
) -> SiemDestination:
    """Change a destination's name, address, credential or CA (each only if given). The
    cursors stay: a new address gets what the old one had not accepted."""
    check_may_manage(actor)
    changes: dict = {}
    if name is not _UNSET:
        changes["name"] = _name_clean(name)
    new_url = destination.url
    if url is not _UNSET:
        changes["url"] = new_url = _url_clean(destination.protocol, url)
    if ca_certificate is not _UNSET:
        changes["ca_certificate"] = _ca_clean(destination.protocol, new_url, ca_certificate)
    elif destination.ca_certificate and not new_url.startswith("tcp+tls://"):
        changes["ca_certificate"] = ""
    if token is not _UNSET:
        token = _token_clean(destination.protocol, token, required=True)
        changes["credential_encrypted"] = _encrypt(token)
    return _destination_change(actor=actor, pk=destination.pk, changes=changes)


@service_transaction(durable=True)
def _destination_change(*, actor, pk: int, changes: dict) -> SiemDestination:
    destination = _locked(pk)
    before = destination_state(destination)
    if (
        "name" in changes
        and SiemDestination.objects.filter(name=changes["name"]).exclude(pk=pk).exists()
    ):
        raise Conflict(
            f"A destination named {changes['name']} exists already.", code="destination_exists"
        )
    for field, value in changes.items():
        setattr(destination, field, value)
    destination.save()
    after = destination_state(destination)
    if "credential_encrypted" in changes:
        after["credential"] = "replaced"
    audit_record(
        actor=actor,
        action=AuditAction.SIEM_DESTINATION_UPDATE,
        target=destination,
        before=before,
        after=after,
    )
    return destination


def _locked(pk: int) -> SiemDestination:
    destination = SiemDestination.objects.select_for_update().filter(pk=pk).first()
    if destination is None:
        raise NotFound("This SIEM destination does not exist or was removed.")
    return destination


@service_transaction(durable=True)
def destination_pause(*, actor, destination, reason: str = "") -> SiemDestination:
    """Stop streaming until resumed (the backlog grows). Pausing a paused one changes nothing."""
    check_may_manage(actor)
    destination = _locked(destination.pk)
    if destination.status == SiemDestination.Status.PAUSED:
        return destination
    return _pause(destination, actor, reason or f"paused by {actor_label(actor)}")


def _pause(destination: SiemDestination, actor, reason: str) -> SiemDestination:
    before = destination_state(destination)
    destination.status = SiemDestination.Status.PAUSED
    destination.paused_reason = reason[:1000]
    destination.paused_at = timezone.now()
    destination.save(update_fields=["status", "paused_reason", "paused_at"])
    audit_record(
        actor=actor,
        action=AuditAction.SIEM_DESTINATION_PAUSE,
        target=destination,
        before=before,
        after={**destination_state(destination), "reason": destination.paused_reason},
    )
    return destination


@service_transaction(durable=True)
def destination_resume(*, actor, destination) -> SiemDestination:
    """Stream again (from the cursors: the backlog is sent first)."""
    check_may_manage(actor)
    destination = _locked(destination.pk)
    if destination.status == SiemDestination.Status.ACTIVE:
        return destination
    before = {**destination_state(destination), "reason": destination.paused_reason}
    destination.status = SiemDestination.Status.ACTIVE
    destination.paused_reason = ""
    destination.paused_at = None
    destination.failures = 0
    destination.save(update_fields=["status", "paused_reason", "paused_at", "failures"])
    audit_record(
        actor=actor,
        action=AuditAction.SIEM_DESTINATION_RESUME,
        target=destination,
        before=before,
        after=destination_state(destination),
    )
    _kick()
    return destination


@service_transaction(durable=True)
def destination_delete(*, actor, destination, reason: str = "") -> None:
    """Remove a destination and its cursors (the logs themselves stay, of course)."""
    check_may_manage(actor)
    destination = _locked(destination.pk)
    target = ("console.siemdestination", destination.pk, str(destination))
    before = destination_state(destination)
    destination.delete()
    audit_record(
        actor=actor,
        action=AuditAction.SIEM_DESTINATION_DELETE,
        target=target,
        before=before,
        after={"reason": str(reason or "")[:1000]},
    )


# --- the backlog --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Backlog:
    chain: str
    behind: int  # rows not accepted yet
    oldest: datetime | None  # when the oldest of them was written
    sent: int

    @property
    def age_seconds(self) -> float | None:
        return (timezone.now() - self.oldest).total_seconds() if self.oldest else None


def backlog(destination: SiemDestination) -> list[Backlog]:
    """Per chain: rows behind the destination's cursor, and the age of the oldest."""
    cursors = {c.chain: c for c in destination.cursors.all()}
    out = []
    for chain, model in CHAINS.items():
        cursor = cursors.get(chain)
        after = cursor.last_id if cursor else 0
        rows = model.objects.filter(id__gt=after)
        figures = rows.aggregate(oldest=Min("occurred_at"))
        out.append(Backlog(chain, rows.count(), figures["oldest"], cursor.sent if cursor else 0))
    return out


def health_summary() -> dict:
    """For /healthz: destinations, how many are paused (loud), how many failing now."""
    rows = list(SiemDestination.objects.values_list("status", "failures"))
    paused = sum(1 for status, _ in rows if status == SiemDestination.Status.PAUSED)
    failing = sum(1 for status, f in rows if status == SiemDestination.Status.ACTIVE and f)
    return {"ok": not paused, "destinations": len(rows), "paused": paused, "failing": failing}


# --- the drain -----------------------------------------------------------------------------------
def batch_read(destination_id: int, chain: str, limit: int):
    """The next events of one chain after the cursor, in chain order, and the cursor they
    lead to: (events, (old last_id, new last_id, new last_checkpoint_id))."""
    cursor = SiemCursor.objects.get(destination_id=destination_id, chain=chain)
    rows = list(CHAINS[chain].objects.filter(id__gt=cursor.last_id).order_by("id")[:limit])
    reach = rows[-1].pk if rows else cursor.last_id
    checkpoints = list(
        ChainCheckpoint.objects.filter(
            log=chain, id__gt=cursor.last_checkpoint_id, last_id__lte=reach
        ).order_by("id")
    )
    placed = [((row.pk, 0, 0), siem_sinks.row_event(chain, row)) for row in rows]
    placed += [
        ((cp.last_id, 1, cp.pk), siem_sinks.checkpoint_event(chain, cp)) for cp in checkpoints
    ]
    placed.sort(key=lambda item: item[0])
    last_cp = checkpoints[-1].pk if checkpoints else cursor.last_checkpoint_id
    return [event for _, event in placed], (
        cursor.last_id,
        reach,
        cursor.last_checkpoint_id,
        last_cp,
    )


def cursor_advance(destination_id: int, chain: str, moves, sent: int) -> bool:
    """Move the cursor past an accepted batch: its own transaction, nothing else in it; only
    from where the batch started (False: another drain moved it first)."""
    old_id, new_id, old_cp, new_cp = moves
    with transaction.atomic():
        return bool(
            SiemCursor.objects.filter(
                destination_id=destination_id,
                chain=chain,
                last_id=old_id,
                last_checkpoint_id=old_cp,
            ).update(last_id=new_id, last_checkpoint_id=new_cp, sent=F("sent") + sent)
        )


def _sink(destination: SiemDestination) -> siem_sinks.Sink:
    token = ""
    if destination.credential_encrypted:
        token = crypto.decrypt(bytes(destination.credential_encrypted)).decode()
    return siem_sinks.Sink(
        protocol=destination.protocol,
        url=destination.url,
        token=token,
        ca_certificate=destination.ca_certificate,
    )


def _failure_note(destination_id: int, error: str) -> None:
    with transaction.atomic():
        SiemDestination.objects.filter(pk=destination_id).update(
            last_error=error[:1000], last_error_at=timezone.now(), failures=F("failures") + 1
        )


@service_transaction(durable=True)
def _refusal_pause(destination_id: int, error: str) -> None:
    destination = SiemDestination.objects.select_for_update().filter(pk=destination_id).first()
    if destination is None or destination.status != SiemDestination.Status.ACTIVE:
        return
    destination.last_error, destination.last_error_at = error[:1000], timezone.now()
    destination.save(update_fields=["last_error", "last_error_at"])
    _pause(destination, SYSTEM, f"The sink refused the console: {error}")


def _success_note(destination_id: int) -> None:
    with transaction.atomic():
        SiemDestination.objects.filter(pk=destination_id).update(
            last_success_at=timezone.now(), failures=0
        )


@dataclass
class DrainResult:
    sent: int = 0
    batches: int = 0
    error: str = ""
    paused: bool = False
    busy: bool = False


def _lock_try(destination_id: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [_LOCK_KEY, destination_id])
        return cursor.fetchone()[0]


def _lock_release(destination_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [_LOCK_KEY, destination_id])


def destination_drain(destination_id: int, *, budget_seconds: float | None = None) -> DrainResult:
    """Send one destination its backlog, a batch at a time, the chains taking turns, until
    nothing is left, the sink fails or the time budget is spent. One drain per destination
    at a time (a session advisory lock, gone with its connection if the worker dies)."""
    result = DrainResult()
    if not _lock_try(destination_id):
        result.busy = True
        return result
    try:
        budget = settings.SIEM_DRAIN_BUDGET_SECONDS if budget_seconds is None else budget_seconds
        ends = time.monotonic() + budget
        destination = SiemDestination.objects.filter(pk=destination_id).first()
        if destination is None or destination.status != SiemDestination.Status.ACTIVE:
            return result
        sink = _sink(destination)
        pending = set(CHAINS)
        while pending and time.monotonic() < ends:
            for chain in list(pending):
                events, moves = batch_read(destination_id, chain, settings.SIEM_BATCH_SIZE)
                if not events:
                    pending.discard(chain)
                    continue
                try:
                    siem_sinks.send(sink, events)
                except siem_sinks.Refused as exc:
                    log.warning("SIEM destination %s paused: %s", destination_id, exc)
                    _refusal_pause(destination_id, str(exc))
                    result.error, result.paused = str(exc), True
                    return result
                except siem_sinks.Failed as exc:
                    log.info("SIEM destination %s: batch not accepted: %s", destination_id, exc)
                    _failure_note(destination_id, str(exc))
                    result.error = str(exc)
                    return result
                if not cursor_advance(destination_id, chain, moves, len(events)):
                    return result  # another drain moved it (cannot happen under the lock)
                result.sent += len(events)
                result.batches += 1
        if result.batches:
            _success_note(destination_id)
        return result
    finally:
        _lock_release(destination_id)


def drain_all() -> dict[int, DrainResult]:
    """Drain every active destination (the beat task); one's error does not stop the others."""
    results = {}
    for pk in SiemDestination.objects.filter(status=SiemDestination.Status.ACTIVE).values_list(
        "pk", flat=True
    ):
        try:
            results[pk] = destination_drain(pk)
        except Exception:  # noqa: BLE001 — logged; the next beat tries again
            log.exception("SIEM destination %s: drain failed", pk)
    return results
