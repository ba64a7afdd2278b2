"""SCIM 2.0 provisioning (issue 33, item 5) over HTTP, with requests shaped exactly as Okta and
Entra ID send them (tests/integration/scim_fixtures.py): people and groups made, changed,
deactivated and deleted; mapped grants following group membership at once; a deactivated
person's session and every personal token refused within 5 seconds; the refusals (wrong
credential, malformed filter or body, a taken userName) in SCIM's error shape, audited,
writing nothing."""

from __future__ import annotations

import json
import time

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from console.access import group_mappings
from console.accounts import scim
from console.accounts.models import ExternalIdentity, PersonalToken, ScimGroup, ScimUser
from console.accounts.personal_tokens import personal_token_create
from console.kernel.models import AccessLogEntry, AuditRecord, Grant
from tests.factories import AgentFactory, role_named, user_with_grants
from tests.integration import scim_fixtures as fx

User = get_user_model()
ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"


@pytest.fixture
def admin(db):
    return user_with_grants("root", admin=None)


@pytest.fixture
def secret(admin):
    _, secret = scim.scim_token_create(actor=admin, provider="bank", name="okta-prod")
    return secret


class Scim:
    """A SCIM client: JSON in application/scim+json, with the bearer token."""

    def __init__(self, secret: str | None):
        self.client = Client()
        self.headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"} if secret else {}

    def call(self, method: str, path: str, body=None, **params):
        url = f"/scim/v2/{path}"
        kwargs = dict(self.headers)
        if body is not None:
            kwargs.update(
                data=body if isinstance(body, str) else json.dumps(body),
                content_type="application/scim+json",
            )
        if params:
            kwargs["QUERY_STRING"] = "&".join(f"{k}={v}" for k, v in params.items())
        return getattr(self.client, method.lower())(url, **kwargs)


@pytest.fixture
def okta(secret):
    return Scim(secret)


def _map(admin, group, role="viewer"):
    return group_mappings.group_mapping_create(
        actor=admin,
        provider="bank",
        group=group,
        role=role_named(role),
        all_agents=True,
        reason="mapped for the SCIM test",
    )


def _scim_error(response, status: int, scim_type: str | None = None) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["schemas"] == [ERROR] and body["status"] == str(status) and body["detail"]
    assert body.get("scimType") == scim_type
    return body


def _roles(user) -> list[tuple[str, str]]:
    grants = Grant.objects.filter(user=user).select_related("role", "mapping")
    return sorted((g.role.name, g.mapping.group if g.mapping_id else "by hand") for g in grants)


