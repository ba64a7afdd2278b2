"""HTTP to the console for the runtime's background threads: one request at a time, always
with a timeout, the bearer token of RUNTIME_API "Authentication", and a readable summary of
the contract's error shape.

Standard library only (``urllib.request``), so proxies from the environment (``HTTPS_PROXY``,
``NO_PROXY``) are honoured. Redirects are not followed: a redirect would carry the runtime token
to wherever it points, and the runtime API never redirects.
"""

from __future__ import annotations

import http.client
import random
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from context_runtime import __version__

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
        data = msgspec.json.decode(body)
    except (msgspec.DecodeError, ValueError):
        return "", ""
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return "", ""
    code, message = error.get("code", ""), error.get("message", "")
    return (code if isinstance(code, str) else ""), (message if isinstance(message, str) else "")


def runtime_url(base_url: str, path: str) -> str:
    """``https://console.example/`` + ``config/assistant`` → the full runtime API URL."""
    return base_url.rstrip("/") + API_PREFIX + path.lstrip("/")


def quote_segment(value: str) -> str:
    return urllib.parse.quote(value, safe="")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # urllib then raises HTTPError with the 3xx status


_OPENER = urllib.request.build_opener(_NoRedirect())


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

    ``timeout`` bounds connecting and every read of the socket. Raises
    :class:`TransportError` when there is no HTTP answer to return.
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
