"""Shadow releases (issue 22 item 1): a version runs beside the live one — judged against the
runtime like a publish, refused where the runtime does not run shadows, one per document and
environment, audited, in the payload's `shadow` with a new ETag, and promoted by a publish."""

from __future__ import annotations

import json

import pytest

from console.kernel.errors import Conflict, Forbidden, NotFound, ValidationFailed
from console.kernel.models import AuditRecord
from strategies.catalog.services import manifest_record
from strategies.delivery.config import CONFIG_CHANNEL
from strategies.delivery.models import ConfigPayload, Webhook, WebhookDelivery
from strategies.documents.services import draft_create
from strategies.releases.models import ApprovalRequest, Release, ReleaseEvent, ShadowRelease
from strategies.releases.selectors import rollback_targets
from strategies.releases.services import (
    approval_approve,
    release_publish,
    release_rollback,
    shadow_promote,
    shadow_start,
    shadow_stop,
)
from tests.engines import pg_connect_kwargs
from tests.factories import (
    DocumentFactory,
    bearer,
    frozen_versions,
    manifest_body,
    release_setup,
    runtime_token,
    strategy_body,
    user_with_grants,
)
from tests.factories.releases import publish

STRATEGY = "after_sales_consultation"


@pytest.fixture
def world(db):
    """release_setup, with runtimes that declare shadow support, and live: v2 in sg-test,
    v2 in bank-uat (its runtime lacks v3's handler), v2 in prod (protected)."""
    w = release_setup()
    for key, env in w.envs.items():
        handlers = [] if key == "bank-uat" else ["general_policy_only"]
        manifest_record(environment=env, body=manifest_body(handlers=handlers, features=["shadow"]))
    for key in ("sg-test", "bank-uat", "prod"):
        publish(w.strategy[2], w.envs[key], actor=w.ops, approver=w.ops2)
    return w


def payload(client, env):
    """The runtime's configuration as stored with the change (the config endpoint serves these
    bytes once the change commits; these tests roll back instead of committing)."""
    row = ConfigPayload.objects.get(agent__key="assistant_professional", environment=env)
    return row.etag, json.loads(bytes(row.body))


def shadow_row(w, env_key) -> ShadowRelease | None:
    return ShadowRelease.objects.filter(document__key=STRATEGY, environment=w.envs[env_key]).first()


def live_number(w, env_key) -> int:
    return Release.objects.get(document__key=STRATEGY, environment=w.envs[env_key]).version.number


# --- services ------------------------------------------------------------------------------------
def test_shadow_start__sg_test_v3__in_payload_new_etag_event_audit_webhook(world, client):
    w, sg = world, world.envs["sg-test"]
    hook = Webhook.objects.create(
        environment=sg, url="http://127.0.0.1:9/", secret="s", events=["shadow.changed"]
    )
    etag_before, before = payload(client, sg)
    assert before["shadow"] == {}

    shadow = shadow_start(version=w.strategy[3], environment=sg, actor=w.ops, reason="budget?")

    etag_after, after = payload(client, sg)
    assert etag_after != etag_before
    assert after["shadow"] == {STRATEGY: {"version": 3, "body": w.strategy[3].body}}
    assert after["strategies"][STRATEGY]["version"] == 2  # users still get live v2
    assert (shadow.version.number, shadow.started_by) == (3, "ops")
    event = ReleaseEvent.objects.get(action="shadow_start")
    assert (event.to_version.number, event.actor, event.reason) == (3, "ops", "budget?")
    audit = AuditRecord.objects.get(action="shadow.start")
    assert audit.after["version"] == 3 and audit.after["live_version"] == 2
    delivery = WebhookDelivery.objects.get(webhook=hook)
    body = json.loads(bytes(delivery.body))
    assert (body["event"], body["action"], body["version"], body["live_version"]) == (
        "shadow.changed",
        "start",
        3,
        2,
    )
    assert body["etag"] == etag_after


def test_shadow_start__version_the_runtime_cannot_serve__refused_like_a_publish(world):
    w = world

    # bank-uat's runtime lacks general_policy_only, which v3 falls back to.
    with pytest.raises(ValidationFailed) as refused:
        shadow_start(version=w.strategy[3], environment=w.envs["bank-uat"], actor=w.ops)

    assert refused.value.code == "not_publishable"
    assert "cannot run as shadow in bank-uat" in refused.value.message
    assert "general_policy_only" in refused.value.message
    assert any(d["path"].startswith("on_missing") for d in refused.value.details)
    assert not ShadowRelease.objects.exists()
    assert not ReleaseEvent.objects.filter(action="shadow_start").exists()


