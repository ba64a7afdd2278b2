"""Group mappings through the operator API (issue 33, item 3): what the Access → Group
mappings page does, for the scripts a platform team keeps its mappings in. The same service
decides (console.access.group_mappings): the escalation rule, the audit row, the grants a
removed mapping ends at once."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from console.access.group_mappings import groups_sync
from console.accounts.personal_tokens import personal_token_create
from console.kernel.models import AuditRecord, Grant, GroupMapping
from tests.factories import AgentFactory, role_named, user_with_grants

pytestmark = pytest.mark.django_db
LIST = reverse("api-group-mapping-list")


@pytest.fixture
def admin():
    return user_with_grants("root", admin=None)


@pytest.fixture
def agents():
    return AgentFactory(key="payments"), AgentFactory(key="cards")


def _detail(pk: int) -> str:
    return reverse("api-group-mapping-detail", args=[pk])


def test_create__named_agents__listed_and_audited_then_grants_follow_the_group(
    client, admin, agents
):
    client.force_login(admin)

    made = client.post(
        LIST,
        {
            "provider": "okta",
            "group": "payments-ops",
            "role": "operator",
            "agents": ["payments"],
            "reason": "payments team edits its agent",
        },
        content_type="application/json",
    )

    assert made.status_code == 201, made.content
    body = made.json()
    assert (body["provider"], body["group"], body["role"], body["agents"]) == (
        "okta",
        "payments-ops",
        "operator",
        ["payments"],
    )
    assert body["role_exists"] and body["created_by"] == "root" and body["grant_count"] == 0
    assert [m["id"] for m in client.get(LIST).json()] == [body["id"]]
    audit = AuditRecord.objects.get(action="group_mapping.create")
    assert audit.actor_label == "root" and audit.after["agents"] == ["payments"]
    dana = user_with_grants("dana")
    groups_sync(user=dana, provider="okta", groups=["payments-ops"])
    assert client.get(_detail(body["id"])).json()["grant_count"] == 1


def test_delete__ends_its_grants_at_once_and_needs_a_reason(client, admin, agents):
    client.force_login(admin)
    pk = client.post(
        LIST,
        {"provider": "okta", "group": "ops", "role": "viewer", "reason": "ops read all"},
        content_type="application/json",
    ).json()["id"]
    dana = user_with_grants("dana")
    groups_sync(user=dana, provider="okta", groups=["ops"])
    assert Grant.objects.filter(user=dana).count() == 1

    no_reason = client.delete(_detail(pk))
    assert no_reason.status_code == 400 and GroupMapping.objects.filter(pk=pk).exists()
    removed = client.delete(_detail(pk) + "?reason=team+disbanded")

    assert removed.status_code == 204 and not GroupMapping.objects.filter(pk=pk).exists()
    assert not Grant.objects.filter(user=dana).exists()
    assert AuditRecord.objects.get(action="group_mapping.delete").before["grants"] == [
        {"user": "dana", "agent": None}
    ]


@pytest.mark.parametrize(
    "body, status, path",
    [
        (
            {"provider": "okta", "group": "g", "role": "no-such-role", "reason": "why not"},
            400,
            "role",
        ),
        (
            {
                "provider": "okta",
                "group": "g",
                "role": "viewer",
                "agents": ["nope"],
                "reason": "x y",
            },
            400,
            "agents",
        ),
        (
            {"provider": "okta", "group": "g", "role": "viewer", "agents": 7, "reason": "x y"},
            400,
            "agents",
        ),
        ({"provider": "okta", "group": "g", "role": "viewer"}, 400, "reason"),
        ({"provider": "okta", "group": "g", "role": "viewer", "reason": "ok", "x": 1}, 400, "x"),
    ],
)
def test_create__bad_input__clear_400_and_nothing_mapped(client, admin, agents, body, status, path):
    client.force_login(admin)

    response = client.post(LIST, body, content_type="application/json")

    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert path in str(error), error
    assert not GroupMapping.objects.exists()


def test_create__same_group_and_role_twice__409(client, admin, agents):
    client.force_login(admin)
    body = {"provider": "okta", "group": "ops", "role": "viewer", "reason": "ops read all"}
    client.post(LIST, body, content_type="application/json")

    again = client.post(LIST, body, content_type="application/json")

    assert again.status_code == 409 and again.json()["error"]["code"] == "group_mapping_exists"
    assert GroupMapping.objects.count() == 1


def test_operator_on_one_agent__403_list_and_create(client, agents):
    client.force_login(user_with_grants("ops", operator="payments"))

    listed = client.get(LIST)
    made = client.post(
        LIST,
        {"provider": "okta", "group": "g", "role": "operator", "reason": "let me in"},
        content_type="application/json",
    )

    assert listed.status_code == 403 and made.status_code == 403
    assert not GroupMapping.objects.exists()


def test_personal_token__maps_only_what_its_own_capabilities_cover(admin, agents):
    viewer = role_named("viewer")
    _, narrow = personal_token_create(
        user=admin, name="narrow", capabilities=["manage_grants"], all_agents=True
    )
    _, wide = personal_token_create(
        user=admin,
        name="mappings-as-code",
        capabilities=["manage_grants", *viewer.capabilities],
        all_agents=True,
    )
    body = {"provider": "entra", "group": "5f0c-oid", "role": "viewer", "reason": "readers"}

    refused = Client(HTTP_AUTHORIZATION=f"Bearer {narrow}").post(
        LIST, body, content_type="application/json"
    )
    made = Client(HTTP_AUTHORIZATION=f"Bearer {wide}").post(
        LIST, body, content_type="application/json"
    )

    assert refused.status_code == 403 and refused.json()["error"]["code"] == "role_above_own"
    assert made.status_code == 201, made.content
    audit = AuditRecord.objects.get(action="group_mapping.create")
    assert audit.actor_label == "root" and audit.actor_token_label == "mappings-as-code"
