"""The operator API for what a team automates besides drafts: creating a strategy with its
first draft, runtime tokens, webhooks, grants and roles. Each write goes through the page's
service (audited); each piece of bad input gets a 4xx in the one error shape and writes
nothing (no row, no audit record)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from context_runtime import vocabulary

from console.kernel.models import AuditRecord, Grant, Role
from strategies.delivery.models import Webhook, WebhookDelivery
from strategies.documents.models import Document, Version
from strategies.runtime.models import RuntimeToken
from tests.factories import (
    AgentFactory,
    DocumentFactory,
    EnvironmentFactory,
    frozen_versions,
    runtime_token,
    strategy_bodies_v1_to_v3,
    strategy_body,
    user_with_grants,
)

AGENT = "assistant_professional"
DOCS = f"/api/v1/agents/{AGENT}/documents/"
TOKENS = "/api/v1/runtime-tokens/"
HOOKS = "/api/v1/webhooks/"
GRANTS = "/api/v1/grants/"
ROLES = "/api/v1/roles/"


@pytest.fixture
def world(db):
    """assistant_professional (ops is its operator, with after_sales_consultation v1–v3) and
    assistant_lite (out of ops' scope); sg-test and prod; an admin on all agents."""
    professional = AgentFactory(key=AGENT)
    lite = AgentFactory(key="assistant_lite")
    ops = user_with_grants("ops", operator=professional)
    frozen_versions(
        DocumentFactory(agent=professional, key="after_sales_consultation"),
        strategy_bodies_v1_to_v3(),
        actor=ops,
    )
    return SimpleNamespace(
        professional=professional,
        lite=lite,
        ops=ops,
        admin=user_with_grants("root", admin=None),
        sg_test=EnvironmentFactory(key="sg-test", position=1),
        prod=EnvironmentFactory(key="prod", position=2, protected=True),
    )


def as_user(client, user):
    client.force_login(user)
    return client


@pytest.fixture
def ops(client, world):
    return as_user(client, world.ops)


@pytest.fixture
def admin(client, world):
    return as_user(client, world.admin)


def send(client, method, url, data):
    body = data if isinstance(data, str) else json.dumps(data)
    return getattr(client, method)(url, data=body, content_type="application/json")


def error_of(response, status):
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert set(error) >= {"code", "message", "details"}
    return error


def paths_of(error) -> set[str]:
    return {d["path"] for d in error["details"]}


def audit_count() -> int:
    return AuditRecord.objects.count()


def oversize(field: str, **rest) -> dict:
    return {**rest, field: "x" * (vocabulary.MAX_BODY_BYTES + 16 * 1024)}


# --- documents: a new strategy and its first draft ----------------------------------------------------
def test_document_create__key_and_body__201_document_and_draft_audited(ops, world):
    response = send(
        ops,
        "post",
        DOCS,
        {"key": "refund_request", "name": "Refunds", "body": strategy_body(), "note": "first"},
    )

    assert response.status_code == 201, response.json()
    out = response.json()
    assert out["document"]["key"] == "refund_request" and out["document"]["name"] == "Refunds"
    assert out["document"]["draft"] == {"number": 1, "revision": 1}
    assert out["draft"]["state"] == "draft" and out["draft"]["note"] == "first"
    assert out["draft"]["body"]["required"] == strategy_body()["required"]
    actions = list(AuditRecord.objects.order_by("-id").values_list("action", flat=True)[:2])
    assert actions == ["draft.create", "document.create"]
    detail = ops.get(f"{DOCS}refund_request/")
    assert detail.status_code == 200 and detail.json()["draft"]["number"] == 1
    listed = [d["key"] for d in ops.get(DOCS).json()["results"]]
    assert "refund_request" in listed


def test_document_detail__frozen_versions__latest_and_no_draft(ops):
    detail = ops.get(f"{DOCS}after_sales_consultation/").json()
    assert detail["latest_version"] == 3 and detail["draft"] is None and detail["live"] == {}


def test_document_create__invalid_body__400_and_no_document_row(ops):
    before = audit_count()
    body = strategy_body(max_extra_reads=50)
    response = send(ops, "post", DOCS, {"key": "refund_request", "body": body})

    error = error_of(response, 400)
    assert "max_extra_reads" in paths_of(error)
    assert not Document.objects.filter(key="refund_request").exists()
    assert audit_count() == before


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ({"key": "refund_request", "body": strategy_body(), "kind": "profile"}, "kind"),
        ({"key": "Refund Request!", "body": strategy_body()}, "key"),
        ({"key": "profile", "body": strategy_body()}, "key"),
        ({"key": "9lives", "body": strategy_body()}, "key"),
        ({"body": strategy_body()}, "key"),
        ({"key": "refund_request"}, "body"),
    ],
    ids=["unknown-field", "invalid-slug", "reserved-key", "leading-digit", "no-key", "no-body"],
)
def test_document_create__bad_input__400_names_the_field_nothing_written(ops, payload, path):
    documents, versions, before = Document.objects.count(), Version.objects.count(), audit_count()

    error = error_of(send(ops, "post", DOCS, payload), 400)

    assert path in paths_of(error)
    assert (Document.objects.count(), Version.objects.count(), audit_count()) == (
        documents,
        versions,
        before,
    )


