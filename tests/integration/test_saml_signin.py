"""SAML 2.0 sign-in (issue 33, items 2 and 3) against a real IdP on loopback (tests/idp:
pysaml2's own IdP under wsgiref, signing with a key made at fixture time): the console's views
read its real metadata and check its real, signed assertions. No mocked endpoint.

Each bad input — a replayed, unsigned, wrongly signed, expired assertion, one for another
audience or recipient, an answer to a request this browser never made, garbage, an IdP whose
metadata cannot be had, a group mapped to a role that no longer exists — grants nothing and is
in the audit chain (access log or audit log)."""

from __future__ import annotations

import base64
import re
from importlib import import_module
from urllib.parse import urlsplit

import pytest
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.urls import reverse

from console.access import group_mappings
from console.accounts import saml
from console.accounts.models import ExternalIdentity, SamlAssertion
from console.kernel import sessions, sso_providers
from console.kernel.models import AccessLogEntry, AuditRecord, Grant
from tests.factories import AgentFactory, role_named, user_with_grants

User = get_user_model()
ACS = "http://testserver/login/saml/corp/acs/"


@pytest.fixture(autouse=True)
def _fresh_metadata():
    """Each test's IdP is new: forget what an earlier one on the same port published."""
    saml._metadata.clear()


@pytest.fixture(scope="module")
def _idp():
    """One IdP process for the module (its users and tamper mode are reset per test)."""
    from tests.idp.saml_idp import LocalSamlIdP

    idp = LocalSamlIdP()
    idp.start()
    yield idp
    idp.close()


@pytest.fixture
def corp(_idp, settings, db):
    """The bank's SAML IdP, configured in the console as `corp`, with alice (group ops)."""
    _idp.users.clear()
    _idp.sps.clear()
    _idp.logouts_forget()
    _idp.set_tamper(None)
    _idp.set_metadata_delay(0)
    _idp.add_user(
        "alice", subject="alice-pid", email="alice@bank.test", groups=["ops"], name="Alice"
    )
    settings.SAML_PROVIDERS = [_idp.provider_setting(key="corp", name="Corp SAML", timeout=2)]
    return _idp


@pytest.fixture
def admin(db):
    return user_with_grants("root", admin=None)


def _map(admin, group="ops", role="viewer", agents=(), all_agents=True):
    return group_mappings.group_mapping_create(
        actor=admin,
        provider="corp",
        group=group,
        role=role_named(role),
        agents=agents,
        all_agents=all_agents,
        reason="the bank's ops team reads configuration",
    )


def _answer(client, idp, login="alice", start=None):
    """The browser's way to the IdP and back: (ACS path, the IdP's posted fields)."""
    start = client.get(start or reverse("saml-start", args=["corp"]))
    assert start.status_code == 302, start.content[:500]
    action, fields = idp.sign_in(start["Location"], login)
    assert action == ACS
    return urlsplit(action).path, fields


def _sign_in(client, idp, login="alice"):
    path, fields = _answer(client, idp, login)
    return client.post(path, fields)


def _denials(why=None):
    rows = AccessLogEntry.objects.filter(action="auth.login", outcome="denied")
    return [r for r in rows if why is None or r.detail.get("why") == why]


def _refused_nothing_granted(response, why, status=400):
    assert response.status_code == status, response.content[:800]
    assert b'data-testid="sso-error"' in response.content
    assert not Grant.objects.filter(mapping__isnull=False).exists()
    assert not ExternalIdentity.objects.exists()
    assert "_auth_user_id" not in response.wsgi_request.session
    [denied] = _denials(why)
    assert denied.detail["provider"] == "corp" and denied.actor_type == "anonymous"


def test_sign_in__first_time__account_made_with_the_mapped_role_and_logged(client, corp, admin):
    _map(admin)

    response = _sign_in(client, corp)

    assert response.status_code == 302 and response["Location"] == reverse("dashboard")
    alice = User.objects.get(external_identities__subject="alice-pid")
    assert alice.email == "alice@bank.test" and not alice.has_usable_password()
    assert [(g.role.name, g.agent, g.mapping.group) for g in Grant.objects.filter(user=alice)] == [
        ("viewer", None, "ops")
    ]
    assert client.get(reverse("dashboard")).wsgi_request.user == alice
    assert client.session["sso"]["provider"] == "corp"
    assert client.session["sso"]["protocol"] == "saml"
    [login] = AccessLogEntry.objects.filter(action="auth.login", outcome="allowed")
    assert login.actor_label == alice.username and login.detail["provider"] == "corp"
    assert SamlAssertion.objects.filter(provider="corp").count() == 1


