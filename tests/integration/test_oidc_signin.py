"""OpenID Connect sign-in (issue 33, items 1 and 3) against a real provider on loopback
(tests/idp: npm oidc-provider under Node.js): the console's own views exchange the code at
the provider's real token endpoint and check its real ID token. No mocked endpoint.

Each bad input — an expired, unsigned or wrongly signed ID token, a wrong audience or issuer,
a provider that times out, a replayed state, a group mapped to a role that no longer exists —
grants nothing and is in the audit chain (access log or audit log)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from console.access import group_mappings
from console.access.services import grant_revoke
from console.accounts import oidc
from console.accounts.models import ExternalIdentity
from console.kernel.errors import Conflict, Forbidden
from console.kernel.models import AccessLogEntry, AuditRecord, Grant, GroupMapping
from console.kernel.sessions import AUTHENTICATED_AT, recently_authenticated
from tests.factories import AgentFactory, role_named, user_with_grants

CALLBACK = "http://testserver/login/sso/bank/callback/"
User = get_user_model()


@pytest.fixture(autouse=True)
def _fresh_discovery():
    """Each test's provider is new: forget what an earlier one on the same port said."""
    oidc._discovered.clear()


@pytest.fixture
def bank(oidc_provider, settings, db):
    """The bank's provider, configured in the console as `bank`, with alice (group ops)."""
    oidc_provider.add_client(
        "console",
        "s3cret",
        redirect_uris=[CALLBACK],
        post_logout_redirect_uris=["http://testserver/login/"],
    )
    oidc_provider.add_user(
        "alice", sub="alice-sub", email="alice@bank.test", groups=["ops"], name="Alice"
    )
    oidc_provider.start()
    settings.OIDC_PROVIDERS = [
        oidc_provider.provider_setting(
            key="bank", name="Bank SSO", client_id="console", client_secret="s3cret", timeout=2
        )
    ]
    return oidc_provider


@pytest.fixture
def admin(db):
    return user_with_grants("root", admin=None)


def _map(admin, group="ops", role="viewer", agents=(), all_agents=True):
    return group_mappings.group_mapping_create(
        actor=admin,
        provider="bank",
        group=group,
        role=role_named(role),
        agents=agents,
        all_agents=all_agents,
        reason="the bank's ops team reads configuration",
    )


def _sign_in(client, provider, login="alice"):
    """The browser's round trip: console → provider (sign in as `login`) → console."""
    start = client.get(reverse("sso-start", args=["bank"]))
    assert start.status_code == 302, start.content
    back = provider.sign_in(start["Location"], login, redirect_uri=CALLBACK)
    parts = urlsplit(back)
    return client.get(f"{parts.path}?{parts.query}")


def _denials(why=None):
    rows = AccessLogEntry.objects.filter(action="auth.login", outcome="denied")
    return [r for r in rows if why is None or r.detail.get("why") == why]


def test_sign_in__first_time__account_made_with_the_mapped_role_and_logged(client, bank, admin):
    _map(admin)

    response = _sign_in(client, bank)

    assert response.status_code == 302 and response["Location"] == reverse("dashboard")
    alice = User.objects.get(external_identities__subject="alice-sub")
    assert alice.email == "alice@bank.test" and not alice.has_usable_password()
    assert [(g.role.name, g.agent, g.mapping.group) for g in Grant.objects.filter(user=alice)] == [
        ("viewer", None, "ops")
    ]
    assert client.get(reverse("dashboard")).wsgi_request.user == alice
    [login] = AccessLogEntry.objects.filter(action="auth.login", outcome="allowed")
    assert login.actor_label == alice.username and login.detail["provider"] == "bank"
    assert AuditRecord.objects.filter(action="sso_account.create", target_id=str(alice.pk)).exists()
    made = AuditRecord.objects.get(action="grant.create")
    assert made.actor_label == "sso:bank" and made.after["from_mapping"]["group"] == "ops"


