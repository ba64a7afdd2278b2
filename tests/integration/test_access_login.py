"""Login hardening: sign-in lockout per username and address (django-axes, in PostgreSQL),
unlock by an admin from the Access area, every attempt in the access log, break-glass Django
admin for superusers only and audited."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from console.kernel.models import AccessLogEntry, AuditRecord
from tests.factories import AgentFactory, standard_roles, user_with_grants

pytestmark = pytest.mark.django_db

HOME = "2001:db8::10"  # documentation addresses
CAFE = "2001:db8::20"
LOCKED = "Too many failed sign-ins for this account from this address"


@pytest.fixture
def person(db):
    get_user_model().objects.create_user("dana", password="right-password-1")
    return "dana"


def sign_in(client, username, password, ip=HOME, **extra):
    return client.post(
        reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=ip, **extra
    )


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def lock_out(client, username, ip=HOME, **extra):
    """Five wrong passwords: the fifth answers with the lockout page."""
    for _ in range(4):
        assert LOCKED not in sign_in(client, username, "wrong", ip, **extra).content.decode()
    return sign_in(client, username, "wrong", ip, **extra)


def test_login__five_wrong_passwords__locked_even_with_right_password_username_kept(person, client):
    fifth = lock_out(client, person)
    assert fifth.status_code == 429
    response = sign_in(client, person, "right-password-1")
    page = response.content.decode()
    assert response.status_code == 429
    assert LOCKED + ". Wait 15 minutes, or ask an admin to unlock it." in page
    assert 'value="dana"' in page  # the username field keeps what was typed
    assert not signed_in(client)
    denied = AccessLogEntry.objects.filter(action="auth.login", target_id=person, outcome="denied")
    assert denied.filter(detail__why="invalid_credentials").count() == 5
    assert denied.filter(detail__why="locked").count() == 1


def test_login__locked_from_one_address__same_username_signs_in_from_another(person, client):
    lock_out(client, person, ip=HOME)
    response = sign_in(client, person, "right-password-1", ip=CAFE)
    assert response.status_code == 302
    assert signed_in(client)
    client.logout()
    assert sign_in(client, person, "right-password-1", ip=HOME).status_code == 429


def test_login__many_wrong_passwords_for_someone_else__admin_still_signs_in(db, client):
    """Nobody can lock an admin out from everywhere: guesses from one address lock only
    that address, and other usernames from it are not affected."""
    get_user_model().objects.create_user("boss", password="boss-pass-12345")
    lock_out(client, "boss", ip=CAFE)
    assert sign_in(client, "boss", "boss-pass-12345", ip=HOME).status_code == 302
    client.logout()
    get_user_model().objects.create_user("colleague", password="colleague-pass-1")
    assert sign_in(client, "colleague", "colleague-pass-1", ip=CAFE).status_code == 302


def test_login__four_failures_then_right_password__signed_in_and_failures_forgotten(person, client):
    for _ in range(4):
        sign_in(client, person, "wrong")
    assert sign_in(client, person, "right-password-1").status_code == 302
    allowed = AccessLogEntry.objects.get(action="auth.login", outcome="allowed")
    assert allowed.actor_label == person
    client.logout()
    for _ in range(4):
        sign_in(client, person, "wrong")
    assert sign_in(client, person, "right-password-1").status_code == 302  # count restarted


def test_login__behind_a_proxy__locked_by_the_forwarded_client_address(person, client, settings):
    """Axes asks console.kernel.request_context.client_ip, like the access log: behind one trusted
    proxy, the address it forwarded, not the proxy's own address."""
    settings.TRUSTED_PROXY_HOPS = 1
    lock_out(client, person, ip="10.0.0.1", HTTP_X_FORWARDED_FOR=HOME)
    row = AccessLogEntry.objects.filter(action="auth.login").latest("id")
    assert row.ip == HOME
    assert (
        sign_in(client, person, "right-password-1", "10.0.0.1", HTTP_X_FORWARDED_FOR=CAFE)
    ).status_code == 302


def test_login__redis_down__lockout_still_works(person, client, settings):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:9/0",  # nothing listens there
            "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2},
        }
    }
    assert lock_out(client, person).status_code == 429
    assert sign_in(client, person, "right-password-1").status_code == 429