def test_document_create__duplicate_key__409_and_nothing_written(ops):
    versions, before = Version.objects.count(), audit_count()
    response = send(ops, "post", DOCS, {"key": "after_sales_consultation", "body": strategy_body()})

    assert error_of(response, 409)["code"] == "document_exists"
    assert Version.objects.count() == versions and audit_count() == before


def test_document_create__body_over_64_kib__413_and_nothing_written(ops):
    before = audit_count()
    huge = strategy_body(optional=[f"source_{i:06d}" for i in range(8000)])
    response = send(ops, "post", DOCS, {"key": "refund_request", "body": huge})

    assert error_of(response, 413)["code"] == "payload_too_large"
    assert not Document.objects.filter(key="refund_request").exists()
    assert audit_count() == before


def test_document_create__malformed_json__400(ops):
    assert error_of(send(ops, "post", DOCS, "{nope"), 400)["code"] == "malformed_json"


def test_document_create__agent_out_of_scope__404_like_missing(ops):
    for agent in ("assistant_lite", "nobody"):
        response = send(
            ops, "post", f"/api/v1/agents/{agent}/documents/", {"key": "x", "body": strategy_body()}
        )
        assert error_of(response, 404)["code"] == "not_found"
    assert not Document.objects.filter(key="x").exists()


def test_document_create__viewer__403_though_they_may_list(client, world):
    as_user(client, user_with_grants("vera", viewer=world.professional))
    assert client.get(DOCS).status_code == 200
    response = send(client, "post", DOCS, {"key": "refund_request", "body": strategy_body()})
    error_of(response, 403)
    assert not Document.objects.filter(key="refund_request").exists()


def test_document_detail__unknown_or_out_of_scope__404(ops):
    error_of(ops.get(f"{DOCS}nothing_here/"), 404)
    error_of(ops.get("/api/v1/agents/assistant_lite/documents/profile/"), 404)


# --- documents: the draft endpoints against the bad-input list ---------------------------------------
DRAFT = f"{DOCS}after_sales_consultation/draft/"


def test_draft_save__unknown_field__400_and_draft_unchanged(ops):
    send(ops, "post", DRAFT, {"body": strategy_body()})
    before = list(Version.objects.values_list("pk", "revision", "body"))
    error = error_of(send(ops, "put", DRAFT, {"body": strategy_body(), "revison": 1}), 400)
    assert "revison" in paths_of(error) and "revision" in paths_of(error)
    assert list(Version.objects.values_list("pk", "revision", "body")) == before


def test_draft_save__over_64_kib__413_and_draft_unchanged(ops):
    send(ops, "post", DRAFT, {"body": strategy_body()})
    before = list(Version.objects.values_list("pk", "revision"))
    huge = strategy_body(optional=[f"source_{i:06d}" for i in range(8000)])
    error_of(send(ops, "put", DRAFT, {"body": huge, "revision": 1}), 413)
    assert list(Version.objects.values_list("pk", "revision")) == before


def test_draft_create__already_open__409_with_current(ops):
    send(ops, "post", DRAFT, {"body": strategy_body()})
    error = error_of(send(ops, "post", DRAFT, {"body": strategy_body()}), 409)
    assert error["code"] == "draft_exists" and error["current"]["number"] == 4
    assert Version.objects.filter(state="draft").count() == 1


