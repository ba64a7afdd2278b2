"""Operator API for releases, approvals and promotions: the same services and rules as the
pages, 200 when live, 202 when it waits for a second person, and bad input answered in the
error shape with nothing written."""

from __future__ import annotations

import json

import pytest

from console.kernel.models import AuditRecord
from strategies.documents.services import draft_create
from strategies.releases.models import ApprovalRequest, Release, ReleaseEvent
from tests.factories import (
    AgentFactory,
    DocumentFactory,
    bank_uat_ahead_of_prod,
    frozen_version,
    publish,
    release_setup,
    strategy_body,
    user_with_grants,
)

API = "/api/v1/agents/assistant_professional"
DOC = f"{API}/documents/after_sales_consultation/releases"
APPROVALS = "/api/v1/approvals/"


@pytest.fixture
def world(db):
    return release_setup()


def post(client, url, data, user=None):
    if user is not None:
        client.force_login(user)
    body = data if isinstance(data, bytes | str) else json.dumps(data)
    return client.post(url, data=body, content_type="application/json")


def written():
    return (
        Release.objects.count(),
        ReleaseEvent.objects.count(),
        ApprovalRequest.objects.count(),
        AuditRecord.objects.filter(action__startswith=("release.")).count()
        + AuditRecord.objects.filter(action__startswith="approval.").count(),
    )


# --- publish --------------------------------------------------------------------------------------
def test_publish__unprotected__200_with_release_and_audit(client, world):
    response = post(client, f"{DOC}/sg-test/", {"version": 2, "reason": "try it"}, world.ops)

    assert response.status_code == 200, response.json()
    release = response.json()["release"]
    assert (release["environment"], release["version"], release["revision"]) == ("sg-test", 2, 1)
    assert release["updated_by"] == "ops"
    assert AuditRecord.objects.filter(action="release.publish", actor_label="ops").exists()


def test_publish__protected__202_with_the_approval_request(client, world):
    response = post(client, f"{DOC}/prod/", {"version": 2, "reason": "ship it"}, world.ops)

    assert response.status_code == 202, response.json()
    approval = response.json()["approval"]
    assert (approval["kind"], approval["status"], approval["version"]) == ("publish", "pending", 2)
    assert approval["requested_by"] == "ops"
    assert not Release.objects.filter(environment=world.envs["prod"]).exists()


def test_publish__draft__frozen_then_live(client, world):
    draft = draft_create(
        document=world.strategy[1].document, body=strategy_body(), actor=world.ops, note="new"
    )

    response = post(client, f"{DOC}/sg-test/", {"version": "draft"}, world.ops)

    assert response.status_code == 200, response.json()
    assert response.json()["release"]["version"] == draft.number
    draft.refresh_from_db()
    assert not draft.is_draft


@pytest.mark.parametrize(
    ("url", "data", "status", "code"),
    [
        (f"{DOC}/sg-test/", {"version": 2, "revison": 1}, 400, "validation_failed"),
        (f"{DOC}/sg-test/", {"version": "latest"}, 400, "validation_failed"),
        (f"{DOC}/sg-test/", {"version": True}, 400, "validation_failed"),
        (f"{DOC}/sg-test/", [1, 2], 400, "validation_failed"),
        (f"{DOC}/sg-test/", "{not json", 400, "malformed_json"),
        (f"{DOC}/sg-test/", {"version": 99}, 404, "not_found"),
        (f"{DOC}/sg-test/", {"version": "draft"}, 404, "no_draft"),
        (f"{DOC}/staging/", {"version": 2}, 404, "not_found"),
        (f"{API}/documents/nope/releases/sg-test/", {"version": 1}, 404, "not_found"),
        (f"{DOC}/bank-uat/", {"version": 3}, 400, "not_publishable"),
        (f"{DOC}/sg-test/", {"version": 2, "reason": "x" * 20_000}, 413, "payload_too_large"),
    ],
)
def test_publish__bad_input__4xx_in_error_shape_nothing_written(
    client, world, url, data, status, code
):
    before = written()

    response = post(client, url, data, world.ops)

    assert response.status_code == status, response.json()
    assert response.json()["error"]["code"] == code
    assert written() == before


