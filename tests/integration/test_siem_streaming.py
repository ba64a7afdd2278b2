"""The audit and access logs streamed to a SIEM (issue 34 item 3; docs/siem.md), against small
real receivers on loopback (tests/siem_receivers.py): a syslog receiver (RFC 5424 over TCP,
octet-counted, TLS with its own CA), a Splunk HTTP Event Collector and an OTLP/HTTP logs
receiver. The drain runs in this process here; test_siem_drill.py runs it in a real worker
that is killed once."""

from __future__ import annotations

import pytest
from django.urls import reverse

from console.access import siem
from console.access.services import chain_checkpoints_write
from console.kernel.audit import AccessAction, AuditAction, SystemActor, access_record, audit_record
from console.kernel.models import (
    AccessLogEntry,
    AuditRecord,
    ChainCheckpoint,
    SiemCursor,
    SiemDestination,
)
from tests.factories import user_with_grants
from tests.siem_receivers import HecReceiver, OtlpReceiver, SyslogReceiver, self_signed_certificate

pytestmark = pytest.mark.django_db
LIST = reverse("api-siem-destination-list")
TOKEN = "hec-0c4d6e1f-secret"


@pytest.fixture
def admin():
    return user_with_grants("root", admin=None)


@pytest.fixture
def loopback(settings):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True  # the receivers are on loopback


def _detail(pk: int) -> str:
    return reverse("api-siem-destination-detail", args=[pk])


def some_rows(n: int = 3) -> None:
    """Rows on both chains and a checkpoint of each, as the console writes them."""
    actor = SystemActor("system:test")
    for i in range(n):
        audit_record(actor=actor, action=AuditAction.AGENT_UPDATE, target=("agent", i, f"a{i}"))
        access_record(actor=actor, action=AccessAction.TRACE_VIEW, target=("trace", i, f"t{i}"))
    chain_checkpoints_write()
    audit_record(actor=actor, action=AuditAction.AGENT_UPDATE, target=("agent", n, "after"))


def expected_ids(chain: str) -> list[str]:
    """Every row and checkpoint of a chain, in chain order (a checkpoint after its row)."""
    model = {"audit": AuditRecord, "access": AccessLogEntry}[chain]
    placed = [((pk, 0, 0), f"{chain}:{pk}") for pk in model.objects.values_list("pk", flat=True)]
    placed += [
        ((last_id, 1, pk), f"{chain}-checkpoint:{pk}")
        for pk, last_id in ChainCheckpoint.objects.filter(log=chain).values_list("pk", "last_id")
    ]
    return [ident for _, ident in sorted(placed)]


def received_in_order(received, chain: str) -> list[str]:
    """The ids of one chain as first received (a repeat at the wire is de-duplicated by id)."""
    seen: dict[str, None] = {}
    for ident in received.ids():
        if ident.split(":")[0].removesuffix("-checkpoint") == chain:
            seen.setdefault(ident)
    return list(seen)


def _receiver(kind: str, tmp_path):
    if kind == "syslog":
        return SyslogReceiver().start()
    if kind == "syslog_tls":
        certfile, keyfile, _ = self_signed_certificate(tmp_path)
        return SyslogReceiver(certfile=certfile, keyfile=keyfile).start()
    if kind == "splunk_hec":
        return HecReceiver(token=TOKEN).start()
    return OtlpReceiver(token="otel-bearer").start()


@pytest.mark.parametrize("kind", ["syslog", "syslog_tls", "splunk_hec", "otlp_http"])
def test_each_sink_receives_every_row_and_checkpoint_in_chain_order_with_its_shape(
    client, admin, loopback, tmp_path, kind
):
    receiver = _receiver(kind, tmp_path)
    try:
        client.force_login(admin)
        body = {"name": f"siem-{kind}", "protocol": kind.removesuffix("_tls"), "url": receiver.url}
        if kind == "syslog_tls":
            body["ca_certificate"] = (tmp_path / "localhost.crt").read_text()
        if kind == "splunk_hec":
            body["token"] = TOKEN
        if kind == "otlp_http":
            body["token"] = "otel-bearer"
        made = client.post(LIST, body, content_type="application/json")
        assert made.status_code == 201, made.content
        some_rows()

        result = siem.destination_drain(made.json()["id"])

        assert not result.error and result.sent > 0
        assert receiver.received.problems == []
        for chain in ("audit", "access"):
            assert received_in_order(receiver.received, chain) == expected_ids(chain)
        events = {e["id"]: e for e in receiver.received.events}
        created = AuditRecord.objects.get(action="siem_destination.create")
        assert events[f"audit:{created.pk}"]["hash"] == created.hash
        assert events[f"audit:{created.pk}"]["after"]["name"] == f"siem-{kind}"
        checkpoint = ChainCheckpoint.objects.filter(log="access").latest("id")
        assert events[f"access-checkpoint:{checkpoint.pk}"]["last_hash"] == checkpoint.last_hash
        if kind.startswith("syslog"):
            first = receiver.received.raw[0]
            assert first["app"] == b"context-console" and first["pri"] == b"110"  # 13*8+6
        if kind == "splunk_hec":
            assert receiver.headers[0]["Authorization"] == f"Splunk {TOKEN}"
        shown = client.get(_detail(made.json()["id"])).json()
        assert [b["behind"] for b in shown["backlog"]] == [0, 0]
        assert shown["status"] == "active" and shown["last_success_at"]
    finally:
        receiver.stop()


