"""Webhook targets (docs/runtime-api.md §4): the console never calls an internal address
unless `WEBHOOK_ALLOW_PRIVATE_TARGETS` allows it, follows no redirect, bounds each try by one
overall deadline, and holds no row lock or transaction while it POSTs.

Network rule of these tests: they talk to loopback receivers only. Refusals of private,
link-local and metadata addresses are checked before any connection: host names resolve
through a fake resolver, and a guard on `socket.create_connection` refuses (and records)
any connection that is not to loopback, so a regression cannot send traffic elsewhere.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.db import DatabaseError, connection, connections, transaction
from django.urls import reverse
from django.utils import timezone

from console.kernel.errors import ValidationFailed
from strategies.delivery import transport, webhooks
from strategies.delivery.models import Webhook, WebhookAttempt, WebhookDelivery
from tests.factories import EnvironmentFactory, user_with_grants

REAL_GETADDRINFO = socket.getaddrinfo
REAL_CREATE_CONNECTION = socket.create_connection
BODY = b'{"event": "release.changed"}'


# --- a fake resolver and a guard on outgoing connections ----------------------------------------
class Network:
    """Host names resolve from `names` (nothing else is looked up); connections go to loopback
    only, except an address listed in `redirect`, which lands on a loopback port instead."""

    def __init__(self):
        self.names: dict[str, list[str]] = {}
        self.lookups: list[str] = []
        self.redirect: dict[str, tuple[str, int]] = {}
        self.connects: list[tuple[str, int]] = []
        self.refused: list[tuple[str, int]] = []

    def getaddrinfo(self, host, port, family=0, type=0, proto=0, flags=0):  # noqa: A002
        self.lookups.append(host)
        if host in self.names:
            return [
                (
                    socket.AF_INET6 if ":" in ip else socket.AF_INET,
                    socket.SOCK_STREAM,
                    socket.IPPROTO_TCP,
                    "",
                    (ip, int(port), 0, 0) if ":" in ip else (ip, int(port)),
                )
                for ip in self.names[host]
            ]
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if host != "localhost":
                raise socket.gaierror(socket.EAI_NONAME, f"{host}: unknown to the test") from None
        return REAL_GETADDRINFO(host, port, family, type, proto, flags)

    def create_connection(self, address, *args, **kwargs):
        host, port = address[0], int(address[1])
        self.connects.append((host, port))
        if host in self.redirect:
            return REAL_CREATE_CONNECTION(self.redirect[host], *args, **kwargs)
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            self.refused.append((host, port))
            raise ConnectionRefusedError(f"test guard: no traffic to {host}:{port}")
        return REAL_CREATE_CONNECTION(address, *args, **kwargs)


@pytest.fixture
def network(monkeypatch):
    net = Network()
    monkeypatch.setattr(socket, "getaddrinfo", net.getaddrinfo)
    monkeypatch.setattr(socket, "create_connection", net.create_connection)
    yield net
    assert net.refused == [], "the console tried to connect outside loopback"


@pytest.fixture
def private_refused(settings):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False


@pytest.fixture
def private_allowed(settings):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True


# --- a loopback receiver --------------------------------------------------------------------------
class Receiver:
    """A webhook endpoint on 127.0.0.1; `respond(handler)` answers (default: 200)."""

    def __init__(self, respond=None, tls: ssl.SSLContext | None = None):
        self.calls: list[dict] = []
        receiver = self
        respond = respond or (lambda handler: handler.send_response(200) or handler.end_headers())

        class Handler(BaseHTTPRequestHandler):
            def _record(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                receiver.calls.append(
                    {"method": self.command, "path": self.path, "headers": dict(self.headers)}
                )
                return body

            def do_POST(self):  # noqa: N802 - http.server's naming
                self._record()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    respond(self)

            def do_GET(self):  # noqa: N802 - a followed redirect arrives as a GET
                self._record()
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hooks/console"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receivers():
    started: list[Receiver] = []

    def start(*args, **kwargs) -> Receiver:
        started.append(Receiver(*args, **kwargs))
        return started[-1]

    yield start
    for receiver in started:
        receiver.close()


@pytest.fixture
def world(db):
    """sg-test and an admin (who may manage webhooks)."""
    return SimpleNamespace(
        sg_test=EnvironmentFactory(key="sg-test"), admin=user_with_grants("admin", admin=None)
    )


def delivery_to(world, url: str) -> WebhookDelivery:
    """A pending delivery to `url`, written directly (as if registered before DNS changed)."""
    hook = Webhook.objects.create(environment=world.sg_test, url=url, secret="whsec_t")
    return WebhookDelivery.objects.create(webhook=hook, body=BODY)


def attempts(delivery) -> list[WebhookAttempt]:
    return list(WebhookAttempt.objects.filter(delivery=delivery).order_by("number"))


# --- registration ----------------------------------------------------------------------------------
INTERNAL_URLS = [
    "http://169.254.169.254/latest/meta-data/",  # the cloud metadata address
    "http://127.0.0.1:5432/",  # PostgreSQL
    "http://localhost:6379/",  # Redis
    "http://10.1.2.3/hooks",
    "http://172.16.0.9/hooks",
    "http://192.168.1.20:8080/hooks",
    "http://100.64.0.1/hooks",  # carrier-grade NAT: not public
    "http://0.0.0.0:8000/",
    "http://[::1]:8000/hooks",
    "http://[fe80::1]/hooks",
    "http://[fd00::7]/hooks",
    "http://[::ffff:127.0.0.1]/hooks",  # IPv4-mapped IPv6
    "http://[::ffff:169.254.169.254]/hooks",
    "https://metadata.internal.example/computeMetadata/v1/",  # a name for the metadata address
    "https://db.corp.example/hooks",  # a name for a private address
    "https://mixed.corp.example/hooks",  # one public and one private address: refused
]


@pytest.mark.django_db
@pytest.mark.parametrize("url", INTERNAL_URLS)
def test_webhook_create__internal_target__refused_on_url_before_any_connection(
    url, world, network, private_refused
):
    network.names["metadata.internal.example"] = ["169.254.169.254"]
    network.names["db.corp.example"] = ["10.20.30.40"]
    network.names["mixed.corp.example"] = ["93.184.216.34", "10.0.0.8"]

    with pytest.raises(ValidationFailed) as refused:
        webhooks.webhook_create(environment=world.sg_test, url=url, actor=world.admin)

    assert [d["path"] for d in refused.value.details] == ["url"]
    assert "internal" in refused.value.message or "public" in refused.value.message
    assert not Webhook.objects.exists()
    assert network.connects == []


@pytest.mark.django_db
def test_webhook_create__public_name__accepted_without_connecting(world, network, private_refused):
    network.names["runtime.bank.example"] = ["93.184.216.34", "2606:2800:220:1::1"]

    hook, _ = webhooks.webhook_create(
        environment=world.sg_test,
        url="https://runtime.bank.example/hooks/console",
        actor=world.admin,
    )

    assert hook.url == "https://runtime.bank.example/hooks/console"
    assert network.connects == []


@pytest.mark.django_db
def test_webhook_create__loopback_with_the_setting__accepted(world, network, private_allowed):
    hook, _ = webhooks.webhook_create(
        environment=world.sg_test, url="http://127.0.0.1:9/hooks", actor=world.admin
    )

    assert Webhook.objects.get() == hook


@pytest.mark.django_db
def test_webhooks_page__metadata_url__400_with_readable_message_on_url(
    client, world, network, private_refused
):
    client.force_login(world.admin)

    response = client.post(
        reverse("webhook-list"),
        {"url": "http://169.254.169.254/latest/meta-data/", "environment": "sg-test"},
    )

    assert response.status_code == 400
    page = response.content.decode()
    assert "169.254.169.254" in page and "internal" in page
    assert not Webhook.objects.exists()


# --- delivery --------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_delivery__name_now_resolves_to_loopback__refused_after_resolution_and_failed(
    world, network, receivers, private_refused
):
    receiver = receivers()
    delivery = delivery_to(world, f"http://hooks.bank.example:{receiver.port}/hooks/console")
    network.names["hooks.bank.example"] = ["127.0.0.1"]  # DNS changed after registration

    status, tries = webhooks.delivery_try(delivery_id=delivery.pk)

    assert receiver.calls == []  # refused before connecting
    assert (status, tries) == (WebhookDelivery.Status.FAILED, 1)  # no point in retrying
    [attempt] = attempts(delivery)
    assert not attempt.ok and attempt.status_code is None
    assert "refused" in attempt.error and "127.0.0.1" in attempt.error


@pytest.mark.django_db
def test_delivery__connects_to_the_checked_address__not_a_second_lookup(
    world, network, receivers, private_refused, monkeypatch
):
    """DNS rebinding: the name resolves to a public address when checked; any later lookup
    would answer loopback. The console connects to the address it checked (which the test's
    network hands to a loopback receiver), with the URL's host in the Host header."""
    receiver = receivers()
    delivery = delivery_to(world, f"http://hooks.bank.example:{receiver.port}/hooks/console?x=1")
    answers = iter([["93.184.216.34"]])
    original = network.getaddrinfo

    def rebinding(host, port, *args, **kwargs):
        if host == "hooks.bank.example":
            network.names[host] = next(answers, ["127.0.0.1"])
        return original(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    network.redirect["93.184.216.34"] = ("127.0.0.1", receiver.port)

    status, _ = webhooks.delivery_try(delivery_id=delivery.pk)

    assert status == WebhookDelivery.Status.DELIVERED
    assert network.connects == [("93.184.216.34", receiver.port)]
    [call] = receiver.calls
    assert call["headers"]["Host"] == f"hooks.bank.example:{receiver.port}"
    assert call["path"] == "/hooks/console?x=1"
    assert call["headers"]["webhook-id"] == str(delivery.delivery_id)


@pytest.mark.django_db
def test_delivery__redirect__not_followed_and_the_try_fails(
    world, network, receivers, private_allowed
):
    elsewhere = receivers()

    def redirect(handler):
        handler.send_response(302)
        handler.send_header("Location", elsewhere.url)
        handler.end_headers()

    receiver = receivers(redirect)
    delivery = delivery_to(world, receiver.url)

    status, tries = webhooks.delivery_try(delivery_id=delivery.pk)

    assert len(receiver.calls) == 1 and elsewhere.calls == []
    assert (status, tries) == (WebhookDelivery.Status.PENDING, 1)  # retried like any failure
    [attempt] = attempts(delivery)
    assert (attempt.status_code, attempt.ok) == (302, False)
    assert "redirect" in attempt.error and elsewhere.url in attempt.error


@pytest.mark.django_db
def test_delivery__answer_dribbled_byte_by_byte__stopped_at_the_overall_deadline(
    world, network, receivers, private_allowed, monkeypatch
):
    """Each byte arrives well within any per-read timeout; the whole answer takes 4 s."""
    monkeypatch.setattr(transport, "TRY_DEADLINE_SECONDS", 1.0, raising=False)
    monkeypatch.setattr(webhooks, "TIMEOUT_SECONDS", 1.0, raising=False)  # the old per-read one
    stop = threading.Event()

    def dribble(handler):
        handler.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        for _ in range(20):
            if stop.wait(0.2):
                return
            handler.wfile.write(b"a")
        handler.wfile.write(b"\r\nContent-Length: 0\r\n\r\n")

    receiver = receivers(dribble)
    delivery = delivery_to(world, receiver.url)

    started = time.monotonic()
    status, _ = webhooks.delivery_try(delivery_id=delivery.pk)
    elapsed = time.monotonic() - started
    stop.set()

    assert elapsed < 2.5, f"the try took {elapsed:.1f} s with a 1 s deadline"
    assert status == WebhookDelivery.Status.PENDING
    [attempt] = attempts(delivery)
    assert not attempt.ok and "deadline" in attempt.error


def _tls_material(tmp_path, host: str):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.mark.django_db
def test_delivery__https__pinned_address_with_sni_and_certificate_of_the_host_name(
    world, network, receivers, private_allowed, monkeypatch, tmp_path
):
    host = "hooks.bank.example"
    cert_path, key_path = _tls_material(tmp_path, host)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert_path, key_path)
    seen_sni: list[str | None] = []
    server_tls.sni_callback = lambda sock, name, ctx: seen_sni.append(name)
    monkeypatch.setattr(
        transport,
        "tls_context",
        lambda: ssl.create_default_context(cafile=str(cert_path)),
        raising=False,
    )
    receiver = receivers(tls=server_tls)
    network.names[host] = ["127.0.0.1"]
    delivery = delivery_to(world, f"https://{host}:{receiver.port}/hooks/console")

    status, _ = webhooks.delivery_try(delivery_id=delivery.pk)

    assert status == WebhookDelivery.Status.DELIVERED, attempts(delivery)[0].error
    assert seen_sni == [host]
    assert receiver.calls[0]["headers"]["Host"] == f"{host}:{receiver.port}"
    assert network.lookups.count(host) == 1


