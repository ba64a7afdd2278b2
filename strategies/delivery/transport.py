"""How the console calls a URL it was given (docs/runtime-api.md §4): public addresses only,
one POST within one deadline. Knows nothing of deliveries (strategies.delivery.webhooks).

A URL whose host is, or resolves to, a private, loopback, link-local, reserved, multicast or
unspecified address (IPv4-mapped IPv6 included) is refused, unless
`WEBHOOK_ALLOW_PRIVATE_TARGETS` is on (tests, on-premise receivers); the cloud metadata
address never. A POST resolves the host once, checks every address and connects to a checked
one (so a DNS answer that changes between check and connect cannot switch it), with the URL's
host in the Host header and as TLS server name. Redirects are not followed (the 3xx is the
answer), only the status and headers are read, and the whole POST ends at
`TRY_DEADLINE_SECONDS` whatever the receiver does.
"""

from __future__ import annotations

import http.client
import io
import ipaddress
import socket
import ssl
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django.conf import settings

# The whole of one try — resolution, connect, TLS, sending, the answer's status and headers.
TRY_DEADLINE_SECONDS = 10.0
_DEFAULT_PORTS = {"http": 80, "https": 443}
# Never a receiver, whatever the setting says.
_METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


# --- which targets the console calls -----------------------------------------------------------
class TargetRefused(Exception):
    """The URL's host is, or resolves to, an address the console does not call."""


class TargetUnresolved(Exception):
    """The URL's host does not resolve (now): a try fails and is retried."""


@dataclass(frozen=True)
class Target:
    """A URL resolved once: the checked addresses to connect to, in order."""

    scheme: str
    host: str  # as in the URL, without brackets
    port: int
    path: str  # path and query, as sent in the request line
    addresses: tuple[str, ...]

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == _DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (IPv4-mapped, 6to4, NAT64), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_refusal(address: str) -> str | None:
    """Why the console does not call `address` (a sentence fragment), or None."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 scope id is not part of it
    if isinstance(ip, ipaddress.IPv6Address):
        ip = _embedded_ipv4(ip) or ip
    if ip in _METADATA_ADDRESSES:
        return "the cloud metadata address"
    if ip.is_unspecified:
        return "an unspecified address"
    if ip.is_multicast:
        return "a multicast address"
    if settings.WEBHOOK_ALLOW_PRIVATE_TARGETS:
        return None
    for refused, label in (
        (ip.is_loopback, "a loopback address"),
        (ip.is_link_local, "a link-local address"),
        (ip.is_private, "a private address"),
        (ip.is_reserved, "a reserved address"),
        (not ip.is_global, "not a public address"),
    ):
        if refused:
            return label
    return None


def target_resolve(url: str) -> Target:
    """Resolve the URL's host once and check every address (TargetRefused, TargetUnresolved)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise TargetRefused("not an http(s) URL")
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError as exc:
        raise TargetRefused("the port is not a number from 1 to 65535") from exc
    host = parts.hostname
    addresses = host_resolve(host, port)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(scheme=scheme, host=host, port=port, path=path, addresses=addresses)


def host_resolve(host: str, port: int) -> tuple[str, ...]:
    """The host's addresses, resolved once, each checked (TargetRefused, TargetUnresolved):
    for URLs (`target_resolve`) and for the SIEM's syslog addresses (host:port)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise TargetUnresolved(f"{host} does not resolve ({exc})") from exc
    addresses = tuple(dict.fromkeys(info[4][0] for info in infos))
    if not addresses:
        raise TargetUnresolved(f"{host} does not resolve")
    for address in addresses:
        reason = address_refusal(address)
        if reason:
            where = address if address == host else f"{host} resolves to {address}"
            raise TargetRefused(f"{where}, {reason}")
    return addresses


# --- one POST within one deadline ----------------------------------------------------------------
def tls_context() -> ssl.SSLContext:
    """The TLS settings of a try: the system's trust store, the host name checked."""
    return ssl.create_default_context()


class _DeadlineReader(io.RawIOBase):
    """Reads from the socket, each read waiting at most until the try's deadline."""

    def __init__(self, sock, deadline: float):
        self._sock, self._deadline = sock, deadline
        # Counted as socket.makefile counts its readers: the connection closes its socket once
        # the answer's head is read (`will_close`), and the body (`get`) is read after that.
        sock._io_refs += 1

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        if not self.closed:
            self._sock._decref_socketios()
        super().close()

    def readinto(self, buffer) -> int:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the try's deadline passed")
        self._sock.settimeout(remaining)
        return self._sock.recv_into(buffer)