def test_sign_in__group_left_at_provider__grant_gone_at_next_sign_in(client, bank, admin):
    agent = AgentFactory(key="payments")
    _map(admin, group="ops", role="viewer")
    _map(admin, group="payments-ops", role="operator", agents=[agent], all_agents=False)
    bank.set_groups("alice", ["ops", "payments-ops"])
    _sign_in(client, bank)
    alice = User.objects.get(username="alice")
    assert sorted(Grant.objects.filter(user=alice).values_list("role__name", flat=True)) == [
        "operator",
        "viewer",
    ]
    client.logout()

    bank.set_groups("alice", ["ops"])
    _sign_in(client, bank)

    assert list(Grant.objects.filter(user=alice).values_list("role__name", flat=True)) == ["viewer"]
    revoked = AuditRecord.objects.get(action="grant.revoke")
    assert revoked.agent_key == "payments" and "payments-ops" in revoked.after["reason"]


def test_sign_in__second_time__same_account_by_subject_not_by_name(client, bank, admin):
    """A local account already called alice is never taken over: the provider's alice gets
    an account of her own, found again by her subject next time."""
    local = user_with_grants("alice")
    _sign_in(client, bank)
    client.logout()
    _sign_in(client, bank)

    [identity] = ExternalIdentity.objects.all()
    assert identity.user != local and identity.user.username == "alice-2"
    assert User.objects.filter(username__startswith="alice").count() == 2


@pytest.mark.parametrize(
    "tamper, why",
    [
        ("expired", "expired_token"),
        ("wrong_key", "bad_signature"),
        ("unsigned", "unsigned_token"),
        ("wrong_aud", "wrong_audience"),
        ("wrong_iss", "wrong_issuer"),
    ],
)
def test_sign_in__bad_id_token__refused_nothing_granted_and_logged(
    client, bank, admin, tamper, why
):
    _map(admin)
    bank.set_tamper(tamper)

    response = _sign_in(client, bank)

    assert response.status_code == 400
    assert b'data-testid="sso-error"' in response.content
    assert not User.objects.filter(email="alice@bank.test").exists()
    assert not Grant.objects.filter(mapping__isnull=False).exists()
    assert "_auth_user_id" not in client.session
    [denied] = _denials(why)
    assert denied.detail["provider"] == "bank" and denied.actor_type == "anonymous"


def test_sign_in__provider_times_out__readable_refusal_logged(client, bank, admin):
    _map(admin)
    bank.set_token_delay(4)  # the console waits 2 s (timeout=2 in its setting)

    response = _sign_in(client, bank)

    assert response.status_code == 504
    assert "did not answer within 2 seconds" in response.content.decode()
    assert not User.objects.filter(email="alice@bank.test").exists()
    assert len(_denials("provider_timeout")) == 1


def test_start__provider_down__readable_refusal_logged(client, bank):
    bank.stop()

    response = client.get(reverse("sso-start", args=["bank"]))

    assert response.status_code == 503
    assert "cannot be reached" in response.content.decode()
    assert len(_denials("provider_unreachable")) == 1


def test_sign_in__mapping_to_deleted_role__grants_nothing_and_audited(client, bank, admin):
    mapping = _map(admin, role="approver")
    role = mapping.role
    role.delete()  # as the break-glass admin could: the mapping now points at nothing

    response = _sign_in(client, bank)

    assert response.status_code == 302  # she signs in, with nothing granted
    alice = User.objects.get(username="alice")
    assert not Grant.objects.filter(user=alice).exists()
    skipped = AuditRecord.objects.get(action="group_mapping.role_missing")
    assert skipped.after["user"] == "alice" and skipped.after["role"] == "approver"


def test_sign_in__keys_rotated_at_provider__next_sign_in_checks_the_new_key(client, bank, admin):
    _sign_in(client, bank)
    client.logout()

    bank.rotate_keys(keep_old=False)
    response = _sign_in(client, bank)

    assert response.status_code == 302
    assert AccessLogEntry.objects.filter(action="auth.login", outcome="allowed").count() == 2


def test_callback__state_replayed__refused_and_logged(client, bank):
    start = client.get(reverse("sso-start", args=["bank"]))
    back = urlsplit(bank.sign_in(start["Location"], "alice", redirect_uri=CALLBACK))
    assert client.get(f"{back.path}?{back.query}").status_code == 302
    client.logout()

    replay = client.get(f"{back.path}?{back.query}")

    assert replay.status_code == 400
    assert len(_denials("state_mismatch")) == 1


