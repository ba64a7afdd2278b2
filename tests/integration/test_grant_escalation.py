"""Grants cannot escalate (issue 19, item 2): a grant needs MANAGE_GRANTS and every
capability of its role where it applies, never goes to the granter (or a group they are in);
revoking is judged the same way; roles are defined only with capabilities held on all
agents. Refusals are structured 403s in the API, messages on the pages, and access-log rows."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from console.accounts.personal_tokens import capabilities_offered
from console.kernel.models import AccessLogEntry, AuditRecord, Grant, Role
from tests.factories import AgentFactory, grant, user_with_grants

pytestmark = pytest.mark.django_db

LITE, PRO = "assistant_lite", "assistant_professional"


@pytest.fixture
def agents(db):
    return {key: AgentFactory(key=key) for key in (PRO, LITE)}


@pytest.fixture
def delegate(agents):
    """view_config + manage_grants on assistant_lite only."""
    return user_with_grants("delegate", delegate=LITE)


@pytest.fixture
def helper(agents):
    return user_with_grants("helper")


def api_grant(client, *, role, agent=LITE, user=None, group=None, reason="needs it this week"):
    body = {"role": role, "agent": agent, "reason": reason}
    body.update({"user": user} if user else {"group": group})
    return client.post(reverse("api-grant-list"), body, content_type="application/json")


def denied_rows(username):
    return AccessLogEntry.objects.filter(actor_label=username, outcome="denied")


def test_api_grant__delegate_grants_self_admin__403_nothing_granted_logged(delegate, client):
    client.force_login(delegate)
    response = api_grant(client, role="admin", user="delegate")
    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "role_above_own"
    assert error["details"][0]["path"] == "role"
    assert "Approve publishes" in error["message"]
    assert not Grant.objects.filter(user=delegate, role__name="admin").exists()
    assert not AuditRecord.objects.filter(action="grant.create").exists()
    row = denied_rows("delegate").get()
    assert row.agent_key == LITE and row.detail["capability"] == "manage_grants"
    # ...so the token they could mint next holds nothing they were not given.
    offered = {c.value for c in capabilities_offered(delegate)}
    assert offered == {"view_config", "manage_grants"}


def test_api_grant__delegate_grants_admin_to_someone_else__403(delegate, helper, client):
    client.force_login(delegate)
    for role in ("admin", "operator", "support"):
        response = api_grant(client, role=role, user="helper")
        assert response.status_code == 403, (role, response.content)
        assert response.json()["error"]["code"] == "role_above_own"
    assert not Grant.objects.filter(user=helper).exists()
    assert denied_rows("delegate").count() == 3


def test_api_grant__delegate_grants_what_they_hold__201(delegate, helper, client):
    client.force_login(delegate)
    assert api_grant(client, role="viewer", user="helper").status_code == 201
    assert api_grant(client, role="delegate", user="helper").status_code == 201
    assert set(Grant.objects.filter(user=helper).values_list("role__name", flat=True)) == {
        "viewer",
        "delegate",
    }


def test_api_grant__to_self_even_within_own_capabilities__403_self_grant(delegate, client):
    client.force_login(delegate)
    response = api_grant(client, role="viewer", user="delegate")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "self_grant"
    assert not Grant.objects.filter(user=delegate, role__name="viewer").exists()


def test_api_grant__to_a_group_the_granter_is_in__403_self_grant(delegate, helper, client):
    team = Group.objects.create(name="lite-team")
    delegate.groups.add(team)
    client.force_login(delegate)
    response = api_grant(client, role="viewer", group="lite-team")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "self_grant"
    other = Group.objects.create(name="other-team")
    assert api_grant(client, role="viewer", group=other.name).status_code == 201


def test_api_grant__all_agents_delegate__only_roles_held_on_all_agents(agents, helper, client):
    """Held on all agents: a delegate of all agents who is admin on one agent still may
    not grant admin on all agents, nor on another agent, but may there."""
    manager = user_with_grants("manager", delegate=None, admin=PRO)
    client.force_login(manager)
    assert api_grant(client, role="admin", agent=None, user="helper").status_code == 403
    assert api_grant(client, role="admin", agent=LITE, user="helper").status_code == 403
    assert api_grant(client, role="admin", agent=PRO, user="helper").status_code == 201
    assert api_grant(client, role="viewer", agent=None, user="helper").status_code == 201


def test_api_grant__agent_admin__grants_admin_on_own_agent_only(agents, helper, client):
    client.force_login(user_with_grants("lite_admin", admin=LITE))
    assert api_grant(client, role="admin", agent=LITE, user="helper").status_code == 201
    assert api_grant(client, role="viewer", agent=None, user="helper").status_code == 403


def test_api_revoke__delegate__role_above_own_403_kept_own_level_204(delegate, helper, client):
    above = grant(helper, "admin", LITE)
    level = grant(helper, "viewer", LITE)
    client.force_login(delegate)
    url = reverse("api-grant-detail", args=[above.pk])
    response = client.delete(url + "?reason=cleanup", content_type="application/json")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "role_above_own"
    assert Grant.objects.filter(pk=above.pk).exists()
    url = reverse("api-grant-detail", args=[level.pk])
    assert client.delete(url + "?reason=cleanup").status_code == 204
    assert not Grant.objects.filter(pk=level.pk).exists()


def test_revoke_page__delegate__offers_revoke_only_within_own_capabilities(
    delegate, helper, client
):
    above = grant(helper, "admin", LITE)
    level = grant(helper, "viewer", LITE)
    client.force_login(delegate)
    grants = {g.pk: g for g in client.get(reverse("access-overview")).context["grants"]}
    assert grants[level.pk].revocable and not grants[above.pk].revocable
    response = client.post(reverse("grant-revoke", args=[above.pk]), {"reason": "forged"})
    assert response.status_code == 403
    assert Grant.objects.filter(pk=above.pk).exists()
    assert denied_rows("delegate").filter(target_id=str(above.pk)).exists()


def test_grant_form__offers_only_roles_the_user_may_grant(delegate, client):
    client.force_login(delegate)
    form = client.get(reverse("grant-create")).context["form"]
    offered = {role.name for role in form.fields["role"].queryset}
    assert offered == {"viewer", "delegate"}


def _form_post(client, *, username, role, agent, confirm=False):
    data = {
        "username": username,
        "role": Role.objects.get(name=role).pk,
        "agent": agent,
        "reason": "on call this week",
    }
    if confirm:
        data["confirm"] = "1"
    return client.post(reverse("grant-create"), data)


def test_grant_form__role_above_own_on_chosen_agent__message_403_logged(agents, helper, client):
    """admin is offered (granted on assistant_professional) but not on assistant_lite."""
    user_with_grants("mixed", admin=PRO, delegate=LITE)
    client.force_login(Grant.objects.get(role__name="delegate").user)
    for confirm in (False, True):
        response = _form_post(client, username="helper", role="admin", agent=LITE, confirm=confirm)
        assert response.status_code == 403
        errors = response.context["form"].errors["role"]
        assert "You cannot grant “admin” on assistant_lite" in errors[0]
        assert "You cannot grant" in response.content.decode()
    assert not Grant.objects.filter(user=helper).exists()
    assert denied_rows("mixed").filter(agent_key=LITE).count() == 2


def test_grant_form__to_self__message_403(delegate, client):
    client.force_login(delegate)
    response = _form_post(client, username="delegate", role="viewer", agent=LITE, confirm=True)
    assert response.status_code == 403
    assert "You cannot grant a role to yourself" in response.context["form"].errors["username"][0]
    assert not Grant.objects.filter(user=delegate, role__name="viewer").exists()


# --- roles: defined only with what the definer holds on all agents -------------------------------
def test_api_role_update__all_agents_delegate_adds_approve_to_own_role__403_unchanged(
    agents, client
):
    manager = user_with_grants("manager", delegate=None)
    role = Role.objects.get(name="delegate")
    client.force_login(manager)
    response = client.patch(
        reverse("api-role-detail", args=[role.pk]),
        {"capabilities": ["view_config", "manage_grants", "approve", "view_snapshots"]},
        content_type="application/json",
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "role_above_own"
    role.refresh_from_db()
    assert sorted(role.capabilities) == ["manage_grants", "view_config"]
    assert not AuditRecord.objects.filter(action="role.update").exists()
    assert denied_rows("manager").count() == 1


def test_api_role__all_agents_delegate__creates_within_own_refused_above(agents, client):
    client.force_login(user_with_grants("manager", delegate=None))
    url = reverse("api-role-list")
    body = {"name": "escalator", "capabilities": ["view_config", "rollback"]}
    assert client.post(url, body, content_type="application/json").status_code == 403
    assert not Role.objects.filter(name="escalator").exists()
    body = {"name": "reader", "capabilities": ["view_config"]}
    assert client.post(url, body, content_type="application/json").status_code == 201
    # a role holding what they lack (admin's) is not theirs to edit, even its description
    admin_role = Role.objects.get(name="admin")
    response = client.patch(
        reverse("api-role-detail", args=[admin_role.pk]),
        {"description": "weaker now"},
        content_type="application/json",
    )
    assert response.status_code == 403


def test_role_edit_page__above_own__message_403(agents, client):
    client.force_login(user_with_grants("manager", delegate=None))
    role = Role.objects.get(name="delegate")
    response = client.post(
        reverse("role-edit", args=[role.pk]),
        {"name": "delegate", "capabilities": ["view_config", "manage_grants", "approve"]},
    )
    assert response.status_code == 403
    assert "Approve publishes" in response.context["form"].errors["capabilities"][0]
    role.refresh_from_db()
    assert "approve" not in role.capabilities


def test_api_grant__through_a_narrow_token__only_what_the_token_holds(agents, helper):
    """A request made with a personal token is judged by the token's scope: an admin's
    token for managing access alone hands out no more than view_config."""
    from django.test import Client

    from console.accounts.personal_tokens import personal_token_create

    admin = user_with_grants("root", admin=None)
    _, secret = personal_token_create(
        user=admin, name="ci", capabilities=["manage_grants", "view_config"], all_agents=True
    )
    token_client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert api_grant(token_client, role="admin", user="helper").status_code == 403
    assert api_grant(token_client, role="viewer", user="helper").status_code == 201