class _DeadlineSocket:
    """What `http.client.HTTPResponse` reads the answer from: the socket, behind the deadline."""

    def __init__(self, sock, deadline: float):
        self._sock, self._deadline = sock, deadline

    def makefile(self, mode="rb", *args, **kwargs):
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))


def _answer_read_until(deadline: float):
    """An `HTTPConnection.response_class` whose reads all end by `deadline`."""

    def response(sock, *args, **kwargs):
        return http.client.HTTPResponse(_DeadlineSocket(sock, deadline), *args, **kwargs)

    return response


def _remaining(deadline: float) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("the try's deadline passed")
    return remaining


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """TLS to a checked address, with the URL's host name as server name (SNI) and as the
    name the certificate must carry."""

    def __init__(self, address: str, port: int, *, server_hostname: str, deadline: float):
        super().__init__(address, port, timeout=_remaining(deadline), context=tls_context())
        self._server_hostname, self._deadline = server_hostname, deadline

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)  # TCP to the pinned address
        self.sock.settimeout(_remaining(self._deadline))  # the handshake, as a whole
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._server_hostname)


def _connection(target: Target, address: str, deadline: float) -> http.client.HTTPConnection:
    if target.scheme == "https":
        conn = _PinnedHTTPSConnection(
            address, target.port, server_hostname=target.host, deadline=deadline
        )
    else:
        conn = http.client.HTTPConnection(address, target.port, timeout=_remaining(deadline))
    conn.response_class = _answer_read_until(deadline)
    return conn


def _post(
    target: Target, body: bytes | None, headers: dict, deadline: float, *, method="POST", read=0
) -> tuple[int, str, bytes, dict[str, str]]:
    """POST (or `method`) to the first checked address that accepts a connection: (status,
    Location, the first `read` bytes of the answer's body, its headers lower-cased)."""
    connect_error: OSError | None = None
    for address in target.addresses:
        conn = _connection(target, address, deadline)
        try:
            try:
                conn.connect()
            except ssl.SSLError:
                raise  # the receiver answered: its certificate is wrong, not its address
            except OSError as exc:
                connect_error = exc
                continue
            conn.sock.settimeout(_remaining(deadline))  # sendall: a total, not per chunk
            conn.request(method, target.path, body=body, headers=headers)
            response = conn.getresponse()
            content = response.read(read) if read else b""
            headers = {name.lower(): value for name, value in response.getheaders()}
            return response.status, headers.get("location", ""), content, headers
        finally:
            conn.close()
    raise connect_error or OSError("no address to connect to")


class PostFailed(Exception):
    """No answer (in time): the message says why, as kept in a try's log."""


@dataclass(frozen=True)
class Answer:
    status: int
    location: str  # the Location header ("" if none): a redirect is reported, not followed
    body: bytes = b""  # read only by `get`, at most its `limit` bytes
    headers: dict[str, str] = field(default_factory=dict)  # names lower-cased


def post(url: str, body: bytes, headers: dict) -> Answer:
    """POST `body` to `url` within `TRY_DEADLINE_SECONDS`, the Host header set from the URL.
    Raises TargetRefused (never worth another try), TargetUnresolved or PostFailed."""
    return _call(url, body, headers, method="POST", read=0)


def get(url: str, headers: dict, *, limit: int = 65536) -> Answer:
    """GET `url` under the same rules and deadline as `post`, reading at most `limit` bytes
    of the answer (a change system's status, strategies.releases.services.changes)."""
    return _call(url, None, headers, method="GET", read=limit)


def _call(url: str, body: bytes | None, headers: dict, *, method: str, read: int) -> Answer:
    deadline = time.monotonic() + TRY_DEADLINE_SECONDS
    target = target_resolve(url)
    try:
        status, location, content, answer_headers = _post(
            target,
            body,
            {"Host": target.host_header, **headers},
            deadline,
            method=method,
            read=read,
        )
    except TimeoutError as exc:
        if time.monotonic() >= deadline - 0.05:
            raise PostFailed(f"deadline: no answer within {TRY_DEADLINE_SECONDS:g} s") from exc
        raise PostFailed(f"TimeoutError: {exc}") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise PostFailed(f"{type(exc).__name__}: {exc}") from exc
    return Answer(status, location, content, answer_headers)