def test_publish__stale_expected_revision__409_with_current_nothing_written(client, world):
    publish(world.strategy[1], world.envs["sg-test"], actor=world.ops)
    before = written()

    response = post(client, f"{DOC}/sg-test/", {"version": 2, "expected_revision": 0}, world.ops)

    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "stale_revision"
    assert (error["current"]["version"], error["current"]["revision"]) == (1, 1)
    assert written() == before


def test_publish__agent_out_of_scope__404_like_unknown(client, world):
    AgentFactory(key="assistant_lite")
    outsider = user_with_grants("lite_ops", operator="assistant_lite")

    response = post(client, f"{DOC}/sg-test/", {"version": 1}, outsider)

    assert response.status_code == 404
    assert not Release.objects.exists()


def test_publish__viewer__403(client, world):
    viewer = user_with_grants("viewer1", viewer=world.agent)

    response = post(client, f"{DOC}/sg-test/", {"version": 1}, viewer)

    assert response.status_code == 403
    assert not Release.objects.exists()


# --- what is live, history --------------------------------------------------------------------------
def test_release_list__live_per_document_and_environment_with_pending(client, world):
    publish(world.strategy[1], world.envs["sg-test"], actor=world.ops)
    publish(world.strategy[2], world.envs["prod"], actor=world.ops)
    client.force_login(world.ops)

    body = client.get(f"{API}/releases/").json()

    docs = {d["key"]: d for d in body["documents"]}
    assert docs["after_sales_consultation"]["releases"]["sg-test"]["version"] == 1
    assert docs["after_sales_consultation"]["releases"]["sg-test"]["revision"] == 1
    assert docs["after_sales_consultation"]["releases"]["prod"] is None
    assert docs["profile"]["releases"] == {"sg-test": None, "bank-uat": None, "prod": None}
    assert [(p["document"], p["environment"], p["version"]) for p in body["pending"]] == [
        ("after_sales_consultation", "prod", 2)
    ]
    assert [e["key"] for e in body["environments"]] == ["sg-test", "bank-uat", "prod"]


def test_release_history__newest_first_filtered(client, world):
    publish(world.strategy[1], world.envs["sg-test"], actor=world.ops, reason="first")
    publish(world.strategy[2], world.envs["sg-test"], actor=world.ops, reason="second")
    publish(world.profile[1], world.envs["sg-test"], actor=world.ops)
    client.force_login(world.ops)

    body = client.get(f"{API}/releases/history/?document=after_sales_consultation").json()

    assert body["count"] == 2
    assert [(e["to_version"], e["from_version"], e["reason"]) for e in body["results"]] == [
        (2, 1, "second"),
        (1, None, "first"),
    ]
    assert client.get(f"{API}/releases/history/?documnt=x").status_code == 400


# --- rollback --------------------------------------------------------------------------------------------
def sg_with_two_releases(w):
    publish(w.strategy[1], w.envs["sg-test"], actor=w.ops)
    publish(w.strategy[2], w.envs["sg-test"], actor=w.ops)


def test_rollback__policy_off__200_live_at_once(client, world):
    sg_with_two_releases(world)

    response = post(
        client, f"{DOC}/sg-test/rollback/", {"version": 1, "reason": "v2 regressed"}, world.admin
    )

    assert response.status_code == 200, response.json()
    assert response.json()["release"]["version"] == 1
    assert ReleaseEvent.objects.filter(action="rollback", actor="admin").exists()


