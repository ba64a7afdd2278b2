"""Enforced single sign-on, break-glass accounts and second factors (issue 33 item 4):
who may sign in with a password under each setting, the second step (TOTP, recovery codes,
throttling), re-authentication with a second factor, removal needing a recent sign-in, the
break-glass count limit, and the audit and access-log rows of each."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

from console.accounts import second_factors
from console.accounts.models import BreakGlassAccount, ExternalIdentity, RecoveryCode
from console.accounts.second_factor_views import REAUTH_KEY_AT
from console.kernel.models import AccessLogEntry, AuditRecord
from console.kernel.sessions import AUTHENTICATED_AT
from tests.factories import standard_roles, user_with_grants

pytestmark = pytest.mark.django_db

PASSWORD = "right-password-1"
ENFORCED_WORDS = "Single sign-on is enforced for this account"
WRONG = "Please enter a correct username and password"


def make(username, *, email="", provider=False, break_glass=False):
    user = get_user_model().objects.create_user(username, email=email, password=PASSWORD)
    if provider:
        ExternalIdentity.objects.create(user=user, provider="corp", subject=f"sub-{username}")
    if break_glass:
        BreakGlassAccount.objects.create(user=user, reason="provider down")
    return user


def with_totp(user) -> TOTPDevice:
    device, _codes = second_factors.totp_enrol_by_operator(user=user)
    return device


def code_of(device: TOTPDevice, *, ahead: int = 0) -> str:
    device.refresh_from_db()
    return f"{totp(device.bin_key, step=device.step, t0=device.t0 - ahead * device.step, digits=device.digits):06d}"


def sign_in(client, username, password=PASSWORD):
    return client.post(reverse("login"), {"username": username, "password": password})


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def second_step(client, code):
    return client.post(reverse("second-factor"), {"code": code})


def denials(why):
    return AccessLogEntry.objects.filter(action="auth.login", outcome="denied", detail__why=why)


# --- the enforcement matrix ------------------------------------------------------------------
@pytest.fixture
def accounts(db):
    return {
        "provider": make("pat", email="pat@bank.example", provider=True),
        "domain": make("dom", email="dom@bank.example"),
        "local": make("lou", email="lou@partner.example"),
        "break_glass": make("bg", email="bg@bank.example", break_glass=True),
    }


# (setting, domains) → which accounts sign in with a password alone ("factor": only with their
# second factor — the break-glass account has one, so it is asked even when nothing is enforced)
MATRIX = [
    ("", [], {"provider": "yes", "domain": "yes", "local": "yes", "break_glass": "factor"}),
    ("all", [], {"provider": "no", "domain": "no", "local": "no", "break_glass": "factor"}),
    (
        "",
        ["bank.example"],
        {"provider": "no", "domain": "no", "local": "yes", "break_glass": "factor"},
    ),
]


@pytest.mark.parametrize(("enforced", "domains", "expected"), MATRIX)
def test_password_sign_in__enforcement_matrix__refused_or_allowed_as_set(
    accounts, client, settings, enforced, domains, expected
):
    settings.SSO_ENFORCED, settings.SSO_ENFORCED_DOMAINS = enforced, domains
    device = with_totp(accounts["break_glass"])
    for kind, outcome in expected.items():
        client.logout()
        response = sign_in(client, accounts[kind].username)
        if outcome == "yes":
            assert response.status_code == 302 and signed_in(client), kind
        elif outcome == "no":
            assert response.status_code == 200 and not signed_in(client), kind
            assert ENFORCED_WORDS in response.content.decode(), kind
        else:  # the password is not enough: the second step, then a session
            assert response.status_code == 302 and not signed_in(client), kind
            assert response["Location"] == reverse("second-factor")
            assert second_step(client, code_of(device)).status_code == 302
            assert signed_in(client), kind
    refused = [k for k, v in expected.items() if v == "no"]
    assert denials("sso_enforced").count() == len(refused)


def test_password_sign_in__enforced_with_wrong_password__same_answer_as_unknown_user(
    accounts, client, settings
):
    """Someone without the password learns nothing: not that the account exists, nor that it
    is held to single sign-on."""
    settings.SSO_ENFORCED = "all"
    enforced = sign_in(client, "dom", "wrong-password").content.decode()
    unknown = sign_in(client, "nobody-here", "wrong-password").content.decode()
    assert WRONG in enforced and WRONG in unknown
    assert ENFORCED_WORDS not in enforced
    assert denials("invalid_credentials").count() == 2
    assert not denials("sso_enforced").exists()


def test_sign_in_page__enforced__says_so_and_off_by_default(client, settings):
    assert 'data-testid="sso-enforced"' not in client.get(reverse("login")).content.decode()
    settings.SSO_ENFORCED_DOMAINS = ["bank.example"]
    page = client.get(reverse("login")).content.decode()
    assert "Single sign-on is enforced" in page


def test_break_glass__enforced_without_second_factor__refused_no_session(
    accounts, client, settings
):
    settings.SSO_ENFORCED = "all"
    response = sign_in(client, "bg")
    assert response.status_code == 200 and not signed_in(client)
    assert "manage.py second_factor_enrol" in response.content.decode()
    assert denials("second_factor_missing").count() == 1


def test_break_glass__password_only_then_pages__no_session(accounts, client, settings):
    settings.SSO_ENFORCED = "all"
    with_totp(accounts["break_glass"])
    sign_in(client, "bg")
    assert client.get(reverse("dashboard")).status_code == 302  # to the sign-in page
    assert client.get(reverse("account")).status_code == 302
    assert not signed_in(client)


def test_django_admin__account_with_second_factor__refused_there(accounts, client):
    user = accounts["local"]
    user.is_staff = user.is_superuser = True
    user.save()
    with_totp(user)
    response = client.post(
        "/django-admin/login/", {"username": "lou", "password": PASSWORD, "next": "/django-admin/"}
    )
    assert not signed_in(client)
    assert "use the console" in response.content.decode()
    assert denials("second_factor_elsewhere").count() == 1


# --- the second step -------------------------------------------------------------------------
def test_totp__good_code__signed_in_and_audited(accounts, client):
    device = with_totp(accounts["local"])
    sign_in(client, "lou")
    response = second_step(client, code_of(device))
    assert response.status_code == 302 and signed_in(client)
    row = AccessLogEntry.objects.get(action="auth.login", outcome="allowed")
    assert row.detail["second_factor"] == "totp"
    assert AccessLogEntry.objects.filter(action="auth.second_factor", outcome="allowed").exists()


def test_totp__bad_code__refused_audited_no_session(accounts, client):
    with_totp(accounts["local"])
    sign_in(client, "lou")
    response = second_step(client, "000000")
    assert response.status_code == 400 and not signed_in(client)
    assert "That code is not right" in response.content.decode()
    denied = AccessLogEntry.objects.get(action="auth.second_factor", outcome="denied")
    assert denied.detail["why"] == "invalid_code"


def test_totp__replayed_code__refused(accounts, client):
    device = with_totp(accounts["local"])
    code = code_of(device)
    sign_in(client, "lou")
    second_step(client, code)
    client.logout()
    sign_in(client, "lou")
    response = second_step(client, code)
    assert response.status_code == 400 and not signed_in(client)


def test_totp__wrong_then_right_at_once__throttled_then_signs_in_after_the_wait(accounts, client):
    device = with_totp(accounts["local"])
    sign_in(client, "lou")
    second_step(client, "111111")
    response = second_step(client, code_of(device))
    assert response.status_code == 429 and not signed_in(client)
    assert "Too many wrong codes" in response.content.decode()
    assert AccessLogEntry.objects.filter(detail__why="throttled").count() == 1
    TOTPDevice.objects.filter(pk=device.pk).update(
        throttling_failure_timestamp=timezone.now() - timedelta(seconds=5)
    )
    assert second_step(client, code_of(device)).status_code == 302 and signed_in(client)


def test_recovery_code__signs_in_once_only(accounts, client):
    _device, codes = second_factors.totp_enrol_by_operator(user=accounts["local"])
    assert len(codes) == 10
    assert RecoveryCode.objects.count() == 10
    assert not RecoveryCode.objects.filter(code_hash=codes[0]).exists()  # stored hashed
    sign_in(client, "lou")
    assert second_step(client, codes[0].upper()).status_code == 302 and signed_in(client)
    client.logout()
    sign_in(client, "lou")
    assert second_step(client, codes[0]).status_code == 400 and not signed_in(client)
    assert RecoveryCode.objects.count() == 9


def test_security_key__answer_without_a_ceremony__refused_and_audited(accounts, client):
    with_totp(accounts["local"])
    sign_in(client, "lou")
    response = client.post(
        reverse("second-factor-key-authentication-complete"), {}, content_type="application/json"
    )
    assert response.status_code == 400 and not signed_in(client)
    denied = AccessLogEntry.objects.get(action="auth.second_factor", outcome="denied")
    assert denied.detail == {
        "kind": "webauthn",
        "path": denied.detail["path"],
        "why": "invalid_state",
    }


def test_security_key__ceremony_without_a_password_first__401(client):
    response = client.post(
        reverse("second-factor-key-authentication-begin"), {}, content_type="application/json"
    )
    assert response.status_code == 401 and not signed_in(client)


def test_second_step__without_a_password_first__back_to_sign_in(client):
    response = client.get(reverse("second-factor"))
    assert response.status_code == 302 and response["Location"] == reverse("login")


def test_second_step__pending_too_long__password_asked_again(accounts, client):
    device = with_totp(accounts["local"])
    sign_in(client, "lou")
    session = client.session
    session["console_sign_in_pending"]["at"] -= 301
    session.save()
    response = second_step(client, code_of(device))
    assert response.status_code == 302 and response["Location"] == reverse("login")
    assert not signed_in(client)


# --- enrolment on the account page -----------------------------------------------------------
def test_account__enrol_totp__confirmed_with_code_recovery_codes_shown_and_audited(
    accounts, client
):
    client.force_login(accounts["local"])
    client.post(reverse("account-totp-start"))
    page = client.get(reverse("account")).content.decode()
    assert "<svg" in page and 'id="totp-secret"' in page
    device = TOTPDevice.objects.get(user=accounts["local"], confirmed=False)
    assert client.post(reverse("account-totp-confirm"), {"code": "123"}).status_code == 302
    assert not TOTPDevice.objects.filter(confirmed=True).exists()
    response = client.post(reverse("account-totp-confirm"), {"code": code_of(device)})
    assert response.status_code == 200
    assert response.content.decode().count("<li>") >= 10
    assert AuditRecord.objects.filter(action="second_factor.enrol").count() == 1
    # from now on it is asked at sign-in
    client.logout()
    assert sign_in(client, "lou")["Location"] == reverse("second-factor")


def test_account__remove_factor__needs_recent_authentication_then_audited(accounts, client):
    device = with_totp(accounts["local"])
    sign_in(client, "lou")
    second_step(client, code_of(device))
    session = client.session
    session[AUTHENTICATED_AT] -= 3600
    session.save()
    data = {"kind": "totp", "id": device.pk}
    response = client.post(reverse("account-second-factor-remove"), data)
    assert response.status_code == 401
    assert TOTPDevice.objects.filter(pk=device.pk).exists()
    # confirming: the password AND a code (this account has a second factor)
    refused = client.post(
        reverse("account-second-factor-remove"), {**data, "reauth_password": PASSWORD}
    )
    assert refused.status_code == 401 and TOTPDevice.objects.filter(pk=device.pk).exists()
    assert "type a code from your app" in refused.content.decode()
    ok = client.post(
        reverse("account-second-factor-remove"),
        {**data, "reauth_password": PASSWORD, "reauth_code": code_of(device, ahead=1)},
    )
    assert ok.status_code == 302
    assert not TOTPDevice.objects.filter(pk=device.pk).exists()
    assert not RecoveryCode.objects.exists()  # the last factor took its codes with it
    assert AuditRecord.objects.filter(action="second_factor.remove").count() == 1
    reauths = AccessLogEntry.objects.filter(action="auth.reauthenticate")
    assert reauths.filter(outcome="denied", detail__why="second_factor_missing").count() == 1
    assert reauths.filter(outcome="allowed").count() == 1


def test_reauthenticate__second_factor_wrong_code__refused(accounts, client):
    device = with_totp(accounts["local"])
    sign_in(client, "lou")
    second_step(client, code_of(device))
    response = client.post(
        reverse("reauthenticate"), {"reauth_password": PASSWORD, "reauth_code": "999999"}
    )
    assert response.status_code == 401
    assert "That code is not right" in response.content.decode()


# --- break-glass accounts ------------------------------------------------------------------------
@pytest.fixture
def admin(db):
    standard_roles()
    return user_with_grants("ada", password=PASSWORD, admin=None)


def test_break_glass__mark_unmark__audited_and_listed(admin, client):
    make("rescue", email="r@bank.example")
    client.force_login(admin)
    response = client.post(
        reverse("break-glass-mark"), {"username": "rescue", "reason": "provider down plan"}
    )
    assert response.status_code == 302
    page = client.get(reverse("break-glass-list")).content.decode()
    assert "rescue" in page and "none" in page  # no second factor yet, said so
    account = BreakGlassAccount.objects.get(user__username="rescue")
    response = client.post(reverse("break-glass-unmark", args=[account.pk]), {"reason": "done"})
    assert response.status_code == 302
    assert not BreakGlassAccount.objects.exists()
    actions = list(AuditRecord.objects.values_list("action", flat=True))
    assert "break_glass_account.mark" in actions and "break_glass_account.unmark" in actions


def test_break_glass__over_the_limit__refused_nothing_written(admin, client, settings):
    settings.BREAK_GLASS_ACCOUNTS_MAX = 1
    make("one", break_glass=True)
    make("two")
    client.force_login(admin)
    response = client.post(reverse("break-glass-mark"), {"username": "two", "reason": "second"})
    assert response.status_code == 409
    assert "already 1 break-glass accounts" in response.content.decode()
    assert BreakGlassAccount.objects.count() == 1
    assert not AuditRecord.objects.filter(action="break_glass_account.mark").exists()


def test_break_glass__provider_account__refused(admin, client):
    make("pat", provider=True)
    client.force_login(admin)
    response = client.post(reverse("break-glass-mark"), {"username": "pat", "reason": "nope"})
    assert response.status_code == 409 and not BreakGlassAccount.objects.exists()


def test_break_glass__without_manage_grants_everywhere__forbidden(db, client):
    standard_roles()
    operator = user_with_grants("op", password=PASSWORD, operator=None)
    make("two")
    client.force_login(operator)
    response = client.post(reverse("break-glass-mark"), {"username": "two", "reason": "try it"})
    assert response.status_code == 403 and not BreakGlassAccount.objects.exists()


def test_break_glass__cannot_remove_last_factor_while_enforced(accounts, client, settings):
    settings.SSO_ENFORCED = "all"
    device = with_totp(accounts["break_glass"])
    sign_in(client, "bg")
    second_step(client, code_of(device))
    response = client.post(
        reverse("account-second-factor-remove"), {"kind": "totp", "id": device.pk}
    )
    assert response.status_code == 302
    assert TOTPDevice.objects.filter(pk=device.pk).exists()


def test_enrol_command__prints_secret_uri_and_codes_once(accounts, capsys):
    call_command("second_factor_enrol", "bg")
    out = capsys.readouterr().out
    assert "otpauth://totp/" in out and "Recovery codes" in out
    assert TOTPDevice.objects.filter(user=accounts["break_glass"], confirmed=True).count() == 1
    assert AuditRecord.objects.filter(action="second_factor.enrol").count() == 1


def test_reauthenticate__security_key_used_on_the_page__counts_once(accounts, client):
    device = with_totp(accounts["local"])
    sign_in(client, "lou")
    second_step(client, code_of(device))
    session = client.session
    session[REAUTH_KEY_AT] = time.time()
    session.save()
    first = client.post(reverse("reauthenticate"), {"reauth_password": PASSWORD})
    assert first.status_code == 302
    again = client.post(reverse("reauthenticate"), {"reauth_password": PASSWORD})
    assert again.status_code == 401


def test_account__provider_account__no_second_factor_here(accounts, client):
    client.force_login(accounts["provider"])
    page = client.get(reverse("account")).content.decode()
    assert "its own second factor applies" in page
    assert client.post(reverse("account-totp-start")).status_code == 404
    assert not TOTPDevice.objects.exists()
