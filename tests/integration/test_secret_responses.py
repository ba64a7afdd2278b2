"""Every answer that shows a secret once — a new personal token (account page, API), a new
runtime token (page, API), a new webhook's signing secret (page, API) — says
`Cache-Control: no-store`: no browser cache, back button or proxy keeps the secret."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse
from django.utils.cache import get_max_age

from tests.factories import AgentFactory, EnvironmentFactory, user_with_grants

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(client, settings):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True  # the webhook target below is loopback
    AgentFactory(key="assistant_professional")
    EnvironmentFactory(key="sg-test", position=1)
    client.force_login(user_with_grants("root", admin=None))
    return client


def assert_not_stored(response, secret: str):
    """The answer carries `secret` and forbids storing it."""
    assert response.status_code in (200, 201), response.content
    assert secret and secret in response.content.decode()
    directives = {d.strip() for d in response["Cache-Control"].split(",")}
    assert {"no-store", "private"} <= directives
    assert get_max_age(response) == 0


def post_json(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


def test_personal_token_api_create__no_store(admin):
    response = post_json(
        admin, "/api/v1/me/tokens/", {"name": "ci", "capabilities": ["view_config"]}
    )
    assert_not_stored(response, response.json()["token"])


def test_account_page_new_token__no_store(admin):
    response = admin.post(
        reverse("account"), {"name": "ci", "capabilities": ["view_config"], "expires_in_days": 90}
    )
    secret = response.context["created"][1]
    assert_not_stored(response, secret)


def test_runtime_token_api_create__no_store(admin):
    response = post_json(
        admin,
        "/api/v1/runtime-tokens/",
        {"name": "prod runner", "environment": "sg-test", "capabilities": ["config:read"]},
    )
    assert_not_stored(response, response.json()["secret"])


def test_runtime_token_page_new_token__no_store(admin):
    response = admin.post(
        reverse("token-list"),
        {"name": "prod runner", "environment": "sg-test", "capabilities": ["config:read"]},
    )
    assert_not_stored(response, response.context["created"][1])


def test_webhook_api_create__no_store(admin):
    response = post_json(
        admin, "/api/v1/webhooks/", {"environment": "sg-test", "url": "http://127.0.0.1:9/hook"}
    )
    assert_not_stored(response, response.json()["secret"])


def test_webhook_page_new_webhook__no_store(admin):
    response = admin.post(
        reverse("webhook-list"),
        {"environment": "sg-test", "url": "http://127.0.0.1:9/hook", "events": ["release.changed"]},
    )
    assert_not_stored(response, response.context["created"][1])
