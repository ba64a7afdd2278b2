"""The audit and access logs: append-only in the database, tamper-evident, scoped pages."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.db.utils import DatabaseError
from django.urls import reverse

from console.kernel.audit import access_record, audit_record
from console.kernel.models import AccessLogEntry, AuditRecord
from tests.factories import (
    AgentFactory,
    DocumentFactory,
    frozen_version,
    profile_body,
    profile_edit,
    user_with_grants,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def some_rows(make_user):
    actor = make_user("auditor_subject", admin=None)
    for n in range(3):
        audit_record(actor=actor, action="test.change", before={"n": n}, after={"n": n + 1})
        access_record(actor=actor, action="trace.view", reason=f"look {n}")
    return actor


@pytest.mark.parametrize("model", [AuditRecord, AccessLogEntry])
@pytest.mark.parametrize(
    "statement",
    ["UPDATE {table} SET action = 'forged' WHERE id = %s", "DELETE FROM {table} WHERE id = %s"],
)
def test_log_row__update_or_delete_in_sql__refused_by_the_database(some_rows, model, statement):
    row = model.objects.order_by("id").first()
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(statement.format(table=model._meta.db_table), [row.pk])
    assert model.objects.get(pk=row.pk).action == row.action


def test_log_row__update_through_the_orm__refused(some_rows):
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditRecord.objects.update(action="forged")


def test_audit_verify__intact_chains__exit_zero_and_counts(some_rows, capsys):
    call_command("audit_verify")
    out = capsys.readouterr().out
    assert "audit log: 3 records, chain intact" in out
    assert "access log: 3 records, chain intact" in out


@pytest.mark.parametrize(
    "model, label", [(AuditRecord, "audit log"), (AccessLogEntry, "access log")]
)
def test_audit_verify__row_edited_with_trigger_disabled__names_the_first_broken_record(
    some_rows, capsys, model, label
):
    table = model._meta.db_table
    victim = model.objects.order_by("id")[1]
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
        cursor.execute(
            f"UPDATE {table} SET actor_label = 'someone-else' WHERE id = %s", [victim.pk]
        )
        cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")
    with pytest.raises(CommandError, match="1 chain"):
        call_command("audit_verify")
    err = capsys.readouterr().err
    assert f"{label}: chain BROKEN at record #{victim.pk}" in err
    assert "after 1 intact records" in err


def test_audit_verify__row_deleted_with_trigger_disabled__gap_detected(some_rows, capsys):
    victim = AuditRecord.objects.order_by("id")[1]
    follower = AuditRecord.objects.order_by("id")[2]
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE console_auditrecord DISABLE TRIGGER USER")
        cursor.execute("DELETE FROM console_auditrecord WHERE id = %s", [victim.pk])
        cursor.execute("ALTER TABLE console_auditrecord ENABLE TRIGGER USER")
    with pytest.raises(CommandError):
        call_command("audit_verify")
    assert f"chain BROKEN at record #{follower.pk}" in capsys.readouterr().err


def test_audit_verify__command_line__nonzero_exit_on_tampering(some_rows):
    """The same through manage.py, as a cron job would run it (exit code 1)."""
    from django.core.management import ManagementUtility

    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE console_accesslogentry DISABLE TRIGGER USER")
        cursor.execute("UPDATE console_accesslogentry SET reason = 'edited'")
        cursor.execute("ALTER TABLE console_accesslogentry ENABLE TRIGGER USER")
    with pytest.raises(SystemExit) as exit_info:
        ManagementUtility(["manage.py", "audit_verify"]).execute()
    assert exit_info.value.code == 1


# --- pages: scope and filters ---------------------------------------------------------------------
@pytest.fixture
def audited_world(db, make_user):
    """Rows to read: ops's edit of assistant_professional's profile (from its v1), a role and
    a console-wide grant by admin, and a change on assistant_lite. Returns admin."""
    from console.access import services
    from console.kernel.models import Role

    professional = AgentFactory(key="assistant_professional")
    AgentFactory(key="assistant_lite")
    frozen_version(DocumentFactory(agent=professional, profile=True), profile_body())
    ops = user_with_grants("ops", operator=professional)
    profile_edit(
        ops, toggle=("user_context", "communication_style", False), note="plain tone for complaints"
    )
    admin = user_with_grants("admin", admin=None)
    services.role_create(actor=admin, name="auditor")
    services.grant_create(
        actor=admin,
        role=Role.objects.get(name="viewer"),
        agent=None,
        user=make_user("newcomer"),
        reason="console-wide read access",
    )
    audit_record(actor=admin, action="lite.change", agent="assistant_lite", after={"x": 1})
    return admin


def test_audit_list__admin_on_one_agent__sees_only_that_agents_rows(
    audited_world, make_user, client
):
    client.force_login(make_user("pro_admin", admin="assistant_professional"))
    response = client.get(reverse("audit-list"))
    assert response.status_code == 200
    agents = {row.agent_key for row in response.context["page_obj"]}
    assert agents == {"assistant_professional"}
    assert "lite.change" not in response.content.decode()
    assert "role.create" not in response.content.decode()  # console-wide: needs all agents


def test_audit_list__admin_on_all_agents__sees_console_wide_rows_too(audited_world, client):
    client.force_login(audited_world)
    actions = {row.action for row in client.get(reverse("audit-list")).context["page_obj"]}
    assert {"role.create", "grant.create", "lite.change", "draft.update"} <= actions


def test_audit_list__support_without_view_audit__403_and_logged(client):
    client.force_login(
        user_with_grants("support", support=AgentFactory(key="assistant_professional"))
    )
    assert client.get(reverse("audit-list")).status_code == 403
    denied = AccessLogEntry.objects.filter(actor_label="support", outcome="denied").get()
    assert denied.detail["capability"] == "view_audit"
    assert denied.detail["path"] == "/audit/"


def test_audit_list__filter_by_target_and_actor__only_the_profile_changes_by_ops(
    audited_world, client
):
    client.force_login(audited_world)
    response = client.get(
        reverse("audit-list"), {"target": "assistant_professional/profile", "actor": "ops"}
    )
    rows = list(response.context["page_obj"])
    assert {"draft.create", "draft.update", "version.freeze"} <= {r.action for r in rows}
    assert all(r.actor_label == "ops" for r in rows)
    assert all(r.target_label.startswith("assistant_professional/profile") for r in rows)
    assert rows[0].action == "version.freeze"  # newest first: the edit just made
    times = [r.occurred_at for r in rows]
    assert times == sorted(times, reverse=True)


def test_audit_list__time_range_in_the_future__empty_state(audited_world, client):
    client.force_login(audited_world)
    response = client.get(reverse("audit-list"), {"since": "2999-01-01"})
    assert "No changes match these filters" in response.content.decode()


@pytest.mark.parametrize("query", [{"until": "9999-12-31"}, {"since": "0001-01-01"}])
def test_log_lists__first_or_last_day_of_the_calendar__rows_shown_never_a_server_error(
    audited_world, client, query
):
    """The "To" date includes its day by ending before the next one; the last day has none."""
    access_record(actor=audited_world, action="trace.list")  # a row for the access log
    client.force_login(audited_world)
    for name in ("audit-list", "access-log-list"):
        response = client.get(reverse(name), query)
        assert response.status_code == 200, name
        assert response.context["page_obj"].paginator.count > 0, name
    export = client.get(reverse("audit-export-csv"), query)
    assert export.status_code == 200
    assert len(b"".join(export.streaming_content).splitlines()) > 1  # header and rows


def test_audit_detail__htmx_expand__field_level_before_after(audited_world, client):
    client.force_login(audited_world)
    record = AuditRecord.objects.get(action="draft.update")
    response = client.get(reverse("audit-detail", args=[record.pk]), headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in html  # a fragment
    assert "body.sections.user_context.communication_style" in html
    assert "false" in html and "true" in html


def test_audit_detail__row_of_an_agent_out_of_scope__404(audited_world, make_user, client):
    client.force_login(make_user("pro_admin", admin="assistant_professional"))
    record = AuditRecord.objects.get(action="lite.change")
    assert client.get(reverse("audit-detail", args=[record.pk])).status_code == 404


def test_access_log_list__denied_filter__shows_refusals_with_outcome(client):
    client.force_login(user_with_grants("viewer", viewer=AgentFactory(key="assistant_lite")))
    client.get(reverse("access-overview"))  # refused: logged
    client.force_login(user_with_grants("admin", admin=None))
    response = client.get(reverse("access-log-list"), {"outcome": "denied"})
    rows = list(response.context["page_obj"])
    assert [r.actor_label for r in rows] == ["viewer"]
    assert "denied" in response.content.decode()


def test_api_audit_list__filters_and_scope(audited_world, make_user, client):
    client.force_login(make_user("pro_admin", admin="assistant_professional"))
    response = client.get(reverse("api-audit-list"), {"action": "draft."})
    assert response.status_code == 200
    results = response.json()["results"]
    assert {r["action"] for r in results} == {"draft.create", "draft.update"}
    assert all(r["agent_key"] == "assistant_professional" for r in results)
    assert results[0]["changes"] or results[1]["changes"]


def test_api_access_log_list__viewer__403_error_shape(client):
    client.force_login(user_with_grants("viewer", viewer=AgentFactory(key="assistant_lite")))
    response = client.get(reverse("api-access-log-list"))
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
