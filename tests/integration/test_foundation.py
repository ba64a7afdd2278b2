"""The foundation: configuration, health, login wall, API skeleton, real Celery worker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.urls import reverse

from strategies.catalog import services as catalog_services
from tests.factories import (
    AgentFactory,
    DocumentFactory,
    EnvironmentFactory,
    frozen_versions,
    manifest_body,
    publish,
    strategy_bodies_v1_to_v3,
    user_with_grants,
)

ROOT = Path(__file__).resolve().parents[2]


def run_manage(*args: str, **env_overrides: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env.update({k: v for k, v in env_overrides.items() if v is not None})
    for key in [k for k, v in env_overrides.items() if v is None]:
        env.pop(key, None)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_production_settings__secret_key_missing__one_line_names_it():
    result = run_manage("check", CONSOLE_ENV="production", SECRET_KEY=None)
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "configuration error: SECRET_KEY is required in production (CONSOLE_ENV=production)"
    )


def test_database_url__not_postgres__one_line_names_it():
    result = run_manage("check", DATABASE_URL="sqlite:///x.db")
    assert result.returncode == 2
    assert "DATABASE_URL must be a PostgreSQL URL" in result.stderr
    assert "Traceback" not in result.stderr


def test_database_url__unreachable__one_line_not_traceback():
    result = run_manage(
        "migrate", "--check", DATABASE_URL="postgresql://postgres@127.0.0.1:1/nowhere"
    )
    assert result.returncode == 2
    assert result.stderr.startswith(
        "configuration error: cannot use the database from DATABASE_URL"
    )
    assert "Traceback" not in result.stderr


PRODUCTION_VALUES = {
    "CONSOLE_ENV": "production",
    "SECRET_KEY": "x" * 64 + "-long-random-secret-for-the-check-only",
    "ALLOWED_HOSTS": "console.example.com",
    "SNAPSHOT_KEYS": "ZGV2LW9ubHktc25hcHNob3Qta2V5LW5vdC1zZWNyZXQ=",
}


def _database_url_as(role: str | None = None) -> str:
    """The test database's DATABASE_URL, signed in as `role` (default: the tests' own,
    a superuser)."""
    from django.db import connection

    from tests.engines import database_url

    if role is None:
        return database_url()
    return database_url({**connection.settings_dict, "USER": role, "PASSWORD": ""})


def test_production_settings__all_values_set__check_deploy_is_clean(login_role):
    result = run_manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DATABASE_URL=_database_url_as(login_role()),
        **PRODUCTION_VALUES,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_fast_password_hasher__ignored_in_production__real_people_get_pbkdf2():
    # The suite sets CONSOLE_FAST_PASSWORD_HASHER for every process it starts (tests/conftest.py);
    # a production process started with it must still hash with Django's strong default.
    show = "from django.conf import settings; print(settings.PASSWORD_HASHERS[0])"
    development = run_manage("shell", "-c", show)
    production = run_manage("shell", "-c", show, **PRODUCTION_VALUES)
    assert development.stdout.split()[-1] == "django.contrib.auth.hashers.MD5PasswordHasher"
    assert production.returncode == 0, production.stderr
    assert production.stdout.split()[-1] == "django.contrib.auth.hashers.PBKDF2PasswordHasher"


def test_check_deploy__superuser_database_role__refused_naming_why(transactional_db):
    result = run_manage("check", "--deploy", DATABASE_URL=_database_url_as(), **PRODUCTION_VALUES)
    assert result.returncode == 1
    assert "console.E101" in result.stderr and "is a superuser" in result.stderr
    assert "Database privileges" in result.stderr  # the hint says where the two roles are


def test_check_deploy__role_in_the_tables_owner_role__refused_naming_the_tables(login_role):
    from django.db import connection

    owner = connection.settings_dict["USER"] or "postgres"  # who ran the migrations
    result = run_manage(
        "check",
        "--deploy",
        DATABASE_URL=_database_url_as(login_role(member_of=owner)),
        **PRODUCTION_VALUES,
    )
    assert result.returncode == 1
    assert "console.E101" in result.stderr
    assert (
        "console_auditrecord" in result.stderr and "can disable or drop the guards" in result.stderr
    )


@pytest.mark.parametrize(
    "start",
    [
        ["-c", "import console.wsgi"],
        ["-m", "celery", "-A", "console", "worker", "--pool=solo", "-Q", "never-consumed"],
        ["-m", "celery", "-A", "console", "beat", "-s", "/tmp/never-scheduled"],
    ],
    ids=["web", "worker", "beat"],
)
def test_production_start__superuser_database_role__refused(transactional_db, start):
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env.update(PRODUCTION_VALUES, DATABASE_URL=_database_url_as())
    result = subprocess.run(
        [sys.executable, *start], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "is a superuser" in result.stdout + result.stderr


def test_healthz__database_and_broker_up__200(client, db):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["checks"]["database"]["ok"] is True
    assert response.json()["checks"]["broker"]["ok"] is True


def test_healthz__broker_stopped__503_names_broker_and_pages_still_render(
    client, db, settings, make_user
):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["failed"] == ["broker"]
    client.force_login(make_user("ops", operator=None))
    assert client.get(reverse("dashboard")).status_code == 200


def test_pages__anonymous__redirected_to_login(client, db):
    response = client.get(reverse("dashboard"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_api_root__anonymous__403_in_error_shape(client, db):
    response = client.get("/api/v1/")
    assert response.status_code in (401, 403)
    assert response.json()["error"]["code"] == "not_authenticated"


def test_api_root__logged_in__links_schema_and_docs(client, make_user):
    client.force_login(make_user("viewer1", viewer=None))
    body = client.get("/api/v1/").json()
    assert body["links"]["schema"].endswith("/api/schema/")
    assert client.get("/api/schema/").status_code == 200
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    assert b"cdn" not in docs.content.lower()  # Swagger UI from local assets


def test_dashboard__user_without_grants__sees_no_agent(client, make_user):
    AgentFactory(key="assistant_professional")
    client.force_login(make_user("nobody"))
    page = client.get(reverse("dashboard")).content.decode()
    assert "assistant_professional" not in page
    assert "No agents to show yet" in page


def test_demo_loader__run_twice__same_world(demo_world):
    from django.core.management import call_command

    from console.kernel.models import Grant
    from strategies.catalog.models import Agent, Environment

    counts = (Agent.objects.count(), Environment.objects.count(), Grant.objects.count())
    call_command("load_demo", "--quiet-logins", stdout=open(os.devnull, "w"))  # noqa: SIM115
    assert (Agent.objects.count(), Environment.objects.count(), Grant.objects.count()) == counts
    assert list(Environment.objects.values_list("key", flat=True)) == [
        "sg-test",
        "bank-uat",
        "prod",
    ]
    assert Environment.objects.get(key="prod").protected


@pytest.mark.worker
def test_celery__task_through_real_broker__worker_process_writes_database(celery_worker_process):
    from console.models import WorkerHeartbeat
    from console.tasks import heartbeat

    heartbeat.apply_async(args=["foundation-test"], queue=celery_worker_process)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if WorkerHeartbeat.objects.filter(marker="foundation-test").exists():
            break
        time.sleep(0.2)
    assert WorkerHeartbeat.objects.filter(marker="foundation-test").exists()


def test_navigation__viewer__shows_only_pages_they_can_use(client, db):
    client.force_login(user_with_grants("viewer", viewer=AgentFactory(key="assistant_lite")))
    page = client.get(reverse("dashboard")).content.decode()
    assert 'href="/agents/"' in page
    assert 'href="/audit/"' not in page and 'href="/access/"' not in page
    assert 'id="request-search"' not in page  # no trace capability anywhere


def test_navigation__admin__shows_audit_access_and_search(client, db):
    AgentFactory(key="assistant_professional")
    client.force_login(user_with_grants("admin", admin=None))
    page = client.get(reverse("dashboard")).content.decode()
    assert 'href="/audit/"' in page and 'href="/access/"' in page
    assert 'id="request-search"' in page


def test_agent_tabs__support_and_ops__tabs_follow_their_capabilities(client, db):
    agent = AgentFactory(key="assistant_professional")
    DocumentFactory(agent=agent, profile=True)  # the agent's page shows its profile
    client.force_login(user_with_grants("support", support=agent))
    page = client.get("/agents/assistant_professional/").content.decode()
    assert "/traces/?agent=assistant_professional" in page
    assert "/access/?agent=assistant_professional" not in page
    client.force_login(user_with_grants("admin", admin=None))
    page = client.get("/agents/assistant_professional/").content.decode()
    assert "/access/?agent=assistant_professional" in page
    assert "/releases/?agent=assistant_professional" in page


def test_dashboard__runtime_drops_a_handler__health_warning_names_the_live_version(client, db):
    agent = AgentFactory(key="assistant_professional")
    ops = user_with_grants("ops", operator=agent)
    sg_test = EnvironmentFactory(key="sg-test", manifest=manifest_body())
    strategy = frozen_versions(
        DocumentFactory(agent=agent, key="after_sales_consultation"), strategy_bodies_v1_to_v3()
    )
    publish(strategy[3], sg_test, actor=ops)  # v3 falls back to general_policy_only
    client.force_login(ops)
    assert 'data-health="manifest"' not in client.get(reverse("dashboard")).content.decode()
    # Given sg-test's runtime reports a manifest without general_policy_only (v3 live there)
    catalog_services.manifest_record(environment=sg_test, body=manifest_body(handlers=[]))
    page = client.get(reverse("dashboard")).content.decode()
    warning = page.split('data-health="manifest"')[1].split("</div>")[0]
    assert "after_sales_consultation v3 in sg-test" in warning
    assert "general_policy_only" in warning
