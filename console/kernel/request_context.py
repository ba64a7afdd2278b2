"""Per-request context that services read without being handed the request: the request id
(for audit rows and logs), the client IP and the path (for refusals in the access log)."""

from __future__ import annotations

import contextvars
import ipaddress
from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class RequestContext:
    request_id: str = ""
    ip: str | None = None
    path: str = ""


current_request: contextvars.ContextVar[RequestContext] = contextvars.ContextVar(
    "console_request",
    default=RequestContext(),  # noqa: B039 - frozen dataclass, immutable
)

_LONGEST_ADDRESS = 64  # "[v6%zone]:port" fits; anything longer is not an address


def ip_normalise(value) -> str | None:
    """One canonical text form of an IP address, or None when `value` is not one.

    Accepts what proxies write (`192.0.2.1:8080`, `[2001:db8::1]:443`, an IPv6 zone such as
    `fe80::1%eth0`); an IPv4-mapped IPv6 address is its IPv4 address. Everything that stores
    or hashes an address (the audit and access logs, django-axes) gets it from here, so the
    same client is one value and a hash matches what the database hands back.
    """
    text = str(value or "").strip()
    if not text or len(text) > _LONGEST_ADDRESS:
        return None
    if text.startswith("["):  # [v6]:port
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:  # v4:port
        text = text.partition(":")[0]
    text = text.partition("%")[0]  # the zone is local to the sender's host
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.compressed


def client_ip(request) -> str | None:
    """The client's address: REMOTE_ADDR, or — behind TRUSTED_PROXY_HOPS proxies that each
    append the address they saw to X-Forwarded-For — the entry the outermost trusted proxy
    wrote (that many from the right). Entries further left are whatever the client sent and
    are never read. A header with fewer entries than trusted hops did not come through the
    proxies, and an entry that is not an address is no answer: REMOTE_ADDR then.

    django-axes asks this too (AXES_CLIENT_IP_CALLABLE): lockouts and the logs agree."""
    remote = ip_normalise(request.META.get("REMOTE_ADDR"))
    hops = settings.TRUSTED_PROXY_HOPS
    if hops <= 0:
        return remote
    forwarded = [
        entry.strip()
        for entry in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
        if entry.strip()
    ]
    if len(forwarded) < hops:
        return remote
    return ip_normalise(forwarded[-hops]) or remote
