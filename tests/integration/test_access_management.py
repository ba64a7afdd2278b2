"""Roles and grants through the pages and the API: deny by default, scoped management,
refusals logged, every change audited."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from console.kernel.models import AccessLogEntry, AuditRecord, Grant, Role
from tests.factories import AgentFactory, user_with_grants

pytestmark = pytest.mark.django_db


# --- the people of these tests, each created by the tests that name them -------------------------
@pytest.fixture
def agents(db):
    return {key: AgentFactory(key=key) for key in ("assistant_professional", "assistant_lite")}


@pytest.fixture
def admin(agents):
    """Administers all agents: the console's only admin."""
    return user_with_grants("admin", admin=None)


@pytest.fixture
def ops(agents):
    return user_with_grants("ops", operator="assistant_professional")


@pytest.fixture
def support(agents):
    return user_with_grants("support", support="assistant_professional")


@pytest.fixture
def viewer(agents):
    """Views assistant_lite only."""
    return user_with_grants("viewer", viewer="assistant_lite")


def user(name):
    return get_user_model().objects.get(username=name)


def post_grant_form(client, *, username, role, agent, reason="on call this week", confirm=False):
    """Submit the grant page's form: first step (preview), or with confirm the grant itself."""
    data = {
        "username": username,
        "role": Role.objects.get(name=role).pk,
        "agent": agent,
        "reason": reason,
    }
    if confirm:
        data["confirm"] = "1"
    return client.post(reverse("grant-create"), data)


def test_role_created_via_api__holder_can_do_nothing_until_capabilities_added(admin, client):
    client.force_login(user("admin"))
    response = client.post(
        reverse("api-role-list"), {"name": "auditor"}, content_type="application/json"
    )
    assert response.status_code == 201
    assert response.json()["capabilities"] == []
    role_id = response.json()["id"]
    newcomer = get_user_model().objects.create_user("newcomer", password="newcomer-pass-1")
    created = client.post(
        reverse("api-grant-list"),
        {
            "user": "newcomer",
            "role": "auditor",
            "agent": "assistant_professional",
            "reason": "audit work",
        },
        content_type="application/json",
    )
    assert created.status_code == 201, created.content

    client.force_login(newcomer)
    dashboard = client.get(reverse("dashboard"))
    assert dashboard.context["agents"] == []  # an empty role does not even show the agent
    assert client.get(reverse("audit-list")).status_code == 403

    client.force_login(user("admin"))
    patched = client.patch(
        reverse("api-role-detail", args=[role_id]),
        {"capabilities": ["view_config", "view_audit"]},
        content_type="application/json",
    )
    assert patched.json()["capabilities"] == ["view_audit", "view_config"]
    client.force_login(newcomer)
    assert [a.key for a in client.get(reverse("dashboard")).context["agents"]] == [
        "assistant_professional"
    ]
    assert client.get(reverse("audit-list")).status_code == 200


def test_role_created_via_page__starts_with_no_capabilities_and_is_audited(admin, client):
    client.force_login(user("admin"))
    response = client.post(reverse("role-create"), {"name": "release-manager", "description": "x"})
    assert response.status_code == 302
    role = Role.objects.get(name="release-manager")
    assert role.capabilities == [] and role.is_standard is False
    record = AuditRecord.objects.get(action="role.create")
    assert record.actor_label == "admin" and record.after["capabilities"] == []
    assert record.actor_roles == ["admin@*"]


def test_role_edit_page__ticks_capabilities__saved_with_field_level_audit(admin, client):
    client.force_login(user("admin"))
    role = Role.objects.get(name="viewer")
    response = client.post(
        reverse("role-edit", args=[role.pk]),
        {
            "name": "viewer",
            "description": role.description,
            "capabilities": ["view_config", "view_traces"],
        },
    )
    assert response.status_code == 302
    change = AuditRecord.objects.get(action="role.update").changes
    assert change == [
        {"path": "capabilities", "before": ["view_config"], "after": ["view_config", "view_traces"]}
    ]


