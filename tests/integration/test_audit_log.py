"""The audit and access logs: append-only in the database, tamper-evident, scoped pages."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.db.utils import DatabaseError
from django.urls import reverse

from console.kernel.audit import AccessAction, AuditAction, access_record, audit_record
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
        audit_record(
            actor=actor, action=AuditAction.AGENT_UPDATE, before={"n": n}, after={"n": n + 1}
        )
        access_record(actor=actor, action=AccessAction.TRACE_VIEW, reason=f"look {n}")
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
    audit_record(
        actor=admin, action=AuditAction.AGENT_UPDATE, agent="assistant_lite", after={"x": 1}
    )
    return admin


def test_audit_list__admin_on_one_agent__sees_only_that_agents_rows(
    audited_world, make_user, client
):
    client.force_login(make_user("pro_admin", admin="assistant_professional"))
    response = client.get(reverse("audit-list"))
    assert response.status_code == 200
    agents = {row.agent_key for row in response.context["page_obj"]}
    assert agents == {"assistant_professional"}
    assert "<code>agent.update</code>" not in response.content.decode()
    # console-wide: needs all agents
    assert "<code>role.create</code>" not in response.content.decode()


def test_audit_list__admin_on_all_agents__sees_console_wide_rows_too(audited_world, client):
    client.force_login(audited_world)
    actions = {row.action for row in client.get(reverse("audit-list")).context["page_obj"]}
    assert {"role.create", "grant.create", "agent.update", "draft.update"} <= actions


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
    access_record(actor=audited_world, action=AccessAction.TRACE_LIST)  # a row for the access log
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
    record = AuditRecord.objects.get(action=AuditAction.AGENT_UPDATE)
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


# --- actions: one list per log, and the filter offers it ------------------------------------------
@pytest.fixture
def every_action(make_user):
    """One row for each action of each log (console-wide), in member order. Returns admin."""
    admin = make_user("every_action_admin", admin=None)
    for member in AuditAction:
        audit_record(actor=admin, action=member, after={"action": member.name})
    for member in AccessAction:
        access_record(actor=admin, action=member)
    return admin


def test_every_member__stored_as_its_string__and_the_chains_verify(every_action, capsys):
    audit = list(AuditRecord.objects.order_by("id").values_list("action", flat=True))
    access = list(AccessLogEntry.objects.order_by("id").values_list("action", flat=True))
    assert audit == [m.value for m in AuditAction]
    assert access == [m.value for m in AccessAction]
    assert all(type(a) is str for a in audit + access)  # plain strings in the rows
    call_command("audit_verify")
    out = capsys.readouterr().out
    assert f"audit log: {len(AuditAction)} records, chain intact" in out
    assert f"access log: {len(AccessAction)} records, chain intact" in out


def test_audit_record__a_plain_string__refused_and_nothing_written(db):
    """Only members are written, even a string that is a member's value: every action in the
    log is one the page's filter offers."""
    for action in ("release.publish", "release.unpublish"):
        with pytest.raises(TypeError):
            audit_record(actor=None, action=action)
    assert AuditRecord.objects.count() == 0


@pytest.mark.parametrize(
    "name, offered, other",
    [("audit-list", AuditAction, AccessAction), ("access-log-list", AccessAction, AuditAction)],
)
def test_log_pages__action_filter__offers_the_logs_actions_with_labels(
    every_action, client, name, offered, other
):
    client.force_login(every_action)
    html = client.get(reverse(name)).content.decode()
    assert '<select name="action" id="f-action" class="input">' in html
    assert '<option value="" selected>Any action</option>' in html
    for member in offered:
        assert f'<option value="{member.value}">{member.label} ({member.value})</option>' in html
    for member in other:
        assert f'value="{member.value}"' not in html


def test_audit_list__action_family_picked__only_its_rows_and_it_stays_selected(
    audited_world, client
):
    client.force_login(audited_world)
    response = client.get(reverse("audit-list"), {"action": "grant."})
    assert {row.action for row in response.context["page_obj"]} == {"grant.create"}
    html = response.content.decode()
    assert '<option value="grant." selected>Every grant action (grant.*)</option>' in html


@pytest.mark.parametrize("action", ["nope", "trace.view", "grant"])
def test_audit_list__unknown_action__readable_error_and_filters_ignored(
    audited_world, client, action
):
    client.force_login(audited_world)
    response = client.get(reverse("audit-list"), {"action": action, "actor": "ops"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "Some filters are not valid and were ignored" in html
    assert f"Action: No action of this log is called “{action}”: pick one from the list." in html
    assert "role.create" in {row.action for row in response.context["page_obj"]}  # unfiltered


def test_access_log_list__audit_action__readable_error(audited_world, client):
    client.force_login(audited_world)
    html = client.get(reverse("access-log-list"), {"action": "grant.create"}).content.decode()
    assert "Action: No action of this log is called “grant.create”" in html


@pytest.mark.parametrize(
    "url, action",
    [
        ("/api/v1/audit/", "nope"),
        ("/api/v1/audit/", "trace.view"),  # an access-log action
        ("/api/v1/access-log/", "grant.create"),  # an audit action
        ("/api/v1/audit/export", "draft"),  # a family is named with its dot
    ],
)
def test_api_logs__unknown_action__400_naming_it(audited_world, client, url, action):
    client.force_login(audited_world)
    before = AccessLogEntry.objects.count()
    response = client.get(url, {"action": action})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_failed"
    assert error["details"] == [
        {
            "path": "action",
            "code": "invalid_choice",
            "message": f"No action of this log is called “{action}”.",
        }
    ]
    assert AccessLogEntry.objects.count() == before  # no export logged


def test_api_logs__filter_by_each_action__exactly_its_rows(every_action, client):
    """Every action can be filtered on, and only by itself: admin.change is not
    admin.change_related (a prefix match would have mixed them)."""
    client.force_login(every_action)
    for url, actions in (("/api/v1/audit/", AuditAction), ("/api/v1/access-log/", AccessAction)):
        for member in actions:
            response = client.get(url, {"action": member.value})
            assert response.status_code == 200, (url, member)
            assert [r["action"] for r in response.json()["results"]] == [member.value]
    admin = client.get("/api/v1/audit/", {"action": "admin.", "limit": 50}).json()["results"]
    assert {r["action"] for r in admin} == {m.value for m in AuditAction if m.family == "admin."}
