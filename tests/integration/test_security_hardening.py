"""Sign-in, audit and access hardening (issue 11, items 10–13): client addresses parsed and
normalised behind a configurable number of trusted proxies, the audit chains anchored by
checkpoints, every refusal in the access log, and the smaller holes (rollback target,
/healthz detail, API page size, SNAPSHOT_KEYS, the release overview's scope)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction
from django.test import RequestFactory
from django.urls import reverse

from console.access.api import OperatorPagination
from console.celery import app
from console.kernel.audit import (
    CHAIN_FIELDS,
    AccessAction,
    AuditAction,
    access_record,
    audit_record,
    record_hash,
)
from console.kernel.models import AccessLogEntry, AuditRecord, ChainCheckpoint
from console.kernel.request_context import RequestContext, client_ip, current_request
from console.tasks import chain_checkpoint
from strategies.releases.models import ApprovalRequest, Release, ReleaseEvent
from tests.engines import pg_connect_kwargs
from tests.factories import (
    SAMPLE_AGENT,
    STRATEGY_KEY,
    AgentFactory,
    RoleFactory,
    grant,
    post_batch,
    publish,
    release_setup,
    runtime_token,
    trace_payload,
    user_with_grants,
    world,
)
from tests.runtime_sim import wait_until

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
CLIENT = "192.0.2.10"  # documentation addresses (RFC 5737 / RFC 3849)
PROXY = "10.0.0.1"


def sign_in(client, username, password, ip=CLIENT, **extra):
    return client.post(
        reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=ip, **extra
    )


def run_manage(*args: str, **env_overrides: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


PRODUCTION = {
    "CONSOLE_ENV": "production",
    "SECRET_KEY": "x" * 64 + "-long-random-secret-for-the-check-only",
    "ALLOWED_HOSTS": "console.example.com",
    "SNAPSHOT_KEYS": "ZGV2LW9ubHktc25hcHNob3Qta2V5LW5vdC1zZWNyZXQ=",
}


@pytest.fixture
def person(db):
    return user_with_grants("dana", password="right-password-1").username


def login_rows():
    return list(AccessLogEntry.objects.filter(action="auth.login").order_by("id"))


# --- 10. X-Forwarded-For and client addresses ------------------------------------------------------
def test_xff__garbage_value__sign_in_works_and_the_row_has_the_peer_address(person, client):
    response = sign_in(
        client, person, "right-password-1", HTTP_X_FORWARDED_FOR="not-an-address, <b>"
    )
    assert response.status_code == 302
    (row,) = login_rows()
    assert (row.outcome, row.ip) == ("allowed", CLIENT)


def test_xff__garbage_behind_a_trusted_proxy__falls_back_to_the_peer(person, client, settings):
    settings.TRUSTED_PROXY_HOPS = 1
    assert sign_in(client, person, "wrong", ip=PROXY, HTTP_X_FORWARDED_FOR="x" * 300).status_code
    assert [r.ip for r in login_rows()] == [PROXY]


@pytest.mark.parametrize(
    "sent, stored",
    [
        ("2001:DB8:0:0:0:0:0:1", "2001:db8::1"),
        ("2001:db8:0000::0001", "2001:db8::1"),
        ("::ffff:192.0.2.7", "192.0.2.7"),  # IPv4-mapped IPv6 is the IPv4 address
        ("0:0:0:0:0:0:0:1", "::1"),
        ("::192.0.2.7", "::192.0.2.7"),  # IPv4-compatible: PostgreSQL's own text form
    ],
)
def test_address__non_canonical_form__stored_canonical_and_the_chain_verifies(
    person, client, capsys, sent, stored
):
    sign_in(client, person, "wrong", ip=sent)
    (row,) = login_rows()
    assert row.ip == stored
    call_command("audit_verify")  # raises CommandError on a broken chain
    assert "access log: 1 record, chain intact" in capsys.readouterr().out


def test_xff__rotated_on_every_attempt__still_locked_by_the_peer_address(person, client):
    """Without a trusted proxy the header is not read: rotating it changes nothing."""
    for n in range(5):
        sign_in(client, person, "wrong", HTTP_X_FORWARDED_FOR=f"198.51.100.{n}")
    refused = sign_in(client, person, "right-password-1", HTTP_X_FORWARDED_FOR="198.51.100.99")
    assert refused.status_code == 429
    assert {r.ip for r in login_rows()} == {CLIENT}  # no forged address in the log


def test_xff__one_trusted_proxy__the_address_it_appended_not_what_the_client_sent(
    person, client, settings
):
    settings.TRUSTED_PROXY_HOPS = 1
    for n in range(5):  # the client forges the left part; the proxy appends the real peer
        sign_in(client, person, "wrong", ip=PROXY, HTTP_X_FORWARDED_FOR=f"198.51.100.{n}, {CLIENT}")
    assert {r.ip for r in login_rows()} == {CLIENT}
    locked = sign_in(client, person, "right-password-1", ip=PROXY, HTTP_X_FORWARDED_FOR=CLIENT)
    assert locked.status_code == 429
    other = sign_in(
        client, person, "right-password-1", ip=PROXY, HTTP_X_FORWARDED_FOR="2001:db8::9"
    )
    assert other.status_code == 302


@pytest.mark.parametrize(
    "hops, forwarded, remote, expected",
    [
        (0, "198.51.100.1", CLIENT, CLIENT),  # default: the header is ignored
        (0, "", "2001:DB8::A", "2001:db8::a"),
        (0, "", "garbage", None),
        (1, "198.51.100.1", PROXY, "198.51.100.1"),
        (1, "203.0.113.9, 198.51.100.1", PROXY, "198.51.100.1"),
        (2, "203.0.113.9, 198.51.100.1, 10.0.0.2", PROXY, "198.51.100.1"),
        (2, "198.51.100.1", PROXY, PROXY),  # fewer entries than proxies: not through them
        (1, "", PROXY, PROXY),
        (1, "[2001:db8::5]:443", PROXY, "2001:db8::5"),
        (1, "192.0.2.9:5555", PROXY, "192.0.2.9"),
        (1, "::ffff:192.0.2.9", PROXY, "192.0.2.9"),
        (1, "fe80::1%eth0", PROXY, "fe80::1"),
        (1, "unknown", PROXY, PROXY),
    ],
)
def test_client_ip__trusted_hops__the_entry_the_nearest_proxies_wrote(
    settings, hops, forwarded, remote, expected
):
    settings.TRUSTED_PROXY_HOPS = hops
    request = RequestFactory().get("/", REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=forwarded)
    assert client_ip(request) == expected


def test_audit_record__address_set_by_a_script__normalised_before_hashing(db, capsys):
    token = current_request.set(RequestContext(ip="2001:0DB8::0:1"))
    try:
        row = audit_record(actor=None, action=AuditAction.AGENT_UPDATE)
        garbage = current_request.set(RequestContext(ip="not-an-address"))
        try:
            unknown = audit_record(actor=None, action=AuditAction.AGENT_UPDATE)
        finally:
            current_request.reset(garbage)
    finally:
        current_request.reset(token)
    row.refresh_from_db()
    unknown.refresh_from_db()
    assert (row.ip, unknown.ip) == ("2001:db8::1", None)
    call_command("audit_verify")
    assert "audit log: 2 records, chain intact" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["-1", "one", "1.5"])
def test_trusted_proxy_hops__not_a_whole_number__refused_at_start(value):
    result = run_manage("check", TRUSTED_PROXY_HOPS=value)
    assert result.returncode == 2
    assert "TRUSTED_PROXY_HOPS" in result.stderr
    assert "Traceback" not in result.stderr


# --- 11. the chain head anchored --------------------------------------------------------------------
@pytest.fixture
def rows(db):
    actor = user_with_grants("auditor_subject", admin=None)
    for n in range(3):
        audit_record(
            actor=actor, action=AuditAction.AGENT_UPDATE, before={"n": n}, after={"n": n + 1}
        )
        access_record(actor=actor, action=AccessAction.TRACE_VIEW, reason=f"look {n}")
    return actor


def _sql(statement: str, *params) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params or None)


def _with_triggers_off(table: str, *statements: tuple) -> None:
    """What only the table's owner or a superuser can do (production's role cannot)."""
    _sql(f"ALTER TABLE {table} DISABLE TRIGGER USER")
    for statement, *params in statements:
        _sql(statement, *params)
    _sql(f"ALTER TABLE {table} ENABLE TRIGGER USER")


def test_checkpoint_task__head_of_each_log_stored_and_written_to_the_app_log(rows, caplog):
    with caplog.at_level(logging.INFO, logger="console.kernel.audit.anchor"):
        chain_checkpoint()
    for log, model in (("audit", AuditRecord), ("access", AccessLogEntry)):
        head = model.objects.order_by("-id").first()
        saved = ChainCheckpoint.objects.get(log=log)
        assert (saved.last_id, saved.last_hash, saved.row_count) == (head.pk, head.hash, 3)
        anchored = [r for r in caplog.records if r.name == "console.kernel.audit.anchor"]
        assert any(
            head.hash in r.getMessage() and f"#{head.pk}" in r.getMessage() for r in anchored
        )


@pytest.mark.parametrize("celery_worker_process", ["WARNING"], indirect=True)
def test_checkpoint_task__worker_at_production_level__anchor_lines_in_its_log(
    rows, celery_worker_process
):
    """`make run` and production run the worker at WARNING: the anchors must still be
    written, or the off-host copy the docs rely on never exists."""
    chain_checkpoint.apply_async(queue=celery_worker_process)
    log = ROOT / ".data" / f"worker-{celery_worker_process}.log"
    head = AuditRecord.objects.order_by("-id").first()
    expected = f"--anchor audit:{head.pk}:{head.hash}"
    checkpointed = ChainCheckpoint.objects.filter(log="audit", last_id=head.pk)
    assert wait_until(checkpointed.exists, 60, 0.2), log.read_text(errors="replace")
    # The line is written right after the row commits; a moment for the file to get it.
    assert wait_until(lambda: expected in log.read_text(errors="replace"), 5, 0.1), log.read_text(
        errors="replace"
    )


def test_checkpoint_task__in_the_beat_schedule(settings):
    entries = [
        e for e in settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == "console.chain_checkpoint"
    ]
    assert len(entries) == 1
    assert entries[0]["schedule"] == settings.AUDIT_CHECKPOINT_MINUTES * 60
    assert "console.chain_checkpoint" in app.tasks


def test_checkpoint__empty_logs__recorded_and_verified(db, capsys):
    chain_checkpoint()
    assert ChainCheckpoint.objects.filter(last_id=0, row_count=0).count() == 2
    call_command("audit_verify")
    assert "audit log: 0 records, chain intact" in capsys.readouterr().out


def test_audit_verify__tail_deleted_after_a_checkpoint__missing_tail_reported(rows, capsys):
    chain_checkpoint()
    saved = ChainCheckpoint.objects.get(log="audit")
    tail = AuditRecord.objects.order_by("-id").first()
    _with_triggers_off(
        "console_auditrecord", ("DELETE FROM console_auditrecord WHERE id = %s", tail.pk)
    )

    with pytest.raises(CommandError, match="1 chain"):
        call_command("audit_verify")
    err = capsys.readouterr().err
    assert f"audit log: TAIL MISSING: checkpoint #{saved.pk}" in err
    assert f"3 records up to #{tail.pk}" in err
    assert f"record #{tail.pk} is gone" in err


def test_audit_verify__whole_log_emptied_after_a_checkpoint__reported(rows, capsys):
    chain_checkpoint()
    _with_triggers_off("console_accesslogentry", ("DELETE FROM console_accesslogentry",))
    with pytest.raises(CommandError, match="1 chain"):
        call_command("audit_verify")
    captured = capsys.readouterr()
    assert "access log: TAIL MISSING" in captured.err
    assert "audit log: 3 records, chain intact" in captured.out


def test_audit_verify__row_deleted_and_chain_rehashed__checkpoint_no_longer_matches(rows, capsys):
    """Someone who can bypass the triggers deletes a row and recomputes every later hash, so
    each link looks right: the checkpointed head no longer has its hash, nor the count."""
    chain_checkpoint()
    first, victim, last = AuditRecord.objects.order_by("id")
    fields = {n: getattr(last, n) for n in CHAIN_FIELDS}
    fields.update(before=last.before, after=last.after, changes=last.changes)
    forged = record_hash("AuditRecord", fields, first.hash)
    _with_triggers_off(
        "console_auditrecord",
        ("DELETE FROM console_auditrecord WHERE id = %s", victim.pk),
        (
            "UPDATE console_auditrecord SET prev_hash = %s, hash = %s WHERE id = %s",
            first.hash,
            forged,
            last.pk,
        ),
    )
    with pytest.raises(CommandError, match="1 chain"):
        call_command("audit_verify")
    err = capsys.readouterr().err
    assert f"record #{last.pk} no longer has the checkpointed hash" in err


def test_audit_verify__row_deleted_after_the_checkpoint__gap_in_the_chain(rows, capsys):
    chain_checkpoint()
    actor = rows
    for n in range(3):
        audit_record(actor=actor, action=AuditAction.ROLE_UPDATE, after={"n": n})
    _, victim, follower = AuditRecord.objects.filter(action=AuditAction.ROLE_UPDATE).order_by("id")
    _with_triggers_off(
        "console_auditrecord", ("DELETE FROM console_auditrecord WHERE id = %s", victim.pk)
    )
    with pytest.raises(CommandError):
        call_command("audit_verify")
    err = capsys.readouterr().err
    assert f"chain BROKEN at record #{follower.pk}" in err
    assert "the record before it is missing or was altered" in err


def test_audit_verify__rolled_back_insert_skips_an_id__no_false_alarm(rows, capsys):
    with pytest.raises(RuntimeError), transaction.atomic():
        audit_record(actor=rows, action=AuditAction.ROLE_CREATE)
        raise RuntimeError("the service failed after its audit row")
    chain_checkpoint()
    audit_record(actor=rows, action=AuditAction.ROLE_UPDATE)
    chain_checkpoint()
    ids = list(AuditRecord.objects.order_by("id").values_list("id", flat=True))
    assert ids[-1] - ids[-2] == 2  # the sequence skipped the rolled-back id
    call_command("audit_verify")
    assert "audit log: 4 records, chain intact" in capsys.readouterr().out


def test_audit_verify__anchor_from_the_app_log__checked(rows, capsys):
    head = AuditRecord.objects.order_by("-id").first()
    call_command("audit_verify", anchor=[f"audit:{head.pk}:{head.hash}"])
    assert "matches anchor" in capsys.readouterr().out
    with pytest.raises(CommandError):
        call_command("audit_verify", anchor=[f"audit:{head.pk}:{'0' * 64}"])
    assert f"record #{head.pk} no longer has the anchored hash" in capsys.readouterr().err
    with pytest.raises(CommandError, match="LOG:ID:HASH"):
        call_command("audit_verify", anchor=["nonsense"])


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE console_chaincheckpoint SET row_count = 0",
        "DELETE FROM console_chaincheckpoint",
        "TRUNCATE console_chaincheckpoint",
    ],
)
def test_checkpoints__append_only_in_the_database(rows, statement):
    chain_checkpoint()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        _sql(statement)
    assert ChainCheckpoint.objects.filter(row_count=3).count() == 2


@pytest.mark.django_db(transaction=True)
def test_checkpoints__production_grants__the_app_role_only_reads_and_adds():
    """docs/access-and-audit.md: SELECT and INSERT only on the checkpoint table; PostgreSQL
    refuses the rest before any trigger runs."""
    chain_checkpoint()
    role = f"checkpoint_probe_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    db = connection.settings_dict
    _sql(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION')
    try:
        _sql(f'GRANT CONNECT ON DATABASE "{db["NAME"]}" TO "{role}"')
        _sql(f'GRANT USAGE ON SCHEMA public TO "{role}"')
        _sql(f'GRANT SELECT, INSERT ON console_chaincheckpoint TO "{role}"')
        # The test database's server as this process reaches it (TCP or socket), as `role`.
        with psycopg.connect(
            **pg_connect_kwargs(user=role, password=None), autocommit=True
        ) as conn:
            assert conn.execute("SELECT count(*) FROM console_chaincheckpoint").fetchone() == (2,)
            for statement in (
                "UPDATE console_chaincheckpoint SET row_count = 0",
                "DELETE FROM console_chaincheckpoint",
                "TRUNCATE console_chaincheckpoint",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
                    conn.execute(statement)
    finally:
        _sql(f'DROP OWNED BY "{role}"')
        _sql(f'DROP ROLE "{role}"')
    assert ChainCheckpoint.objects.count() == 2


# --- 12. every refusal in the access log --------------------------------------------------------------
def denials(**filters):
    return list(AccessLogEntry.objects.filter(outcome="denied", **filters).order_by("id"))


@pytest.fixture
def traces(client):
    env = world()
    secret = runtime_token(env["environments"]["sg-test"], capabilities=("traces:write",))
    post_batch(
        client,
        secret,
        [trace_payload("lite-1", agent="assistant_lite", documents={"profile": 1}, strategy="")],
    )
    return env


@pytest.mark.parametrize("url", ["/traces/lite-1/", "/api/v1/traces/lite-1"])
def test_trace__another_agents_request_id__404_and_refusal_logged(traces, client, url):
    client.force_login(user_with_grants("sup", support=SAMPLE_AGENT))
    assert client.get(url).status_code == 404
    (row,) = denials(action="access.denied")
    assert (row.actor_label, row.agent_key, row.target_id) == ("sup", "assistant_lite", "lite-1")
    assert row.detail["capability"] == "view_traces"
    assert row.detail["status"] == 404


def test_trace__unknown_request_id__404_without_a_refusal(traces, client):
    client.force_login(user_with_grants("sup", support=SAMPLE_AGENT))
    assert client.get("/traces/never-sent/").status_code == 404
    assert denials() == []


@pytest.mark.parametrize("url", ["/traces/", "/api/v1/traces"])
def test_trace_list__without_view_traces__403_and_refusal_logged(traces, client, url):
    client.force_login(user_with_grants("vi", viewer=SAMPLE_AGENT))
    assert client.get(url).status_code == 403
    (row,) = denials(action="access.denied")
    assert (row.actor_label, row.detail["capability"], row.detail["status"]) == (
        "vi",
        "view_traces",
        403,
    )


def test_self_approval__refused_and_logged(client):
    setup = release_setup()
    approval = publish(setup.strategy[1], setup.envs["prod"], actor=setup.ops2)
    client.force_login(setup.ops2)
    url = reverse("approval-decide", args=[SAMPLE_AGENT, approval.pk])
    response = client.post(url, {"decision": "approve"})
    assert response.status_code == 403
    approval.refresh_from_db()
    assert approval.status == ApprovalRequest.Status.PENDING
    (row,) = denials(action="access.denied")
    assert (row.actor_label, row.detail["capability"], row.agent_key) == (
        "ops2",
        "approve",
        SAMPLE_AGENT,
    )


def test_audit_detail__row_of_an_agent_out_of_scope__404_and_logged(client):
    world()
    record = audit_record(actor=None, action=AuditAction.AGENT_UPDATE, agent="assistant_lite")
    client.force_login(user_with_grants("pro_admin", admin=SAMPLE_AGENT))
    assert client.get(reverse("audit-detail", args=[record.pk])).status_code == 404
    (row,) = denials(action="access.denied")
    assert (row.agent_key, row.detail["capability"]) == ("assistant_lite", "view_audit")


def test_api_grant_detail__grant_out_of_scope__404_and_logged(client):
    agents = world()["agents"]
    other = grant(user_with_grants("someone"), "viewer", agents["assistant_lite"])
    client.force_login(user_with_grants("pro_admin", admin=SAMPLE_AGENT))
    assert client.get(reverse("api-grant-detail", args=[other.pk])).status_code == 404
    (row,) = denials(action="access.denied")
    assert (row.agent_key, row.detail["capability"]) == ("assistant_lite", "manage_grants")


def test_access_overview__agent_out_of_scope__404_and_logged(client):
    world()
    client.force_login(user_with_grants("pro_admin", admin=SAMPLE_AGENT))
    assert client.get(reverse("access-overview"), {"agent": "assistant_lite"}).status_code == 404
    (row,) = denials(action="access.denied")
    assert (row.agent_key, row.detail["capability"]) == ("assistant_lite", "manage_grants")


def test_add_strategy__without_edit_drafts__403_and_logged(client):
    world()
    client.force_login(user_with_grants("vi", viewer=SAMPLE_AGENT))
    url = reverse("agent-strategies", args=[SAMPLE_AGENT])
    assert client.post(url, {"key": "new_task", "name": "New"}).status_code == 403
    (row,) = denials(action="access.denied")
    assert (row.agent_key, row.detail["capability"]) == (SAMPLE_AGENT, "edit_drafts")


# --- 13. the smaller ones -----------------------------------------------------------------------------
ROLLBACK = f"/releases/{SAMPLE_AGENT}/{STRATEGY_KEY}/sg-test/rollback/"


@pytest.fixture
def two_releases():
    """v1 then v2 live in sg-test: v1 is the one version a rollback may go back to."""
    setup = release_setup()
    for n in (1, 2):
        publish(setup.strategy[n], setup.envs["sg-test"], actor=setup.ops)
    return setup


def live_number(setup) -> int:
    return Release.objects.get(
        environment=setup.envs["sg-test"], document=setup.strategy[1].document
    ).version.number


@pytest.mark.parametrize(
    "version, message",
    [
        ("99", f"{STRATEGY_KEY} has no version 99"),
        ("3", "v3 was never live in sg-test"),  # exists, never live there
        ("2", "v2 was never live in sg-test (or is live now)"),  # the live one
        ("", "Choose the version to roll back to"),
    ],
)
def test_rollback__unknown_or_ineligible_version__refused_nothing_moves(
    two_releases, client, version, message
):
    client.force_login(two_releases.admin)
    events = ReleaseEvent.objects.count()
    response = client.post(ROLLBACK, {"version": version, "reason": "incident 7", "revision": 2})
    assert response.status_code == 400
    assert message in response.content.decode()
    assert live_number(two_releases) == 2
    assert ReleaseEvent.objects.count() == events


def test_rollback__unknown_version_asked_on_the_page__said_not_replaced(two_releases, client):
    client.force_login(two_releases.admin)
    response = client.get(ROLLBACK, {"version": "99"})
    assert response.status_code == 400
    assert response.context["target"] is None
    assert f"{STRATEGY_KEY} has no version 99" in response.content.decode()


def test_rollback__eligible_version__still_rolls_back(two_releases, client):
    client.force_login(two_releases.admin)
    response = client.post(ROLLBACK, {"version": "1", "reason": "incident 7", "revision": 2})
    assert response.status_code == 302
    assert live_number(two_releases) == 1


def test_healthz__anonymous_and_broker_down__status_only_no_hosts_or_ports(client, db, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable" and body["failed"] == ["broker"]
    assert body["checks"] == {
        "database": {"ok": True},
        "broker": {"ok": False},
        "worker": {"ok": False},  # heard of through the broker
        "beat": {"ok": False},
    }
    assert "127.0.0.1" not in response.content.decode()
    assert "Error" not in response.content.decode()


def test_healthz__signed_in__detail_shown(client, db, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"
    client.force_login(user_with_grants("ops", operator=None))
    body = client.get("/healthz").json()
    assert "127.0.0.1:9" in body["checks"]["broker"]["detail"]
    assert body["checks"]["database"]["detail"] == "ok"


def test_api_page_size__huge_limit__capped(db, client):
    for n in range(OperatorPagination.max_limit + 1):
        audit_record(actor=None, action=AuditAction.AGENT_UPDATE, after={"n": n})
    client.force_login(user_with_grants("boss", admin=None))
    body = client.get(reverse("api-audit-list"), {"limit": 1_000_000}).json()
    assert len(body["results"]) == OperatorPagination.max_limit
    assert body["next"] is not None


@pytest.mark.parametrize(
    "url", ["/api/v1/audit/", "/api/v1/access-log/", "/api/v1/traces", "/api/v1/agents/"]
)
def test_api_page_size__every_operator_list__one_maximum(client, monkeypatch, url):
    env = world()
    secret = runtime_token(env["environments"]["sg-test"], capabilities=("traces:write",))
    post_batch(client, secret, [trace_payload(f"req-{n}") for n in range(3)])
    for n in range(3):
        audit_record(actor=None, action=AuditAction.AGENT_UPDATE, after={"n": n})
        access_record(actor=None, action=AccessAction.TRACE_LIST)
    for n in range(3):
        AgentFactory(key=f"agent_extra_{n}")
    monkeypatch.setattr(OperatorPagination, "max_limit", 2)
    client.force_login(user_with_grants("boss", admin=None))
    response = client.get(url, {"limit": 500})
    assert response.status_code == 200
    assert len(response.json()["results"]) == 2


def test_snapshot_keys__only_commas_in_production__refused_at_start():
    result = run_manage("check", **{**PRODUCTION, "SNAPSHOT_KEYS": " , ,"})
    assert result.returncode == 2
    assert "SNAPSHOT_KEYS" in result.stderr
    assert "Traceback" not in result.stderr


def test_release_overview__grant_without_view_config__agent_not_shown(client):
    agents = world()["agents"]
    tracer = RoleFactory(name="tracer", capabilities=["view_traces"])
    user = user_with_grants("tr", viewer="assistant_lite")
    grant(user, tracer, agents[SAMPLE_AGENT])
    client.force_login(user)
    page = client.get("/releases/").content.decode()
    assert 'id="releases-assistant_lite"' in page
    assert f'id="releases-{SAMPLE_AGENT}"' not in page
    assert f'value="{SAMPLE_AGENT}"' not in page  # nor in the agent picker
