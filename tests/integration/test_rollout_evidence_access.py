"""Who reads a rollout's evidence (issue 31 item 18): the request ids a guard names are real
requests with a verdict on each, so they are a look at traces — shown on the rollout page and
in the operator API only to someone who may view the agent's traces, and each such read is in
the access log like every other list of request ids. Someone with view_config alone sees the
rollout, its guards and how many requests they name, never which; the release row, the
dashboard and a 409's `current` never carry them."""

from __future__ import annotations

import json

import pytest

from console.kernel.models import AccessLogEntry
from strategies.catalog.services import manifest_record
from strategies.releases.services import (
    rollout_finish,
    rollout_guard_rollback,
    rollout_record_guards,
    rollout_start,
    rollout_watch_warn,
)
from tests.factories import manifest_body, user_with_grants
from tests.factories.releases import rollout_setup

IDS = ["req-1", "req-2", "req-3", "req-4", "req-5"]
EVIDENCE = {
    "guard": "paired",
    "state": "breach",
    "message": "12 of 640 requests worse on the same inputs (lower bound 1.1% > 0.5%)",
    "request_ids": IDS,
}
PLAN = [{"share": 0.1, "bake_seconds": 120}, {"share": 1.0, "bake_seconds": 120}]
API = "/api/v1/agents/assistant_professional/rollouts/"


@pytest.fixture
def world(db):
    w = rollout_setup()
    w.viewer = user_with_grants("viewer", viewer=w.agent)  # view_config alone
    w.support = user_with_grants("support", support=w.agent)  # view_config and view_traces
    return w


@pytest.fixture
def rolled_back(world):
    """A rollout the paired guard rolled back, its guards' last look naming requests too."""
    rollout = rollout_start(
        version=world.strategy[3], environment=world.envs["sg-test"], actor=world.ops, plan=PLAN
    )
    rollout_record_guards(
        rollout=rollout,
        guards=[
            {
                "name": "paired",
                "state": "breach",
                "message": "worse",
                "evidence": {"kinds": {"status": {"request_ids": IDS[:2]}}},
            }
        ],
    )
    return rollout_guard_rollback(rollout=rollout, guard="paired", evidence=EVIDENCE)


def looks() -> list[dict]:
    return list(AccessLogEntry.objects.filter(action="trace.list").values("actor_label", "detail"))


def page_of(client, rollout) -> str:
    response = client.get(f"/releases/assistant_professional/rollouts/{rollout.key}/")
    assert response.status_code == 200
    return response.content.decode()


def test_evidence__view_config_alone__no_request_id_on_page_or_api__counts_only(
    client, world, rolled_back
):
    """Given a viewer (view_config, not view_traces), when they open the rolled-back
    rollout's page, its htmx status part, the API's rollout and the API's list, then no
    request id is in any of them — the page says how many requests the guard named — and
    nothing is logged as a look at traces."""
    client.force_login(world.viewer)

    html = page_of(client, rolled_back)
    polled = client.get(
        f"/releases/assistant_professional/rollouts/{rolled_back.key}/", HTTP_HX_REQUEST="true"
    ).content.decode()
    detail = client.get(f"{API}{rolled_back.key}/")
    listed = client.get(API)

    assert detail.status_code == listed.status_code == 200
    for shown in (html, polled, json.dumps(detail.json()), json.dumps(listed.json())):
        assert not any(request_id in shown for request_id in IDS)
    assert 'data-request-ids-hidden="5"' in html  # the evidence: how many, not which
    assert "12 of 640 requests worse" in html  # the guard's words stay
    assert detail.json()["evidence"]["message"] == EVIDENCE["message"]
    assert looks() == []


def test_evidence__with_view_traces__request_ids_shown__each_read_access_logged(
    client, world, rolled_back
):
    """Given support (view_traces on the agent), the page links each request id to its trace
    and the API returns them; each response that shows them writes one access-log row naming
    the rollout and the ids."""
    client.force_login(world.support)

    html = page_of(client, rolled_back)
    detail = client.get(f"{API}{rolled_back.key}/").json()
    listed = client.get(API).json()

    assert all(f'href="/traces/{request_id}/' in html for request_id in IDS)
    assert detail["evidence"]["request_ids"] == IDS
    assert detail["guards"][0]["evidence"]["kinds"]["status"]["request_ids"] == IDS[:2]
    assert listed["results"][0]["evidence"]["request_ids"] == IDS
    logged = looks()
    assert len(logged) == 3  # the page, the API's rollout, the API's list
    assert {row["actor_label"] for row in logged} == {"support"}
    assert all(row["detail"]["rollout_evidence"] == {rolled_back.key: IDS} for row in logged)


def test_evidence__watch_warning__dashboard_and_release_row_name_no_request_id(client, world):
    """A watch's warning on the dashboard and the release row says how many requests and
    links to the rollout's page; the ids are only there (for those who may see traces)."""
    sg = world.envs["sg-test"]
    manifest_record(
        environment=sg,
        body=manifest_body(handlers=["general_policy_only"], features=["shadow", "split", "watch"]),
    )
    rollout = rollout_start(version=world.strategy[3], environment=sg, actor=world.ops, plan=PLAN)
    rollout = rollout_finish(rollout=rollout, actor=world.ops, reason="looks good")
    rollout_watch_warn(rollout=rollout, guard="paired", evidence=EVIDENCE)
    client.force_login(world.support)

    for url in ("/", "/releases/?agent=assistant_professional"):
        html = client.get(url).content.decode()
        assert f'data-watch-warning="{rollout.key}"' in html, url
        assert not any(request_id in html for request_id in IDS), url
        assert 'data-request-ids-hidden="5"' in html, url
    assert looks() == []
    html = page_of(client, rollout)
    assert all(request_id in html for request_id in IDS)
    assert len(looks()) == 1


def test_evidence__a_409s_current__carries_no_request_id(client, world, rolled_back):
    """A refused action answers with the rollout as it stands: without its request ids."""
    client.force_login(world.ops)
    response = client.post(
        f"{API}{rolled_back.key}/pause/",
        data=json.dumps({"reason": "look"}),
        content_type="application/json",
    )
    assert response.status_code == 409
    assert response.json()["error"]["current"]["evidence"]["message"] == EVIDENCE["message"]
    assert not any(request_id in response.content.decode() for request_id in IDS)
