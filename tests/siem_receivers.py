"""Small real SIEM receivers on loopback for the SIEM streaming tests (docs/siem.md): a syslog
receiver (RFC 5424 over TCP, octet-counted framing per RFC 6587, TLS when given a certificate),
an HTTP receiver shaped as Splunk's HTTP Event Collector, and an OTLP/HTTP logs receiver.

Each parses what it gets strictly (a malformed frame or body fails the test through
`problems`), keeps the events in arrival order, and can be stopped and started again on the
same port (a sink that is down for a while)."""

from __future__ import annotations

import json
import re
import socket
import socketserver
import ssl
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# <PRI>VERSION SP TIMESTAMP SP HOSTNAME SP APP-NAME SP PROCID SP MSGID SP SD SP MSG
SYSLOG_5424 = re.compile(
    rb"^<(?P<pri>\d{1,3})>1 (?P<ts>\S+) (?P<host>\S+) (?P<app>\S+) (?P<procid>\S+) "
    rb"(?P<msgid>\S+) (?P<sd>\[[^ \]]+(?: [^=\s]+=\"(?:[^\"\\\]]|\\.)*\")*\]) (?P<msg>.*)$",
    re.S,
)


@dataclass
class Received:
    events: list[dict] = field(default_factory=list)  # the console's events, in arrival order
    raw: list = field(default_factory=list)  # the messages / request bodies as parsed
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ids(self) -> list[str]:
        with self.lock:
            return [e["id"] for e in self.events]


class _Receiver:
    """A receiver's server thread: started by `start`, stopped (the port closed) by `stop`."""

    _server = None

    def _serve(self, server) -> None:
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


# --- syslog --------------------------------------------------------------------------------------
def _read_frames(stream, received: Received) -> None:
    """Octet-counted frames until EOF: `LEN SP MSG`."""
    while True:
        digits = b""
        while True:
            c = stream.read(1)
            if not c:
                if digits:
                    received.problems.append(f"EOF inside a frame length {digits!r}")
                return
            if c == b" ":
                break
            if not c.isdigit() or len(digits) > 9:
                received.problems.append(f"not octet-counted framing: {digits + c!r}")
                return
            digits += c
        message = stream.read(int(digits))
        if len(message) != int(digits):
            received.problems.append("a frame shorter than its length")
            return
        match = SYSLOG_5424.match(message)
        if not match:
            received.problems.append(f"not RFC 5424: {message[:120]!r}")
            continue
        body = match["msg"]
        if not body.startswith(b"\xef\xbb\xbf"):
            received.problems.append("MSG without the UTF-8 BOM")
        event = json.loads(body.removeprefix(b"\xef\xbb\xbf"))
        sd_id = re.search(rb'eventId="([^"]+)"', match["sd"])
        if not sd_id or sd_id[1].decode() != event["id"]:
            received.problems.append(f"SD eventId does not match {event['id']}")
        with received.lock:
            received.raw.append(match.groupdict())
            received.events.append(event)


class SyslogReceiver(_Receiver):
    """`tcp://127.0.0.1:<port>` (or `tcp+tls://localhost:<port>` with `certfile`/`keyfile`)."""

    def __init__(self, *, certfile: Path | None = None, keyfile: Path | None = None):
        self.received = Received()
        self.delay = 0.0  # seconds each connection waits before it is read (a slow receiver)
        self.port = _free_port()
        self.tls = certfile is not None
        self._context = None
        if self.tls:
            self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._context.load_cert_chain(certfile, keyfile)

    @property
    def url(self) -> str:
        return f"tcp+tls://localhost:{self.port}" if self.tls else f"tcp://127.0.0.1:{self.port}"

    def start(self) -> SyslogReceiver:
        received, context, receiver = self.received, self._context, self

        class Handler(socketserver.StreamRequestHandler):
            def setup(self):
                if context is not None:
                    try:
                        self.request = context.wrap_socket(self.request, server_side=True)
                    except (ssl.SSLError, OSError):
                        self.request = None
                        return
                super().setup()

            def handle(self):
                if self.request is None:
                    return
                time.sleep(receiver.delay)
                try:
                    _read_frames(self.rfile, received)
                except (ssl.SSLError, OSError) as exc:
                    received.problems.append(f"read: {exc}")

            def finish(self):
                if self.request is not None:
                    super().finish()

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

        self._serve(Server(("127.0.0.1", self.port), Handler))
        return self