# --- Okta ---------------------------------------------------------------------------------------
def test_okta__provision_update_group_push_deactivate__as_okta_sends_them(okta, admin):
    _map(admin, "Test SCIMv2 ops")
    found = okta.call(
        "GET",
        "Users",
        filter="userName%20eq%20%22test.user%40okta.local%22",
        startIndex=1,
        count=100,
    )
    assert found.status_code == 200 and found.json()["totalResults"] == 0
    assert found["Content-Type"].startswith("application/scim+json")

    made = okta.call("POST", "Users", fx.OKTA_USER)
    assert made.status_code == 201, made.content
    user_id = made.json()["id"]
    person = ScimUser.objects.get(pk=user_id).user
    assert person.email == "test.user@okta.local" and not person.has_usable_password()
    assert "password" not in made.json() and "password" not in ScimUser.objects.get().attributes

    again = okta.call("GET", "Users", filter="userName%20eq%20%22TEST.user%40okta.local%22")
    assert [r["id"] for r in again.json()["Resources"]] == [user_id]
    assert okta.call("GET", f"Users/{user_id}").json()["name"]["givenName"] == "Test"

    put = okta.call("PUT", f"Users/{user_id}", fx.filled(fx.OKTA_USER_PUT, user=user_id))
    assert put.status_code == 200 and put.json()["displayName"] == "Another User"
    person.refresh_from_db()
    assert person.first_name == "Another"

    group = okta.call("POST", "Groups", fx.OKTA_GROUP)
    assert group.status_code == 201
    group_id = group.json()["id"]
    added = okta.call("PATCH", f"Groups/{group_id}", fx.filled(fx.OKTA_GROUP_ADD, user=user_id))
    assert added.status_code == 200 and added.json()["members"][0]["value"] == user_id
    assert _roles(person) == []  # the group is called "Test SCIMv2": no mapping yet
    renamed = okta.call(
        "PATCH", f"Groups/{group_id}", fx.filled(fx.OKTA_GROUP_RENAME, group=group_id)
    )
    assert renamed.json()["displayName"] == "Test SCIMv2 ops"
    assert _roles(person) == [("viewer", "Test SCIMv2 ops")]  # the rename matched a mapping
    grant = AuditRecord.objects.filter(action="grant.create").last()
    assert grant.actor_label == "scim:bank:okta-prod"

    off = okta.call("PATCH", f"Users/{user_id}", fx.OKTA_DEACTIVATE)
    assert off.status_code == 200 and off.json()["active"] is False
    person.refresh_from_db()
    assert not person.is_active and _roles(person) == []
    audit = AuditRecord.objects.get(action="scim_user.deactivate")
    assert audit.actor_label == "scim:bank:okta-prod" and audit.actor_type == "system"

    back = okta.call("PUT", f"Users/{user_id}", fx.filled(fx.OKTA_USER_PUT, user=user_id))
    person.refresh_from_db()
    assert back.json()["active"] and person.is_active
    assert _roles(person) == [("viewer", "Test SCIMv2 ops")]  # mapped grants come back
    assert AuditRecord.objects.filter(action="scim_user.reactivate").exists()

    removed = okta.call(
        "PATCH", f"Groups/{group_id}", fx.filled(fx.OKTA_GROUP_REMOVE, user=user_id)
    )
    assert removed.json()["members"] == [] and _roles(person) == []
    assert okta.call("DELETE", f"Groups/{group_id}").status_code == 204
    assert okta.call("GET", f"Groups/{group_id}").status_code == 404


# --- Entra ID -----------------------------------------------------------------------------------
def test_entra__capitalised_ops_string_false_group_members_and_delete_after_soft_delete(
    okta, admin
):
    entra = okta
    group_external = fx.ENTRA_GROUP["externalId"]
    _map(admin, group_external, role="operator")  # Entra's ID tokens carry object ids
    probe = entra.call(
        "GET", "Users", filter=fx.ENTRA_PROBE.replace(" ", "%20").replace('"', "%22")
    )
    assert probe.status_code == 200 and probe.json()["Resources"] == []

    made = entra.call("POST", "Users", fx.ENTRA_USER)
    assert made.status_code == 201, made.content
    user_id = made.json()["id"]
    by_external = entra.call(
        "GET", "Users", filter=f"externalId%20eq%20%22{fx.ENTRA_USER['externalId']}%22"
    )
    assert [r["id"] for r in by_external.json()["Resources"]] == [user_id]

    changed = entra.call("PATCH", f"Users/{user_id}", fx.ENTRA_USER_UPDATE)
    assert changed.status_code == 200, changed.content
    body = changed.json()
    assert body["emails"][0]["value"] == "updatedEmail@microsoft.com"
    assert body["name"]["familyName"] == "updatedFamilyName"
    assert body[fx.ENTERPRISE]["department"] == "Payments" and fx.ENTERPRISE in body["schemas"]
    person = ScimUser.objects.get(pk=user_id).user
    assert person.email == "updatedEmail@microsoft.com"

    group = entra.call("POST", "Groups", fx.ENTRA_GROUP)
    group_id = group.json()["id"]
    listed = entra.call(
        "GET", "Groups", excludedAttributes="members", filter="displayName%20eq%20%22displayName%22"
    )
    assert [g["id"] for g in listed.json()["Resources"]] == [group_id]
    assert "members" not in listed.json()["Resources"][0]
    entra.call("PATCH", f"Groups/{group_id}", fx.filled(fx.ENTRA_GROUP_ADD, user=user_id))
    assert _roles(person) == [("operator", group_external)]
    entra.call(
        "PATCH", f"Groups/{group_id}", fx.filled(fx.ENTRA_GROUP_REMOVE_BY_VALUE, user=user_id)
    )
    assert _roles(person) == []
    entra.call("PATCH", f"Groups/{group_id}", fx.filled(fx.ENTRA_GROUP_ADD, user=user_id))
    entra.call(
        "PATCH", f"Groups/{group_id}", fx.filled(fx.ENTRA_GROUP_REMOVE_BY_FILTER, user=user_id)
    )
    assert _roles(person) == []
    renamed = entra.call("PATCH", f"Groups/{group_id}", fx.ENTRA_GROUP_RENAME)
    assert renamed.json()["displayName"] == "updatedDisplayName"

    disabled = entra.call("PATCH", f"Users/{user_id}", fx.ENTRA_DISABLE)
    assert disabled.status_code == 200 and disabled.json()["active"] is False
    person.refresh_from_db()
    assert not person.is_active
    assert entra.call("DELETE", f"Users/{user_id}").status_code == 204
    assert entra.call("GET", f"Users/{user_id}").status_code == 404
    person.refresh_from_db()
    assert not person.is_active  # the account and its history stay
    assert AuditRecord.objects.filter(action="scim_user.delete", target_id=str(person.pk)).exists()
    assert AuditRecord.objects.filter(action="scim_user.create", target_id=str(person.pk)).exists()


