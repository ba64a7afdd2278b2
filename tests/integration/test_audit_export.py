"""Audit export: JSON Lines with a cursor for a SIEM (/api/v1/audit/export), and CSV from the
audit page with its filters — the same filters and visibility as the audit list, and each
export written to the access log."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.test import Client
from django.urls import reverse

from console.accounts.personal_tokens import personal_token_create
from console.kernel.audit import AuditAction, audit_record
from console.kernel.models import AccessLogEntry, AuditRecord
from tests.factories import AgentFactory

pytestmark = pytest.mark.django_db

EXPORT = "/api/v1/audit/export"


@pytest.fixture
def world(db, make_user):
    """Rows on two agents and one console-wide; returns the all-agents admin."""
    AgentFactory(key="assistant_professional")
    AgentFactory(key="assistant_lite")
    admin = make_user("root", admin=None)
    for n in range(4):
        audit_record(
            actor=admin,
            action=AuditAction.AGENT_UPDATE,
            agent="assistant_professional",
            before={"n": n},
            after={"n": n + 1},
        )
    audit_record(
        actor=admin, action=AuditAction.ENVIRONMENT_UPDATE, agent="assistant_lite", after={"x": 1}
    )
    audit_record(actor=admin, action=AuditAction.ROLE_UPDATE, after={"y": 1})
    return admin


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def lines(response) -> list[dict]:
    assert response["Content-Type"].startswith("application/x-ndjson")
    text = response.content.decode()
    assert text == "" or text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_export__ndjson_oldest_first_every_field_and_a_cursor(world):
    response = signed_in(world).get(EXPORT + "?limit=4")
    assert response.status_code == 200
    rows = lines(response)
    ids = list(AuditRecord.objects.order_by("id").values_list("id", flat=True))
    assert [r["id"] for r in rows] == ids[:4]
    first = rows[0]
    assert first["before"] == {"n": 0} and first["after"] == {"n": 1}
    assert first["changes"] == [{"path": "n", "before": 0, "after": 1}]
    assert first["hash"] and first["prev_hash"] and first["actor_label"] == "root"
    assert response["X-Next-Cursor"] == str(ids[3])
    assert f"after={ids[3]}" in response["Link"] and 'rel="next"' in response["Link"]
    export = AccessLogEntry.objects.get(action="audit.export")
    assert export.actor_label == "root" and export.detail["rows"] == 4


# Characters orjson writes raw that line readers break a line at (Python's splitlines,
# JavaScript's line terminators), and the other controls beside them.
LINE_BREAKERS = ["\x85", "\u2028", "\u2029", "\x7f", "\x80", "\x9f", "\x1c", "\x1e", "\n", "\r"]


@pytest.mark.parametrize("char", LINE_BREAKERS, ids=[f"U+{ord(c):04X}" for c in LINE_BREAKERS])
def test_export__name_with_a_line_separator__escaped_one_record_a_line(world, char):
    name = f"Shop{char}assistant"
    audit_record(actor=world, action=AuditAction.AGENT_UPDATE, after={"name": name})
    response = signed_in(world).get(EXPORT + "?limit=100")
    records = response.content.split(b"\n")
    assert records[-1] == b"" and not any(char.encode() in r for r in records)  # escaped
    rows = lines(response)  # splitlines: one record a line, or json.loads fails on a half
    assert len(rows) == 7
    assert rows[-1]["after"] == {"name": name}  # the escape reads back as the character


def test_export__cursor_paging_while_rows_are_added__none_lost_or_repeated(world):
    client = signed_in(world)
    seen, cursor, added = [], 0, 0
    for _ in range(20):
        response = client.get(EXPORT, {"after": cursor, "limit": 3})
        page = lines(response)
        seen += [r["id"] for r in page]
        cursor = int(response["X-Next-Cursor"])
        if added < 5:  # a writer keeps adding rows between the polls
            audit_record(
                actor=world, action=AuditAction.AGENT_UPDATE, agent="assistant_professional"
            )
            added += 1
        elif not page:
            break
    everything = list(AuditRecord.objects.order_by("id").values_list("id", flat=True))
    assert seen == everything
    assert len(seen) == len(set(seen)) == 6 + 5


def test_export__filters_of_the_audit_list(world):
    client = signed_in(world)
    pro = lines(client.get(EXPORT, {"agent": "assistant_professional", "action": "agent."}))
    assert len(pro) == 4 and {r["agent_key"] for r in pro} == {"assistant_professional"}
    assert lines(client.get(EXPORT, {"actor": "nobody"})) == []


def test_export__visibility__auditor_of_one_agent_sees_only_its_rows(world, make_user):
    rows = lines(signed_in(make_user("pro_admin", admin="assistant_professional")).get(EXPORT))
    assert len(rows) == 4 and {r["agent_key"] for r in rows} == {"assistant_professional"}
    denied = signed_in(make_user("ops", operator=None)).get(EXPORT)
    assert denied.status_code == 403 and denied["Content-Type"] == "application/json"
    assert denied.json()["error"]["code"] == "forbidden"


def test_export__with_a_personal_token__works_and_is_logged_with_the_token(world):
    _, secret = personal_token_create(
        user=world, name="siem", capabilities=["view_audit"], all_agents=True
    )
    response = Client(HTTP_AUTHORIZATION=f"Bearer {secret}").get(EXPORT)
    assert response.status_code == 200 and len(lines(response)) == 7  # + the token's creation
    export = AccessLogEntry.objects.get(action="audit.export")
    assert (export.actor_label, export.actor_token_label) == ("root", "siem")


@pytest.mark.parametrize("query", ["limit=5001", "limit=0", "after=-1", "after=abc"])
def test_export__bad_cursor_or_limit__400_nothing_logged(world, query):
    response = signed_in(world).get(f"{EXPORT}?{query}")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_failed"
    assert not AccessLogEntry.objects.filter(action="audit.export").exists()


def test_export__in_the_openapi_schema_as_json_lines(world):
    schema = signed_in(world).get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/audit/export"]["get"]
    assert "application/x-ndjson" in operation["responses"]["200"]["content"]
    assert "X-Next-Cursor" in operation["responses"]["200"]["headers"]


# --- CSV from the page ------------------------------------------------------------------------------
def csv_rows(response) -> list[dict]:
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith('attachment; filename="audit-')
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


def test_csv__current_filters__streamed_and_logged(world):
    client = signed_in(world)
    page = client.get(reverse("audit-list") + "?agent=assistant_lite").content.decode()
    assert reverse("audit-export-csv") + "?agent=assistant_lite" in page  # the Download link
    rows = csv_rows(client.get(reverse("audit-export-csv") + "?agent=assistant_lite"))
    assert [r["action"] for r in rows] == ["environment.update"]
    assert json.loads(rows[0]["after"]) == {"x": 1} and rows[0]["hash"]
    export = AccessLogEntry.objects.get(action="audit.export")
    assert export.detail == {"format": "csv", "filters": {"agent": "assistant_lite"}}


def test_csv__formula_like_cells__prefixed_with_a_quote(world):
    audit_record(
        actor=world,
        action=AuditAction.AGENT_UPDATE,
        agent="assistant_professional",
        target=("note", '=HYPERLINK("http://x")', "@SUM(A1:A9)"),
    )
    rows = csv_rows(signed_in(world).get(reverse("audit-export-csv") + "?target=SUM"))
    assert rows[0]["target_label"] == "'@SUM(A1:A9)"
    assert rows[0]["target_id"] == '\'=HYPERLINK("http://x")'


def test_csv__visibility__auditor_of_one_agent(world, make_user):
    client = signed_in(make_user("lite_admin", admin="assistant_lite"))
    rows = csv_rows(client.get(reverse("audit-export-csv")))
    assert [r["agent_key"] for r in rows] == ["assistant_lite"]
    assert (
        signed_in(make_user("ops", operator=None)).get(reverse("audit-export-csv")).status_code
        == 403
    )