def test_credential_is_stored_encrypted_never_shown_never_audited(client, admin, loopback):
    receiver = HecReceiver(token=TOKEN).start()
    try:
        client.force_login(admin)
        made = client.post(
            LIST,
            {"name": "splunk", "protocol": "splunk_hec", "url": receiver.url, "token": TOKEN},
            content_type="application/json",
        )
        assert made.status_code == 201
        assert TOKEN not in made.content.decode() and made.json()["has_token"] is True
        stored = SiemDestination.objects.get()
        assert TOKEN.encode() not in bytes(stored.credential_encrypted)
        listed = client.get(LIST).content.decode()
        page = client.get(reverse("siem-destination-list")).content.decode()
        changed = client.patch(
            _detail(stored.pk), {"token": "hec-new"}, content_type="application/json"
        )
        assert changed.status_code == 200
        for text in (listed, page, changed.content.decode()):
            assert TOKEN not in text and "hec-new" not in text
        for row in AuditRecord.objects.filter(action__startswith="siem_destination."):
            assert TOKEN not in str(row.after) and "hec-new" not in str(row.after)
        assert (
            AuditRecord.objects.filter(action="siem_destination.update").get().after["credential"]
            == "replaced"
        )
    finally:
        receiver.stop()


@pytest.mark.parametrize(
    ("body", "path", "words"),
    [
        ({"protocol": "splunk_hec", "url": "http://10.0.0.8:8088/services/collector/event",
          "token": "t"}, "url", "internal addresses"),
        ({"protocol": "syslog", "url": "tcp://127.0.0.1:6514"}, "url", "internal addresses"),
        ({"protocol": "otlp_http", "url": "htp:/otel/v1/logs"}, "url", "full http(s) URL"),
        ({"protocol": "syslog", "url": "udp://siem.example.com:514"}, "url", "tcp+tls://"),
        ({"protocol": "syslog", "url": "tcp://siem.example.com"}, "url", "port"),
        ({"protocol": "kafka", "url": "https://siem.example.com/"}, "protocol", "Unknown protocol"),
        ({"protocol": "splunk_hec", "url": "https://93.184.215.14:8088/services/collector/event"},
         "token", "Event Collector's token"),
        ({"protocol": "otlp_http", "url": "https://93.184.215.14/v1/logs",
          "ca_certificate": "x"}, "ca_certificate", "TLS syslog"),
        ({"protocol": "syslog", "url": "tcp+tls://93.184.215.14:6514",
          "ca_certificate": "not a pem"}, "ca_certificate", "PEM"),
        ({"protocol": "syslog", "url": "tcp://93.184.215.14:514", "secret": "x"}, "secret",
         "Unknown field"),
    ],
)  # fmt: skip
def test_bad_input__clear_400__nothing_saved_nothing_audited(client, admin, body, path, words):
    client.force_login(admin)

    answer = client.post(LIST, {"name": "bad", **body}, content_type="application/json")

    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert words in error["message"], error
    assert path in [d["path"] for d in error["details"]]
    assert not SiemDestination.objects.exists() and not SiemCursor.objects.exists()
    assert not AuditRecord.objects.filter(action__startswith="siem_destination.").exists()


def test_not_an_admin__refused(client):
    auditor = user_with_grants("aud", support=None)
    client.force_login(auditor)
    assert client.get(LIST).status_code == 403
    assert client.get(reverse("siem-destination-list")).status_code == 403


def test_credential_refused__paused_loudly__until_resumed_then_backlog_sent(
    client, admin, loopback
):
    receiver = HecReceiver(token=TOKEN).start()
    try:
        client.force_login(admin)
        made = client.post(
            LIST,
            {"name": "splunk", "protocol": "splunk_hec", "url": receiver.url, "token": "revoked"},
            content_type="application/json",
        ).json()
        some_rows()

        result = siem.destination_drain(made["id"])

        assert result.paused and "HTTP 403" in result.error
        shown = client.get(_detail(made["id"])).json()
        assert shown["status"] == "paused" and "refused the credential" in shown["paused_reason"]
        assert shown["backlog"][0]["behind"] > 0 and receiver.received.events == []
        paused = AuditRecord.objects.get(action="siem_destination.pause")
        assert paused.actor_label == "system:siem" and "HTTP 403" in paused.after["reason"]
        page = client.get(reverse("siem-destination-list")).content.decode()
        assert "splunk is paused" in page and "HTTP 403" in page
        health = client.get("/healthz").json()["siem"]
        assert health == {"ok": False, "destinations": 1, "paused": 1, "failing": 0}
        assert siem.destination_drain(made["id"]).sent == 0  # paused: nothing sent

        client.patch(_detail(made["id"]), {"token": TOKEN}, content_type="application/json")
        resumed = client.patch(
            _detail(made["id"]), {"status": "active"}, content_type="application/json"
        )
        assert resumed.status_code == 200 and resumed.json()["status"] == "active"
        assert AuditRecord.objects.filter(action="siem_destination.resume").count() == 1
        siem.destination_drain(made["id"])
        assert received_in_order(receiver.received, "access") == expected_ids("access")
    finally:
        receiver.stop()