def test_group_deleted__members_lose_the_mapped_grant_at_once(okta, admin):
    _map(admin, "payments-ops", role="operator")
    user_id = okta.call("POST", "Users", {**fx.OKTA_USER, "userName": "bob@bank.test"}).json()["id"]
    group = okta.call(
        "POST",
        "Groups",
        {**fx.OKTA_GROUP, "displayName": "payments-ops", "members": [{"value": user_id}]},
    ).json()
    person = ScimUser.objects.get(pk=user_id).user
    assert _roles(person) == [("operator", "payments-ops")]

    assert okta.call("DELETE", f"Groups/{group['id']}").status_code == 204

    assert _roles(person) == []
    assert AuditRecord.objects.filter(action="scim_group.delete").exists()
    revoke = AuditRecord.objects.get(action="grant.revoke")
    assert revoke.actor_label == "scim:bank:okta-prod"


# --- deactivation: the next request is refused within 5 seconds -------------------------------------
@pytest.mark.parametrize("how", ["okta_patch", "okta_put", "entra_patch", "delete"])
def test_deactivation__session_and_every_personal_token_refused_within_5_seconds(okta, admin, how):
    _map(admin, "readers")
    user_id = okta.call("POST", "Users", fx.OKTA_USER).json()["id"]
    okta.call(
        "POST",
        "Groups",
        {**fx.OKTA_GROUP, "displayName": "readers", "members": [{"value": user_id}]},
    )
    person = ScimUser.objects.get(pk=user_id).user
    secrets = [
        personal_token_create(user=person, name=n, capabilities=["view_config"], all_agents=True)[1]
        for n in ("laptop", "ci")
    ]
    browser = Client()
    browser.force_login(person)  # a real stored session
    assert browser.get(reverse("dashboard")).status_code == 200
    assert browser.get("/api/v1/").status_code == 200
    for token in secrets:
        assert Client().get("/api/v1/", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200

    started = time.monotonic()
    if how == "okta_patch":
        answer = okta.call("PATCH", f"Users/{user_id}", fx.OKTA_DEACTIVATE)
    elif how == "okta_put":
        answer = okta.call("PUT", f"Users/{user_id}", {**fx.OKTA_USER, "active": False})
    elif how == "entra_patch":
        answer = okta.call("PATCH", f"Users/{user_id}", fx.ENTRA_DISABLE)
    else:
        answer = okta.call("DELETE", f"Users/{user_id}")
    assert answer.status_code in (200, 204), answer.content
    page = browser.get(reverse("dashboard"))
    api = browser.get("/api/v1/")
    tokens = [Client().get("/api/v1/", HTTP_AUTHORIZATION=f"Bearer {s}") for s in secrets]
    elapsed = time.monotonic() - started

    assert page.status_code == 302 and page["Location"].startswith(reverse("login"))
    assert api.status_code == 401
    assert [t.status_code for t in tokens] == [401, 401]
    assert elapsed < 5, f"refused after {elapsed:.2f} s"
    assert not PersonalToken.objects.active().filter(user=person).exists()
    revoked = AuditRecord.objects.filter(action="personal_token.revoke")
    assert revoked.count() == 2 and {r.actor_label for r in revoked} == {"scim:bank:okta-prod"}
    assert _roles(person) == []
    print(f"deactivation ({how}): refused {elapsed * 1000:.0f} ms after the SCIM call began")


def test_reactivation__restores_the_account_not_the_tokens(okta, admin):
    user_id = okta.call("POST", "Users", fx.OKTA_USER).json()["id"]
    person = ScimUser.objects.get(pk=user_id).user
    _map(admin, "readers")
    okta.call(
        "POST",
        "Groups",
        {**fx.OKTA_GROUP, "displayName": "readers", "members": [{"value": user_id}]},
    )
    _, secret = personal_token_create(
        user=person, name="laptop", capabilities=["view_config"], all_agents=True
    )
    okta.call("PATCH", f"Users/{user_id}", fx.OKTA_DEACTIVATE)
    okta.call(
        "PATCH",
        f"Users/{user_id}",
        {"schemas": [fx.PATCH], "Operations": [{"op": "replace", "path": "active", "value": True}]},
    )

    person.refresh_from_db()
    assert person.is_active and _roles(person) == [("viewer", "readers")]
    assert Client().get("/api/v1/", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 401


# --- refusals -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "header",
    [None, "Bearer scim_not-a-real-token", "Bearer ccp_a-personal-token", "Basic dXNlcjpwdw=="],
)
def test_wrong_credential__401_in_scim_shape_and_in_the_access_log(db, header):
    client = Client()
    kwargs = {"HTTP_AUTHORIZATION": header} if header else {}
    response = client.get("/scim/v2/Users", **kwargs)

    _scim_error(response, 401)
    assert response["WWW-Authenticate"].startswith("Bearer")
    [denied] = AccessLogEntry.objects.filter(action="access.denied", outcome="denied")
    assert denied.reason.startswith("SCIM:") and denied.detail["api"] == "scim"
    assert denied.actor_type == "anonymous" and denied.target_id == "/scim/v2/Users"


def test_revoked_token__401_at_once(okta, admin):
    token = scim.ScimToken.objects.get()
    assert okta.call("GET", "Users").status_code == 200
    scim.scim_token_revoke(actor=admin, token=token)
    _scim_error(okta.call("GET", "Users"), 401)
    assert AuditRecord.objects.filter(action="scim_token.revoke").exists()


def test_session_is_no_scim_credential(admin, db):
    browser = Client()
    browser.force_login(admin)
    _scim_error(browser.get("/scim/v2/Users"), 401)


@pytest.mark.parametrize(
    "query",
    [
        "userName%20eq",  # no value
        'userName%20eq%20%22a"%20or',  # dangling or
        "userName%20~%20%22a%22",  # unknown operator
        "password%20eq%20%22x%22",  # an attribute the console cannot filter on
        "active%20gt%20%22x%22",
        "emails%5Btype%20eq%20%22work%22%5D.value%20co%20%22a%22",  # nested filter
        "%28%28%28",
        "x" * 1200,
    ],
)
def test_malformed_filter__400_invalid_filter(okta, query):
    _scim_error(okta.call("GET", "Users", filter=query), 400, "invalidFilter")


def test_malformed_group_filter__400_invalid_filter(okta):
    _scim_error(okta.call("GET", "Groups", filter="members%20sw"), 400, "invalidFilter")


@pytest.mark.parametrize(
    "method, path, body, scim_type",
    [
        ("POST", "Users", "{not json", "invalidSyntax"),
        ("POST", "Users", "[]", "invalidSyntax"),
        ("POST", "Users", {"userName": ""}, "invalidValue"),
        ("POST", "Users", {"userName": 7}, "invalidValue"),
        ("POST", "Users", {"userName": "a" * 300}, "invalidValue"),
        ("POST", "Users", {"userName": "x", "active": "maybe"}, "invalidValue"),
        ("POST", "Users", {"userName": "x", "emails": "x@y"}, "invalidValue"),
        ("POST", "Users", {"userName": "x", "name": {"givenName": 3}}, "invalidValue"),
        ("POST", "Users", '{"userName": "a", "userName": "b"}', "invalidSyntax"),
        ("POST", "Groups", {"displayName": "g", "members": [{"value": "999999"}]}, "invalidValue"),
        ("POST", "Groups", {"displayName": "g", "members": "all"}, "invalidValue"),
        ("POST", "Groups", {}, "invalidValue"),
        ("PATCH", "Users/{user}", {"Operations": []}, "invalidSyntax"),
        ("PATCH", "Users/{user}", {"Operations": [{"op": "explode"}]}, "invalidSyntax"),
        ("PATCH", "Users/{user}", {"Operations": [{"op": "remove"}]}, "noTarget"),
        ("PATCH", "Users/{user}", {"Operations": [{"op": "add", "path": "a[b"}]}, "invalidPath"),
        ("PATCH", "Users/{user}", {"Operations": [{"op": "replace", "value": 3}]}, "invalidValue"),
        (
            "PATCH",
            "Users/{user}",
            {"Operations": [{"op": "replace", "path": "active", "value": "no"}]},
            "invalidValue",
        ),
        (
            "PATCH",
            "Users/{user}",
            {"Operations": [{"op": "remove", "path": "userName"}]},
            "invalidValue",
        ),
        (
            "PATCH",
            "Users/{user}",
            {"Operations": [{"op": "add", "path": 'emails[type ne "x"]'}]},
            "invalidPath",
        ),
        (
            "PATCH",
            "Users/{user}",
            {"Operations": [{"op": "add", "path": "name.givenName.x"}]},
            "invalidPath",
        ),
        ("PATCH", "Users/{user}", {"Operations": "replace"}, "invalidSyntax"),
        ("PATCH", "Users/{user}", ["replace"], "invalidSyntax"),
        ("PUT", "Users/{user}", {"displayName": "no userName"}, "invalidValue"),
        ("GET", "Users?count=many", None, "invalidValue"),
    ],
)
def test_malformed_body__400_in_scim_shape_nothing_written(okta, method, path, body, scim_type):
    user_id = okta.call("POST", "Users", fx.OKTA_USER).json()["id"]
    before = (ScimUser.objects.get().attributes, ScimGroup.objects.count(), User.objects.count())
    audit = AuditRecord.objects.count()
    path = path.replace("{user}", user_id)
    if "?" in path:
        path, query = path.split("?")
        response = okta.call(method, path, body, **dict([query.split("=")]))
    else:
        response = okta.call(method, path, body)

    _scim_error(response, 400, scim_type)
    after = (ScimUser.objects.get().attributes, ScimGroup.objects.count(), User.objects.count())
    assert after == before and AuditRecord.objects.count() == audit


def test_unknown_ids__404_in_scim_shape(okta):
    for method in ("GET", "PUT", "PATCH", "DELETE"):
        body = None if method in ("GET", "DELETE") else {"userName": "x"}
        if method == "PATCH":
            body = fx.OKTA_DEACTIVATE
        _scim_error(okta.call(method, "Users/12345678", body), 404)
        _scim_error(okta.call(method, "Users/not-a-number", body), 404)
        _scim_error(okta.call(method, "Groups/0", body and {"displayName": "x", **body}), 404)


def test_user_name_taken__409_uniqueness_case_insensitive(okta):
    okta.call("POST", "Users", fx.OKTA_USER)
    again = okta.call("POST", "Users", {**fx.OKTA_USER, "userName": "TEST.USER@okta.local"})
    _scim_error(again, 409, "uniqueness")
    assert ScimUser.objects.count() == 1
    other = okta.call("POST", "Users", {**fx.OKTA_USER, "userName": "other@okta.local"}).json()
    renamed = okta.call("PUT", f"Users/{other['id']}", fx.OKTA_USER)
    _scim_error(renamed, 409, "uniqueness")
    okta.call("POST", "Groups", fx.OKTA_GROUP)
    _scim_error(okta.call("POST", "Groups", fx.OKTA_GROUP), 409, "uniqueness")


def test_one_provider_token_sees_only_its_provider(okta, admin):
    user_id = okta.call("POST", "Users", fx.OKTA_USER).json()["id"]
    _, other_secret = scim.scim_token_create(actor=admin, provider="entra", name="entra")
    entra = Scim(other_secret)
    assert entra.call("GET", "Users").json()["totalResults"] == 0
    _scim_error(entra.call("GET", f"Users/{user_id}"), 404)
    # the same userName at another provider is another person
    assert entra.call("POST", "Users", fx.OKTA_USER).status_code == 201


def test_local_account_of_the_same_name_is_never_taken_over(okta):
    local = user_with_grants("test.user@okta.local")
    user_id = okta.call("POST", "Users", fx.OKTA_USER).json()["id"]
    link = ScimUser.objects.get(pk=user_id)
    assert link.user != local and link.user.username == "test.user@okta.local-2"


def test_discovery_endpoints_and_pagination(okta):
    for n in range(5):
        okta.call("POST", "Users", {**fx.OKTA_USER, "userName": f"u{n}@okta.local"})
    page = okta.call("GET", "Users", startIndex=2, count=2).json()
    assert page["totalResults"] == 5 and page["itemsPerPage"] == 2 and page["startIndex"] == 2
    assert [r["userName"] for r in page["Resources"]] == ["u1@okta.local", "u2@okta.local"]
    config = okta.call("GET", "ServiceProviderConfig").json()
    assert config["patch"]["supported"] and config["filter"]["supported"]
    types = okta.call("GET", "ResourceTypes").json()
    assert {r["name"] for r in types["Resources"]} == {"User", "Group"}
    schemas = okta.call("GET", "Schemas").json()
    assert {s["name"] for s in schemas["Resources"]} == {"User", "Group"}


def test_every_scim_endpoint_is_in_the_openapi_schema(admin, client):
    client.force_login(admin)
    schema = client.get("/api/schema/", {"format": "json"}).json()
    paths = {p for p in schema["paths"] if p.startswith("/scim/v2/")}
    assert paths == {
        "/scim/v2/Users",
        "/scim/v2/Users/{id}",
        "/scim/v2/Groups",
        "/scim/v2/Groups/{id}",
        "/scim/v2/ServiceProviderConfig",
        "/scim/v2/ResourceTypes",
        "/scim/v2/Schemas",
    }
    methods = {m for p in paths for m in schema["paths"][p]}
    assert {"get", "post", "put", "patch", "delete"} <= methods
    assert "scimToken" in schema["components"]["securitySchemes"]


# --- tokens -------------------------------------------------------------------------------------
def test_token__needs_manage_grants_on_all_agents_and_every_mapped_role(admin, db):
    from console.kernel.errors import Forbidden

    _map(admin, "admins", role="admin")
    narrow = user_with_grants("narrow", admin=AgentFactory(key="payments"))
    with pytest.raises(Forbidden):
        scim.scim_token_create(actor=narrow, provider="bank", name="x")
    token, secret = scim.scim_token_create(actor=admin, provider="bank", name="okta")
    assert secret.startswith("scim_") and token.token_hash != secret and secret not in token.prefix
    made = AuditRecord.objects.get(action="scim_token.create")
    assert made.actor_label == "root" and secret not in json.dumps(made.after)
    assert made.after["provider_configured"] is False  # "bank" is not in OIDC_PROVIDERS here


def test_management_command__creates_and_revokes(admin, capsys):
    from django.core.management import call_command

    call_command("scim_token", "create", "--provider", "bank", "--name", "cli", "--by", "root")
    secret = capsys.readouterr().out.strip().splitlines()[-1]
    assert secret.startswith("scim_")
    assert Scim(secret).call("GET", "Users").status_code == 200
    call_command("scim_token", "revoke", "--provider", "bank", "--name", "cli", "--by", "root")
    assert Scim(secret).call("GET", "Users").status_code == 401


# --- linking at the first sign-in through the provider ------------------------------------------
def test_first_sign_in__links_the_scim_account_by_user_name(client, oidc_provider, settings, admin):
    from tests.integration.test_oidc_signin import CALLBACK, _sign_in

    oidc_provider.add_client(
        "console",
        "s3cret",
        redirect_uris=[CALLBACK],
        post_logout_redirect_uris=["http://testserver/login/"],
    )
    oidc_provider.add_user("alice", sub="alice-sub", email="Alice@Bank.test", groups=[])
    oidc_provider.start()
    settings.OIDC_PROVIDERS = [
        oidc_provider.provider_setting(key="bank", client_id="console", client_secret="s3cret")
    ]
    _map(admin, "ops")
    _, secret = scim.scim_token_create(actor=admin, provider="bank", name="okta")
    okta = Scim(secret)
    user_id = okta.call("POST", "Users", {**fx.OKTA_USER, "userName": "alice@bank.TEST"}).json()[
        "id"
    ]
    okta.call("POST", "Groups", {"displayName": "ops", "members": [{"value": user_id}]})
    provisioned = ScimUser.objects.get(pk=user_id).user
    accounts = User.objects.count()

    response = _sign_in(client, oidc_provider)

    assert response.status_code == 302 and response["Location"] == reverse("dashboard")
    assert client.get(reverse("dashboard")).wsgi_request.user == provisioned
    assert User.objects.count() == accounts  # linked, not made again
    assert ExternalIdentity.objects.get(subject="alice-sub").user == provisioned
    assert _roles(provisioned) == [("viewer", "ops")]  # SCIM's groups count at sign-in too
    link = AuditRecord.objects.get(action="scim_user.link")
    assert link.after["subject"] == "alice-sub" and link.after["matched"] == "e-mail"

    # deactivated by SCIM: the provider's sign-in is refused
    client.logout()
    okta.call("PATCH", f"Users/{user_id}", fx.ENTRA_DISABLE)
    refused = _sign_in(client, oidc_provider)
    assert "_auth_user_id" not in client.session
    assert refused.status_code == 403 and "deactivated" in refused.content.decode()
    assert AccessLogEntry.objects.filter(action="auth.login", outcome="denied").exists()
    assert not client.get(reverse("dashboard")).wsgi_request.user.is_authenticated


# --- the page -----------------------------------------------------------------------------------
def test_page__token_made_secret_shown_once_bad_key_refused_and_revoked(admin, client):
    client.force_login(admin)
    page = reverse("scim-provisioning")

    bad = client.post(page, {"provider": "Not A Key!", "name": "x"})
    assert bad.status_code == 400 and not scim.ScimToken.objects.exists()
    made = client.post(page, {"provider": "entra", "name": "Entra production"})
    token = scim.ScimToken.objects.get()
    assert made.status_code == 200 and token.prefix in made.content.decode()
    secret = made.context["created"][1]
    assert secret in made.content.decode() and "not a configured provider" in made.content.decode()
    assert secret not in client.get(page).content.decode()  # shown once

    revoked = client.post(reverse("scim-token-revoke", args=[token.pk]))
    assert revoked.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    _scim_error(Scim(secret).call("GET", "Users"), 401)
    actions = list(
        AuditRecord.objects.filter(action__startswith="scim_token")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == ["scim_token.create", "scim_token.revoke"]


def test_page__an_admin_of_one_agent_is_refused(client, db):
    client.force_login(user_with_grants("agent-admin", admin=AgentFactory(key="payments")))
    assert client.get(reverse("scim-provisioning")).status_code == 403
    assert (
        client.post(reverse("scim-provisioning"), {"provider": "x", "name": "y"}).status_code == 403
    )
    assert not scim.ScimToken.objects.exists()


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("POST", "Users", {"userName": "nul", "title": "a\u0000b"}),
        ("POST", "Users", {"userName": "deep", "x": [[[[[[[[[[{}]]]]]]]]]]}),
        ("POST", "Users", {"userName": "e", "emails": [{"value": 5}, "x", None]}),
        ("POST", "Groups", {"displayName": "g", "members": [{"value": True}, {"value": 10**40}]}),
        ("PATCH", "Users/{user}", {"Operations": [{"op": "add", "value": {"locale": "a\u0000"}}]}),
        ("PATCH", "Users/{user}", {"Operations": [{"op": "add", "value": {"urn:x:y": {"a": 1}}}]}),
        (
            "PATCH",
            "Users/{user}",
            {
                "Operations": [
                    {"op": "add", "path": "locale", "value": "x"},
                    {"op": "add", "value": {"locale": {"a": 1}}},
                    {"op": "add", "value": {"urn:x:y": "s"}},
                    {"op": "add", "value": {"urn:x:y": {"a": 1}}},
                ]
            },
        ),
        (
            "PATCH",
            "Users/{user}",
            {"Operations": [{"op": "add", "path": "name.givenName", "value": [1]}]},
        ),
        (
            "PATCH",
            "Users/{user}",
            {"Operations": [{"op": "add", "path": "userName.x", "value": "y"}]},
        ),
        (
            "PATCH",
            "Users/{user}",
            {"Operations": [{"op": "add", "path": 'userName[a eq "b"]', "value": "y"}]},
        ),
        (
            "PATCH",
            "Users/{user}",
            {"Operations": [{"op": "add", "path": 'emails[type eq "w"]', "value": 3}]},
        ),
        (
            "PATCH",
            "Users/{user}",
            {"Operations": [{"op": "replace", "path": "urn:a:b:c", "value": 1}]},
        ),
        (
            "PATCH",
            "Users/{user}",
            {"Operations": [{"op": "replace", "path": "x" * 600, "value": 1}]},
        ),
        ("PATCH", "Users/{user}", {"Operations": [{"op": "replace", "path": 7, "value": 1}]}),
        (
            "PATCH",
            "Users/{user}",
            {"Operations": [{"op": "replace", "path": "active", "value": None}]},
        ),
        ("PATCH", "Users/{user}", {"Operations": [{"op": "add", "path": "emails", "value": "x"}]}),
        (
            "PATCH",
            "Groups/{group}",
            {"Operations": [{"op": "remove", "path": "members", "value": {"value": "1"}}]},
        ),
        (
            "PATCH",
            "Groups/{group}",
            {"Operations": [{"op": "add", "path": "members", "value": "x"}]},
        ),
        (
            "PATCH",
            "Groups/{group}",
            {"Operations": [{"op": "add", "path": 'members[value eq "1"]', "value": 1}]},
        ),
        ("PATCH", "Groups/{group}", {"Operations": [{"op": "replace", "value": {"members": 1}}]}),
        (
            "PATCH",
            "Groups/{group}",
            {"Operations": [{"op": "replace", "value": {"displayName": None}}]},
        ),
        (
            "PATCH",
            "Groups/{group}",
            {"Operations": [{"op": "replace", "path": "displayName", "value": ["x"]}]},
        ),
        ("PUT", "Groups/{group}", {"displayName": "x", "members": [{}]}),
        ("GET", "Users?startIndex=99999999999999999999999", None),
        ("GET", "Users?count=-5", None),
        ("GET", "Users?filter=displayName%20gt%20%22a%22", None),
        ("GET", "Users?filter=name.givenName%20lt%20%22a%22%20or%20displayName%20pr", None),
        ("GET", "Users?filter=emails%20eq%20%22a%22%20and%20not%20(active%20eq%20true)", None),
        ("GET", "Users?filter=id%20eq%20%2299999999999999999999%22", None),
        ("GET", "Groups?filter=members%20eq%20%22abc%22", None),
        ("GET", "Groups?filter=externalId%20sw%20%22a%22", None),
    ],
)
def test_hostile_input__never_a_500_always_scim_shaped(okta, method, path, body):
    user_id = okta.call("POST", "Users", fx.OKTA_USER).json()["id"]
    group_id = okta.call("POST", "Groups", fx.OKTA_GROUP).json()["id"]
    path = path.replace("{user}", user_id).replace("{group}", group_id)
    params = {}
    if "?" in path:
        path, query = path.split("?")
        params = dict(part.split("=", 1) for part in query.split("&"))
    response = okta.call(method, path, body, **params)

    assert response.status_code < 500, response.content
    if response.status_code >= 400:
        assert response.json()["schemas"] == [ERROR]
