"""Audit rows outlive their agent (issue 19, item 5): rows are scoped by the agent they were
written for (its id, stored on the row at write time), so an all-agent auditor keeps seeing
every row of a deleted agent, its agent.delete row too, in the page, the API, the CSV and
the SIEM export; a per-agent auditor of a new agent that takes the key does not inherit
them; rows written before rows kept that id (legacy) still verify and go by the key."""

from __future__ import annotations

import csv
import hashlib
import io
import json

import orjson
import pytest
from django.core.management import call_command
from django.urls import reverse

from console.kernel.audit import (
    _EXTRA_HASHED,
    CHAIN_FIELDS,
    AccessAction,
    AgentRef,
    AuditAction,
    _jsonable,
    access_record,
    audit_record,
)
from console.kernel.models import AccessLogEntry, AuditRecord
from console.kernel.wording import counted
from strategies.catalog.models import Agent
from strategies.catalog.services import agent_create, agent_delete
from tests.factories import user_with_grants

pytestmark = pytest.mark.django_db

KEY = "pilot"


def legacy_row(*, actor, agent_key: str, after: dict):
    """A row as the code before agent ids wrote it: the key, no id."""
    return audit_record(
        actor=actor,
        action=AuditAction.AGENT_UPDATE,
        target=("strategies.agent", 0, agent_key),
        agent=AgentRef(agent_key, None),
        after=after,
    )


@pytest.fixture
def admin(db):
    return user_with_grants("chief", admin=None)


@pytest.fixture
def first_pilot(admin):
    """An agent with a legacy row, a row with its id, and a look in the access log; then
    deleted. Returns the id it had."""
    agent = agent_create(key=KEY, actor=admin)
    legacy_row(actor=admin, agent_key=KEY, after={"note": "old-agent legacy row"})
    audit_record(
        actor=admin,
        action=AuditAction.AGENT_UPDATE,
        target=agent,
        agent=agent,
        after={"note": "old-agent row"},
    )
    access_record(
        actor=admin, action=AccessAction.TRACE_VIEW, agent=agent, target=("trace", "r1", "r1")
    )
    pk = agent.pk
    agent_delete(agent=agent, actor=admin, reason="made by mistake")
    return pk


def notes(rows) -> set[str]:
    return {(r.get("after") or {}).get("note") for r in rows} - {None}


def api_rows(client, url, **params):
    return client.get(url, params).json()["results"]


def export_rows(client, **params):
    response = client.get(reverse("api-audit-export"), params)
    return [orjson.loads(line) for line in response.content.splitlines()]


def csv_dicts(client, **params):
    response = client.get(reverse("audit-export-csv"), params)
    text = b"".join(response.streaming_content).decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    for row in rows:
        row["after"] = json.loads(row["after"]) if row["after"] else None
    return rows


def page_rows(client, url, **params):
    return [
        {"action": r.action, "after": getattr(r, "after", None), "agent_id": r.agent_id}
        for r in client.get(url, params).context["page_obj"]
    ]


def test_deleted_agent__all_agent_auditor__every_row_in_page_api_csv_and_export(
    admin, first_pilot, client
):
    client.force_login(admin)
    expected = {"old-agent legacy row", "old-agent row"}
    for rows in (
        page_rows(client, reverse("audit-list"), agent=KEY),
        api_rows(client, reverse("api-audit-list"), agent=KEY),
        csv_dicts(client, agent=KEY),
        export_rows(client, agent=KEY),
    ):
        assert notes(rows) == expected
        actions = [r["action"] for r in rows]
        assert "agent.delete" in actions and "agent.create" in actions
    deleted = AuditRecord.objects.get(action="agent.delete")
    assert deleted.agent_key == KEY and deleted.agent_id == first_pilot
    looks = api_rows(client, reverse("api-access-log-list"), agent=KEY)
    assert [r["action"] for r in looks] == ["trace.view"]
    assert looks[0]["agent_id"] == first_pilot
    # the page's agent filter still offers the deleted agent
    assert KEY in client.get(reverse("audit-list")).context["agent_keys"]


