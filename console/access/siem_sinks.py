"""The wire of the SIEM streaming (docs/siem.md): one event per log row or chain checkpoint,
shaped for each kind of destination, and one batch sent to a sink. Touches no database.

- syslog: RFC 5424 messages over TCP, octet-counted (RFC 6587 §3.4.1), TLS for `tcp+tls://`
  (the destination's CA, else the system's trust store). TCP syslog has no acknowledgement: a
  batch counts as accepted once the receiver has read it to the end of the connection (we
  close our side, it closes its own), within the deadline.
- Splunk HTTP Event Collector: `Authorization: Splunk <token>`, the events concatenated as
  JSON objects with `time`, `host`, `source`, `sourcetype`, `event`; a 2xx answer accepts.
- OpenTelemetry logs over OTLP/HTTP JSON: one `resourceLogs` with a scope per chain; the
  token, if any, as `Authorization: Bearer <token>`; a 2xx answer accepts.

A 401 or 403, a TLS certificate that does not verify, or a target the SSRF rules refuse is
`Refused` (the destination pauses until an admin resumes it); anything else that is not an
acceptance is `Failed` (the batch is sent again at the next drain).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

import orjson
from django.conf import settings

from strategies.delivery import transport

APP_NAME = "context-console"
# RFC 5424 structured data: the SD-ID of the documentation enterprise number (RFC 5612).
SD_ID = "console@32473"
SYSLOG_SCHEMES = {"tcp": False, "tcp+tls": True}  # scheme → TLS
FACILITY_LOG_AUDIT = 13
SEVERITY_INFO, SEVERITY_NOTICE = 6, 5


class Refused(Exception):
    """The sink refused the console (credential, certificate, address): pause until resumed."""


class Failed(Exception):
    """The sink did not accept the batch (down, slow, 5xx): send it again later."""


@dataclass(frozen=True)
class Sink:
    """What sending needs of a destination (the credential decrypted)."""

    protocol: str
    url: str
    token: str = ""
    ca_certificate: str = ""


def hostname() -> str:
    return (getattr(settings, "SIEM_HOSTNAME", "") or socket.gethostname() or "-")[:255]


# --- the events ---------------------------------------------------------------------------------
def _iso(moment: datetime) -> str:
    """RFC 3339 in UTC with microseconds, as RFC 5424's TIMESTAMP allows."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def row_event(chain: str, row) -> dict:
    """One audit or access row as an event; its id (`audit:<id>`, `access:<id>`) is stable."""
    event = {
        "id": f"{chain}:{row.pk}",
        "chain": chain,
        "kind": "record",
        "row_id": row.pk,
        "occurred_at": _iso(row.occurred_at),
        "action": row.action,
        "actor": {
            "type": row.actor_type,
            "id": row.actor_id,
            "label": row.actor_label,
            "roles": row.actor_roles,
            "token_id": row.actor_token_id,
            "token_label": row.actor_token_label,
        },
        "target": {"type": row.target_type, "id": row.target_id, "label": row.target_label},
        "agent_key": row.agent_key,
        "request_id": row.request_id,
        "ip": row.ip,
        "hash": row.hash,
        "prev_hash": row.prev_hash,
    }
    if chain == "audit":
        event.update(before=row.before, after=row.after, changes=row.changes)
    else:
        event.update(outcome=row.outcome, reason=row.reason, detail=row.detail)
    return event


def checkpoint_event(chain: str, checkpoint) -> dict:
    """A chain checkpoint (the head anchored every AUDIT_CHECKPOINT_MINUTES) as an event."""
    return {
        "id": f"{chain}-checkpoint:{checkpoint.pk}",
        "chain": chain,
        "kind": "checkpoint",
        "checkpoint_id": checkpoint.pk,
        "occurred_at": _iso(checkpoint.created_at),
        "action": "chain.checkpoint",
        "last_id": checkpoint.last_id,
        "last_hash": checkpoint.last_hash,
        "row_count": checkpoint.row_count,
    }


def _severity(event: dict) -> int:
    return SEVERITY_NOTICE if event.get("outcome") not in (None, "allowed") else SEVERITY_INFO