def test_login__failed_attempt__access_log_names_username_and_ip(person, client):
    sign_in(client, person, "wrong", ip="2001:db8::77")
    row = AccessLogEntry.objects.get(action="auth.login")
    assert (row.outcome, row.target_label, row.ip) == ("denied", person, "2001:db8::77")
    assert row.detail == {"why": "invalid_credentials"}


# --- locked sign-ins: the admin's page ---------------------------------------------------------
@pytest.fixture
def admin_client(make_user):
    from django.test import Client

    other = Client()
    other.force_login(make_user("boss", admin=None))
    return other


def test_login_locks_page__nobody_locked__says_so(admin_client):
    response = admin_client.get(reverse("login-lock-list"))
    assert response.status_code == 200
    assert "Nobody is locked out." in response.content.decode()


def test_login_locks_page__a_locked_pair__listed_with_address_and_failures(
    person, client, admin_client
):
    lock_out(client, person, ip=HOME)
    sign_in(client, person, "wrong", ip=CAFE)  # one failure elsewhere: not locked
    response = admin_client.get(reverse("login-lock-list"))
    rows = response.context["locks"]
    assert [(r["username"], r["ip_address"], r["failures"]) for r in rows] == [(person, HOME, 5)]
    assert "Unlock…" in response.content.decode()


def test_login_locks_page__lockout_rule__stated_from_the_axes_settings(admin_client, settings):
    default = admin_client.get(reverse("login-lock-list")).content.decode()
    assert "After 5 failed sign-ins within 15 minutes" in default
    assert "for 15 minutes." in default

    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(minutes=40)
    page = admin_client.get(reverse("login-lock-list")).content.decode()

    assert "After 3 failed sign-ins within 40 minutes" in page
    assert "for 40 minutes." in page
    assert "15 minutes" not in page


def test_login_lock_clear__admin_with_reason__audited_and_user_signs_in_at_once(
    person, client, admin_client
):
    lock_out(client, person, ip=HOME)
    response = admin_client.post(
        reverse("login-lock-clear"),
        {"username": person, "ip_address": HOME, "reason": "Confirmed by phone"},
        follow=True,
    )
    assert "Unlocked: dana can sign in from 2001:db8::10 again." in response.content.decode()
    assert "Nobody is locked out." in response.content.decode()
    record = AuditRecord.objects.get(action="auth.unlock")
    assert (record.actor_label, record.target_label) == ("boss", person)
    assert record.before == {"username": person, "ip_address": HOME, "failures": 5}
    assert record.after == {"reason": "Confirmed by phone"}
    assert sign_in(client, person, "right-password-1", ip=HOME).status_code == 302


def test_login_lock_clear__without_reason__refused_and_still_locked(person, client, admin_client):
    lock_out(client, person, ip=HOME)
    response = admin_client.post(
        reverse("login-lock-clear"), {"username": person, "ip_address": HOME}, follow=True
    )
    assert "Give a reason" in response.content.decode()
    assert not AuditRecord.objects.filter(action="auth.unlock").exists()
    assert sign_in(client, person, "right-password-1", ip=HOME).status_code == 429


def test_login_lock_clear__only_that_address__other_locks_stay(person, client, admin_client):
    lock_out(client, person, ip=HOME)
    lock_out(client, person, ip=CAFE)
    admin_client.post(
        reverse("login-lock-clear"),
        {"username": person, "ip_address": CAFE, "reason": "It was me at the cafe"},
    )
    assert sign_in(client, person, "right-password-1", ip=HOME).status_code == 429
    assert sign_in(client, person, "right-password-1", ip=CAFE).status_code == 302


def test_login_lock_clear__not_an_address__refused_without_error(person, admin_client):
    response = admin_client.post(
        reverse("login-lock-clear"),
        {"username": person, "ip_address": "not-an-ip", "reason": "trying"},
        follow=True,
    )
    assert response.status_code == 200
    assert "Not an IP address." in response.content.decode()