def test_rollback__policy_on__202_request_then_second_person_approves_through_api(client, world):
    sg_with_two_releases(world)
    world.envs["sg-test"].rollback_needs_approval = True
    world.envs["sg-test"].save()

    response = post(
        client, f"{DOC}/sg-test/rollback/", {"version": 1, "reason": "v2 regressed"}, world.admin
    )
    assert response.status_code == 202, response.json()
    approval = response.json()["approval"]
    assert (approval["kind"], approval["version"], approval["base_revision"]) == (
        "rollback",
        1,
        2,
    )
    own = post(client, f"{APPROVALS}{approval['id']}/approve/", {})
    assert own.status_code == 403 and own.json()["error"]["code"] == "self_approval"

    approved = post(client, f"{APPROVALS}{approval['id']}/approve/", {"note": "ok"}, world.ops2)

    assert approved.status_code == 200, approved.json()
    assert approved.json()["release"]["version"] == 1
    assert approved.json()["approval"]["status"] == "approved"
    event = ReleaseEvent.objects.get(revision=3)
    assert (event.action, event.actor, event.approved_by) == ("rollback", "admin", "ops2")


@pytest.mark.parametrize(
    ("data", "status", "code"),
    [
        ({"version": 1}, 400, "validation_failed"),  # no reason
        ({"version": 1, "reason": "ok ok", "force": True}, 400, "validation_failed"),
        ({"version": 3, "reason": "never live"}, 400, "not_a_rollback_target"),
        ({"version": 42, "reason": "unknown"}, 404, "not_found"),
        ({"version": 1, "reason": "stale", "expected_revision": 1}, 409, "stale_revision"),
    ],
)
def test_rollback__bad_input__4xx_nothing_written(client, world, data, status, code):
    sg_with_two_releases(world)
    before = written()

    response = post(client, f"{DOC}/sg-test/rollback/", data, world.admin)

    assert response.status_code == status, response.json()
    assert response.json()["error"]["code"] == code
    assert written() == before


def test_rollback__nothing_live__404_and_operator_without_rollback__403(client, world):
    assert (
        post(client, f"{DOC}/prod/rollback/", {"version": 1, "reason": "none"}, world.admin)
    ).status_code == 404
    sg_with_two_releases(world)
    response = post(client, f"{DOC}/sg-test/rollback/", {"version": 1, "reason": "x y"}, world.ops)
    assert response.status_code == 403


# --- approvals ---------------------------------------------------------------------------------------------
@pytest.fixture
def requests_(world):
    """A pending prod request on assistant_professional and one on assistant_lite."""
    lite = AgentFactory(key="assistant_lite")
    lite_doc = frozen_version(DocumentFactory(agent=lite, profile=True))
    lite_admin = user_with_grants("lite_admin", admin=lite)
    mine = publish(world.strategy[2], world.envs["prod"], actor=world.ops, reason="ship")
    theirs = publish(lite_doc, world.envs["prod"], actor=lite_admin, reason="lite")
    return mine, theirs


def test_approval_list__only_agents_you_see_filtered_paginated(client, world, requests_):
    mine, theirs = requests_
    client.force_login(world.ops)

    body = client.get(APPROVALS).json()

    assert body["count"] == 1 and [a["id"] for a in body["results"]] == [mine.pk]
    assert client.get(f"{APPROVALS}?status=approved").json()["count"] == 0
    assert client.get(f"{APPROVALS}?environment=prod&status=pending").json()["count"] == 1
    assert client.get(f"{APPROVALS}?agent=assistant_lite").json()["count"] == 0
    client.force_login(world.admin)
    assert client.get(f"{APPROVALS}?limit=1").json()["count"] == 2
    assert len(client.get(f"{APPROVALS}?limit=1").json()["results"]) == 1
    assert client.get(f"{APPROVALS}?status=maybe").status_code == 400
    assert client.get(f"{APPROVALS}?sort=new").status_code == 400


def test_approval_detail__out_of_scope__404(client, world, requests_):
    mine, theirs = requests_
    client.force_login(world.ops)

    assert client.get(f"{APPROVALS}{mine.pk}/").json()["version"] == 2
    assert client.get(f"{APPROVALS}{theirs.pk}/").status_code == 404
    assert client.get(f"{APPROVALS}999999/").status_code == 404


def test_approve__out_of_scope__404_nothing_written(client, world, requests_):
    _, theirs = requests_

    response = post(client, f"{APPROVALS}{theirs.pk}/approve/", {}, world.ops2)

    assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.status == "pending"