# --- no lock and no transaction during the POST; one claim per try -----------------------------------
@pytest.mark.django_db(transaction=True)
def test_delivery__during_the_post__row_unlocked_no_transaction_try_claimed(
    world, network, receivers, private_allowed
):
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        [delivering_pid] = cursor.fetchone()
    seen: dict = {}
    delivery_holder: list[WebhookDelivery] = []

    def look(handler):
        """From another connection, while the console waits for this answer."""
        try:
            try:
                with transaction.atomic():
                    row = (
                        WebhookDelivery.objects.select_for_update(nowait=True)
                        .filter(pk=delivery_holder[0].pk)
                        .first()
                    )
                    seen["locked"], seen["tries"] = False, row.tries
            except DatabaseError:
                seen["locked"] = True
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT state FROM pg_stat_activity WHERE pid = %s", [delivering_pid]
                )
                seen["state"] = cursor.fetchone()[0]
        finally:
            connections.close_all()
        handler.send_response(200)
        handler.end_headers()

    receiver = receivers(look)
    delivery_holder.append(delivery_to(world, receiver.url))

    status, tries = webhooks.delivery_try(delivery_id=delivery_holder[0].pk)

    assert seen == {"locked": False, "tries": 1, "state": "idle"}
    assert (status, tries) == (WebhookDelivery.Status.DELIVERED, 1)