def test_start__pkce_state_and_nonce_sent(client, bank):
    start = client.get(reverse("sso-start", args=["bank"]))
    query = parse_qs(urlsplit(start["Location"]).query)
    assert query["code_challenge_method"] == ["S256"]
    assert query["state"] and query["nonce"] and query["code_challenge"]
    assert query["redirect_uri"] == [CALLBACK]


def test_mapped_grant__revoked_by_hand__refused(client, bank, admin):
    _map(admin)
    _sign_in(client, bank)
    grant = Grant.objects.get(mapping__isnull=False)

    with pytest.raises(Conflict) as refused:
        grant_revoke(actor=admin, grant=grant, reason="trying to remove it by hand")

    assert refused.value.code == "grant_from_mapping"
    assert Grant.objects.filter(pk=grant.pk).exists()


def test_mapping__role_above_the_mappers_own__refused(db):
    delegate = user_with_grants("deleg", delegate=None)

    with pytest.raises(Forbidden) as refused:
        group_mappings.group_mapping_create(
            actor=delegate,
            provider="bank",
            group="ops",
            role=role_named("admin"),
            all_agents=True,
            reason="escalating through a group",
        )

    assert refused.value.code == "role_above_own"
    assert not GroupMapping.objects.exists()


def test_mapping_removed__its_grants_end_at_once(client, bank, admin):
    mapping = _map(admin)
    _sign_in(client, bank)

    removed = group_mappings.group_mapping_delete(
        actor=admin, mapping=mapping, reason="ops no longer reads the console"
    )

    assert removed == 1 and not Grant.objects.filter(mapping__isnull=False).exists()
    row = AuditRecord.objects.get(action="group_mapping.delete")
    assert row.before["grants"] == [{"user": "alice", "agent": None}]


def test_logout__through_provider__sent_to_its_end_session_endpoint(client, bank):
    _sign_in(client, bank)

    response = client.post(reverse("logout"))

    assert response.status_code == 302
    target = urlsplit(response["Location"])
    assert response["Location"].startswith(bank.discovery()["end_session_endpoint"])
    query = parse_qs(target.query)
    assert query["post_logout_redirect_uri"] == ["http://testserver/login/"]
    assert query["id_token_hint"][0].count(".") == 2
    assert "_auth_user_id" not in client.session


def test_login_page__providers_configured__one_button_each(client, bank):
    page = client.get(reverse("login")).content.decode()
    assert "Sign in with Bank SSO" in page


def test_login_page__no_provider__password_only(client, settings, db):
    settings.OIDC_PROVIDERS = []
    page = client.get(reverse("login")).content.decode()
    assert "sso-providers" not in page
    assert client.get("/login/sso/bank/").status_code == 404


def test_api__mapped_grant__listed_as_such_and_delete_refused_409(client, bank, admin):
    _map(admin)
    _sign_in(client, bank)
    grant = Grant.objects.get(mapping__isnull=False)
    client.force_login(admin)

    listed = client.get(reverse("api-grant-detail", args=[grant.pk])).json()
    refused = client.delete(
        reverse("api-grant-detail", args=[grant.pk]) + "?reason=by+hand+via+the+API"
    )

    assert listed["from_mapping"] == "bank group ops → viewer"
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "grant_from_mapping"
    assert Grant.objects.filter(pk=grant.pk).exists()


def test_sign_in__account_deactivated__refused_and_grants_untouched(client, bank, admin):
    _map(admin)
    _sign_in(client, bank)
    client.logout()
    alice = User.objects.get(username="alice")
    User.objects.filter(pk=alice.pk).update(is_active=False)
    bank.set_groups("alice", [])  # would remove her grant, were she let in

    response = _sign_in(client, bank)

    assert response.status_code == 403 and "deactivated" in response.content.decode()
    assert "_auth_user_id" not in client.session
    assert Grant.objects.filter(user=alice, mapping__isnull=False).count() == 1
    assert len(_denials("account_disabled")) == 1