@pytest.mark.parametrize(
    "grants",
    [{"operator": None}, {"admin": "assistant_professional"}],
    ids=["operator_everywhere", "admin_of_one_agent"],
)
def test_login_locks_page__without_manage_grants_everywhere__refused(
    make_user, person, client, grants
):
    AgentFactory(key="assistant_professional")
    lock_out(client, person, ip=HOME)
    client.force_login(make_user("someone", **grants))
    assert client.get(reverse("login-lock-list")).status_code == 403
    response = client.post(
        reverse("login-lock-clear"), {"username": person, "ip_address": HOME, "reason": "let in"}
    )
    assert response.status_code == 403
    client.logout()
    assert sign_in(client, person, "right-password-1", ip=HOME).status_code == 429


def test_access_overview__console_admin__links_to_locked_sign_ins(admin_client):
    page = admin_client.get(reverse("access-overview")).content.decode()
    assert reverse("login-lock-list") in page


def test_session_settings__expire_at_browser_close_and_within_the_absolute_lifetime(settings):
    assert settings.SESSION_EXPIRE_AT_BROWSER_CLOSE is True
    # The stored session and its cookie outlive no session: the absolute lifetime bounds both
    # (the idle and absolute limits themselves are tests/integration/test_sessions.py's).
    assert settings.SESSION_COOKIE_AGE == settings.SESSION_ABSOLUTE_HOURS * 3600 <= 12 * 3600
    assert settings.SESSION_COOKIE_HTTPONLY is True


# --- Django admin: break-glass ----------------------------------------------------------------------
def test_django_admin__staff_without_superuser__not_let_in(db, client):
    staff = get_user_model().objects.create_user("staffer", password="x-pass-12345", is_staff=True)
    client.force_login(staff)
    response = client.get("/django-admin/console/role/")
    assert response.status_code == 302
    assert "/django-admin/login/" in response["Location"]


def test_django_admin__console_user_with_admin_grant__not_let_in(db, client):
    client.force_login(user_with_grants("admin", admin=None))
    assert client.get("/django-admin/").status_code == 302


def test_django_admin__superuser_changes_role__audit_row_with_before_after(db, client):
    role = standard_roles()["viewer"]
    root = get_user_model().objects.create_superuser("root", password="root-pass-12345")
    client.force_login(root)
    response = client.post(
        f"/django-admin/console/role/{role.pk}/change/",
        {
            "name": "viewer",
            "description": "Break-glass edit",
            "capabilities": "view_config,view_traces",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    record = AuditRecord.objects.get(action="admin.change")
    assert record.actor_label == "root"
    assert {c["path"] for c in record.changes} == {"description", "capabilities"}


def test_django_admin__superuser_deletes_grant__audit_row(db, client):
    from console.kernel.models import Grant

    user_with_grants("support", support=AgentFactory(key="assistant_professional"))
    root = get_user_model().objects.create_superuser("root", password="root-pass-12345")
    client.force_login(root)
    grant = Grant.objects.get(user__username="support")
    response = client.post(f"/django-admin/console/grant/{grant.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    record = AuditRecord.objects.get(action="admin.delete")
    assert record.before["role"] == grant.role_id and record.agent_key == "assistant_professional"


def test_django_admin__audit_rows__read_only(db, client):
    root = get_user_model().objects.create_superuser("root", password="root-pass-12345")
    client.force_login(root)
    assert client.get("/django-admin/console/auditrecord/add/").status_code == 403


def test_django_admin__login_failures__locked_too(person, client):
    for _ in range(5):
        client.post(
            "/django-admin/login/", {"username": person, "password": "wrong"}, REMOTE_ADDR=HOME
        )
    response = client.post(
        "/django-admin/login/",
        {"username": person, "password": "right-password-1"},
        REMOTE_ADDR=HOME,
    )
    assert response.status_code == 429
    assert LOCKED in response.content.decode()


def test_django_admin__superuser_sets_a_password__audited_without_the_password(db, client):
    root = get_user_model().objects.create_superuser("root", password="root-pass-12345")
    target = get_user_model().objects.create_user("someone", password="old-pass-12345")
    client.force_login(root)
    response = client.post(
        f"/django-admin/auth/user/{target.pk}/password/",
        {
            "password1": "N3w-long-passphrase",
            "password2": "N3w-long-passphrase",
            "usable_password": "true",
        },
    )
    assert response.status_code == 302
    record = AuditRecord.objects.get(action="admin.password_change")
    assert record.target_label == "someone" and record.actor_label == "root"
    assert "N3w-long-passphrase" not in str(record.before) + str(record.after)
