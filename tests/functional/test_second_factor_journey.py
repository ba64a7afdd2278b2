"""Browser (issue 33 item 4): a local account adds a second factor on its account page and
then signs in with it — (1) an authenticator app: the key read from the page, the code
computed as the app would; (2) a security key: Chromium's virtual authenticator (CDP
`WebAuthn`), registered, used at the sign-in's second step, then to confirm a sensitive
action with the password."""

from __future__ import annotations

import base64

import pytest
from django.contrib.auth import get_user_model
from django_otp.oath import totp
from django_otp_webauthn.models import WebAuthnCredential
from playwright.sync_api import expect

from console.kernel.models import AccessLogEntry, AuditRecord
from tests.functional.layout import LAPTOP, PHONE, layout_faults

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "lou-pass-12345"


@pytest.fixture
def lou(db):
    return get_user_model().objects.create_user("lou", password=PASSWORD)


def sign_in_with_password(page, live_server):
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", "lou")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")


def sign_out(page):
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url("**/login/")


def app_code(secret: str, *, ahead: int = 0) -> str:
    key = base64.b32decode(secret)
    return f"{totp(key, step=30, t0=0, digits=6, drift=ahead):06d}"


def test_authenticator_app__enrolled_on_account_page__then_asked_at_sign_in(page, live_server, lou):
    sign_in_with_password(page, live_server)
    page.wait_for_url(f"{live_server.url}/")
    page.goto(f"{live_server.url}/account/")
    page.click("#totp-start")
    page.wait_for_selector("[data-testid=totp-setup] svg")
    assert layout_faults(page, PHONE, LAPTOP) == {}
    secret = page.inner_text("#totp-secret").strip()
    page.fill("#id_totp_code", app_code(secret))
    page.get_by_role("button", name="Confirm").click()

    page.wait_for_selector("[data-testid=recovery-codes]")
    expect(page.locator("[data-testid=recovery-codes] li")).to_have_count(10)
    page.get_by_role("link", name="I have saved them").click()
    assert page.locator("[data-testid=factor-totp]").is_visible()

    sign_out(page)
    sign_in_with_password(page, live_server)
    page.wait_for_selector("[data-testid=second-factor]")
    assert page.url == f"{live_server.url}/login/second-factor/"
    page.fill("#id_code", app_code(secret, ahead=1))  # the next 30 s: never the one just used
    page.click("#second-factor-form button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    assert page.locator(".nav-user-name").inner_text() == "lou"
    assert AuditRecord.objects.filter(action="second_factor.enrol", actor_label="lou").exists()
    signed = AccessLogEntry.objects.filter(action="auth.login", outcome="allowed")
    assert signed.filter(detail__second_factor="totp").count() == 1


def test_security_key__registered_with_virtual_authenticator__then_signs_in_with_it(
    page, live_server, lou, settings
):
    settings.OTP_WEBAUTHN_RP_ID = "localhost"
    settings.OTP_WEBAUTHN_ALLOWED_ORIGINS = [live_server.url]
    cdp = page.context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
            }
        },
    )

    sign_in_with_password(page, live_server)
    page.wait_for_url(f"{live_server.url}/")
    page.goto(f"{live_server.url}/account/")
    page.click("#passkey-register-button")
    page.wait_for_function(
        "() => document.querySelector('#passkey-register-status-message')?.textContent.trim()"
    )
    assert WebAuthnCredential.objects.filter(user=lou, confirmed=True).count() == 1
    page.reload()
    assert page.locator("[data-testid=factor-webauthn]").is_visible()

    sign_out(page)
    sign_in_with_password(page, live_server)
    page.wait_for_selector("[data-testid=second-factor]")
    page.click("#passkey-verification-button")
    page.wait_for_url(f"{live_server.url}/")
    assert page.locator(".nav-user-name").inner_text() == "lou"
    signed = AccessLogEntry.objects.filter(action="auth.login", outcome="allowed")
    assert signed.filter(detail__second_factor="webauthn").count() == 1
    assert AuditRecord.objects.filter(action="second_factor.enrol").count() == 1

    # Confirming before a sensitive action: the key, then the password.
    page.goto(f"{live_server.url}/reauthenticate/?next=/account/")
    page.click("#passkey-verification-button")
    page.wait_for_selector("#key-confirmed", state="visible")
    page.fill("input[name=reauth_password]", PASSWORD)
    page.click("#reauth-form button[type=submit]")
    page.wait_for_url(f"{live_server.url}/account/")
    assert AccessLogEntry.objects.filter(
        action="auth.reauthenticate", outcome="allowed", actor_label="lou"
    ).exists()
