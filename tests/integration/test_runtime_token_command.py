"""`manage.py runtime_token create|list|revoke`, and the token page's agent choice."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from strategies.runtime.models import RuntimeToken
from tests.factories import AgentFactory, EnvironmentFactory


@pytest.fixture
def envs(db):
    """sg-test and prod, and the agent a token may be scoped to."""
    AgentFactory(key="assistant_professional")
    return {key: EnvironmentFactory(key=key) for key in ("sg-test", "prod")}


def run(*args) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command("runtime_token", *args, stdout=out, stderr=err)
    return out.getvalue()


def test_runtime_token_create__prints_secret_once_stores_only_hash(envs):
    secret = run(
        "create",
        "--environment",
        "prod",
        "--agent",
        "assistant_professional",
        "--capability",
        "config:read",
        "--capability",
        "traces:write",
    ).strip()

    token = RuntimeToken.objects.get()
    assert secret.startswith("cc_rt_") and secret not in (token.token_hash, token.prefix)
    assert token.environment.key == "prod"
    assert sorted(token.capabilities) == ["config:read", "traces:write"]
    assert [a.key for a in token.agents.all()] == ["assistant_professional"]
    assert secret not in run("list")


def test_runtime_token_revoke__by_prefix__revoked(envs):
    run("create", "--environment", "sg-test")
    token = RuntimeToken.objects.get()

    run("revoke", token.prefix)

    token.refresh_from_db()
    assert token.revoked_at is not None
    assert "revoked" in run("list")


def test_runtime_token_create__agent_scoped_manifest_write__refused_nothing_made(envs):
    with pytest.raises(CommandError, match="manifest:write needs a token for every agent"):
        run("create", "--environment", "prod", "--agent", "assistant_professional",
            "--capability", "manifest:write")  # fmt: skip

    assert not RuntimeToken.objects.exists()


@pytest.mark.parametrize(
    "args",
    [
        ("create", "--environment", "nowhere"),
        ("create", "--environment", "prod", "--agent", "nobody"),
        ("create", "--environment", "prod", "--capability", "root"),
        ("revoke", "cc_rt_nothing"),
    ],
)
def test_runtime_token__bad_input__clear_error_nothing_written(envs, args):
    with pytest.raises(CommandError):
        run(*args)
    assert RuntimeToken.objects.filter(revoked_at__isnull=True).count() == 0


def test_runtime_token_page__agent_gone_since_the_form__400_not_an_all_agents_token(client, envs):
    """A ticked agent deleted before the form is sent is refused by name: the token is never
    made with fewer agents than asked for (none would have meant every agent)."""
    from tests.factories import user_with_grants

    client.force_login(user_with_grants("root", admin=None))
    response = client.post(
        "/releases/tokens/",
        {
            "name": "r",
            "environment": "sg-test",
            "capabilities": ["config:read"],
            "agents": ["gone"],
        },
    )
    assert response.status_code == 400
    assert "Unknown agent gone" in response.content.decode()
    assert not RuntimeToken.objects.exists()