def _dumps(value) -> bytes:
    return orjson.dumps(value, default=str)


def _epoch(event: dict) -> float:
    return datetime.fromisoformat(event["occurred_at"].replace("Z", "+00:00")).timestamp()


# --- syslog (RFC 5424 over TCP, octet-counted) ----------------------------------------------------
def _sd_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("]", "\\]")


def _printable(value: str, limit: int) -> str:
    cleaned = "".join(c for c in value if 33 <= ord(c) <= 126)[:limit]
    return cleaned or "-"


def syslog_message(event: dict) -> bytes:
    """`<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID [SD] BOM JSON` (RFC 5424)."""
    pri = FACILITY_LOG_AUDIT * 8 + _severity(event)
    params = {"eventId": event["id"], "chain": event["chain"], "kind": event["kind"]}
    if "hash" in event:
        params["hash"] = event["hash"]
    sd = "[" + SD_ID + "".join(f' {k}="{_sd_value(str(v))}"' for k, v in params.items()) + "]"
    header = (
        f"<{pri}>1 {event['occurred_at']} {_printable(hostname(), 255)} {APP_NAME} - "
        f"{_printable(event['action'], 32)} {sd} "
    )
    return header.encode() + b"\xef\xbb\xbf" + _dumps(event)


def syslog_frames(events: list[dict]) -> bytes:
    """Octet-counted framing (RFC 6587 §3.4.1): `MSG-LEN SP SYSLOG-MSG` per message."""
    out = bytearray()
    for event in events:
        message = syslog_message(event)
        out += f"{len(message)} ".encode() + message
    return bytes(out)


def syslog_address(url: str) -> tuple[str, int, bool]:
    """(host, port, tls) of `tcp://host:port` or `tcp+tls://host:port`; ValueError otherwise."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SYSLOG_SCHEMES:
        raise ValueError("use tcp://host:port or tcp+tls://host:port")
    if not parts.hostname or parts.path not in ("", "/") or parts.query or parts.username:
        raise ValueError("give a host and a port only, e.g. tcp+tls://siem.example.com:6514")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError("the port is not a number from 1 to 65535") from exc
    if not port:
        raise ValueError("give the port, e.g. :6514 (TLS) or :601")
    return parts.hostname, port, SYSLOG_SCHEMES[scheme]


def tls_context(ca_certificate: str) -> ssl.SSLContext:
    """The destination's CA (PEM) if given, else the system's; the host name checked.
    ssl.SSLError for a CA that is not PEM."""
    if ca_certificate.strip():
        return ssl.create_default_context(cadata=ca_certificate)
    return ssl.create_default_context()


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the deadline passed")
    return left


def _syslog_send(sink: Sink, body: bytes, deadline: float) -> None:
    try:
        host, port, tls = syslog_address(sink.url)
        addresses = transport.host_resolve(host, port)
    except (ValueError, transport.TargetRefused) as exc:
        raise Refused(f"target refused: {exc}") from exc
    except transport.TargetUnresolved as exc:
        raise Failed(str(exc)) from exc
    last: Exception | None = None
    for address in addresses:
        try:
            sock = socket.create_connection((address, port), timeout=_remaining(deadline))
        except OSError as exc:
            last = exc
            continue
        try:
            if tls:
                sock.settimeout(_remaining(deadline))
                try:
                    sock = tls_context(sink.ca_certificate).wrap_socket(sock, server_hostname=host)
                except ssl.SSLCertVerificationError as exc:
                    raise Refused(
                        f"TLS: the receiver's certificate does not verify: {exc}"
                    ) from exc
                except ssl.SSLError as exc:
                    raise Refused(f"TLS failed: {exc}") from exc
            sock.settimeout(_remaining(deadline))
            sock.sendall(body)
            # No acknowledgement in syslog over TCP: close our side and wait for the receiver
            # to close its own, once it has read everything.
            sock.shutdown(socket.SHUT_WR)
            while True:
                sock.settimeout(_remaining(deadline))
                if not sock.recv(4096):
                    return
        except (OSError, TimeoutError) as exc:
            raise Failed(f"{type(exc).__name__}: {exc}") from exc
        finally:
            with contextlib.suppress(OSError):
                sock.close()
    raise Failed(f"cannot connect to {host}:{port}: {last}")


# --- HTTP sinks ----------------------------------------------------------------------------------
def splunk_hec_body(events: list[dict]) -> bytes:
    """Concatenated HEC event objects (Splunk's batch format)."""
    host = hostname()
    return b"\n".join(
        _dumps(
            {
                "time": round(_epoch(event), 6),
                "host": host,
                "source": APP_NAME,
                "sourcetype": f"{APP_NAME}:{event['chain']}",
                "event": event,
            }
        )
        for event in events
    )


def _attr(key: str, value) -> dict:
    if isinstance(value, int) and not isinstance(value, bool):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}