def test_sign_in__group_left_at_idp__grant_gone_at_next_sign_in(client, corp, admin):
    agent = AgentFactory(key="payments")
    _map(admin, group="ops", role="viewer")
    _map(admin, group="payments-ops", role="operator", agents=[agent], all_agents=False)
    corp.set_groups("alice", ["ops", "payments-ops"])
    _sign_in(client, corp)
    alice = User.objects.get(username="alice")
    assert sorted(Grant.objects.filter(user=alice).values_list("role__name", flat=True)) == [
        "operator",
        "viewer",
    ]
    client.logout()

    corp.set_groups("alice", ["ops"])
    _sign_in(client, corp)

    assert list(Grant.objects.filter(user=alice).values_list("role__name", flat=True)) == ["viewer"]
    revoked = AuditRecord.objects.get(action="grant.revoke")
    assert revoked.agent_key == "payments" and "payments-ops" in revoked.after["reason"]


@pytest.mark.parametrize(
    "tamper, why",
    [
        ("unsigned", "unsigned_assertion"),
        ("wrong_key", "bad_signature"),
        ("wrong_audience", "wrong_audience"),
        ("wrong_recipient", "wrong_recipient"),
        ("expired", "expired_assertion"),
    ],
)
def test_sign_in__bad_assertion__refused_nothing_granted_and_logged(
    client, corp, admin, tamper, why
):
    _map(admin)
    corp.set_tamper(tamper)

    response = _sign_in(client, corp)

    _refused_nothing_granted(response, why)


def _browser_copy(client):
    """Another browser holding a copy of `client`'s pending SAML requests (its cookie's
    session copied): as a thief with the cookie, or a second process racing the first."""
    engine = import_module(settings.SESSION_ENGINE)
    original = engine.SessionStore(client.cookies[settings.SAML_SESSION_COOKIE_NAME].value)
    copy = engine.SessionStore()
    copy.update(original.load())
    copy.save()
    other = Client()
    other.cookies[settings.SAML_SESSION_COOKIE_NAME] = copy.session_key
    return other


def test_sign_in__replayed_response__refused_and_logged(client, corp, admin):
    _map(admin)
    path, fields = _answer(client, corp)
    thief = _browser_copy(client)
    assert client.post(path, fields).status_code == 302
    alice = User.objects.get(username="alice")
    client.logout()

    again = client.post(path, fields)  # the same browser: its request was answered already
    replayed = thief.post(path, fields)  # InResponseTo passes; the assertion was used

    for response in (again, replayed):
        assert response.status_code == 400
        assert "_auth_user_id" not in response.wsgi_request.session
    assert len(_denials("unsolicited_response")) == 1
    [denied] = _denials("replayed_assertion")
    assert denied.detail["provider"] == "corp" and "already used" in denied.detail["message"]
    assert Grant.objects.filter(user=alice).count() == 1  # the first sign-in's, nothing more
    assert AccessLogEntry.objects.filter(action="auth.login", outcome="allowed").count() == 1


def test_sign_in__answer_to_a_request_never_made_here__refused(client, corp, admin):
    """IdP-initiated, or an answer meant for another browser: InResponseTo is unknown here."""
    _map(admin)
    path, fields = _answer(Client(), corp)  # another browser started it

    response = client.post(path, fields)

    _refused_nothing_granted(response, "unsolicited_response")


@pytest.mark.parametrize(
    "posted",
    [
        {},
        {"SAMLResponse": "%%% not base64 %%%"},
        {"SAMLResponse": base64.b64encode(b"<not-xml").decode()},
        {
            "SAMLResponse": base64.b64encode(
                b"<samlp:Response xmlns:samlp='urn:oasis:names:tc:SAML:2.0:protocol'/>"
            ).decode()
        },
    ],
    ids=["missing", "garbage-base64", "bad-xml", "empty-response"],
)
def test_acs__malformed_response__refused_in_words_never_a_500(client, corp, posted):
    client.get(reverse("saml-start", args=["corp"]))

    response = client.post(reverse("saml-acs", args=["corp"]), posted)

    assert response.status_code == 400
    assert b'data-testid="sso-error"' in response.content
    assert len(_denials()) == 1 and _denials()[0].detail["message"]


def test_start__metadata_unreachable__readable_refusal_logged(client, corp, settings):
    settings.SAML_PROVIDERS = [
        {**settings.SAML_PROVIDERS[0], "metadata_url": "http://127.0.0.1:9/metadata"}
    ]

    response = client.get(reverse("saml-start", args=["corp"]))

    assert response.status_code == 503
    assert "cannot be reached" in response.content.decode()
    assert len(_denials("provider_unreachable")) == 1