def test_freeze__stale_revision__409_and_still_a_draft(ops):
    send(ops, "post", DRAFT, {"body": strategy_body()})
    send(ops, "put", DRAFT, {"body": strategy_body(max_extra_reads=2), "revision": 1})
    error = error_of(send(ops, "post", f"{DRAFT}freeze/", {"revision": 1}), 409)
    assert error["code"] == "stale_revision" and error["current"]["revision"] == 2
    assert Version.objects.get(number=4).state == "draft"


def test_freeze__unknown_field__400_and_still_a_draft(ops):
    send(ops, "post", DRAFT, {"body": strategy_body()})
    error_of(send(ops, "post", f"{DRAFT}freeze/", {"revision": 1, "force": True}), 400)
    assert Version.objects.get(number=4).state == "draft"


def test_discard__no_open_draft__404_no_draft(ops):
    assert error_of(ops.delete(DRAFT), 404)["code"] == "no_draft"


def test_draft_endpoints__agent_out_of_scope__404_and_nothing_written(ops, world):
    DocumentFactory(agent=world.lite, key="lite_task")
    lite = "/api/v1/agents/assistant_lite/documents/lite_task/draft/"
    before = Version.objects.count(), audit_count()
    error_of(send(ops, "post", lite, {"body": strategy_body()}), 404)
    error_of(send(ops, "put", lite, {"body": strategy_body(), "revision": 1}), 404)
    error_of(send(ops, "post", lite + "freeze/", {}), 404)
    error_of(ops.delete(lite), 404)
    assert (Version.objects.count(), audit_count()) == before


# --- runtime tokens -------------------------------------------------------------------------------------
def test_runtime_token_create__201_secret_once_hash_never_audited(admin, world):
    response = send(
        admin,
        "post",
        TOKENS,
        {
            "name": "sg-test runtime",
            "environment": "sg-test",
            "capabilities": ["config:read", "traces:write"],
            "agents": [AGENT],
        },
    )

    assert response.status_code == 201, response.json()
    out = response.json()
    token = RuntimeToken.objects.get()
    assert out["secret"].startswith(out["prefix"]) and token.prefix == out["prefix"]
    assert out["environment"] == "sg-test" and out["agents"] == [AGENT]
    assert out["capabilities"] == ["config:read", "traces:write"] and out["is_active"]
    assert "token_hash" not in out and token.token_hash not in response.content.decode()
    assert AuditRecord.objects.filter(action="runtime_token.create").count() == 1
    # the secret is a working runtime credential, and never shown again
    config = admin.get(
        f"/api/v1/runtime/config/{AGENT}", HTTP_AUTHORIZATION=f"Bearer {out['secret']}"
    )
    assert config.status_code != 401
    for later in (admin.get(TOKENS), admin.get(f"{TOKENS}{token.pk}/")):
        assert later.status_code == 200
        text = later.content.decode()
        assert out["secret"] not in text and token.token_hash not in text


def test_runtime_token_list__active_and_revoked__no_hashes(admin, world):
    runtime_token(world.sg_test)
    rows = admin.get(TOKENS).json()["results"]
    assert [r["environment"] for r in rows] == ["sg-test"]
    assert all("token_hash" not in r and "secret" not in r for r in rows)


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        (
            {"name": "a", "environment": "sg-test", "capabilities": ["config:read"], "env": 1},
            "env",
        ),
        ({"name": "a", "environment": "mars", "capabilities": ["config:read"]}, "environment"),
        (
            {"name": "a", "environment": "sg\x00test", "capabilities": ["config:read"]},
            "environment",
        ),
        ({"name": "a", "environment": "sg-test", "capabilities": ["root"]}, "capabilities"),
        ({"name": "a", "environment": "sg-test", "capabilities": []}, "capabilities"),
        ({"name": " ", "environment": "sg-test", "capabilities": ["config:read"]}, "name"),
        (
            {
                "name": "a",
                "environment": "sg-test",
                "capabilities": ["config:read"],
                "agents": ["nobody"],
            },
            "agents",
        ),
    ],
    ids=[
        "unknown-field",
        "unknown-env",
        "nul-in-env",
        "unknown-cap",
        "no-cap",
        "blank-name",
        "unknown-agent",
    ],
)
def test_runtime_token_create__bad_input__400_names_the_field_nothing_written(admin, payload, path):
    before = audit_count()
    error = error_of(send(admin, "post", TOKENS, payload), 400)
    assert path in paths_of(error)
    assert not RuntimeToken.objects.exists() and audit_count() == before