@pytest.mark.parametrize(
    "next_url, lands",
    [("/audit/", "/audit/"), ("https://evil.example/phish", "/"), ("//evil.example/", "/")],
)
def test_sign_in__next__own_pages_only(client, bank, next_url, lands):
    start = client.get(reverse("sso-start", args=["bank"]), {"next": next_url})
    back = urlsplit(bank.sign_in(start["Location"], "alice", redirect_uri=CALLBACK))

    response = client.get(f"{back.path}?{back.query}")

    assert response.status_code == 302 and response["Location"] == lands


# --- re-authentication at the provider (item 6: the password's place for provider accounts) -------
def _stale(client):
    """Signed in more than REAUTHENTICATION_MINUTES ago: the dangerous actions ask again."""
    session = client.session
    session[AUTHENTICATED_AT] -= 11 * 60
    session.save()


def _confirm_at_provider(client, provider, login, next_url="/access/"):
    page = client.get(reverse("reauthenticate"), {"next": next_url})
    assert page.status_code == 200
    assert page.context["provider_confirmation"]["name"] == "Bank SSO"
    start = client.get(page.context["provider_confirmation"]["url"])
    assert start.status_code == 302, start.content
    asked = parse_qs(urlsplit(start["Location"]).query)
    back = provider.sign_in(start["Location"], login, redirect_uri=CALLBACK)
    parts = urlsplit(back)
    return asked, client.get(f"{parts.path}?{parts.query}")


def test_reauthenticate__provider_account__provider_asks_again_then_back_to_the_action(
    client, bank, admin
):
    _sign_in(client, bank)
    _stale(client)
    assert not recently_authenticated(client.session)

    asked, back = _confirm_at_provider(client, bank, "alice")

    assert asked["prompt"] == ["login"] and asked["max_age"] == ["0"]
    assert back.status_code == 302 and back["Location"] == "/access/"
    assert recently_authenticated(client.session)
    [row] = AccessLogEntry.objects.filter(action="auth.reauthenticate")
    assert row.outcome == "allowed" and row.detail["path"] == "/access/"


def test_reauthenticate__another_person_at_the_provider__refused_and_logged(client, bank, admin):
    bank.add_user("bob", sub="bob-sub", email="bob@bank.test", groups=["ops"])
    _sign_in(client, bank)
    _stale(client)

    _asked, back = _confirm_at_provider(client, bank, "bob")

    assert back.status_code == 302 and back["Location"].startswith(reverse("reauthenticate"))
    page = client.get(back["Location"])
    assert "confirmed someone else than alice" in page.content.decode()
    assert page.wsgi_request.user.username == "alice"  # still alice, not bob
    assert not recently_authenticated(client.session)
    [row] = AccessLogEntry.objects.filter(action="auth.reauthenticate")
    assert row.outcome == "denied" and row.detail["why"] == "another_person"


def test_reauthenticate__password_account__provider_confirmation_refused(client, bank, db):
    local = user_with_grants("carol", admin=None)
    client.force_login(local)

    page = client.get(reverse("reauthenticate"))
    refused = client.get(reverse("sso-reauthenticate", args=["bank"]), {"next": "/access/"})

    assert page.context["provider_confirmation"] is None
    assert refused.status_code == 302 and refused["Location"].startswith(reverse("reauthenticate"))
    [row] = AccessLogEntry.objects.filter(action="auth.reauthenticate")
    assert row.outcome == "denied" and row.detail["why"] == "not_signed_in_here"


def test_reauthenticate__provider_did_not_ask_again__refused_and_logged(client, bank, admin):
    _sign_in(client, bank)
    _stale(client)
    bank.set_tamper("stale_auth_time")  # signed correctly; auth_time an hour ago

    _asked, back = _confirm_at_provider(client, bank, "alice")

    assert back["Location"].startswith(reverse("reauthenticate"))
    assert not recently_authenticated(client.session)
    [row] = AccessLogEntry.objects.filter(action="auth.reauthenticate")
    assert row.outcome == "denied" and row.detail["why"] == "not_asked_again"