def test_start__metadata_times_out__readable_refusal_logged(client, corp):
    corp.set_metadata_delay(3)  # the console waits 2 s (timeout=2 in its setting)

    response = client.get(reverse("saml-start", args=["corp"]))

    assert response.status_code == 504
    assert "did not answer within 2 seconds" in response.content.decode()
    assert len(_denials("provider_timeout")) == 1


def test_sign_in__mapping_to_deleted_role__grants_nothing_and_audited(client, corp, admin):
    mapping = _map(admin, role="approver")
    mapping.role.delete()

    response = _sign_in(client, corp)

    assert response.status_code == 302  # she signs in, with nothing granted
    alice = User.objects.get(username="alice")
    assert not Grant.objects.filter(user=alice).exists()
    skipped = AuditRecord.objects.get(action="group_mapping.role_missing")
    assert skipped.after["user"] == "alice" and skipped.after["role"] == "approver"


def test_sign_in__deactivated_account__refused_and_logged(client, corp, admin):
    _map(admin)
    _sign_in(client, corp)
    client.logout()
    User.objects.filter(username="alice").update(is_active=False)

    response = _sign_in(client, corp)

    assert response.status_code == 403
    assert "deactivated" in response.content.decode()
    assert len(_denials("account_disabled")) == 1


def test_metadata__names_the_acs_and_persistent_name_id(client, corp):
    response = client.get(reverse("saml-metadata", args=["corp"]))

    assert response.status_code == 200
    xml = response.content.decode()
    assert 'entityID="http://testserver/login/saml/corp/metadata/"' in xml
    assert ACS in xml and "nameid-format:persistent" in xml


def test_sign_in_page__shows_saml_and_oidc_buttons(client, corp, settings):
    settings.OIDC_PROVIDERS = [
        {
            "key": "bank",
            "name": "Bank SSO",
            "issuer": "http://127.0.0.1:9",
            "client_id": "c",
            "client_secret": "s",
        }
    ]

    page = client.get(reverse("login")).content.decode()

    assert 'href="/login/saml/corp/"' in page and "Sign in with Corp SAML" in page
    assert 'href="/login/sso/bank/"' in page
    assert client.get(reverse("sso-start", args=["corp"])).status_code == 404
    assert client.get(reverse("saml-start", args=["bank"])).status_code == 404


# --- re-authentication (ForceAuthn) ---------------------------------------------------------------
def _reauthenticate(client, idp, login, next_path="/access/"):
    url = f"{reverse('saml-reauthenticate', args=['corp'])}?next={next_path}"
    start = client.get(url)
    assert start.status_code == 302, start.content[:300]
    assert "Confirm who you are" in requests.get(start["Location"], timeout=5).text  # ForceAuthn
    action, fields = idp.sign_in(start["Location"], login)
    back = client.post(urlsplit(action).path, fields)
    assert back.status_code == 302, back.content[:500]
    return client.get(back["Location"])


def test_reauthenticate__same_person_with_force_authn__opens_dangerous_actions(client, corp, admin):
    _map(admin)
    _signed_in_an_hour_ago(client, corp)
    assert not sessions.recently_authenticated(client.session)

    finished = _reauthenticate(client, corp, "alice")

    assert finished.status_code == 302 and finished["Location"] == "/access/"
    assert sessions.recently_authenticated(client.session)
    [proof] = AccessLogEntry.objects.filter(action="auth.reauthenticate")
    assert proof.outcome == "allowed" and proof.detail["path"] == "/access/"


def _signed_in_an_hour_ago(client, idp):
    _sign_in(client, idp)
    session = client.session
    session[sessions.AUTHENTICATED_AT] -= 3600
    session.save()


def test_reauthenticate__another_persons_answer__refused_and_audited(client, corp, admin):
    corp.add_user("bob", subject="bob-pid", email="bob@bank.test", groups=["ops"])
    _map(admin)
    _signed_in_an_hour_ago(client, corp)

    finished = _reauthenticate(client, corp, "bob")

    assert finished.status_code == 302
    assert finished["Location"] == f"{reverse('reauthenticate')}?next=%2Faccess%2F"
    assert "confirmed someone else than alice" in client.get(finished["Location"]).content.decode()
    assert not sessions.recently_authenticated(client.session)
    assert client.session["_auth_user_id"] == str(User.objects.get(username="alice").pk)
    [refused] = AccessLogEntry.objects.filter(action="auth.reauthenticate")
    assert refused.outcome == "denied" and refused.detail["why"] == "another_person"
    assert not User.objects.filter(username="bob").exists()