def test_runtime_token_create__oversize__413_nothing_written(admin):
    payload = oversize("name", environment="sg-test", capabilities=["config:read"])
    error_of(send(admin, "post", TOKENS, payload), 413)
    assert not RuntimeToken.objects.exists()


def test_runtime_token_revoke__with_reason__revoked_audited_then_409(admin, world):
    secret = runtime_token(world.sg_test)
    token = RuntimeToken.objects.get()
    url = f"{TOKENS}{token.pk}/revoke/"

    response = send(admin, "post", url, {"reason": "runtime decommissioned"})

    assert response.status_code == 200 and response.json()["revoked_at"]
    assert response.json()["is_active"] is False
    record = AuditRecord.objects.get(action="runtime_token.revoke")
    assert record.after["reason"] == "runtime decommissioned"
    denied = admin.get(f"/api/v1/runtime/config/{AGENT}", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert denied.status_code == 401
    assert error_of(send(admin, "post", url, {"reason": "again"}), 409)["code"] == "already_revoked"


@pytest.mark.parametrize(
    "payload", [{}, {"reason": "gone", "now": True}], ids=["no-reason", "unknown-field"]
)
def test_runtime_token_revoke__bad_input__400_still_active(admin, world, payload):
    runtime_token(world.sg_test)
    token = RuntimeToken.objects.get()
    error_of(send(admin, "post", f"{TOKENS}{token.pk}/revoke/", payload), 400)
    token.refresh_from_db()
    assert token.revoked_at is None


def test_runtime_token__unknown_pk__404(admin):
    error_of(admin.get(f"{TOKENS}999999/"), 404)
    error_of(send(admin, "post", f"{TOKENS}999999/revoke/", {"reason": "gone"}), 404)


def test_runtime_tokens__admin_of_one_agent_only__403_nothing_written(client, world):
    runtime_token(world.sg_test)
    token = RuntimeToken.objects.get()
    as_user(client, user_with_grants("agent_admin", admin=world.professional))
    error_of(client.get(TOKENS), 403)
    payload = {"name": "a", "environment": "sg-test", "capabilities": ["config:read"]}
    error_of(send(client, "post", TOKENS, payload), 403)
    error_of(send(client, "post", f"{TOKENS}{token.pk}/revoke/", {"reason": "mine now"}), 403)
    assert RuntimeToken.objects.count() == 1 and RuntimeToken.objects.get().revoked_at is None


# --- webhooks -------------------------------------------------------------------------------------------
@pytest.fixture
def private_allowed(settings):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True  # the receivers below are loopback ones


@pytest.fixture
def private_refused(settings):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False


def test_webhook_create__both_events__201_secret_once_audited(admin, private_allowed):
    response = send(
        admin,
        "post",
        HOOKS,
        {
            "environment": "sg-test",
            "url": "http://127.0.0.1:9/hooks/chat",
            "description": "review channel",
            "events": ["approval.requested", "release.changed"],
        },
    )

    assert response.status_code == 201, response.json()
    out = response.json()
    hook = Webhook.objects.get()
    assert out["secret"].startswith("whsec_") and out["secret"] == hook.secret
    assert out["events"] == hook.events == ["release.changed", "approval.requested"]
    assert out["environment"] == "sg-test" and out["description"] == "review channel"
    record = AuditRecord.objects.get(action="webhook.create")
    assert record.after["events"] == ["release.changed", "approval.requested"]
    for later in (admin.get(HOOKS), admin.get(f"{HOOKS}{hook.pk}/")):
        assert later.status_code == 200 and hook.secret not in later.content.decode()


def test_webhook_create__no_events_given__release_changed_only(admin, private_allowed):
    response = send(admin, "post", HOOKS, {"environment": "sg-test", "url": "http://127.0.0.1:9/"})
    assert response.status_code == 201 and response.json()["events"] == ["release.changed"]


def test_webhook_detail__deliveries__counts_and_recent_summary(admin, world, private_allowed):
    hook = Webhook.objects.create(environment=world.sg_test, url="http://127.0.0.1:9/", secret="s")
    body = json.dumps(
        {
            "agent": AGENT,
            "document": "profile",
            "from_version": 1,
            "to_version": 2,
            "action": "publish",
        }
    ).encode()
    WebhookDelivery.objects.create(webhook=hook, body=body, status="delivered", tries=1)
    WebhookDelivery.objects.create(webhook=hook, body=body, status="failed", tries=5)
    WebhookDelivery.objects.create(
        webhook=hook, body=b'{"approval": {"id": 7}}', event="approval.requested"
    )

    detail = admin.get(f"{HOOKS}{hook.pk}/").json()

    assert detail["deliveries"]["counts"] == {"pending": 1, "delivered": 1, "failed": 1}
    recent = detail["deliveries"]["recent"]
    assert [r["status"] for r in recent] == ["pending", "failed", "delivered"]
    assert recent[0]["summary"] == "approval.requested"
    assert recent[1]["summary"] == f"{AGENT} / profile v1 → v2 (publish)"
    row = admin.get(HOOKS).json()["results"][0]
    assert (row["delivered"], row["failed"], row["events"]) == (1, 1, ["release.changed"])


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ({"environment": "sg-test", "url": "http://127.0.0.1:9/", "secret": "mine"}, "secret"),
        ({"environment": "mars", "url": "http://127.0.0.1:9/"}, "environment"),
        ({"environment": "sg-test", "url": "ftp://127.0.0.1/"}, "url"),
        ({"environment": "sg-test", "url": "http://127.0.0.1:9/", "events": []}, "events"),
        (
            {"environment": "sg-test", "url": "http://127.0.0.1:9/", "events": ["everything"]},
            "events",
        ),
        ({"environment": "sg-test"}, "url"),
    ],
    ids=["unknown-field", "unknown-env", "not-http", "no-events", "unknown-event", "no-url"],
)
def test_webhook_create__bad_input__400_names_the_field_nothing_written(
    admin, private_allowed, payload, path
):
    before = audit_count()
    error = error_of(send(admin, "post", HOOKS, payload), 400)
    assert path in paths_of(error)
    assert not Webhook.objects.exists() and audit_count() == before


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:9/", "http://10.1.2.3/"]
)
def test_webhook_create__internal_address__400_with_the_reason(admin, private_refused, url):
    error = error_of(send(admin, "post", HOOKS, {"environment": "sg-test", "url": url}), 400)
    [detail] = error["details"]
    assert detail["path"] == "url" and detail["code"] == "internal_address"
    assert url.split("/")[2].split(":")[0] in error["message"]
    assert not Webhook.objects.exists()