def test_shadow_start__runtime_without_shadow_support__refused_naming_features(world):
    w, sg = world, world.envs["sg-test"]
    manifest_record(environment=sg, body=manifest_body())  # an older runtime: no `features`

    with pytest.raises(ValidationFailed) as refused:
        shadow_start(version=w.strategy[3], environment=sg, actor=w.ops)

    assert [(d["path"], d["code"]) for d in refused.value.details] == [
        ("features", "shadow_unsupported")
    ]
    assert "does not declare shadow support" in refused.value.message
    assert shadow_row(w, "sg-test") is None


def test_shadow_start__the_live_version_itself__allowed_as_the_aa_test(world, client):
    w, sg = world, world.envs["sg-test"]

    shadow_start(version=w.strategy[2], environment=sg, actor=w.ops)

    _, body = payload(client, sg)
    assert body["shadow"][STRATEGY]["version"] == body["strategies"][STRATEGY]["version"] == 2


def test_shadow_start__second_one_same_place__409_with_the_running_one(world):
    w, sg = world, world.envs["sg-test"]
    shadow_start(version=w.strategy[3], environment=sg, actor=w.ops)

    with pytest.raises(Conflict) as refused:
        shadow_start(version=w.strategy[1], environment=sg, actor=w.ops2)

    assert refused.value.code == "shadow_running"
    assert refused.value.extra["current"]["version"] == 3
    assert refused.value.extra["current"]["started_by"] == "ops"
    assert shadow_row(w, "sg-test").version.number == 3
    assert ReleaseEvent.objects.filter(action="shadow_start").count() == 1


def test_shadow_start__stale_revision__409_and_nothing_written(world):
    w, sg = world, world.envs["sg-test"]
    shadow_start(version=w.strategy[3], environment=sg, actor=w.ops)
    shadow_stop(document=w.strategy[3].document, environment=sg, actor=w.ops, reason="done")

    with pytest.raises(Conflict) as refused:
        shadow_start(version=w.strategy[1], environment=sg, actor=w.ops, expected_revision=1)

    assert refused.value.code == "stale_revision"
    assert refused.value.extra["current"] == {
        "document": STRATEGY,
        "environment": "sg-test",
        "version": None,
        "revision": 2,
        "started_by": "",
        "started_at": None,
        "actions": ["start"],  # none runs: the state table allows a start only
    }


@pytest.mark.parametrize(
    ("case", "code"),
    [("profile", "not_a_strategy"), ("nothing_live", "nothing_live"), ("draft", "not_frozen")],
)
def test_shadow_start__not_a_shadow__refused_with_its_reason(world, case, code):
    w = world
    if case == "profile":
        version = w.profile[1]
    elif case == "nothing_live":
        version = frozen_versions(
            DocumentFactory(agent=w.agent, key="returns_consultation"),
            [strategy_body()],
            actor=w.ops,
        )[1]
    else:
        version = draft_create(
            document=w.strategy[3].document, body=w.strategy[3].body, actor=w.ops
        )

    with pytest.raises((ValidationFailed, Conflict)) as refused:
        shadow_start(version=version, environment=w.envs["sg-test"], actor=w.ops)

    assert refused.value.code == code
    assert not ShadowRelease.objects.exists()


def test_shadow_start__protected_prod__no_approval_asked(world):
    w = world

    shadow_start(version=w.strategy[3], environment=w.envs["prod"], actor=w.ops, reason="A/B")

    assert shadow_row(w, "prod").version.number == 3
    assert not ApprovalRequest.objects.filter(status="pending").exists()


def test_shadow__without_publish_rights__forbidden_and_out_of_scope_not_found(world):
    w = world
    support = user_with_grants("support_person", support=w.agent)
    stranger = user_with_grants("stranger")

    with pytest.raises(Forbidden):
        shadow_start(version=w.strategy[3], environment=w.envs["sg-test"], actor=support)
    with pytest.raises(NotFound):
        shadow_start(version=w.strategy[3], environment=w.envs["sg-test"], actor=stranger)
    assert not ShadowRelease.objects.exists()