# --- HTTP receivers --------------------------------------------------------------------------------
class _HttpReceiver(_Receiver):
    path = "/"

    def __init__(self, *, token: str = ""):
        self.received = Received()
        self.token = token
        self.answer = 200  # what the receiver says (403: it refuses the credential)
        self.port = _free_port()
        self.headers: list[dict] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def parse(self, body: bytes) -> list[dict]:
        raise NotImplementedError

    def authorised(self, authorization: str) -> bool:
        raise NotImplementedError

    def start(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.headers.append(dict(self.headers))
                status = receiver.answer
                if self.path != receiver.path:
                    status = 404
                elif not receiver.authorised(self.headers.get("Authorization", "")):
                    status = 403
                if status == 200:
                    try:
                        events = receiver.parse(body)
                    except (ValueError, KeyError, TypeError, AssertionError) as exc:
                        receiver.received.problems.append(f"{type(exc).__name__}: {exc}")
                        status = 400
                    else:
                        with receiver.received.lock:
                            receiver.received.raw.append(body)
                            receiver.received.events.extend(events)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"text":"Success","code":0}' if status == 200 else b"{}")

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self._serve(server)
        return self


def _json_objects(body: bytes) -> list[dict]:
    """Concatenated JSON objects (whitespace between them allowed), as HEC takes them."""
    decoder, text, at, out = json.JSONDecoder(), body.decode(), 0, []
    while at < len(text):
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            break
        value, at = decoder.raw_decode(text, at)
        out.append(value)
    return out


class HecReceiver(_HttpReceiver):
    """Splunk HTTP Event Collector: POST /services/collector/event, `Authorization: Splunk
    <token>`, a batch of concatenated event objects."""

    path = "/services/collector/event"

    def authorised(self, authorization: str) -> bool:
        return authorization == f"Splunk {self.token}"

    def parse(self, body: bytes) -> list[dict]:
        events = []
        for item in _json_objects(body):
            assert set(item) >= {"time", "host", "source", "sourcetype", "event"}, item
            assert isinstance(item["time"], int | float)
            events.append(item["event"])
        return events


class OtlpReceiver(_HttpReceiver):
    """OpenTelemetry logs over OTLP/HTTP JSON: POST /v1/logs, an ExportLogsServiceRequest."""

    path = "/v1/logs"

    def authorised(self, authorization: str) -> bool:
        return not self.token or authorization == f"Bearer {self.token}"

    def parse(self, body: bytes) -> list[dict]:
        request = json.loads(body)
        events = []
        for resource_logs in request["resourceLogs"]:
            attributes = {a["key"]: a["value"] for a in resource_logs["resource"]["attributes"]}
            assert attributes["service.name"] == {"stringValue": "context-console"}
            for scope_logs in resource_logs["scopeLogs"]:
                assert scope_logs["scope"]["name"].startswith("context-console.")
                for record in scope_logs["logRecords"]:
                    int(record["timeUnixNano"])
                    assert 1 <= record["severityNumber"] <= 24
                    event = json.loads(record["body"]["stringValue"])
                    attrs = {a["key"]: a["value"]["stringValue"] for a in record["attributes"]}
                    assert attrs["event.id"] == event["id"]
                    events.append(event)
        return events


# --- helpers ---------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def self_signed_certificate(directory: Path, host: str = "localhost") -> tuple[Path, Path, str]:
    """A self-signed certificate for `host` (its own CA): (certfile, keyfile, PEM text)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = certificate.public_bytes(serialization.Encoding.PEM)
    certfile, keyfile = directory / f"{host}.crt", directory / f"{host}.key"
    certfile.write_bytes(pem)
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return certfile, keyfile, pem.decode()
