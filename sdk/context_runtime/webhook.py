"""Webhooks from the console (RUNTIME_API §4): check the signature, read the delivery.

The console POSTs ``release.changed`` signed after the Standard Webhooks scheme
(https://www.standardwebhooks.com/): ``webhook-id`` (the delivery id, the idempotency key, the
same on every retry), ``webhook-timestamp`` (Unix seconds of this try) and
``webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{raw body}">`` (several,
space-separated, during a secret rotation). The key is the webhook's secret as UTF-8 bytes.
Signing the id and the time with the body is what stops a replay: a captured delivery sent
again with another id, or later than :data:`TOLERANCE_SECONDS`, does not verify.

Until 2027-06-01 (00:00 UTC) the console also sends the old headers (``X-Console-Event``,
``X-Console-Delivery``, ``X-Console-Signature: sha256=<hex HMAC of the body alone>``) for
receivers not updated yet, and never after (sooner when its operator sets
``WEBHOOK_LEGACY_HEADERS=false``); this module no longer accepts them alone and needs none of
them — the event is read from the body (:func:`sign` and :func:`verify_signature` remain for
those receivers' tests).

The console counts a 2xx within 10 s as delivered (the console's
``strategies.delivery.transport.TRY_DEADLINE_SECONDS``, for the whole try) and retries anything
else, so the handler answers at once and leaves the work to a background thread
(:meth:`context_runtime.client.ConfigClient.handle_webhook` does exactly that).

To mount it without a web framework, :func:`make_wsgi_app` wraps a handler as a WSGI app.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import http.client
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from context_runtime import _json

__all__ = [
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "MAX_WEBHOOK_BYTES",
    "SIGNATURE_HEADER",
    "SIGNATURE_PREFIX",
    "TOLERANCE_SECONDS",
    "WEBHOOK_ID_HEADER",
    "WEBHOOK_SIGNATURE_HEADER",
    "WEBHOOK_TIMESTAMP_HEADER",
    "Delivery",
    "DeliveryLog",
    "Handler",
    "WebhookRefused",
    "WebhookResult",
    "header_value",
    "make_wsgi_app",
    "read_delivery",
    "sign",
    "sign_delivery",
    "verify_delivery",
    "verify_signature",
]

WEBHOOK_ID_HEADER = "webhook-id"
WEBHOOK_TIMESTAMP_HEADER = "webhook-timestamp"
WEBHOOK_SIGNATURE_HEADER = "webhook-signature"
SIGNATURE_VERSION = "v1"
# A delivery signed more than this long before (or after) the receiver's clock is refused:
# a captured one cannot be replayed later. The Standard Webhooks default.
TOLERANCE_SECONDS = 300
# The old headers, sent by the console during the transition (see the module).
SIGNATURE_PREFIX = "sha256="
EVENT_HEADER = "X-Console-Event"
DELIVERY_HEADER = "X-Console-Delivery"
SIGNATURE_HEADER = "X-Console-Signature"
MAX_WEBHOOK_BYTES = 64 * 1024


def _key(secret: str | bytes) -> bytes:
    return secret.encode() if isinstance(secret, str) else bytes(secret)


def sign_delivery(secret: str | bytes, delivery_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: ``v1,<base64 HMAC-SHA256 of id.timestamp.body>``."""
    signed = f"{delivery_id}.{timestamp}.".encode() + bytes(body)
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return f"{SIGNATURE_VERSION}," + base64.b64encode(digest).decode()