def test_webhook_create__same_url_twice_on_an_environment__409_one_webhook(admin, private_allowed):
    payload = {"environment": "sg-test", "url": "http://127.0.0.1:9/hooks"}
    first = send(admin, "post", HOOKS, payload)
    error = error_of(send(admin, "post", HOOKS, payload), 409)
    assert error["code"] == "webhook_exists" and error["current"]["id"] == first.json()["id"]
    assert Webhook.objects.count() == 1
    # another environment may hear the same URL
    assert send(admin, "post", HOOKS, {**payload, "environment": "prod"}).status_code == 201


def test_webhook_create__oversize__413_nothing_written(admin, private_allowed):
    error_of(send(admin, "post", HOOKS, oversize("description", environment="sg-test")), 413)
    assert not Webhook.objects.exists()


def test_webhook_delete__stops_it_keeps_it_audited_then_404(admin, world, private_allowed):
    created = send(admin, "post", HOOKS, {"environment": "sg-test", "url": "http://127.0.0.1:9/"})
    url = f"{HOOKS}{created.json()['id']}/"

    assert admin.delete(url).status_code == 204

    hook = Webhook.objects.get()
    assert hook.deleted_at is not None
    assert AuditRecord.objects.filter(action="webhook.delete").count() == 1
    assert admin.get(url).json()["is_active"] is False  # the record stays readable
    error_of(admin.delete(url), 404)
    assert AuditRecord.objects.filter(action="webhook.delete").count() == 1
    error_of(admin.get(f"{HOOKS}999999/"), 404)


def test_webhooks__operator__403_nothing_written(ops, private_allowed):
    error_of(ops.get(HOOKS), 403)
    error_of(
        send(ops, "post", HOOKS, {"environment": "sg-test", "url": "http://127.0.0.1:9/"}), 403
    )
    assert not Webhook.objects.exists()


