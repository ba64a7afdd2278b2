"""Platform teams script onboarding (issue 32 item 6): a personal API token whose scope holds
`manage_runtime_tokens` creates runtime tokens (the secret in that answer only) and revokes
them through /api/v1/runtime-tokens/, audited as the token page does and naming the personal
token; without that capability, on every agent, it is refused (deny by default). A runtime
token that could never use a capability it asks for (agent-scoped `manifest:write`) is refused
by the one service, whatever asks: the API, the page, the command."""

from __future__ import annotations

import importlib
import json

import pytest
from django.apps import apps as django_apps
from django.test import Client

from console.accounts.personal_tokens import personal_token_create
from console.kernel.models import AccessLogEntry, AuditRecord, Role
from console.kernel.policy import STANDARD_ROLES, Capability
from strategies.catalog.models import Environment
from strategies.runtime.models import RuntimeToken
from tests.factories import (
    AgentFactory,
    EnvironmentFactory,
    RoleFactory,
    runtime_token,
    user_with_grants,
)

TOKENS = "/api/v1/runtime-tokens/"
AGENT = "assistant_returns"

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db):
    AgentFactory(key=AGENT)
    AgentFactory(key="assistant_lite")
    EnvironmentFactory(key="returns-test", position=1)
    return user_with_grants("platform", admin=None)


def personal(user, capabilities, **scope) -> Client:
    scope.setdefault("all_agents", not scope.get("agents"))
    _, secret = personal_token_create(
        user=user, name="onboarding-ci", capabilities=list(capabilities), **scope
    )
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def post(client, url, data):
    return client.post(url, data=json.dumps(data), content_type="application/json")


RUNTIME_TOKEN = {
    "name": "returns runtime",
    "environment": "returns-test",
    "capabilities": ["config:read", "manifest:write", "traces:write"],
}


def test_runtime_tokens_api__personal_token_with_capability__creates_shown_once_and_revokes(
    world, django_capture_on_commit_callbacks
):
    script = personal(world, [Capability.MANAGE_RUNTIME_TOKENS])

    created = post(script, TOKENS, RUNTIME_TOKEN)

    assert created.status_code == 201, created.content
    out = created.json()
    assert out["secret"].startswith("cc_rt_") and out["all_agents"] is True
    assert "no-store" in created["Cache-Control"]
    token = RuntimeToken.objects.get()
    audit = AuditRecord.objects.get(action="runtime_token.create")
    assert audit.actor_label.startswith("platform")
    assert audit.actor_token_label == "onboarding-ci"  # as the page's row, naming the token
    assert audit.after["capabilities"] == ["config:read", "manifest:write", "traces:write"]
    assert out["secret"] not in json.dumps([audit.before, audit.after])
    runtime = Client(HTTP_AUTHORIZATION=f"Bearer {out['secret']}")
    assert runtime.get(f"/api/v1/runtime/config/{AGENT}").status_code != 401
    # never shown again
    assert out["secret"] not in script.get(f"{TOKENS}{token.pk}/").content.decode()

    with django_capture_on_commit_callbacks(execute=True):  # the identity cache's tombstone
        revoked = post(script, f"{TOKENS}{token.pk}/revoke/", {"reason": "runtime retired"})

    assert revoked.status_code == 200, revoked.content
    assert revoked.json()["is_active"] is False
    audit = AuditRecord.objects.get(action="runtime_token.revoke")
    assert audit.actor_token_label == "onboarding-ci" and audit.after["reason"] == "runtime retired"
    assert runtime.get(f"/api/v1/runtime/config/{AGENT}").status_code == 401