def verify_delivery(
    secret: str | bytes | Iterable[str | bytes],
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float | None = None,
    tolerance: float = TOLERANCE_SECONDS,
) -> str:
    """Check the Standard Webhooks signature of a delivery; return its ``webhook-id``.

    Raises :class:`WebhookRefused` (401) when a header is missing, the timestamp is further
    than ``tolerance`` seconds from ``now``, or no ``v1`` signature in the header matches
    under ``secret`` (or any of several secrets, for a rotation). Constant-time comparison.
    """
    delivery_id = header_value(headers, WEBHOOK_ID_HEADER)
    timestamp = header_value(headers, WEBHOOK_TIMESTAMP_HEADER)
    given = header_value(headers, WEBHOOK_SIGNATURE_HEADER)
    for name, value in (
        (WEBHOOK_ID_HEADER, delivery_id),
        (WEBHOOK_TIMESTAMP_HEADER, timestamp),
        (WEBHOOK_SIGNATURE_HEADER, given),
    ):
        if not value or not value.strip():
            raise WebhookRefused(401, "missing_header", f"{name} is missing.")
    try:
        sent_at = int(timestamp.strip())
    except ValueError:
        raise WebhookRefused(
            401, "bad_timestamp", f"{WEBHOOK_TIMESTAMP_HEADER} is not a number."
        ) from None
    now = time.time() if now is None else now
    if abs(now - sent_at) > tolerance:
        raise WebhookRefused(
            401,
            "stale_timestamp",
            f"The delivery was signed {now - sent_at:+.0f} s from now; at most "
            f"{tolerance:g} s are accepted.",
        )
    offered = []
    for part in given.split():
        version, _, value = part.partition(",")
        if version != SIGNATURE_VERSION:
            continue
        try:
            offered.append(base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError):
            continue
    secrets = [secret] if isinstance(secret, str | bytes) else list(secret)
    signed = f"{delivery_id}.{sent_at}.".encode() + bytes(body)
    matched = False
    for one in secrets:
        if not one:
            continue
        expected = hmac.new(_key(one), signed, hashlib.sha256).digest()
        for candidate in offered:
            # No early exit, so the time taken does not say which secret matched.
            matched |= hmac.compare_digest(expected, candidate)
    if not matched:
        raise WebhookRefused(401, "bad_signature", "The signature does not match the delivery.")
    return delivery_id


def sign(secret: str | bytes, body: bytes) -> str:
    """The old ``X-Console-Signature`` value for ``body``: ``sha256=<hex>`` (the body alone,
    so it can be replayed; sent during the transition only)."""
    return SIGNATURE_PREFIX + hmac.new(_key(secret), body, hashlib.sha256).hexdigest()


def verify_signature(
    secret: str | bytes | Iterable[str | bytes], body: bytes, header: str | None
) -> bool:
    """True when ``header`` is the old ``sha256=<hex HMAC-SHA256 of body>`` under ``secret``
    (or any of several). Constant-time comparison; never raises. :func:`read_delivery` does
    not accept this alone: it does not stop a replay."""
    if not isinstance(header, str) or not isinstance(body, bytes | bytearray):
        return False
    header = header.strip()
    if header[: len(SIGNATURE_PREFIX)].lower() != SIGNATURE_PREFIX:
        return False
    given = header[len(SIGNATURE_PREFIX) :].lower().encode("utf-8", "surrogateescape")
    secrets = [secret] if isinstance(secret, str | bytes) else list(secret)
    matched = False
    for one in secrets:
        if not one:
            continue
        expected = sign(one, bytes(body))[len(SIGNATURE_PREFIX) :].encode()
        # No early exit, so the time taken does not say which secret matched.
        matched |= hmac.compare_digest(expected, given)
    return matched


@dataclass(frozen=True)
class WebhookResult:
    """What to answer the console: ``status`` (HTTP), ``outcome`` (a machine word) and a
    sentence. 2xx for everything the console should not retry."""

    status: int
    outcome: str
    message: str = ""

    def as_json(self) -> bytes:
        return msgspec.json.encode({"outcome": self.outcome, "message": self.message})


class WebhookRefused(Exception):
    def __init__(self, status: int, outcome: str, message: str):
        super().__init__(message)
        self.status, self.outcome, self.message = status, outcome, message

    def result(self) -> WebhookResult:
        return WebhookResult(self.status, self.outcome, self.message)


