"""Operator API for agents and environments: list, create, read, change, archive, delete —
and every bad input answered in the error shape with nothing written (unknown fields,
invalid keys, duplicates, refused deletes, oversize bodies, out-of-scope agents)."""

from __future__ import annotations

import json

import pytest

from console.kernel.models import AuditRecord
from strategies.catalog import services
from strategies.catalog.models import Agent, Environment
from tests.factories import (
    AgentFactory,
    EnvironmentFactory,
    manifest_body,
    runtime_token,
    user_with_grants,
)

pytestmark = pytest.mark.django_db
AGENTS, ENVIRONMENTS = "/api/v1/agents/", "/api/v1/environments/"


@pytest.fixture
def admin(db):
    return user_with_grants("boss", admin=None)


@pytest.fixture
def api(client, admin):
    client.force_login(admin)
    return client


def send(client, method, url, data=None, **extra):
    if method == "get":
        return client.get(url, **extra)
    body = data if isinstance(data, bytes | str) else json.dumps(data or {})
    return getattr(client, method)(url, data=body, content_type="application/json", **extra)


def error_of(response) -> dict:
    return response.json()["error"]


def written() -> tuple[int, int, int]:
    return Agent.objects.count(), Environment.objects.count(), AuditRecord.objects.count()


# --- agents ----------------------------------------------------------------------------------------
def test_agents_post__valid__201_with_its_profile_and_audited(api):
    response = send(api, "post", AGENTS, {"key": "assistant_returns", "name": "Returns"})
    assert response.status_code == 201
    assert response.json() | {"created_at": None} == {
        "key": "assistant_returns",
        "name": "Returns",
        "description": "",
        "archived": False,
        "archived_at": None,
        "created_at": None,
        "documents": [{"key": "profile", "kind": "profile"}],
    }
    assert AuditRecord.objects.filter(action="agent.create", agent_key="assistant_returns").exists()


@pytest.mark.parametrize(
    ("body", "path", "code"),
    [
        ({"key": "assistant_returns", "nmae": "typo"}, "nmae", "unknown_field"),
        ({"key": "Assistant Returns"}, "key", "invalid"),
        ({"key": "a/b"}, "key", "invalid"),
        ({"key": "x" * 101}, "key", "max_length"),
        ({"name": "no key"}, "key", "required"),
        ({"key": "ok_key", "description": "d" * 2001}, "description", "max_length"),
        (["assistant_returns"], "", "invalid"),
    ],
)
def test_agents_post__bad_input__400_at_its_path_nothing_written(api, body, path, code):
    before = written()
    response = send(api, "post", AGENTS, body)
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "validation_failed"
    assert {"path": path, "code": code} in [
        {"path": d["path"], "code": d["code"]} for d in error["details"]
    ]
    assert written() == before


def test_agents_post__duplicate_key__409_nothing_written(api):
    AgentFactory(key="assistant_returns")
    before = written()
    response = send(api, "post", AGENTS, {"key": "assistant_returns"})
    assert response.status_code == 409
    assert error_of(response)["code"] == "agent_exists"
    assert written() == before


def test_agents_post__oversize_body__413_nothing_written(api):
    before = written()
    body = json.dumps({"key": "big", "description": "d" * 20_000})
    response = send(api, "post", AGENTS, body)
    assert response.status_code == 413
    assert error_of(response)["code"] == "payload_too_large"
    assert written() == before


def test_agents_post__malformed_json__400_nothing_written(api):
    before = written()
    response = send(api, "post", AGENTS, b'{"key": ')
    assert response.status_code == 400
    assert error_of(response)["code"] == "malformed_json"
    assert written() == before


def test_agents_post__operator__403_nothing_written(client):
    agent = AgentFactory(key="assistant_returns")
    client.force_login(user_with_grants("ops", operator=agent))
    before = written()
    response = send(client, "post", AGENTS, {"key": "sneaky"})
    assert response.status_code == 403
    assert written() == before
    assert [a["key"] for a in client.get(AGENTS).json()["results"]] == ["assistant_returns"]


def test_agents_list__unknown_query_parameter__400(api):
    response = api.get(AGENTS, {"archvied": "true"})
    assert response.status_code == 400
    assert error_of(response)["details"][0]["path"] == "archvied"


