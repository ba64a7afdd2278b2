"""The runtime contract (docs/runtime-contract.md §1, §2): config with ETags from the cache, manifests."""

from __future__ import annotations

import json

import pytest

from strategies.delivery import config as runtime_config
from strategies.releases.services import release_publish
from strategies.runtime.auth import last_used_flush
from strategies.runtime.tokens import runtime_token_revoke
from tests.factories import AgentFactory, bearer, manifest_body, release_setup, runtime_token

CONFIG = "/api/v1/runtime/config/assistant_professional"
MANIFEST = "/api/v1/runtime/manifest"

pytestmark = pytest.mark.django_db(transaction=True)


def one_tool_more() -> dict:
    """A new manifest that breaks nothing live (one that did would be refused, 409)."""
    body = manifest_body()
    body["tools"] = [*body["tools"], "refund_order"]
    return body


@pytest.fixture
def world():
    w = release_setup()
    release_publish(version=w.profile[1], environment=w.envs["sg-test"], actor=w.ops)
    release_publish(version=w.strategy[3], environment=w.envs["sg-test"], actor=w.ops)
    return w


def test_config__live_releases__contract_document_with_matching_etag(client, world):
    secret = runtime_token(world.envs["sg-test"])

    response = client.get(CONFIG, **bearer(secret))

    assert response.status_code == 200
    body = json.loads(response.content)
    assert body["agent"] == "assistant_professional"
    assert body["environment"] == "sg-test"
    assert body["profile"]["version"] == 1
    assert body["profile"]["body"]["sections"]["user_context"]["high_level_profile"] is True
    strategy = body["strategies"]["after_sales_consultation"]
    assert strategy["version"] == 3
    assert strategy["body"]["on_missing"] == {"order_delivery": "general_policy_only"}
    assert body["shadow"] == {}
    assert response["ETag"] == body["etag"]
    assert body["etag"].startswith('"r2-') and body["etag"].endswith('"')


def test_config__if_none_match_current__304_without_body(client, world):
    secret = runtime_token(world.envs["sg-test"])
    etag = client.get(CONFIG, **bearer(secret))["ETag"]

    response = client.get(CONFIG, HTTP_IF_NONE_MATCH=etag, **bearer(secret))

    assert response.status_code == 304
    assert response.content == b""
    assert response["ETag"] == etag


def test_config__cache_hit__no_sql_query(client, world, django_assert_num_queries):
    secret = runtime_token(world.envs["sg-test"])
    etag = client.get(CONFIG, **bearer(secret))["ETag"]  # fills the identity cache

    with django_assert_num_queries(0):
        full = client.get(CONFIG, **bearer(secret))
        not_modified = client.get(CONFIG, HTTP_IF_NONE_MATCH=etag, **bearer(secret))

    assert full.status_code == 200
    assert not_modified.status_code == 304


def test_config__release_changes__etag_changes_only_then(client, world):
    sg_test = world.envs["sg-test"]
    secret = runtime_token(sg_test, capabilities=("config:read", "manifest:write"))
    first = client.get(CONFIG, **bearer(secret))["ETag"]

    # Neither a manifest report nor a change in another environment touches sg-test's config.
    client.put(
        MANIFEST,
        data=json.dumps(one_tool_more()),
        content_type="application/json",
        **bearer(secret),
    )
    release_publish(version=world.strategy[2], environment=world.envs["bank-uat"], actor=world.ops)
    assert client.get(CONFIG, **bearer(secret))["ETag"] == first

    release_publish(version=world.strategy[2], environment=sg_test, actor=world.ops)
    response = client.get(CONFIG, HTTP_IF_NONE_MATCH=first, **bearer(secret))

    assert response.status_code == 200
    assert response["ETag"] != first
    assert json.loads(response.content)["strategies"]["after_sales_consultation"]["version"] == 2


def test_config__cache_lost__served_from_stored_payload_same_etag(client, world):
    secret = runtime_token(world.envs["sg-test"])
    etag = client.get(CONFIG, **bearer(secret))["ETag"]
    runtime_config.cache_forget("assistant_professional", world.envs["sg-test"].pk)

    response = client.get(CONFIG, **bearer(secret))

    assert response.status_code == 200
    assert response["ETag"] == etag


