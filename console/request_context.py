"""Per-request context that services read without being handed the request: the request id
(for audit rows and logs), the client IP and the path (for refusals in the access log)."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestContext:
    request_id: str = ""
    ip: str | None = None
    path: str = ""


current_request: contextvars.ContextVar[RequestContext] = contextvars.ContextVar(
    "console_request",
    default=RequestContext(),  # noqa: B039 - frozen dataclass, immutable
)


def client_ip(request) -> str | None:
    # Behind a proxy, set the proxy to overwrite X-Forwarded-For; the first hop is the client.
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    return (forwarded.split(",")[0].strip() or request.META.get("REMOTE_ADDR")) or None