def test_tls_certificate_that_does_not_verify__paused(client, admin, loopback, tmp_path):
    certfile, keyfile, _ = self_signed_certificate(tmp_path)
    receiver = SyslogReceiver(certfile=certfile, keyfile=keyfile).start()
    try:
        destination = siem.destination_create(
            actor=admin,
            name="tls",
            protocol="syslog",
            url=receiver.url,  # system trust store
        )
        result = siem.destination_drain(destination.pk)
        destination.refresh_from_db()
        assert result.paused and destination.status == "paused"
        assert "certificate" in destination.paused_reason
    finally:
        receiver.stop()


def test_sink_down__backlog_shown__drained_when_it_returns(client, admin, loopback):
    receiver = SyslogReceiver().start()
    destination = siem.destination_create(
        actor=admin, name="syslog", protocol="syslog", url=receiver.url
    )
    siem.destination_drain(destination.pk)
    receiver.stop()
    some_rows(5)

    failed = siem.destination_drain(destination.pk)

    assert failed.error and not failed.paused
    backlog = {b.chain: b for b in siem.backlog(destination)}
    assert backlog["audit"].behind == 6 and backlog["access"].behind == 5
    assert backlog["audit"].age_seconds is not None
    client.force_login(admin)
    page = client.get(reverse("siem-destination-list")).content.decode()
    assert "11 rows behind" in page and "Not accepting" in page
    assert client.get("/healthz").json()["siem"]["failing"] == 1

    receiver.start()
    try:
        siem.destination_drain(destination.pk)
        for chain in ("audit", "access"):
            assert received_in_order(receiver.received, chain) == expected_ids(chain)
        assert sum(b.behind for b in siem.backlog(destination)) == 0
    finally:
        receiver.stop()


def test_changes_are_audited(client, admin, loopback):
    receiver = SyslogReceiver().start()
    try:
        client.force_login(admin)
        made = client.post(
            LIST, {"name": "a", "protocol": "syslog", "url": receiver.url},
            content_type="application/json",
        ).json()  # fmt: skip
        client.patch(_detail(made["id"]), {"name": "b"}, content_type="application/json")
        client.patch(
            _detail(made["id"]), {"status": "paused", "reason": "maintenance"},
            content_type="application/json",
        )  # fmt: skip
        client.patch(_detail(made["id"]), {"status": "active"}, content_type="application/json")
        assert client.delete(_detail(made["id"])).status_code == 204
        actions = list(
            AuditRecord.objects.filter(action__startswith="siem_destination.")
            .order_by("id")
            .values_list("action", "actor_label")
        )
        assert actions == [
            ("siem_destination.create", "root"),
            ("siem_destination.update", "root"),
            ("siem_destination.pause", "root"),
            ("siem_destination.resume", "root"),
            ("siem_destination.delete", "root"),
        ]
        assert not SiemCursor.objects.exists()
    finally:
        receiver.stop()


def test_page__paused_by_a_refused_token__admin_changes_it_and_resumes(
    client, admin, loopback, settings
):
    receiver = HecReceiver(token=TOKEN).start()
    try:
        destination = siem.destination_create(
            actor=admin, name="splunk", protocol="splunk_hec", url=receiver.url, token="old"
        )
        assert siem.destination_drain(destination.pk).paused
        client.force_login(admin)

        changed = client.post(
            reverse("siem-destination-change", args=[destination.pk]),
            {"url": receiver.url, "token": TOKEN, "ca_certificate": ""},
            follow=True,
        )
        assert "stays paused until you resume it" in changed.content.decode()
        destination.refresh_from_db()
        assert destination.status == "paused"
        client.post(reverse("siem-destination-resume", args=[destination.pk]))
        siem.destination_drain(destination.pk)

        assert received_in_order(receiver.received, "audit") == expected_ids("audit")
        settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False
        kept = client.post(
            reverse("siem-destination-change", args=[destination.pk]),
            {"url": "http://10.0.0.9/services/collector/event", "token": ""},
            follow=True,
        )
        assert kept.status_code == 200
        destination.refresh_from_db()
        assert destination.url == receiver.url  # private address: refused, nothing changed
    finally:
        receiver.stop()