@pytest.mark.django_db(transaction=True)
def test_delivery__duplicate_task_during_a_try__does_not_post_again(
    world, network, receivers, private_allowed
):
    duplicate: dict = {}
    delivery_holder: list[WebhookDelivery] = []

    def run_duplicate():
        try:
            duplicate["result"] = webhooks.delivery_try(
                delivery_id=delivery_holder[0].pk, claimant="task-b"
            )
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            duplicate["result"] = exc
        finally:
            connections.close_all()

    def answer(handler):
        thread = threading.Thread(target=run_duplicate)
        thread.start()
        thread.join(3)  # the old code made it wait for the row lock held during this POST
        handler.send_response(200)
        handler.end_headers()

    receiver = receivers(answer)
    delivery_holder.append(delivery_to(world, receiver.url))

    status, tries = webhooks.delivery_try(delivery_id=delivery_holder[0].pk, claimant="task-a")

    assert duplicate.get("result") == ("busy", 1)
    assert (status, tries) == (WebhookDelivery.Status.DELIVERED, 1)
    assert len(receiver.calls) == 1
    assert [(a.number, a.ok) for a in attempts(delivery_holder[0])] == [(1, True)]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("claimed_by", "age_seconds", "taken_over"),
    [
        ("task-a", 1, True),  # the same task again: its worker died mid-try, the message is back
        ("task-b", 1, False),  # another task is posting right now
        ("task-b", 3600, True),  # a claim far older than any try: abandoned
    ],
)
def test_delivery__try_left_in_progress__taken_over_only_by_its_task_or_when_stale(
    world, network, receivers, private_allowed, claimed_by, age_seconds, taken_over
):
    receiver = receivers()
    delivery = delivery_to(world, receiver.url)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(tries=1)
    WebhookAttempt.objects.create(
        delivery=delivery,
        number=1,
        started_at=timezone.now() - dt.timedelta(seconds=age_seconds),
        error=f"in progress (task {claimed_by})",
    )

    result = webhooks.delivery_try(delivery_id=delivery.pk, claimant="task-a")

    if taken_over:
        assert result == (WebhookDelivery.Status.DELIVERED, 2)
        first, second = attempts(delivery)
        assert "abandoned" in first.error and second.ok
        assert len(receiver.calls) == 1
    else:
        assert result == ("busy", 1)
        assert receiver.calls == []