def test_agent_patch__rename_and_archive__one_call_two_audit_rows(api, admin):
    services.agent_create(key="assistant_returns", actor=admin)
    response = send(
        api,
        "patch",
        f"{AGENTS}assistant_returns/",
        {"name": "Returns desk", "archived": True, "reason": "merged"},
    )
    assert response.status_code == 200
    assert (response.json()["name"], response.json()["archived"]) == ("Returns desk", True)
    assert [a["key"] for a in api.get(AGENTS).json()["results"]] == []
    assert api.get(f"{AGENTS}assistant_returns/").json()["archived"] is True
    actions = AuditRecord.objects.filter(agent_key="assistant_returns").order_by("id")
    assert list(actions.values_list("action", flat=True))[-2:] == ["agent.update", "agent.archive"]

    response = send(api, "patch", f"{AGENTS}assistant_returns/", {"archived": False})
    assert response.json()["archived"] is False


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"key": "renamed"}, "key"),  # the key cannot change
        ({"archived": "maybe"}, "archived"),
        ({"name": "n" * 201}, "name"),
    ],
)
def test_agent_patch__bad_input__400_nothing_changed(api, body, path):
    AgentFactory(key="assistant_returns")
    before = written()
    response = send(api, "patch", f"{AGENTS}assistant_returns/", body)
    assert response.status_code == 400
    assert path in [d["path"] for d in error_of(response)["details"]]
    agent = Agent.objects.get()
    assert (agent.key, agent.name, agent.archived_at) == (
        "assistant_returns",
        "Assistant Returns",
        None,
    )
    assert written() == before


def test_agent_detail__out_of_scope__404_like_unknown(client):
    AgentFactory(key="assistant_returns")
    mine = AgentFactory(key="assistant_lite")
    client.force_login(user_with_grants("lead", admin=mine))
    for method in ("get", "patch", "delete"):
        out_of_scope = send(client, method, f"{AGENTS}assistant_returns/", {"name": "x"})
        unknown = send(client, method, f"{AGENTS}no_such_agent/", {"name": "x"})
        assert out_of_scope.status_code == unknown.status_code == 404
        assert error_of(out_of_scope) == error_of(unknown)
    assert Agent.objects.get(key="assistant_returns").name == "Assistant Returns"


def test_agent_detail__viewer__reads_but_cannot_change(client):
    agent = AgentFactory(key="assistant_returns")
    client.force_login(user_with_grants("viewer", viewer=agent))
    assert client.get(f"{AGENTS}assistant_returns/").status_code == 200
    assert send(client, "patch", f"{AGENTS}assistant_returns/", {"name": "x"}).status_code == 403
    assert send(client, "delete", f"{AGENTS}assistant_returns/").status_code == 403
    assert Agent.objects.get().name == "Assistant Returns"


def test_agent_delete__fresh__204_then_404(api, admin):
    services.agent_create(key="typo_agent", actor=admin)
    response = api.delete(f"{AGENTS}typo_agent/?reason=typo")
    assert response.status_code == 204
    assert not Agent.objects.exists()
    assert AuditRecord.objects.get(action="agent.delete").after == {"reason": "typo"}
    assert api.get(f"{AGENTS}typo_agent/").status_code == 404


def test_agent_delete__with_a_frozen_version__409_with_the_reason(api, admin):
    from tests.factories import DocumentFactory, frozen_version, strategy_body

    agent = AgentFactory(key="assistant_returns")
    frozen_version(DocumentFactory(agent=agent, key="returns"), strategy_body(), actor=admin)
    before = written()
    response = send(api, "delete", f"{AGENTS}assistant_returns/")
    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "in_use"
    assert [d["code"] for d in error["details"]] == ["has_frozen_versions"]
    assert "Archive it instead" in error["message"]
    assert written() == before