@dataclass(frozen=True)
class Delivery:
    """One verified delivery: the headers' event and id, and the body's fields."""

    event: str
    delivery: str
    body: Mapping[str, Any]

    @property
    def agent(self) -> str | None:
        return _text(self.body.get("agent"))

    @property
    def environment(self) -> str | None:
        return _text(self.body.get("environment"))

    @property
    def etag(self) -> str | None:
        return _text(self.body.get("etag"))

    @property
    def action(self) -> str | None:
        return _text(self.body.get("action"))


def header_value(headers: Mapping[str, str], name: str) -> str | None:
    """A header from a dict (any case), an ``email.message.Message``, Django's
    ``request.headers`` or a WSGI environ (``HTTP_WEBHOOK_SIGNATURE``)."""
    value = headers.get(name)
    if value is None:
        value = headers.get("HTTP_" + name.upper().replace("-", "_"))
    if value is None:
        lowered = name.lower()
        value = next((v for k, v in headers.items() if str(k).lower() == lowered), None)
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return value if isinstance(value, str) else None


def read_delivery(
    secrets: Iterable[str | bytes], headers: Mapping[str, str], body: bytes
) -> Delivery:
    """Verify and read a delivery; raise :class:`WebhookRefused` with the status to answer."""
    secrets = tuple(secrets)
    if not secrets:
        raise WebhookRefused(401, "not_configured", "No webhook secret is configured here.")
    if not isinstance(body, bytes | bytearray):
        raise WebhookRefused(400, "malformed", "The body must be the raw bytes received.")
    if len(body) > MAX_WEBHOOK_BYTES:
        raise WebhookRefused(413, "too_large", "The delivery is larger than a webhook can be.")
    delivery = verify_delivery(secrets, headers, bytes(body))
    try:
        data = _json.decode(body)
    except (msgspec.DecodeError, ValueError) as error:
        raise WebhookRefused(400, "malformed", f"The body is not JSON: {error}") from error
    if not isinstance(data, dict):
        raise WebhookRefused(400, "malformed", "The body must be a JSON object.")
    # The signed body's event first; the header is not signed.
    event = _text(data.get("event")) or header_value(headers, EVENT_HEADER) or ""
    return Delivery(event=event, delivery=delivery, body=data)


class DeliveryLog:
    """The last ``size`` delivery ids seen, so a retried delivery is acted on once."""

    def __init__(self, size: int = 1024):
        self._size = size
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def first_time(self, delivery_id: str) -> bool:
        with self._lock:
            if delivery_id in self._seen:
                self._seen.move_to_end(delivery_id)
                return False
            self._seen[delivery_id] = None
            if len(self._seen) > self._size:
                self._seen.popitem(last=False)
            return True

    def forget(self, delivery_id: str) -> None:
        """Let a delivery that could not be acted on count as new when it comes again."""
        with self._lock:
            self._seen.pop(delivery_id, None)


Handler = Callable[[Mapping[str, str], bytes], WebhookResult]


def make_wsgi_app(handler: Handler, *, max_body_bytes: int = MAX_WEBHOOK_BYTES):
    """A WSGI app that passes every POST to ``handler(headers, raw_body)`` (for example
    ``config_client.handle_webhook``) and answers with its :class:`WebhookResult` as JSON."""

    def app(environ, start_response):
        if environ.get("REQUEST_METHOD") != "POST":
            return _answer(start_response, WebhookResult(405, "method_not_allowed", "POST only."))
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > max_body_bytes:
            return _answer(start_response, WebhookResult(413, "too_large", "Body too large."))
        body = environ["wsgi.input"].read(length) if length else b""
        return _answer(start_response, handler(environ, body))

    return app


def _answer(start_response, result: WebhookResult):
    data = result.as_json()
    reason = http.client.responses.get(result.status, "Error")
    start_response(
        f"{result.status} {reason}",
        [("Content-Type", "application/json"), ("Content-Length", str(len(data)))],
    )
    return [data]


def _text(value) -> str | None:
    return value if isinstance(value, str) and value else None