def test_config__no_release_yet__empty_config_200(client, world):
    secret = runtime_token(world.envs["prod"])

    body = client.get(CONFIG, **bearer(secret)).json()

    assert body["profile"] is None and body["strategies"] == {}
    assert body["etag"].startswith('"r0-')


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"HTTP_AUTHORIZATION": "Bearer cc_rt_not-a-real-token"},
        {"HTTP_AUTHORIZATION": "Basic x"},
    ],
)
def test_config__missing_or_unknown_token__401_error_shape(client, world, headers):
    response = client.get(CONFIG, **headers)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response.json()["error"]["message"]
    assert response.json()["error"]["details"] == []


def test_config__token_revoked_while_cached__401_at_once(client, world):
    from strategies.runtime.models import RuntimeToken

    secret = runtime_token(world.envs["sg-test"])
    assert client.get(CONFIG, **bearer(secret)).status_code == 200
    runtime_token_revoke(token=RuntimeToken.objects.get(), actor=world.admin)

    assert client.get(CONFIG, **bearer(secret)).status_code == 401


def test_config__token_without_config_read__403(client, world):
    secret = runtime_token(world.envs["sg-test"], capabilities=("traces:write",))

    response = client.get(CONFIG, **bearer(secret))

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


def test_config__agent_unknown_or_out_of_scope__same_404(client, world):
    lite_only = runtime_token(world.envs["sg-test"], agents=[AgentFactory(key="assistant_lite")])

    out_of_scope = client.get(CONFIG, **bearer(lite_only))
    unknown = client.get("/api/v1/runtime/config/no_such_agent", **bearer(lite_only))

    assert out_of_scope.status_code == unknown.status_code == 404
    assert out_of_scope.json()["error"]["code"] == unknown.json()["error"]["code"] == "not_found"
    assert (
        client.get("/api/v1/runtime/config/assistant_lite", **bearer(lite_only)).status_code == 200
    )


def test_config__cookie_session_without_token__401(client, world):
    client.force_login(world.admin)

    assert client.get(CONFIG).status_code == 401


def test_manifest_put__stored_by_the_override__same_version_and_warnings_for_live(client, world):
    """A manifest that breaks live is refused from a runtime (test_manifest_refusal.py), but an
    admin's `manage.py manifest_load` may store one: the runtime reporting it then hears which
    live releases it cannot serve."""
    from strategies.catalog.services import manifest_record

    secret = runtime_token(world.envs["sg-test"])
    body = {"runtime": "bank-assistant 2026.12.1", **manifest_body(handlers=[])}
    manifest_record(environment=world.envs["sg-test"], body=body, reported_by="admin")

    response = client.put(
        MANIFEST, data=json.dumps(body), content_type="application/json", **bearer(secret)
    )

    assert response.status_code == 200
    assert response.json()["version"] == 2
    [warning] = response.json()["warnings"]
    assert warning["document"] == "after_sales_consultation"
    assert warning["version"] == 3
    assert any("general_policy_only" in e["message"] for e in warning["errors"])


def test_manifest_put__identical_body__same_version_nothing_written(client, world):
    from strategies.catalog.models import Manifest

    secret = runtime_token(world.envs["sg-test"])
    body = json.dumps(one_tool_more())
    first = client.put(MANIFEST, data=body, content_type="application/json", **bearer(secret))
    again = client.put(MANIFEST, data=body, content_type="application/json", **bearer(secret))

    assert first.json()["version"] == again.json()["version"] == 2
    assert Manifest.objects.filter(environment=world.envs["sg-test"]).count() == 2


@pytest.mark.parametrize(
    "payload, path",
    [
        (
            {
                "providers": "task_state",
                "tools": [],
                "handlers": [],
                "sections": [],
                "switches": [],
            },
            "providers",
        ),
        ({"tools": [], "handlers": [], "sections": [], "switches": []}, "providers"),
    ],
)
def test_manifest_put__malformed__400_with_details_nothing_written(client, world, payload, path):
    from strategies.catalog.models import Manifest

    secret = runtime_token(world.envs["sg-test"])

    response = client.put(
        MANIFEST, data=json.dumps(payload), content_type="application/json", **bearer(secret)
    )

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_failed"
    assert any(d["path"].startswith(path) for d in error["details"])
    assert Manifest.objects.filter(environment=world.envs["sg-test"]).count() == 1


