"""HTTP to the console for the runtime's background threads: one request at a time, always
within one deadline, the bearer token of RUNTIME_API "Authentication", and a readable summary of
the contract's error shape.

Standard library only (``urllib.request``), so proxies from the environment (``HTTPS_PROXY``,
``NO_PROXY``) are honoured. Redirects are not followed: a redirect would carry the runtime token
to wherever it points, and the runtime API never redirects.

A request's ``timeout`` is one deadline for all of it (connect, TLS, send, status line,
headers, body), not a bound per socket read: a console (or a proxy) trickling a byte at a time
must not hold a refresh, and with it an emergency rollback, for longer than ``timeout``.
Every socket operation gets what is left of the deadline as its own timeout. (Name
resolution is the system resolver's and is not bounded here.)
"""

from __future__ import annotations

import functools
import http.client
import io
import os
import random
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from context_runtime import __version__, _json

API_PREFIX = "/api/v1/runtime/"
USER_AGENT = f"context-runtime/{__version__} (python)"
# Largest answer read from the console (the config payload is the big one; its bodies are at
# most 64 KiB each).  Anything larger is garbage, not a configuration.
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024


class TransportError(Exception):
    """The console could not be asked: refused, reset, DNS, TLS, timeout, oversized answer."""


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]  # an ``email.message.Message``: lookups ignore case
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def error_summary(self) -> str:
        """``"401 not_authenticated: <message>"`` from the contract's error shape, or the
        status and the start of the body when the answer is not in that shape."""
        code, message = error_of(self.body)
        if code or message:
            return f"HTTP {self.status} {code}: {message}".rstrip(": ")
        snippet = self.body[:120].decode("utf-8", "replace").strip()
        reason = http.client.responses.get(self.status, "")
        return f"HTTP {self.status} {reason}" + (f": {snippet}" if snippet else "")


def error_of(body: bytes) -> tuple[str, str]:
    """``(code, message)`` of ``{"error": {"code", "message", ...}}``; empty strings if the
    body is something else."""
    try:
        data = _json.decode(body)
    except (msgspec.DecodeError, ValueError):
        return "", ""
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return "", ""
    code, message = error.get("code", ""), error.get("message", "")
    return (code if isinstance(code, str) else ""), (message if isinstance(message, str) else "")


def default_instance_id() -> str:
    """What names this process to the console (heartbeats, manifest reports): ``<host>:<pid>``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def runtime_url(base_url: str, path: str) -> str:
    """``https://console.example/`` + ``config/assistant`` → the full runtime API URL."""
    return base_url.rstrip("/") + API_PREFIX + path.lstrip("/")


def quote_segment(value: str) -> str:
    return urllib.parse.quote(value, safe="")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # urllib then raises HTTPError with the 3xx status


class _DeadlineReader(io.RawIOBase):
    """The raw reader under an HTTP response: each read may take what is left of the
    request's deadline, no more, however few bytes each read brings."""

    def __init__(self, sock, deadline: float):
        super().__init__()
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)  # counts as a user of the socket
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, b):
        self._sock.settimeout(_time_left(self._deadline))
        return self._raw.readinto(b)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


class _DeadlineResponse(http.client.HTTPResponse):
    def __init__(self, sock, *args, deadline: float, **kwargs):
        super().__init__(sock, *args, **kwargs)
        self.fp.close()  # the plain reader of the base class, replaced before any read
        self.fp = io.BufferedReader(_DeadlineReader(sock, deadline))


class _DeadlineConnection:
    """Mixed into http.client's connections: connect, send and every read within the
    request's deadline (``deadline``: a ``time.monotonic()`` value)."""

    def __init__(self, *args, deadline: float, **kwargs):
        super().__init__(*args, **kwargs)
        self._deadline = deadline
        self.response_class = functools.partial(_DeadlineResponse, deadline=deadline)
        self._create_connection = self._connect_in_time  # the base class sets it per instance

    def _connect_in_time(self, address, timeout, source_address=None):
        sock = socket.create_connection(address, _time_left(self._deadline), source_address)
        sock.settimeout(_time_left(self._deadline))  # the TLS handshake that follows
        return sock

    def send(self, data):
        if self.sock is not None:
            self.sock.settimeout(_time_left(self._deadline))
        super().send(data)