def test_approve__publish_request__200_live_and_twice__409(client, world, requests_):
    mine, _ = requests_

    response = post(client, f"{APPROVALS}{mine.pk}/approve/", {"note": "checked"}, world.ops2)
    again = post(client, f"{APPROVALS}{mine.pk}/approve/", {})

    assert response.status_code == 200, response.json()
    assert response.json()["release"]["environment"] == "prod"
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_decided"
    assert again.json()["error"]["current"]["status"] == "approved"


def test_reject__needs_note__then_rejected(client, world, requests_):
    mine, _ = requests_

    missing = post(client, f"{APPROVALS}{mine.pk}/reject/", {}, world.ops2)
    unknown = post(client, f"{APPROVALS}{mine.pk}/reject/", {"note": "no", "why": "x"})
    rejected = post(client, f"{APPROVALS}{mine.pk}/reject/", {"note": "not this week"})

    assert missing.status_code == 400 and unknown.status_code == 400
    assert rejected.status_code == 200
    assert rejected.json()["approval"]["status"] == "rejected"
    assert rejected.json()["approval"]["decision_note"] == "not this week"


def test_withdraw__requester_only(client, world, requests_):
    mine, _ = requests_

    other = post(client, f"{APPROVALS}{mine.pk}/withdraw/", {"reason": "not mine"}, world.ops2)
    own = post(client, f"{APPROVALS}{mine.pk}/withdraw/", {"reason": "wrong one"}, world.ops)

    assert other.status_code == 403
    assert own.status_code == 200 and own.json()["approval"]["status"] == "withdrawn"


# --- promotion -----------------------------------------------------------------------------------------------
@pytest.fixture
def ahead(world):
    return bank_uat_ahead_of_prod(world)


def test_promote__bank_uat_to_prod__202_one_request_per_changed_document(client, ahead):
    response = post(
        client,
        f"{API}/promote/",
        {"source": "bank-uat", "target": "prod", "reason": "uat signed off"},
        ahead.ops,
    )

    assert response.status_code == 202, response.json()
    results = {r["document"]: r for r in response.json()["results"]}
    assert {k: r["outcome"] for k, r in results.items()} == {
        "profile": "unchanged",
        "after_sales_consultation": "requested",
        "returns_consultation": "requested",
    }
    assert results["after_sales_consultation"]["approval"]["version"] == 2
    assert results["profile"]["approval"] is None
    assert ApprovalRequest.objects.filter(status="pending", environment__key="prod").count() == 2


def test_promote__one_document_to_unprotected__200_published(client, ahead):
    response = post(
        client,
        f"{API}/promote/",
        {
            "source": "bank-uat",
            "target": "sg-test",
            "documents": ["returns_consultation"],
            "reason": "catch up",
        },
        ahead.ops,
    )

    assert response.status_code == 200, response.json()
    (result,) = response.json()["results"]
    assert (result["outcome"], result["release"]["version"]) == ("published", 1)


@pytest.mark.parametrize(
    ("data", "status", "code"),
    [
        ({"source": "bank-uat", "target": "prod"}, 400, "validation_failed"),
        ({"source": "bank-uat", "target": "prod", "reason": "ok!", "dry": 1}, 400, None),
        ({"source": "bank-uat", "target": "bank-uat", "reason": "same env"}, 400, None),
        ({"source": "bank-uat", "target": "mars", "reason": "unknown env"}, 404, "not_found"),
        (
            {"source": "bank-uat", "target": "prod", "documents": ["nope"], "reason": "x y z"},
            404,
            "not_found",
        ),
        ({"source": "bank-uat", "target": "prod", "documents": [], "reason": "none"}, 400, None),
    ],
)
def test_promote__bad_input__4xx_nothing_written(client, ahead, data, status, code):
    before = written()

    response = post(client, f"{API}/promote/", data, ahead.ops)

    assert response.status_code == status, response.json()
    if code:
        assert response.json()["error"]["code"] == code
    assert written() == before