def test_webhooks_page__events_ticked__registered_with_them_and_listed(
    admin, world, private_allowed
):
    response = admin.post(
        "/releases/webhooks/",
        {
            "url": "http://127.0.0.1:9/chat",
            "environment": "sg-test",
            "events": "approval.requested",
        },
    )
    assert response.status_code == 200
    assert Webhook.objects.get().events == ["approval.requested"]
    assert "approval.requested" in admin.get("/releases/webhooks/").content.decode()


def test_webhooks_page__no_event_ticked__400_nothing_written(admin, world, private_allowed):
    response = admin.post(
        "/releases/webhooks/", {"url": "http://127.0.0.1:9/chat", "environment": "sg-test"}
    )
    assert response.status_code == 400 and "at least one event" in response.content.decode()
    assert not Webhook.objects.exists()


# --- grants and roles -------------------------------------------------------------------------------
@pytest.fixture
def agent_admin(client, world):
    """An admin of assistant_professional only (manages its grants, not the other agent's)."""
    return as_user(client, user_with_grants("agent_admin", admin=world.professional))


def test_grant_create_and_revoke__through_api__audited_with_reason(admin, world):
    user_with_grants("sam")
    response = send(
        admin,
        "post",
        GRANTS,
        {"user": "sam", "role": "support", "agent": AGENT, "reason": "on call"},
    )
    assert response.status_code == 201, response.json()
    grant = Grant.objects.get(user__username="sam")
    assert response.json()["agent"] == AGENT and response.json()["role"] == "support"

    revoked = send(admin, "delete", f"{GRANTS}{grant.pk}/", {"reason": "rotation over"})

    assert revoked.status_code == 204
    assert not Grant.objects.filter(user__username="sam").exists()
    actions = list(AuditRecord.objects.order_by("id").values_list("action", flat=True))
    assert actions[-2:] == ["grant.create", "grant.revoke"]


@pytest.mark.parametrize(
    ("payload", "status", "path"),
    [
        (
            {"user": "sam", "role": "support", "reason": "on call", "expires": "never"},
            400,
            "expires",
        ),
        ({"user": "sam", "role": "wizard", "reason": "on call"}, 400, "role"),
        ({"user": "nobody", "role": "support", "reason": "on call"}, 400, "user"),
        ({"user": "sam", "role": "support"}, 400, "reason"),
        (
            {"user": "sam", "role": "support", "agent": "assistant_lite", "reason": "x" * 5},
            404,
            None,
        ),
        ({"user": "sam", "role": "support", "agent": "nobody", "reason": "on call"}, 404, None),
    ],
    ids=["unknown-field", "unknown-role", "unknown-user", "no-reason", "out-of-scope", "no-agent"],
)
def test_grant_create__bad_input__4xx_nothing_written(agent_admin, payload, status, path):
    user_with_grants("sam")
    grants, before = Grant.objects.count(), audit_count()
    error = error_of(send(agent_admin, "post", GRANTS, {"agent": AGENT, **payload}), status)
    if path:
        assert path in paths_of(error)
    assert Grant.objects.count() == grants and audit_count() == before


def test_grant_create__duplicate__409_one_grant(admin):
    user_with_grants("sam", support=AGENT)
    before = Grant.objects.count()
    payload = {"user": "sam", "role": "support", "agent": AGENT, "reason": "again"}
    assert error_of(send(admin, "post", GRANTS, payload), 409)["code"] == "grant_exists"
    assert Grant.objects.count() == before


def test_grant_create__oversize__413_nothing_written(admin):
    user_with_grants("sam")
    before = Grant.objects.count()
    payload = oversize("reason", user="sam", role="support", agent=AGENT)
    error_of(send(admin, "post", GRANTS, payload), 413)
    assert Grant.objects.count() == before


def test_grant_revoke__other_agents_grant__404_kept(agent_admin, world):
    user_with_grants("lee", support=world.lite)
    grant = Grant.objects.get(user__username="lee")
    error_of(send(agent_admin, "delete", f"{GRANTS}{grant.pk}/", {"reason": "not mine"}), 404)
    error_of(agent_admin.get(f"{GRANTS}{grant.pk}/"), 404)
    assert Grant.objects.filter(pk=grant.pk).exists()


