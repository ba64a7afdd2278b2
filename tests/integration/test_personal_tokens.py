"""Personal API tokens: made on the account page or through /api/v1/me/tokens/, accepted by
the operator API as `Authorization: Bearer ccp_…`, never wider than the user's grants, and
named beside the user in every log row they make."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from console.accounts.models import PersonalToken
from console.accounts.personal_tokens import personal_token_create
from console.kernel.audit import PERSONAL_TOKEN_ATTR, actor_label, describe_actor
from console.kernel.credentials import secret_hash
from console.kernel.models import AccessLogEntry, AuditRecord, Grant
from tests.factories import (
    AgentFactory,
    DocumentFactory,
    EnvironmentFactory,
    frozen_version,
    profile_body,
    runtime_token,
)

pytestmark = pytest.mark.django_db

TOKENS = "/api/v1/me/tokens/"


@pytest.fixture
def agents(db):
    pro = AgentFactory(key="assistant_professional")
    lite = AgentFactory(key="assistant_lite")
    frozen_version(DocumentFactory(agent=pro, profile=True), profile_body())
    return pro, lite


def bearer_client(secret: str, **kwargs) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}", **kwargs)


def make_token(user, name="ci-deploy", capabilities=("view_config",), **scope):
    scope.setdefault("all_agents", not scope.get("agents"))
    return personal_token_create(user=user, name=name, capabilities=list(capabilities), **scope)


def agent_keys(response) -> set[str]:
    body = response.json()
    return {a["key"] for a in body.get("results", body)}


def assert_401(response, words: str = ""):
    assert response.status_code == 401, response.content
    assert response["WWW-Authenticate"].startswith("Bearer")
    error = response.json()["error"]
    assert error["code"] == "not_authenticated"
    assert words in error["message"]


# --- creation --------------------------------------------------------------------------------------
def test_api_create__session__secret_once_hash_stored_audited_without_secret(
    agents, make_user, client
):
    ann = make_user("ann", operator="assistant_professional")
    client.force_login(ann)
    response = client.post(
        TOKENS,
        {
            "name": "ci-deploy",
            "capabilities": ["view_config", "edit_drafts"],
            "expires_in_days": 30,
        },
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    secret = body["token"]
    assert secret.startswith("ccp_") and body["prefix"] == secret[:10]
    assert body["state"] == "active" and body["agents"] == []
    token = PersonalToken.objects.get(pk=body["id"])
    assert token.token_hash == secret_hash(secret)
    assert abs(token.expires_at - (timezone.now() + timedelta(days=30))) < timedelta(minutes=1)
    row = AuditRecord.objects.get(action="personal_token.create")
    assert row.actor_label == "ann" and secret not in str(row.after) and secret[4:] not in row.hash
    listed = client.get(TOKENS).json()
    assert [t["name"] for t in listed] == ["ci-deploy"] and "token" not in listed[0]


def test_api_create__capability_not_held__400_names_it_nothing_written(agents, make_user, client):
    client.force_login(make_user("ann", viewer="assistant_professional"))
    response = client.post(
        TOKENS,
        {"name": "too-wide", "capabilities": ["view_config", "publish"]},
        content_type="application/json",
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert (
        error["code"] == "scope_too_wide"
        and "Publish to unprotected environments" in error["message"]
    )
    assert error["details"][0]["path"] == "capabilities"
    assert not PersonalToken.objects.exists()
    assert not AuditRecord.objects.filter(action="personal_token.create").exists()


def test_api_create__agent_out_of_scope__400_like_an_unknown_agent(agents, make_user, client):
    client.force_login(make_user("ann", viewer="assistant_professional"))
    answers = [
        client.post(
            TOKENS,
            {"name": f"t-{key}", "capabilities": ["view_config"], "agents": [key]},
            content_type="application/json",
        )
        for key in ("assistant_lite", "no_such_agent")
    ]
    assert [r.status_code for r in answers] == [400, 400]
    assert all(r.json()["error"]["code"] == "scope_too_wide" for r in answers)
    assert not PersonalToken.objects.exists()


@pytest.mark.parametrize(
    "body, status, code",
    [
        ({"name": "dup", "capabilities": ["view_config"]}, 409, "duplicate_name"),
        ({"name": "x", "capabilities": ["view_config"], "scopes": []}, 400, "validation_failed"),
        ({"name": "x", "capabilities": ["view_config"], "expires_in_days": 400}, 400, None),
        ({"name": "x", "capabilities": []}, 400, None),
        ({"name": "x", "capabilities": ["view_config"], "note": "a" * 20_000}, 413, None),
    ],
    ids=["duplicate-name", "unknown-field", "expiry-over-a-year", "no-capability", "oversize"],
)
def test_api_create__bad_input__refused_in_the_error_shape(
    agents, make_user, client, body, status, code
):
    ann = make_user("ann", viewer="assistant_professional")
    make_token(ann, name="dup")
    client.force_login(ann)
    response = client.post(TOKENS, body, content_type="application/json")
    assert response.status_code == status, response.content
    if code:
        assert response.json()["error"]["code"] == code
    assert PersonalToken.objects.count() == 1


def test_api_create__with_a_token__403_a_token_cannot_make_tokens(agents, make_user):
    _, secret = make_token(make_user("ann", viewer=None))
    response = bearer_client(secret).post(
        TOKENS, {"name": "child", "capabilities": ["view_config"]}, content_type="application/json"
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "token_cannot_create_tokens"
    assert PersonalToken.objects.count() == 1


def test_api_manage__with_a_token__403_on_list_detail_and_revoke_nothing_changes(agents, make_user):
    """A view_config-only token may not list its user's tokens, read one or revoke the CI's
    token: managing tokens is for a signed-in session, as creating them is."""
    ann = make_user("ann", viewer=None)
    ci, _ = make_token(ann, name="ci")
    _, secret = make_token(ann, name="read-only")
    api = bearer_client(secret)
    answers = [
        api.get(TOKENS),
        api.get(f"{TOKENS}{ci.pk}/"),
        api.delete(f"{TOKENS}{ci.pk}/"),
        api.get(f"{TOKENS}999999/"),  # 403 before the lookup: no probing for ids
    ]
    assert [r.status_code for r in answers] == [403, 403, 403, 403]
    assert {r.json()["error"]["code"] for r in answers} == {"token_cannot_manage_tokens"}
    assert "ci" not in answers[0].content.decode()
    ci.refresh_from_db()
    assert ci.state == "active"
    assert not AuditRecord.objects.filter(action="personal_token.revoke").exists()
    denied = AccessLogEntry.objects.filter(action="access.denied", actor_token_label="read-only")
    assert denied.count() == 4


def test_api_manage__schema_documents_the_403(db):
    from drf_spectacular.generators import SchemaGenerator

    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    listed, one = paths[TOKENS], paths[TOKENS + "{id}/"]
    for operation in (listed["get"], one["get"], one["delete"]):
        assert "token_cannot_manage_tokens" in operation["responses"]["403"]["description"]


# --- authentication ----------------------------------------------------------------------------------
def test_bearer__valid__user_sees_agents_and_last_used_noted_once_a_minute(agents, make_user):
    token, secret = make_token(make_user("ann", viewer="assistant_professional"))
    api = bearer_client(secret)
    assert api.get("/api/v1/agents/").status_code == 200
    token.refresh_from_db()
    first = token.last_used_at
    assert first is not None
    api.get("/api/v1/agents/")
    token.refresh_from_db()
    assert token.last_used_at == first  # within a minute: not written again
    PersonalToken.objects.filter(pk=token.pk).update(last_used_at=first - timedelta(minutes=2))
    api.get("/api/v1/agents/")
    token.refresh_from_db()
    assert token.last_used_at > first


@pytest.mark.parametrize("state", ["unknown", "revoked", "expired", "runtime", "deactivated"])
def test_bearer__not_a_valid_personal_token__401_never_the_session(agents, make_user, state):
    ann = make_user("ann", admin=None)
    token, secret = make_token(ann)
    if state == "unknown":
        secret = "ccp_" + "x" * 43
    elif state == "revoked":
        PersonalToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    elif state == "expired":
        PersonalToken.objects.filter(pk=token.pk).update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )
    elif state == "runtime":
        secret = runtime_token(EnvironmentFactory(key="sg-test"))
    else:
        ann.is_active = False
        ann.save()
    api = bearer_client(secret)
    api.force_login(make_user("bob", admin=None))  # a valid session does not rescue it
    response = api.get("/api/v1/agents/")
    assert_401(response, {"expired": "expired", "runtime": "runtime"}.get(state, ""))


def test_bearer__anonymous_without_header__401_asks_for_bearer(db):
    response = Client().get("/api/v1/agents/")
    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")


def test_bearer__pages_ignore_it__sign_in_page(agents, make_user):
    _, secret = make_token(make_user("ann", viewer=None))
    response = bearer_client(secret).get(reverse("dashboard"))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


def test_csrf__session_writes_need_it__token_writes_do_not(agents, make_user):
    ann = make_user("ann", viewer=None)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(ann)
    body = {"name": "from-browser", "capabilities": ["view_config"]}
    assert browser.post(TOKENS, body, content_type="application/json").status_code == 403
    token, secret = make_token(ann)
    script = bearer_client(secret, enforce_csrf_checks=True)
    # The write reaches the view (no CSRF refusal), which refuses a token managing tokens.
    response = script.delete(f"{TOKENS}{token.pk}/")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "token_cannot_manage_tokens"


# --- scope: the user's grants AND the token's ---------------------------------------------------------
def test_scope__token_for_one_agent__other_agents_invisible(agents, make_user):
    _, secret = make_token(make_user("ann", viewer=None), agents=["assistant_professional"])
    api = bearer_client(secret)
    assert agent_keys(api.get("/api/v1/agents/")) == {"assistant_professional"}
    lite = "/api/v1/agents/assistant_lite/documents/"
    assert api.get(lite).status_code == 404
    denied = AccessLogEntry.objects.get(action="access.denied")
    assert denied.actor_label == "ann" and denied.actor_token_label == "ci-deploy"


def test_scope__user_loses_the_grant__the_token_loses_it_too(agents, make_user):
    ann = make_user("ann", viewer="assistant_professional")
    _, secret = make_token(ann)
    api = bearer_client(secret)
    documents = "/api/v1/agents/assistant_professional/documents/"
    assert api.get(documents).status_code == 200
    Grant.objects.filter(user=ann).delete()
    assert api.get(documents).status_code == 404


def test_scope__token_without_a_capability__403_though_the_user_holds_it(agents, make_user):
    _, secret = make_token(make_user("ann", admin=None), capabilities=["view_config"])
    api = bearer_client(secret)
    assert api.get("/api/v1/agents/assistant_professional/documents/").status_code == 200
    assert api.get("/api/v1/audit/").status_code == 403
    assert api.get("/api/v1/grants/").status_code == 403


# --- the logs name the user and the token ---------------------------------------------------------------
def test_audit__change_made_with_a_token__names_user_and_token_and_chain_verifies(
    agents, make_user, capsys
):
    admin = make_user("root", admin=None)
    make_user("newcomer")
    # A token grants only what it holds itself (no escalation): viewer needs view_config.
    _, secret = make_token(admin, capabilities=["manage_grants", "view_config"])
    response = bearer_client(secret).post(
        "/api/v1/grants/",
        {"user": "newcomer", "role": "viewer", "agent": "assistant_lite", "reason": "ci grant"},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    row = AuditRecord.objects.get(action="grant.create")
    assert (row.actor_type, row.actor_label) == ("user", "root")
    assert row.actor_token_label == "ci-deploy" and row.actor_token_id
    admin_api = Client()
    admin_api.force_login(admin)
    by_user = admin_api.get("/api/v1/audit/?actor=root&action=grant.").json()["results"]
    by_token = admin_api.get("/api/v1/audit/?token=ci-deploy").json()["results"]
    assert [r["id"] for r in by_user] == [r["id"] for r in by_token] == [row.pk]
    assert by_token[0]["actor_token_label"] == "ci-deploy"
    call_command("audit_verify")
    assert "audit log" in capsys.readouterr().out  # rows with and without a token verify
    page = admin_api.get(reverse("audit-list") + "?token=ci-deploy").content.decode()
    assert "token ci-deploy" in page


def test_describe_actor_and_actor_label__name_the_token(agents, make_user):
    ann = make_user("ann", viewer=None)
    token, _ = make_token(ann)
    assert describe_actor(ann)["actor_token_label"] == ""
    assert actor_label(ann) == "ann"
    setattr(ann, PERSONAL_TOKEN_ATTR, token)
    described = describe_actor(ann)
    assert described["actor_label"] == "ann" and described["actor_token_label"] == "ci-deploy"
    assert described["actor_token_id"] == str(token.pk)
    assert actor_label(ann) == "ann (token ci-deploy)"
    assert describe_actor(None)["actor_token_label"] == ""


# --- revocation -----------------------------------------------------------------------------------------
def test_api_revoke__own_token__204_then_401__others_404(agents, make_user, client):
    ann, bob = make_user("ann", viewer=None), make_user("bob", admin=None)
    token, secret = make_token(ann)
    bobs, _ = make_token(bob, name="bob-ci")
    client.force_login(ann)
    assert client.delete(f"{TOKENS}{bobs.pk}/").status_code == 404
    assert client.get(f"{TOKENS}{bobs.pk}/").status_code == 404
    assert client.delete(f"{TOKENS}{token.pk}/").status_code == 204
    assert client.delete(f"{TOKENS}{token.pk}/").status_code == 409
    assert_401(bearer_client(secret).get("/api/v1/agents/"))
    row = AuditRecord.objects.get(action="personal_token.revoke")
    assert row.actor_label == "ann" and row.before["revoked_at"] is None
    bobs.refresh_from_db()
    assert bobs.revoked_at is None


# --- pages ----------------------------------------------------------------------------------------------
def test_account_page__offers_only_held_capabilities_and_visible_agents(agents, make_user, client):
    client.force_login(make_user("ann", support="assistant_professional"))
    page = client.get(reverse("account")).content.decode()
    assert 'value="view_traces"' in page and 'value="publish"' not in page
    assert 'value="assistant_professional"' in page and 'value="assistant_lite"' not in page
    forged = client.post(
        reverse("account"), {"name": "x", "capabilities": ["publish"], "expires_in_days": 90}
    )
    assert forged.status_code == 400 and not PersonalToken.objects.exists()
    made = client.post(
        reverse("account"),
        {"name": "support-bot", "capabilities": ["view_traces"], "expires_in_days": 7},
    )
    assert made.status_code == 200
    secret = PersonalToken.objects.get().prefix
    assert "not shown again" in made.content.decode() and secret in made.content.decode()


def test_admin_tokens_page__lists_everyones__revokes_with_reason(agents, make_user, client):
    ann = make_user("ann", viewer=None)
    token, _ = make_token(ann)
    client.force_login(make_user("viewer_only", viewer=None))
    assert client.get(reverse("personal-token-admin-list")).status_code == 403
    client.force_login(make_user("root", admin=None))
    page = client.get(reverse("personal-token-admin-list")).content.decode()
    assert "ci-deploy" in page and "ann" in page
    url = reverse("access-personaltoken-revoke", args=[token.pk])
    assert client.post(url, {"reason": "ann left the team"}).status_code == 302
    token.refresh_from_db()
    assert token.state == "revoked"
    row = AuditRecord.objects.get(action="personal_token.revoke")
    assert row.actor_label == "root" and row.after["reason"] == "ann left the team"


# --- "every agent" is said, never an empty set ------------------------------------------------------
@pytest.mark.parametrize(
    "scope, status, path",
    [
        ({}, 201, None),  # the API's documented default: no agents, every agent
        ({"all_agents": True}, 201, None),
        ({"agents": ["assistant_professional"]}, 201, None),
        ({"all_agents": False}, 400, "agents"),
        ({"all_agents": True, "agents": ["assistant_professional"]}, 400, "agents"),
    ],
    ids=["omitted", "all-agents", "a-list", "none-and-not-all", "both"],
)
def test_api_create__agent_scope__explicit_flag_stored(
    agents, make_user, client, scope, status, path
):
    client.force_login(make_user("ann", viewer=None))
    body = {"name": "t", "capabilities": ["view_config"], **scope}
    response = client.post(TOKENS, body, content_type="application/json")
    assert response.status_code == status, response.content
    if status == 400:
        assert response.json()["error"]["details"][0]["path"] == path
        assert not PersonalToken.objects.exists()
        return
    token = PersonalToken.objects.get()
    assert response.json()["all_agents"] is token.all_agents is (not scope.get("agents"))