def test_role_create__unknown_capability_via_api__400_with_path(admin, client):
    client.force_login(user("admin"))
    response = client.post(
        reverse("api-role-list"),
        {"name": "x", "capabilities": ["fly"]},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"][0]["path"].startswith("capabilities")
    assert not Role.objects.filter(name="x").exists()


def test_role_create__admin_of_one_agent__403_roles_are_console_wide(agents, make_user, client):
    client.force_login(make_user("pro_admin", admin="assistant_professional"))
    assert client.get(reverse("role-create")).status_code == 403
    response = client.post(
        reverse("api-role-list"), {"name": "sneaky"}, content_type="application/json"
    )
    assert response.status_code == 403
    assert not Role.objects.filter(name="sneaky").exists()
    assert AccessLogEntry.objects.filter(actor_label="pro_admin", outcome="denied").count() == 2


def test_grant_create_page__agent_admin_grants_on_own_agent__audited_with_reason(
    viewer, make_user, client
):
    client.force_login(make_user("pro_admin", admin="assistant_professional"))
    response = post_grant_form(
        client,
        username="viewer",
        role="support",
        agent="assistant_professional",
        reason="on call this week",
        confirm=True,
    )
    assert response.status_code == 302
    grant = Grant.objects.get(user__username="viewer", role__name="support")
    assert grant.agent.key == "assistant_professional"
    record = AuditRecord.objects.get(action="grant.create")
    assert record.agent_key == "assistant_professional"
    assert record.after["reason"] == "on call this week"


def test_grant_create_page__forged_agent_out_of_scope__404_nothing_written_and_logged(
    ops, make_user, client
):
    client.force_login(make_user("pro_admin", admin="assistant_professional"))
    before = Grant.objects.count()
    # assistant_lite is not offered in the form: a forged submission.
    response = post_grant_form(
        client,
        username="ops",
        role="admin",
        agent="assistant_lite",
        reason="let me in",
        confirm=True,
    )
    assert response.status_code == 404
    assert Grant.objects.count() == before
    denied = AccessLogEntry.objects.get(actor_label="pro_admin", outcome="denied")
    assert denied.agent_key == "assistant_lite"
    assert denied.detail["capability"] == "manage_grants"


def test_grant_revoke__forged_pk_of_other_agents_grant__404_kept_and_logged(
    viewer, make_user, client
):
    client.force_login(make_user("pro_admin", admin="assistant_professional"))
    lite_grant = Grant.objects.get(user__username="viewer")  # viewer on assistant_lite
    response = client.post(reverse("grant-revoke", args=[lite_grant.pk]), {"reason": "forged"})
    assert response.status_code == 404
    assert Grant.objects.filter(pk=lite_grant.pk).exists()
    denied = AccessLogEntry.objects.get(outcome="denied")
    assert denied.target_label == str(lite_grant)


def test_grant_revoke__admin__grant_gone_user_loses_access_audited(admin, support, client):
    client.force_login(user("admin"))
    grant = Grant.objects.get(user__username="support")
    response = client.post(reverse("grant-revoke", args=[grant.pk]), {"reason": "left the team"})
    assert response.status_code == 302
    assert not Grant.objects.filter(pk=grant.pk).exists()
    record = AuditRecord.objects.get(action="grant.revoke")
    assert record.before["user"] == "support" and record.after == {"reason": "left the team"}
    client.force_login(user("support"))
    assert client.get(reverse("dashboard")).context["agents"] == []


def test_grant_revoke__without_reason__refused_nothing_changed(admin, support, client):
    client.force_login(user("admin"))
    grant = Grant.objects.get(user__username="support")
    response = client.delete(
        reverse("api-grant-detail", args=[grant.pk]), {}, content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"][0]["path"] == "reason"
    assert Grant.objects.filter(pk=grant.pk).exists()


def test_api_grant_list__agent_admin__sees_own_agent_and_all_agent_grants_only(
    admin, viewer, make_user, client
):
    client.force_login(make_user("pro_admin", admin="assistant_professional"))
    grants = client.get(reverse("api-grant-list")).json()
    assert {g["agent"] for g in grants} == {"assistant_professional", None}
    assert "viewer" not in {g["user"] for g in grants}  # viewer's grant is on assistant_lite


def test_api_grant_create__duplicate__409(admin, ops, client):
    client.force_login(user("admin"))
    body = {"user": "ops", "role": "operator", "agent": "assistant_professional", "reason": "again"}
    response = client.post(reverse("api-grant-list"), body, content_type="application/json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "grant_exists"


def test_access_overview__admin__people_matrix_and_roles_matrix(admin, ops, client):
    client.force_login(user("admin"))
    response = client.get(reverse("access-overview"))
    html = response.content.decode()
    assert response.status_code == 200
    people = {row["name"]: row for row in response.context["people"]}
    agents = [a.key for a in response.context["agents"]]
    ops_cells = dict(zip(["*"] + agents, people["ops"]["cells"], strict=True))
    assert ops_cells["assistant_professional"] == ["operator"]
    assert people["admin"]["cells"][0] == ["admin"]
    assert "Publish to unprotected environments" in html


def test_access_overview__operator__403_logged(ops, client):
    client.force_login(user("ops"))
    assert client.get(reverse("access-overview")).status_code == 403
    assert AccessLogEntry.objects.filter(actor_label="ops", outcome="denied").count() == 1


def test_openapi_schema__access_endpoints__documented(admin, client):
    client.force_login(user("admin"))
    schema = client.get(reverse("schema"), {"format": "json"}).json()
    for path in ("/api/v1/roles/", "/api/v1/grants/{id}/", "/api/v1/audit/", "/api/v1/access-log/"):
        assert path in schema["paths"], path


def test_grant_revoke__last_console_admin__409_kept(admin, client):
    client.force_login(user("admin"))
    grant = Grant.objects.get(user__username="admin")
    response = client.delete(
        reverse("api-grant-detail", args=[grant.pk]),
        {"reason": "oops"},
        content_type="application/json",
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "last_console_admin"
    assert Grant.objects.filter(pk=grant.pk).exists()


def test_access_pages__query_count__does_not_grow_with_grants(
    admin, make_user, client, django_assert_max_num_queries
):
    client.force_login(user("admin"))
    for n in range(20):
        make_user(f"extra{n}", viewer="assistant_lite")
    with django_assert_max_num_queries(20):
        assert client.get(reverse("access-overview")).status_code == 200
    with django_assert_max_num_queries(15):
        assert client.get(reverse("audit-list")).status_code == 200
    with django_assert_max_num_queries(15):
        assert client.get(reverse("api-grant-list")).status_code == 200


def test_grant_create_page__first_post__shows_what_changes_and_writes_nothing(
    admin, support, client
):
    client.force_login(user("admin"))
    response = post_grant_form(
        client, username="support", role="operator", agent="*", reason="cover"
    )
    assert response.status_code == 200
    preview = " ".join(response.context["preview"])
    assert "support gets the role “operator” on ALL agents" in preview
    assert "New there: " in preview and "Edit drafts" in preview
    assert not Grant.objects.filter(user__username="support", role__name="operator").exists()
    assert not AuditRecord.objects.filter(action="grant.create").exists()


def test_grant_create_page__forged_agent_at_preview__404_and_logged(ops, make_user, client):
    client.force_login(make_user("pro_admin", admin="assistant_professional"))
    response = post_grant_form(
        client, username="ops", role="admin", agent="assistant_lite", reason="x" * 5
    )
    assert response.status_code == 404
    assert AccessLogEntry.objects.filter(actor_label="pro_admin", outcome="denied").count() == 1


def test_grant_preview__capabilities_already_held_there__not_listed_as_new(admin, ops, client):
    client.force_login(user("admin"))
    response = post_grant_form(
        client, username="ops", role="support", agent="assistant_professional", reason="redundant"
    )
    assert "They already hold every capability of this role there." in response.context["preview"]


def test_grant_form__archived_agent__not_offered(client, admin, agents):
    from django.utils import timezone

    archived = agents["assistant_lite"]
    archived.archived_at = timezone.now()
    archived.save(update_fields=["archived_at"])
    client.force_login(admin)
    choices = [
        value
        for value, _ in client.get(reverse("grant-create"))
        .context["form"]
        .fields["agent"]
        .widget.choices
    ]
    assert "assistant_professional" in choices and "assistant_lite" not in choices