def test_manifest_put__not_json__400_malformed(client, world):
    secret = runtime_token(world.envs["sg-test"])

    response = client.put(
        MANIFEST, data="{not json", content_type="application/json", **bearer(secret)
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_json"


def test_manifest_put__token_without_manifest_write__403(client, world):
    secret = runtime_token(world.envs["sg-test"], capabilities=("config:read",))

    response = client.put(MANIFEST, data="{}", content_type="application/json", **bearer(secret))

    assert response.status_code == 403


def test_token_use__flushed__last_used_at_set(client, world):
    from strategies.runtime.models import RuntimeToken

    secret = runtime_token(world.envs["sg-test"])
    client.get(CONFIG, **bearer(secret))

    last_used_flush()

    assert RuntimeToken.objects.get().last_used_at is not None


def test_manifest_put__csrf_enforced_client__token_suffices(world):
    from django.test import Client

    secret = runtime_token(world.envs["sg-test"])

    response = Client(enforce_csrf_checks=True).put(
        MANIFEST,
        data=json.dumps(one_tool_more()),
        content_type="application/json",
        **bearer(secret),
    )

    assert response.status_code == 200


def test_config__head__etag_without_body(client, world):
    secret = runtime_token(world.envs["sg-test"])
    etag = client.get(CONFIG, **bearer(secret))["ETag"]

    response = client.head(CONFIG, **bearer(secret))

    assert response.status_code == 200
    assert response["ETag"] == etag and response.content == b""


@pytest.mark.parametrize(
    "body, path",
    [
        ({"instance": "i-1", "agents": {"\u0000": {"etag": "0", "documents": {}}}}, "agents"),
        (
            {
                "instance": "i-1",
                "sdk_version": "0.2.0\ud8a8",  # a lone surrogate
                "agents": {"assistant_professional": {"etag": "0", "documents": {}}},
            },
            "sdk_version",
        ),
    ],
    ids=["nul-in-an-agent-key", "surrogate-in-sdk-version"],
)
def test_heartbeat__text_no_store_keeps__400_at_its_path_nothing_written(client, world, body, path):
    """Found by the API fuzz: a NUL in an agent key reached the insert (500)."""
    from strategies.runtime.models import RuntimeInstance

    secret = runtime_token(world.envs["sg-test"])

    response = client.post(
        "/api/v1/runtime/heartbeat",
        data=json.dumps(body),
        content_type="application/json",
        **bearer(secret),
    )

    assert response.status_code == 400
    error = response.json()["error"]
    # Refused at its path: by the heartbeat's own check, or already by the JSON parser.
    named = [d for d in error.get("details", []) if d["path"].startswith(path)]
    assert named or path in error["message"] or "surrogate" in error["message"], error
    assert not RuntimeInstance.objects.exists()


def test_heartbeat__stopped__counted_out_at_once_and_shown_as_stopped(client, world):
    from strategies.runtime.selectors import runtimes_of_agent

    sg_test = world.envs["sg-test"]
    secret = runtime_token(sg_test)
    live = client.get(CONFIG, **bearer(secret))["ETag"]

    def beat(instance, transport):
        served = {"etag": live, "documents": {}, "resolution": "fresh"}
        body = {"instance": instance, "transport": transport, "sdk_version": "0.2.0"}
        body["agents"] = {"assistant_professional": served}
        response = client.post(
            "/api/v1/runtime/heartbeat",
            data=json.dumps(body),
            content_type="application/json",
            **bearer(secret),
        )
        assert response.status_code == 200, response.content

    # Given three runtimes serving what is live
    for instance in ("pod-a", "pod-b", "pod-c"):
        beat(instance, "stream")

    # When pod-a stops cleanly (its last heartbeat says so)
    beat("pod-a", "stopped")

    # Then the releases page counts two runtimes, both serving, and lists pod-a as stopped
    env = next(e for e in runtimes_of_agent(agent=world.agent) if e.environment == sg_test)
    assert env.summary.startswith("2 of 2 runtimes serve")
    stopped = next(r for r in env.rows if r.instance.instance == "pod-a")
    assert stopped.gone and not next(r for r in env.rows if r.instance.instance == "pod-b").gone
    client.force_login(world.ops)
    page = client.get(f"/releases/{world.agent.key}/runtimes/").content.decode()
    assert "2 of 2 runtimes serve" in page and "(stopped)" in page
