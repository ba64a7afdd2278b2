"""Webhooks from the console (RUNTIME_API §4): check the signature, read the delivery.

The console POSTs ``release.changed`` with ``X-Console-Event``, ``X-Console-Delivery`` (the
idempotency key, the same on every retry) and ``X-Console-Signature: sha256=<hex HMAC-SHA256 of
the raw body with the webhook's secret>``. It counts a 2xx within 10 s as delivered (the
console's ``strategies.delivery.transport.TRY_DEADLINE_SECONDS``, for the whole try) and
retries anything else, so the handler answers at once and leaves the work to a background thread
(:meth:`context_runtime.client.ConfigClient.handle_webhook` does exactly that).

To mount it without a web framework, :func:`make_wsgi_app` wraps a handler as a WSGI app.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

__all__ = [
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "MAX_WEBHOOK_BYTES",
    "SIGNATURE_HEADER",
    "SIGNATURE_PREFIX",
    "Delivery",
    "DeliveryLog",
    "Handler",
    "WebhookRefused",
    "WebhookResult",
    "header_value",
    "make_wsgi_app",
    "read_delivery",
    "sign",
    "verify_signature",
]

SIGNATURE_PREFIX = "sha256="
EVENT_HEADER = "X-Console-Event"
DELIVERY_HEADER = "X-Console-Delivery"
SIGNATURE_HEADER = "X-Console-Signature"
MAX_WEBHOOK_BYTES = 64 * 1024


def sign(secret: str | bytes, body: bytes) -> str:
    """The ``X-Console-Signature`` value for ``body``: ``sha256=<hex>``."""
    key = secret.encode() if isinstance(secret, str) else secret
    return SIGNATURE_PREFIX + hmac.new(key, body, hashlib.sha256).hexdigest()


def verify_signature(
    secret: str | bytes | Iterable[str | bytes], body: bytes, header: str | None
) -> bool:
    """True when ``header`` is ``sha256=<hex HMAC-SHA256 of body>`` under ``secret`` (or under
    any of several secrets, for a rotation). Constant-time comparison; never raises."""
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
    ``request.headers`` or a WSGI environ (``HTTP_X_CONSOLE_SIGNATURE``)."""
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
    if not verify_signature(secrets, bytes(body), header_value(headers, SIGNATURE_HEADER)):
        raise WebhookRefused(401, "bad_signature", "The signature does not match the body.")
    try:
        data = msgspec.json.decode(body)
    except (msgspec.DecodeError, ValueError) as error:
        raise WebhookRefused(400, "malformed", f"The body is not JSON: {error}") from error
    if not isinstance(data, dict):
        raise WebhookRefused(400, "malformed", "The body must be a JSON object.")
    event = header_value(headers, EVENT_HEADER) or _text(data.get("event")) or ""
    delivery = header_value(headers, DELIVERY_HEADER) or ""
    if not delivery:
        raise WebhookRefused(400, "malformed", f"{DELIVERY_HEADER} is missing.")
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