@pytest.mark.parametrize(
    "capabilities, scope",
    [
        ([Capability.VIEW_CONFIG, Capability.MANAGE_TOKENS], {}),  # webhooks are not tokens
        ([Capability.MANAGE_RUNTIME_TOKENS], {"all_agents": False, "agents": [AGENT]}),
    ],
    ids=["without-the-capability", "for-some-agents-only"],
)
def test_runtime_tokens_api__personal_token_without_it_everywhere__403_nothing_written_logged(
    world, capabilities, scope
):
    runtime_token(Environment.objects.get(key="returns-test"))
    existing = RuntimeToken.objects.get()
    script = personal(world, capabilities, **scope)
    denials = AccessLogEntry.objects.filter(outcome="denied").count()
    audits = AuditRecord.objects.count()

    answers = [
        script.get(TOKENS),
        post(script, TOKENS, RUNTIME_TOKEN),
        post(script, f"{TOKENS}{existing.pk}/revoke/", {"reason": "not mine"}),
    ]

    assert [a.status_code for a in answers] == [403, 403, 403]
    assert RuntimeToken.objects.count() == 1 and RuntimeToken.objects.get().revoked_at is None
    assert AuditRecord.objects.count() == audits
    assert AccessLogEntry.objects.filter(outcome="denied").count() == denials + 3


def test_runtime_tokens_api__operator_role__403(world):
    """Ops edit and publish; runtime tokens (credentials that read every agent's config) stay
    with admins and the roles given the capability."""
    assert Capability.MANAGE_RUNTIME_TOKENS not in STANDARD_ROLES["operator"][1]
    assert Capability.MANAGE_RUNTIME_TOKENS in STANDARD_ROLES["admin"][1]
    ops = Client()
    ops.force_login(user_with_grants("ops", operator=AGENT))

    assert post(ops, TOKENS, RUNTIME_TOKEN).status_code == 403
    assert not RuntimeToken.objects.exists()


def test_runtime_tokens_api__agent_scoped_manifest_write__400_reason_nothing_written(world):
    script = personal(world, [Capability.MANAGE_RUNTIME_TOKENS])

    response = post(script, TOKENS, {**RUNTIME_TOKEN, "agents": [AGENT]})

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "manifest_needs_all_agents"
    assert "could never report one" in error["message"]
    [detail] = error["details"]
    assert (detail["path"], detail["code"]) == ("capabilities", "manifest_needs_all_agents")
    assert not RuntimeToken.objects.exists()
    assert not AuditRecord.objects.filter(action="runtime_token.create").exists()


def test_runtime_tokens_page__agent_scoped_manifest_write__refused_typed_input_kept(client, world):
    client.force_login(world)

    response = client.post(
        "/releases/tokens/",
        {
            "name": "returns runtime",
            "environment": "returns-test",
            "capabilities": ["config:read", "manifest:write"],
            "agents": [AGENT],
        },
    )

    assert response.status_code == 400
    text = response.content.decode()
    assert "manifest:write needs a token for every agent" in text
    assert 'value="returns runtime"' in text
    assert not RuntimeToken.objects.exists()


def test_migration__roles_and_personal_tokens_with_manage_tokens__gain_manage_runtime_tokens(world):
    migration = importlib.import_module("console.migrations.0009_manage_runtime_tokens_capability")
    webhooks_only = RoleFactory(name="webhook keeper", capabilities=["manage_tokens"])
    untouched = RoleFactory(name="reader", capabilities=["view_config"])
    hooks_token, _ = personal_token_create(
        user=world, name="hooks-ci", capabilities=["manage_tokens"], all_agents=True
    )
    reader_token, _ = personal_token_create(
        user=world, name="read-ci", capabilities=["view_config"], all_agents=True
    )

    migration.add(django_apps, None)

    webhooks_only.refresh_from_db()
    untouched.refresh_from_db()
    assert webhooks_only.capabilities == ["manage_tokens", "manage_runtime_tokens"]
    assert untouched.capabilities == ["view_config"]
    hooks_token.refresh_from_db()
    reader_token.refresh_from_db()
    assert hooks_token.capabilities == ["manage_tokens", "manage_runtime_tokens"]
    assert reader_token.capabilities == ["view_config"]
    assert "manage_runtime_tokens" in Role.objects.get(name="admin").capabilities