def test_reauthenticate__idp_did_not_ask_again__refused_and_audited(client, corp, admin):
    _signed_in_an_hour_ago(client, corp)
    corp.set_tamper("stale_login")  # a good assertion, but her sign-in there is an hour old

    finished = _reauthenticate(client, corp, "alice")

    assert finished["Location"].startswith(reverse("reauthenticate"))
    assert not sessions.recently_authenticated(client.session)
    [refused] = AccessLogEntry.objects.filter(action="auth.reauthenticate")
    assert refused.detail["why"] == "not_asked_again"


def test_reauthenticate__signed_in_with_a_password__refused(client, corp):
    client.force_login(user_with_grants("carol"))

    response = client.get(f"{reverse('saml-reauthenticate', args=['corp'])}?next=/access/")

    assert response["Location"].startswith(reverse("reauthenticate"))
    [refused] = AccessLogEntry.objects.filter(action="auth.reauthenticate")
    assert refused.detail["why"] == "not_signed_in_here"


# --- one registry of providers ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "oidc, saml_entry, words",
    [
        (
            [{"key": "corp", "issuer": "http://x", "client_id": "c", "client_secret": "s"}],
            {"key": "corp", "metadata_url": "http://x/md"},
            "already a provider",
        ),
        ([], {"key": "corp"}, "metadata_url or metadata_file"),
        ([], {"key": "corp", "metadata_url": "u", "metadata_file": "f"}, "(one)"),
        ([], {"key": "corp", "metadata_url": "u", "groups_claim": "g"}, "unknown ['groups_claim']"),
        ([], {"key": "Corp!", "metadata_url": "u"}, "lower-case letters"),
    ],
)
def test_providers__bad_saml_setting__start_refused_with_its_reason(
    settings, oidc, saml_entry, words
):
    settings.OIDC_PROVIDERS, settings.SAML_PROVIDERS = oidc, [saml_entry]

    with pytest.raises(ImproperlyConfigured) as refused:
        sso_providers.providers()

    assert words in str(refused.value)


def test_group_mappings_page__offers_the_saml_provider(client, corp, admin):
    client.force_login(admin)

    page = client.get(reverse("group-mapping-list")).content.decode()

    assert '<option value="corp">Corp SAML</option>' in page


def test_logout__idp_without_single_logout__console_session_ends(client, corp, settings, tmp_path):
    """An IdP whose metadata publishes no SingleLogoutService: the console's session ends,
    the browser stays with the console."""
    _sign_in(client, corp)
    saml._metadata.clear()
    no_slo = tmp_path / "metadata.xml"
    xml = requests.get(corp.metadata_url, timeout=5).text
    no_slo.write_text(re.sub(r"<ns0:SingleLogoutService [^>]*/>", "", xml))
    settings.SAML_PROVIDERS = [
        {**settings.SAML_PROVIDERS[0], "metadata_url": "", "metadata_file": str(no_slo)}
    ]

    response = client.post(reverse("logout"))

    assert response.status_code == 302 and response["Location"] == reverse("login")
    assert "_auth_user_id" not in client.session


def test_logout__idp_with_single_logout__signed_out_there_too_and_back_to_sign_in(client, corp):
    corp.register_sp(
        entity_id="http://testserver/login/saml/corp/metadata/",
        acs=ACS,
        sls="http://testserver/login/saml/corp/sls/",
    )
    _sign_in(client, corp)

    response = client.post(reverse("logout"))

    assert "_auth_user_id" not in client.session  # the console's session ended first
    assert response["Location"].startswith(f"{corp.base}/slo?SAMLRequest=")
    at_idp = requests.get(response["Location"], allow_redirects=False, timeout=5)
    assert at_idp.status_code == 303 and corp.logouts() == ["alice-pid"]
    back = urlsplit(at_idp.headers["Location"])
    assert back.path == reverse("saml-sls", args=["corp"]) and "SAMLResponse=" in back.query
    landed = client.get(f"{back.path}?{back.query}")
    assert landed.status_code == 302 and landed["Location"] == reverse("login")


def test_start__metadata_unreadable__readable_refusal_logged(client, corp, settings, tmp_path):
    junk = tmp_path / "metadata.xml"
    junk.write_text("<EntityDescriptor>not metadata")
    settings.SAML_PROVIDERS = [
        {**settings.SAML_PROVIDERS[0], "metadata_url": "", "metadata_file": str(junk)}
    ]

    response = client.get(reverse("saml-start", args=["corp"]))

    assert response.status_code == 502
    assert "cannot read" in response.content.decode()
    assert len(_denials("provider_bad_metadata")) == 1