class _DeadlineHTTPConnection(_DeadlineConnection, http.client.HTTPConnection):
    pass


class _DeadlineHTTPSConnection(_DeadlineConnection, http.client.HTTPSConnection):
    pass


def _time_left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the request's deadline passed")
    return left


_DEADLINE_CONNECTIONS = {
    http.client.HTTPConnection: _DeadlineHTTPConnection,
    http.client.HTTPSConnection: _DeadlineHTTPSConnection,
}


class _DeadlineHandler:
    """Mixed into urllib's handlers: their connections keep the request's deadline."""

    def do_open(self, http_class, req, **kwargs):
        connection = functools.partial(_DEADLINE_CONNECTIONS[http_class], deadline=req.deadline)
        return super().do_open(connection, req, **kwargs)


class _DeadlineHTTPHandler(_DeadlineHandler, urllib.request.HTTPHandler):
    pass


class _DeadlineHTTPSHandler(_DeadlineHandler, urllib.request.HTTPSHandler):
    pass


_OPENER = urllib.request.build_opener(_NoRedirect(), _DeadlineHTTPHandler, _DeadlineHTTPSHandler)


def request(
    method: str,
    url: str,
    *,
    token: str,
    timeout: float,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> Response:
    """Send one request and return the answer whatever its status.

    ``timeout`` bounds the whole request, from connecting to the last byte of the body.
    Raises :class:`TransportError` when there is no HTTP answer to return.
    """
    if not url.startswith(("http://", "https://")):
        raise TransportError(f"{url} is not an http(s) URL.")
    all_headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
    }
    if body is not None:
        all_headers["Content-Type"] = "application/json"
    all_headers.update(headers or {})
    req = urllib.request.Request(url, data=body, method=method, headers=all_headers)  # noqa: S310
    req.deadline = time.monotonic() + timeout  # read by the deadline handlers above
    try:
        try:
            answer = _OPENER.open(req, timeout=timeout)
        except urllib.error.HTTPError as error:  # every non-2xx status, 304 included
            status, response_headers = error.code, error.headers
            data = error.read(max_response_bytes + 1) if error.fp is not None else b""
            error.close()
        else:
            with answer:
                status, response_headers = answer.status, answer.headers
                data = answer.read(max_response_bytes + 1)
    except TimeoutError as error:
        raise TransportError(f"no answer within {timeout:g} s ({method} {url})") from error
    except urllib.error.URLError as error:
        if isinstance(error.reason, TimeoutError):
            raise TransportError(f"no answer within {timeout:g} s ({method} {url})") from error
        raise TransportError(
            f"cannot reach the console: {error.reason} ({method} {url})"
        ) from error
    except (OSError, http.client.HTTPException, ValueError) as error:
        raise TransportError(f"{type(error).__name__}: {error} ({method} {url})") from error
    if len(data) > max_response_bytes:
        raise TransportError(
            f"the answer to {method} {url} is larger than {max_response_bytes:,} bytes"
        )
    return Response(status=status, headers=response_headers, body=data)


def backoff_delay(
    failures: int, initial: float, maximum: float, rng: random.Random | None = None
) -> float:
    """Seconds to wait after ``failures`` failures in a row: ``initial`` doubled per failure,
    capped at ``maximum``, with jitter in the upper half ("equal jitter") so that many runtimes
    failing together do not retry together, while no wait is shorter than half its step."""
    step = min(maximum, initial * (2 ** max(0, failures - 1)))
    return (rng or random).uniform(step / 2, step)


def retry_after_seconds(response: Response) -> float | None:
    """``Retry-After`` in seconds when it is a number (the HTTP-date form is ignored)."""
    value = response.header("Retry-After")
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