# --- environments ----------------------------------------------------------------------------------
def test_environments_post__valid__201_and_listed_in_order(api):
    EnvironmentFactory(key="sg-test", position=10)
    response = send(
        api,
        "post",
        ENVIRONMENTS,
        {
            "key": "prod",
            "protected": True,
            "rollback_needs_approval": True,
            "trace_retention_days": 90,
            "snapshot_retention_days": 14,
            "require_preview": True,
        },
    )
    assert response.status_code == 201
    assert response.json() == {
        "key": "prod",
        "name": "prod",
        "position": 20,
        "protected": True,
        "rollback_needs_approval": True,
        "require_preview": True,
        "trace_retention_days": 90,
        "snapshot_retention_days": 14,
        "archived": False,
        "archived_at": None,
        "break_glass": None,
    }
    assert [e["key"] for e in api.get(ENVIRONMENTS).json()["results"]] == ["sg-test", "prod"]


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"key": "prod", "colour": "red"}, "colour"),
        ({"key": "Prod Env"}, "key"),
        ({"key": "prod", "trace_retention_days": 0}, "trace_retention_days"),
        ({"key": "prod", "trace_retention_days": 3651}, "trace_retention_days"),
        (
            {"key": "prod", "trace_retention_days": 10, "snapshot_retention_days": 11},
            "snapshot_retention_days",
        ),
        ({"key": "prod", "position": -1}, "position"),
        ({"key": "prod", "protected": "perhaps"}, "protected"),
    ],
)
def test_environments_post__bad_input__400_at_its_path_nothing_written(api, body, path):
    before = written()
    response = send(api, "post", ENVIRONMENTS, body)
    assert response.status_code == 400
    assert path in [d["path"] for d in error_of(response)["details"]]
    assert written() == before


def test_environments_post__duplicate__409_and_oversize__413(api):
    EnvironmentFactory(key="prod")
    before = written()
    assert error_of(send(api, "post", ENVIRONMENTS, {"key": "prod"}))["code"] == (
        "environment_exists"
    )
    oversize = send(api, "post", ENVIRONMENTS, json.dumps({"key": "x", "name": "n" * 20_000}))
    assert oversize.status_code == 413
    assert written() == before


def test_environment_patch__retention__applies_and_audited_with_before_after(api):
    EnvironmentFactory(key="prod", position=30)
    response = send(
        api,
        "patch",
        f"{ENVIRONMENTS}prod/",
        {"trace_retention_days": 10, "snapshot_retention_days": 2},
    )
    assert response.status_code == 200
    assert (
        response.json()["trace_retention_days"],
        response.json()["snapshot_retention_days"],
    ) == (
        10,
        2,
    )
    record = AuditRecord.objects.get(action="environment.update")
    assert record.before["trace_retention_days"] == 30
    assert record.after["trace_retention_days"] == 10


def test_environment_patch__snapshot_longer_than_traces__400_nothing_changed(api):
    EnvironmentFactory(key="prod")
    before = written()
    response = send(api, "patch", f"{ENVIRONMENTS}prod/", {"snapshot_retention_days": 31})
    assert response.status_code == 400
    assert error_of(response)["details"][0]["code"] == "longer_than_traces"
    assert Environment.objects.get().snapshot_retention_days == 7
    assert written() == before


def test_environment_patch__archive__gone_from_list_unless_asked(api):
    EnvironmentFactory(key="old-uat")
    assert send(api, "patch", f"{ENVIRONMENTS}old-uat/", {"archived": True}).status_code == 200
    assert api.get(ENVIRONMENTS).json()["results"] == []
    listed = api.get(ENVIRONMENTS, {"archived": "true"}).json()["results"]
    assert [(e["key"], e["archived"]) for e in listed] == [("old-uat", True)]


def test_environment_writes__admin_of_one_agent__403_nothing_written(client):
    EnvironmentFactory(key="prod")
    client.force_login(user_with_grants("lead", admin=AgentFactory(key="assistant_returns")))
    before = written()
    assert send(client, "post", ENVIRONMENTS, {"key": "mine"}).status_code == 403
    assert send(client, "patch", f"{ENVIRONMENTS}prod/", {"protected": True}).status_code == 403
    assert send(client, "delete", f"{ENVIRONMENTS}prod/").status_code == 403
    assert client.get(f"{ENVIRONMENTS}prod/").status_code == 200
    assert written() == before


def test_environment_delete__with_manifest__409_bare__204(api):
    EnvironmentFactory(key="sg-test", manifest=manifest_body())
    runtime_token(Environment.objects.get(key="sg-test"))
    EnvironmentFactory(key="typo-env")
    refused = send(api, "delete", f"{ENVIRONMENTS}sg-test/")
    assert refused.status_code == 409
    assert {d["code"] for d in error_of(refused)["details"]} == {
        "has_manifests",
        "has_runtime_tokens",
    }
    assert send(api, "delete", f"{ENVIRONMENTS}typo-env/", {"reason": "typo"}).status_code == 204
    assert list(Environment.objects.values_list("key", flat=True)) == ["sg-test"]
    assert send(api, "delete", f"{ENVIRONMENTS}nowhere/").status_code == 404