def test_shadow_stop__audited_out_of_payload_etag_moves_on(world, client):
    w, sg = world, world.envs["sg-test"]
    shadow_start(version=w.strategy[3], environment=sg, actor=w.ops)
    etag_running, _ = payload(client, sg)

    shadow_stop(document=w.strategy[3].document, environment=sg, actor=w.ops2, reason="seen enough")

    etag_stopped, body = payload(client, sg)
    assert body["shadow"] == {}
    # The revision sum only grows: a stopped shadow keeps its row and revision.
    assert int(etag_stopped[2:].split("-")[0]) > int(etag_running[2:].split("-")[0])
    event = ReleaseEvent.objects.get(action="shadow_stop")
    assert (event.to_version.number, event.actor, event.reason) == (3, "ops2", "seen enough")
    audit = AuditRecord.objects.get(action="shadow.stop")
    assert audit.before["version"] == 3 and audit.after["version"] is None


def test_shadow_stop__without_reason_or_when_none_runs__refused(world):
    w, sg, doc = world, world.envs["sg-test"], world.strategy[3].document

    with pytest.raises(Conflict) as none_runs:
        shadow_stop(document=doc, environment=sg, actor=w.ops, reason="why not")
    shadow_start(version=w.strategy[3], environment=sg, actor=w.ops)
    with pytest.raises(ValidationFailed):
        shadow_stop(document=doc, environment=sg, actor=w.ops, reason=" ")

    assert none_runs.value.code == "no_shadow"
    assert shadow_row(w, "sg-test").running


def test_shadow_promote__unprotected__live_and_shadow_stopped_audited(world, client):
    w, sg = world, world.envs["sg-test"]
    shadow_start(version=w.strategy[3], environment=sg, actor=w.ops)

    outcome = shadow_promote(
        document=w.strategy[3].document, environment=sg, actor=w.ops, reason="agrees", version=3
    )

    assert outcome.release.version.number == 3 and live_number(w, "sg-test") == 3
    assert not shadow_row(w, "sg-test").running
    _, body = payload(client, sg)
    assert body["shadow"] == {} and body["strategies"][STRATEGY]["version"] == 3
    stop = ReleaseEvent.objects.get(action="shadow_stop")
    assert stop.reason.startswith("Promoted: v3 is live")
    assert AuditRecord.objects.filter(action="shadow.stop").count() == 1


def test_shadow_promote__protected_prod__approval_request_then_shadow_stops_on_approval(world):
    w, prod, doc = world, world.envs["prod"], world.strategy[3].document
    shadow_start(version=w.strategy[3], environment=prod, actor=w.ops)

    outcome = shadow_promote(document=doc, environment=prod, actor=w.ops, reason="CHG-7")

    assert outcome.release is None
    assert (outcome.approval.status, outcome.approval.version.number) == ("pending", 3)
    assert shadow_row(w, "prod").running and live_number(w, "prod") == 2  # runs on meanwhile

    approval_approve(approval=outcome.approval, actor=w.ops2)

    assert live_number(w, "prod") == 3
    assert not shadow_row(w, "prod").running
    assert ReleaseEvent.objects.filter(action="shadow_stop", release__environment=prod).exists()


def test_shadow_promote__aa_shadow_or_another_version_seen__409(world):
    w, sg, doc = world, world.envs["sg-test"], world.strategy[3].document
    shadow_start(version=w.strategy[2], environment=sg, actor=w.ops)

    with pytest.raises(Conflict) as aa:
        shadow_promote(document=doc, environment=sg, actor=w.ops)
    with pytest.raises(Conflict) as other:
        shadow_promote(document=doc, environment=sg, actor=w.ops, version=3)

    assert aa.value.code == "already_live" and "A/A" in aa.value.message
    assert other.value.code == "stale_revision"
    assert live_number(w, "sg-test") == 2 and shadow_row(w, "sg-test").running


def test_publish_and_rollback_of_live__leave_the_shadow_in_place(world):
    w, sg = world, world.envs["sg-test"]
    shadow_start(version=w.strategy[3], environment=sg, actor=w.ops)

    release_publish(version=w.strategy[1], environment=sg, actor=w.ops)
    release = Release.objects.get(document__key=STRATEGY, environment=sg)
    release_rollback(release=release, to_version=w.strategy[2], actor=w.admin, reason="back")

    assert live_number(w, "sg-test") == 2
    assert shadow_row(w, "sg-test").version.number == 3


def test_rollback_targets__a_version_only_ever_shadow__not_offered(world):
    w, sg = world, world.envs["sg-test"]
    shadow_start(version=w.strategy[1], environment=sg, actor=w.ops)
    release_publish(version=w.strategy[3], environment=sg, actor=w.ops)

    release = Release.objects.get(document__key=STRATEGY, environment=sg)
    assert [v.number for v in rollback_targets(release)] == [2]


# --- operator API --------------------------------------------------------------------------------
def api_url(env_key, action=""):
    base = f"/api/v1/agents/assistant_professional/documents/{STRATEGY}/releases/{env_key}/shadow/"
    return base + (f"{action}/" if action else "")