@pytest.mark.parametrize(
    "payload", [{}, {"reason": "enough", "force": True}], ids=["no-reason", "unknown-field"]
)
def test_grant_revoke__bad_input__400_kept(admin, payload):
    user_with_grants("sam", support=AGENT)
    grant = Grant.objects.get(user__username="sam")
    error_of(send(admin, "delete", f"{GRANTS}{grant.pk}/", payload), 400)
    assert Grant.objects.filter(pk=grant.pk).exists()


def test_role_create_and_update__through_api__audited(admin):
    created = send(admin, "post", ROLES, {"name": "publisher", "capabilities": ["view_config"]})
    assert created.status_code == 201, created.json()
    role_id = created.json()["id"]

    updated = send(
        admin, "patch", f"{ROLES}{role_id}/", {"capabilities": ["view_config", "publish"]}
    )

    assert updated.status_code == 200
    assert set(Role.objects.get(pk=role_id).capabilities) == {"view_config", "publish"}
    actions = list(AuditRecord.objects.order_by("id").values_list("action", flat=True))
    assert actions[-2:] == ["role.create", "role.update"]


@pytest.mark.parametrize(
    ("payload", "status", "path"),
    [
        ({"name": "publisher", "capabilites": ["publish"]}, 400, "capabilites"),
        ({"name": "publisher", "capabilities": ["fly"]}, 400, "capabilities.0"),
        ({"name": "Operator"}, 409, None),
        ({"capabilities": []}, 400, "name"),
    ],
    ids=["unknown-field", "unknown-capability", "duplicate-name", "no-name"],
)
def test_role_create__bad_input__4xx_nothing_written(admin, payload, status, path):
    roles, before = Role.objects.count(), audit_count()
    error = error_of(send(admin, "post", ROLES, payload), status)
    if path:
        assert path in paths_of(error)
    assert Role.objects.count() == roles and audit_count() == before


@pytest.mark.parametrize(
    ("payload", "status"),
    [({"name": "viewer"}, 409), ({"colour": "red"}, 400), ({"capabilities": ["fly"]}, 400)],
    ids=["duplicate-name", "unknown-field", "unknown-capability"],
)
def test_role_update__bad_input__4xx_role_unchanged(admin, payload, status):
    role = send(admin, "post", ROLES, {"name": "publisher"}).json()
    before = audit_count()
    error_of(send(admin, "patch", f"{ROLES}{role['id']}/", payload), status)
    assert Role.objects.get(pk=role["id"]).name == "publisher" and audit_count() == before


def test_role_write__admin_of_one_agent__403_roles_are_console_wide(agent_admin):
    error_of(send(agent_admin, "post", ROLES, {"name": "publisher"}), 403)
    viewer = Role.objects.get(name="viewer")
    error_of(send(agent_admin, "patch", f"{ROLES}{viewer.pk}/", {"description": "mine"}), 403)
    assert not Role.objects.filter(name="publisher").exists()


def test_role_detail__unknown__404(admin):
    error_of(admin.get(f"{ROLES}999999/"), 404)
    error_of(send(admin, "patch", f"{ROLES}999999/", {"description": "x"}), 404)


# --- the schema ---------------------------------------------------------------------------------------
def test_openapi_schema__new_operations__documented_with_errors(admin):
    schema = admin.get("/api/schema/", {"format": "json"}).json()
    paths = schema["paths"]
    expected = {
        "/api/v1/agents/{agent}/documents/": {"post": {"400", "403", "404", "409", "413"}},
        "/api/v1/agents/{agent}/documents/{document}/": {"get": {"403", "404"}},
        "/api/v1/runtime-tokens/": {"get": {"403"}, "post": {"400", "403", "413"}},
        "/api/v1/runtime-tokens/{id}/": {"get": {"404"}},
        "/api/v1/runtime-tokens/{id}/revoke/": {"post": {"400", "404", "409"}},
        "/api/v1/webhooks/": {"get": {"403"}, "post": {"400", "403", "409", "413"}},
        "/api/v1/webhooks/{id}/": {"get": {"404"}, "delete": {"404"}},
    }
    for path, methods in expected.items():
        for method, errors in methods.items():
            assert errors <= set(paths[path][method]["responses"]), (path, method)
