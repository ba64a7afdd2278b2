"""Operator API for staged rollouts: start (201, or 202 waiting for the plan's approval where
protected), list and read, pause/resume/advance/finish/stop — in the OpenAPI schema, bad
input answered in the error shape with nothing written, rights through the one policy."""

from __future__ import annotations

import json

import pytest

from strategies.releases.models import Rollout
from tests.factories import AgentFactory, user_with_grants
from tests.factories.releases import rollout_setup

API = "/api/v1/agents/assistant_professional"
START = f"{API}/documents/after_sales_consultation/releases"
PLAN = [{"share": 0.1, "bake_seconds": 120}, {"share": 1.0, "bake_seconds": 120}]


@pytest.fixture
def world(db):
    return rollout_setup()


def post(client, url, data, user=None):
    if user is not None:
        client.force_login(user)
    return client.post(url, data=json.dumps(data), content_type="application/json")


def started(client, world, env="sg-test"):
    response = post(client, f"{START}/{env}/rollout/", {"version": 3, "plan": PLAN}, world.ops)
    assert response.status_code in (201, 202), response.json()
    return response.json()["rollout"]


def test_start__unprotected__201_running_with_its_plan(client, world):
    response = post(
        client,
        f"{START}/sg-test/rollout/",
        {"version": 3, "plan": PLAN, "unit": "principal", "reason": "v3 slowly"},
        world.ops,
    )

    assert response.status_code == 201, response.json()
    rollout = response.json()["rollout"]
    assert rollout["id"].startswith("ro-")
    assert (rollout["state"], rollout["step"], rollout["share"], rollout["unit"]) == (
        "running",
        0,
        0.1,
        "principal",
    )
    assert (rollout["version"], rollout["control_version"], rollout["plan"]) == (3, 2, PLAN)


def test_start__protected_default_plan__202_waits_with_staged_template(client, world):
    response = post(client, f"{START}/prod/rollout/", {"version": 3}, world.ops)

    assert response.status_code == 202, response.json()
    rollout = response.json()["rollout"]
    assert (rollout["state"], rollout["plan_name"], len(rollout["plan"])) == (
        "awaiting_approval",
        "staged",
        4,
    )
    assert rollout["approval"] is not None


@pytest.mark.parametrize(
    "body, code, path",
    [
        ({"version": 3, "plan": PLAN, "colour": "red"}, "validation_failed", "colour"),
        ({"version": 3, "plan": {"share": 1}}, "validation_failed", "plan"),
        (
            {"version": 3, "plan": [{"share": 2, "bake_seconds": 1}]},
            "invalid_plan",
            "plan[0].share",
        ),
        ({"version": 3, "plan": "canary"}, "invalid_plan", "plan"),
        ({"version": 3, "unit": "session"}, "validation_failed", "unit"),
    ],
)
def test_start__bad_input__400_at_the_field_nothing_written(client, world, body, code, path):
    response = post(client, f"{START}/sg-test/rollout/", body, world.ops)

    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == code
    assert path in [d["path"] for d in error["details"]]
    assert not Rollout.objects.exists()


def test_start__runtime_without_split__400_split_unsupported(client, world):
    from strategies.catalog.services import manifest_record
    from tests.factories import manifest_body

    manifest_record(environment=world.envs["sg-test"], body=manifest_body(features=["shadow"]))

    response = post(client, f"{START}/sg-test/rollout/", {"version": 3, "plan": PLAN}, world.ops)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "split_unsupported"


def test_start__support_user_403__other_agent_404(client, world):
    support = user_with_grants("sup", support=world.agent)
    response = post(client, f"{START}/sg-test/rollout/", {"version": 3, "plan": PLAN}, support)
    assert response.status_code == 403

    AgentFactory(key="assistant_lite")
    stranger = user_with_grants("stranger", operator="assistant_lite")
    response = post(client, f"{START}/sg-test/rollout/", {"version": 3, "plan": PLAN}, stranger)
    assert response.status_code == 404
    assert not Rollout.objects.exists()


def test_actions__pause_twice_409_stop_needs_reason_finished_409(client, world):
    rollout = started(client, world)
    url = f"{API}/rollouts/{rollout['id']}"

    assert post(client, f"{url}/pause/", {"reason": "look"}).json()["rollout"]["state"] == "paused"
    again = post(client, f"{url}/pause/", {})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "rollout_state"
    assert again.json()["error"]["current"]["state"] == "paused"
    assert post(client, f"{url}/stop/", {}).status_code == 400
    assert post(client, f"{url}/stop/", {"reason": "enough"}).status_code == 200

    finished = post(client, f"{url}/resume/", {})

    assert finished.status_code == 409
    assert finished.json()["error"]["code"] == "rollout_finished"
    assert finished.json()["error"]["current"]["ended_by"] == "ops"


def test_actions__advance_then_finish__new_version_live(client, world):
    rollout = started(client, world)
    url = f"{API}/rollouts/{rollout['id']}"

    assert post(client, f"{url}/advance/", {}).json()["rollout"]["step"] == 1
    done = post(client, f"{url}/finish/", {"reason": "all good"}).json()["rollout"]

    assert done["state"] == "completed"
    releases = client.get(f"{API}/releases/").json()
    doc = next(d for d in releases["documents"] if d["key"] == "after_sales_consultation")
    assert doc["releases"]["sg-test"]["version"] == 3


def test_actions__viewer_may_read_not_act(client, world):
    rollout = started(client, world)
    viewer = user_with_grants("view", viewer=world.agent)
    client.force_login(viewer)

    assert client.get(f"{API}/rollouts/{rollout['id']}/").status_code == 200
    assert (
        post(client, f"{API}/rollouts/{rollout['id']}/stop/", {"reason": "nope"}).status_code == 403
    )
    assert Rollout.objects.get().state == "running"


def test_list_and_detail__filters_and_404(client, world):
    rollout = started(client, world)
    client.force_login(world.ops)

    listed = client.get(f"{API}/rollouts/?state=running&environment=sg-test").json()
    assert [r["id"] for r in listed["results"]] == [rollout["id"]]
    assert client.get(f"{API}/rollouts/?state=running&colour=x").status_code == 400
    assert client.get(f"{API}/rollouts/ro-999999/").status_code == 404


def test_schema__rollout_paths_and_shapes_present(client, world):
    client.force_login(world.ops)
    schema = client.get("/api/schema/?format=json")
    assert schema.status_code == 200
    body = json.loads(schema.content)
    paths = body["paths"]
    assert "/api/v1/agents/{agent}/rollouts/" in paths
    assert "/api/v1/agents/{agent}/rollouts/ro-{id}/stop/" in paths
    assert "/api/v1/agents/{agent}/documents/{document}/releases/{environment}/rollout/" in paths
    assert "Rollout" in body["components"]["schemas"]