def post(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


def test_api_shadow__start_list_promote_in_prod__202_with_request(world, client):
    w = world
    client.force_login(w.ops)

    started = post(client, api_url("prod"), {"version": 3, "reason": "try v3 quietly"})
    listed = client.get("/api/v1/agents/assistant_professional/releases/")
    promoted = post(client, api_url("prod", "promote"), {"version": 3, "reason": "CHG-9"})

    assert started.status_code == 200, started.content
    assert started.json()["shadow"]["version"] == 3
    assert started.json()["shadow"]["started_by"] == "ops"
    strategy = next(d for d in listed.json()["documents"] if d["key"] == STRATEGY)
    assert strategy["shadows"]["prod"]["version"] == 3
    assert strategy["shadows"]["sg-test"] is None
    assert promoted.status_code == 202
    assert promoted.json()["approval"]["version"] == 3


def test_api_shadow__twice__second_409_with_current_state(world, client):
    client.force_login(world.ops)

    first = post(client, api_url("sg-test"), {"version": 3})
    second = post(client, api_url("sg-test"), {"version": 1})

    assert first.status_code == 200
    assert second.status_code == 409
    error = second.json()["error"]
    assert error["code"] == "shadow_running" and error["current"]["version"] == 3


@pytest.mark.parametrize(
    ("action", "body", "status", "code"),
    [
        ("", {"version": 3, "colour": "red"}, 400, "validation_failed"),
        ("", {"version": "three"}, 400, "validation_failed"),
        ("", {"version": 99}, 404, "not_found"),
        ("stop", {}, 400, "validation_failed"),
        ("stop", {"reason": "nothing runs"}, 409, "no_shadow"),
        ("promote", {}, 409, "no_shadow"),
    ],
)
def test_api_shadow__bad_input__structured_4xx_nothing_written(
    world, client, action, body, status, code
):
    client.force_login(world.ops)

    response = post(client, api_url("sg-test", action), body)

    assert response.status_code == status, response.content
    assert response.json()["error"]["code"] == code
    assert not ShadowRelease.objects.exists()


def test_api_shadow__no_shadow_support__400_naming_the_manifest_field(world, client):
    manifest_record(environment=world.envs["sg-test"], body=manifest_body())
    client.force_login(world.ops)

    response = post(client, api_url("sg-test"), {"version": 3})

    assert response.status_code == 400
    details = response.json()["error"]["details"]
    assert {"path": "features", "code": "shadow_unsupported"}.items() <= details[0].items()


def test_api_history__shadow_events_listed_with_their_action(world, client):
    w = world
    shadow_start(version=w.strategy[3], environment=w.envs["sg-test"], actor=w.ops)
    client.force_login(w.ops)

    history = client.get(
        "/api/v1/agents/assistant_professional/releases/history/?environment=sg-test"
    )

    first = history.json()["results"][0]
    assert (first["action"], first["to_version"], first["actor"]) == ("shadow_start", 3, "ops")


# --- committed: what a runtime sees ------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_shadow_start_and_stop__committed__notify_sent_and_config_endpoint_serves_it(client):
    import psycopg

    w = release_setup()
    sg = w.envs["sg-test"]
    manifest_record(environment=sg, body=manifest_body(features=["shadow"]))
    publish(w.strategy[2], sg, actor=w.ops)
    secret = runtime_token(sg)
    config = "/api/v1/runtime/config/assistant_professional"
    etag_live = client.get(config, **bearer(secret))["ETag"]
    # As this process reaches the test database: TCP, or the embedded engine's socket
    listener = psycopg.connect(**pg_connect_kwargs(), autocommit=True)
    listener.execute(f"LISTEN {CONFIG_CHANNEL}")

    shadow_start(version=w.strategy[3], environment=sg, actor=w.ops)
    running = client.get(config, **bearer(secret))
    shadow_stop(document=w.strategy[3].document, environment=sg, actor=w.ops, reason="done")
    stopped = client.get(config, **bearer(secret))

    heard = [n.payload for n in listener.notifies(timeout=5, stop_after=2)]
    listener.close()
    assert running.json()["shadow"][STRATEGY]["version"] == 3
    assert stopped.json()["shadow"] == {}
    assert len({etag_live, running["ETag"], stopped["ETag"]}) == 3
    assert heard == [
        f"{sg.pk} assistant_professional {running['ETag']}",
        f"{sg.pk} assistant_professional {stopped['ETag']}",
    ]