def otlp_logs_body(events: list[dict]) -> bytes:
    """An OTLP/HTTP JSON ExportLogsServiceRequest: one scope per chain, a log record per
    event (its body the event as JSON; its id, chain, kind and action as attributes)."""
    scopes: dict[str, list] = {}
    now = str(time.time_ns())
    for event in events:
        severity = _severity(event)
        attributes = [
            _attr("event.id", event["id"]),
            _attr("event.name", event["action"]),
            _attr("console.chain", event["chain"]),
            _attr("console.kind", event["kind"]),
        ]
        if "hash" in event:
            attributes.append(_attr("console.hash", event["hash"]))
        scopes.setdefault(event["chain"], []).append(
            {
                "timeUnixNano": str(int(_epoch(event) * 1_000_000) * 1000),
                "observedTimeUnixNano": now,
                "severityNumber": 9 if severity == SEVERITY_INFO else 10,
                "severityText": "INFO" if severity == SEVERITY_INFO else "INFO2",
                "body": {"stringValue": _dumps(event).decode()},
                "attributes": attributes,
            }
        )
    return _dumps(
        {
            "resourceLogs": [
                {
                    "resource": {
                        "attributes": [
                            _attr("service.name", APP_NAME),
                            _attr("host.name", hostname()),
                        ]
                    },
                    "scopeLogs": [
                        {"scope": {"name": f"{APP_NAME}.{chain}"}, "logRecords": records}
                        for chain, records in scopes.items()
                    ],
                }
            ]
        }
    )


def _http_send(sink: Sink, body: bytes, headers: dict) -> None:
    try:
        answer = transport.post(sink.url, body, headers)
    except transport.TargetRefused as exc:
        raise Refused(f"target refused: {exc}") from exc
    except transport.PostFailed as exc:
        if isinstance(exc.__cause__, ssl.SSLError):
            raise Refused(f"TLS failed: {exc}") from exc
        raise Failed(str(exc)) from exc
    except transport.TargetUnresolved as exc:
        raise Failed(str(exc)) from exc
    if answer.status in (401, 403):
        raise Refused(f"HTTP {answer.status}: the sink refused the credential")
    if not 200 <= answer.status < 300:
        raise Failed(f"HTTP {answer.status}")


def send(sink: Sink, events: list[dict]) -> None:
    """Send one batch; returns once the sink accepted it (Refused, Failed otherwise)."""
    deadline = time.monotonic() + transport.TRY_DEADLINE_SECONDS
    if sink.protocol == "syslog":
        _syslog_send(sink, syslog_frames(events), deadline)
        return
    common = {"User-Agent": f"{APP_NAME}-siem/1", "Connection": "close"}
    if sink.protocol == "splunk_hec":
        headers = {**common, "Content-Type": "application/json"}
        headers["Authorization"] = f"Splunk {sink.token}"
        _http_send(sink, splunk_hec_body(events), headers)
        return
    if sink.protocol == "otlp_http":
        headers = {**common, "Content-Type": "application/json"}
        if sink.token:
            headers["Authorization"] = f"Bearer {sink.token}"
        _http_send(sink, otlp_logs_body(events), headers)
        return
    raise Refused(f"unknown protocol {sink.protocol!r}")