def test_new_agent_with_the_same_key__its_auditor_sees_only_its_own_rows(
    admin, first_pilot, client
):
    second = agent_create(key=KEY, actor=admin)
    assert second.pk != first_pilot
    audit_record(
        actor=admin,
        action=AuditAction.AGENT_UPDATE,
        target=second,
        agent=second,
        after={"note": "new-agent row"},
    )
    legacy_row(actor=admin, agent_key=KEY, after={"note": "new-agent legacy row"})
    access_record(
        actor=admin, action=AccessAction.TRACE_VIEW, agent=second, target=("trace", "r2", "r2")
    )
    client.force_login(user_with_grants("pilot_lead", admin=KEY))
    mine = {"new-agent row", "new-agent legacy row"}
    for rows in (
        page_rows(client, reverse("audit-list")),
        api_rows(client, reverse("api-audit-list")),
        csv_dicts(client),
        export_rows(client),
    ):
        assert notes(rows) == mine
        actions = [r["action"] for r in rows]
        assert "agent.delete" not in actions
        assert actions.count("agent.create") == 1
    looks = api_rows(client, reverse("api-access-log-list"), action="trace.view")
    assert [r["target_id"] for r in looks] == ["r2"]
    old = AuditRecord.objects.filter(agent_id=first_pilot).first()
    assert client.get(reverse("audit-detail", args=[old.pk])).status_code == 404
    # the refusal is logged against the old agent, so it does not show up here either
    denied = AccessLogEntry.objects.get(action="access.denied", actor_label="pilot_lead")
    assert (denied.agent_key, denied.agent_id) == (KEY, first_pilot)
    assert not [r for r in api_rows(client, reverse("api-access-log-list")) if r["id"] == denied.pk]

    client.force_login(admin)  # the all-agent auditor sees both agents' rows
    assert notes(api_rows(client, reverse("api-audit-list"), agent=KEY)) == mine | {
        "old-agent legacy row",
        "old-agent row",
    }


def test_live_agent__legacy_and_new_rows__seen_by_its_auditor_as_before(admin, client):
    agent = agent_create(key=KEY, actor=admin)
    legacy_row(actor=admin, agent_key=KEY, after={"note": "legacy"})
    audit_record(actor=admin, action=AuditAction.AGENT_UPDATE, agent=KEY, after={"note": "by key"})
    other = agent_create(key="other", actor=admin)
    audit_record(actor=admin, action=AuditAction.AGENT_UPDATE, agent=other, after={"note": "other"})
    assert AuditRecord.objects.get(after__note="by key").agent_id == agent.pk
    client.force_login(user_with_grants("pilot_lead", admin=KEY))
    assert notes(api_rows(client, reverse("api-audit-list"))) == {"legacy", "by key"}


def _hash_as_before(row) -> str:
    """A row's hash as the code before agent ids computed it (no agent_id field at all)."""
    names = CHAIN_FIELDS + _EXTRA_HASHED["AuditRecord"]
    names += tuple(n for n in ("actor_token_id", "actor_token_label") if getattr(row, n))
    material = json.dumps(
        [row.prev_hash, [[n, _jsonable(getattr(row, n))] for n in names]],
        sort_keys=True,
        separators=(",", ":"),
        default=str,
        ensure_ascii=False,
    )
    return hashlib.sha256(material.encode()).hexdigest()


def test_audit_verify__legacy_rows_and_rows_with_agent_ids__chains_intact(
    admin, first_pilot, capsys
):
    legacy = AuditRecord.objects.get(after__note="old-agent legacy row")
    assert legacy.agent_id is None and legacy.hash == _hash_as_before(legacy)
    assert AuditRecord.objects.filter(agent_id=first_pilot).count() >= 3
    call_command("audit_verify")
    out = capsys.readouterr().out
    assert f"audit log: {counted(AuditRecord.objects.count(), 'record')}, chain intact" in out
    assert f"access log: {counted(AccessLogEntry.objects.count(), 'record')}, chain intact" in out


def test_audit_verify__agent_id_rewritten__content_break_reported(admin, first_pilot):
    """The id is covered by the hash: moving a row to another agent is caught."""
    from django.core.management.base import CommandError
    from django.db import connection, transaction

    row = AuditRecord.objects.filter(agent_id=first_pilot).order_by("id").first()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("ALTER TABLE console_auditrecord DISABLE TRIGGER USER")
        cursor.execute("UPDATE console_auditrecord SET agent_id = 999999 WHERE id = %s", [row.pk])
        cursor.execute("ALTER TABLE console_auditrecord ENABLE TRIGGER USER")
    with pytest.raises(CommandError):
        call_command("audit_verify")
    assert not Agent.objects.filter(pk=999999).exists()
