"""Login hardening: throttled failures (per username and per IP, in Redis), failures in the
access log, break-glass Django admin for superusers only and audited."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from console.models import AccessLogEntry, AuditRecord, Role

pytestmark = pytest.mark.django_db


@pytest.fixture
def person(db):
    """A user with a fresh name, so the Redis counters of other runs do not interfere."""
    name = f"p{uuid.uuid4().hex[:10]}"
    get_user_model().objects.create_user(name, password="right-password-1")
    return name


def fresh_ip() -> str:
    """A documentation-range IPv6 address of its own, so the per-IP counters left in Redis
    by earlier runs (15-minute window) do not interfere."""
    return f"2001:db8::{uuid.uuid4().hex[:4]}:{uuid.uuid4().hex[:4]}"


def sign_in(client, username, password, ip=None):
    return client.post(
        reverse("login"),
        {"username": username, "password": password},
        REMOTE_ADDR=ip or client.ip,
    )


@pytest.fixture
def client(client):
    client.ip = fresh_ip()
    return client


def test_login__five_failures__locked_even_with_right_password_clear_message(person, client):
    for _ in range(5):
        assert sign_in(client, person, "wrong").status_code == 200
    response = sign_in(client, person, "right-password-1")
    assert response.status_code == 200
    assert "Too many failed sign-ins" in response.content.decode()
    assert "_auth_user_id" not in client.session
    assert AccessLogEntry.objects.filter(target_id=person, outcome="denied").count() == 6
    assert AccessLogEntry.objects.filter(target_id=person, detail__why="locked").count() == 1


def test_login__four_failures_then_right_password__signed_in_and_counter_reset(person, client):
    for _ in range(4):
        sign_in(client, person, "wrong")
    assert sign_in(client, person, "right-password-1").status_code == 302
    allowed = AccessLogEntry.objects.get(action="auth.login", outcome="allowed")
    assert allowed.actor_label == person
    client.logout()
    for _ in range(4):
        sign_in(client, person, "wrong")
    assert sign_in(client, person, "right-password-1").status_code == 302  # counter was reset


def test_login__many_usernames_from_one_ip__ip_locked(db, client, settings):
    ip = fresh_ip()
    limit = settings.LOGIN_THROTTLE["max_failures_per_ip"]
    for n in range(limit):
        sign_in(client, f"guess{uuid.uuid4().hex[:6]}{n}", "wrong", ip=ip)
    response = sign_in(client, "anyone", "wrong", ip=ip)
    assert "Too many failed sign-ins" in response.content.decode()


def test_login__failed_attempt__access_log_names_username_and_ip(person, client):
    sign_in(client, person, "wrong", ip="2001:db8::77")
    row = AccessLogEntry.objects.get(action="auth.login")
    assert (row.outcome, row.target_label, row.ip) == ("denied", person, "2001:db8::77")


def test_session_settings__expire_at_browser_close_and_within_a_working_day(settings):
    assert settings.SESSION_EXPIRE_AT_BROWSER_CLOSE is True
    assert settings.SESSION_COOKIE_AGE <= 8 * 3600
    assert settings.SESSION_COOKIE_HTTPONLY is True


# --- Django admin: break-glass ----------------------------------------------------------------------
def test_django_admin__staff_without_superuser__not_let_in(db, client):
    staff = get_user_model().objects.create_user("staffer", password="x-pass-12345", is_staff=True)
    client.force_login(staff)
    response = client.get("/django-admin/console/role/")
    assert response.status_code == 302
    assert "/django-admin/login/" in response["Location"]


def test_django_admin__console_user_with_admin_grant__not_let_in(demo_world, client):
    client.force_login(get_user_model().objects.get(username="admin"))
    assert client.get("/django-admin/").status_code == 302


def test_django_admin__superuser_changes_role__audit_row_with_before_after(demo_world, client):
    root = get_user_model().objects.create_superuser("root", password="root-pass-12345")
    client.force_login(root)
    role = Role.objects.get(name="viewer")
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


def test_django_admin__superuser_deletes_grant__audit_row(demo_world, client):
    from console.models import Grant

    root = get_user_model().objects.create_superuser("root", password="root-pass-12345")
    client.force_login(root)
    grant = Grant.objects.get(user__username="support")
    response = client.post(f"/django-admin/console/grant/{grant.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    record = AuditRecord.objects.get(action="admin.delete")
    assert record.before["role"] == grant.role_id and record.agent_key == "assistant_professional"


def test_django_admin__audit_rows__read_only(demo_world, client):
    root = get_user_model().objects.create_superuser("root", password="root-pass-12345")
    client.force_login(root)
    assert client.get("/django-admin/console/auditrecord/add/").status_code == 403


def test_django_admin__login_failures__throttled_too(person, client):
    for _ in range(5):
        client.post(
            "/django-admin/login/",
            {"username": person, "password": "wrong"},
            REMOTE_ADDR=client.ip,
        )
    response = client.post(
        "/django-admin/login/",
        {"username": person, "password": "right-password-1"},
        REMOTE_ADDR=client.ip,
    )
    assert "Too many failed sign-ins" in response.content.decode()


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
