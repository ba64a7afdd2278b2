"""Runtime tokens, created through the service the console's token page uses."""

from __future__ import annotations

from django.utils import timezone

from strategies.runtime.auth import new_secret, token_hash
from strategies.runtime.models import RuntimeInstance, RuntimeToken
from strategies.runtime.tokens import runtime_token_create


def runtime_token(environment, capabilities=None, agents=()) -> str:
    """A token for `environment`'s runtime (every capability its scope can use unless given —
    manifest:write only for every agent —, every agent unless `agents`); returns the secret,
    shown once."""
    if capabilities is None:
        capabilities = [c for c in RuntimeToken.CAPABILITIES if not agents or c != "manifest:write"]
    _, secret = runtime_token_create(
        name=f"test {environment.key}",
        environment=environment,
        capabilities=list(capabilities),
        all_agents=not agents,
        agents=list(agents),
    )
    return secret


def legacy_runtime_token(environment, *, capabilities, agents) -> str:
    """A token made before the console refused scopes it could never use (an agent-scoped
    token with manifest:write): written as a row, since the service no longer makes one."""
    secret = new_secret()
    token = RuntimeToken.objects.create(
        name=f"legacy {environment.key}",
        environment=environment,
        capabilities=sorted(capabilities),
        all_agents=False,
        prefix=secret[:12],
        token_hash=token_hash(secret),
    )
    token.agents.set(agents)
    return secret


def bearer(secret: str) -> dict:
    """The header a runtime sends, as Django test client keywords."""
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def runtime_instances(
    *, environment, agent, token_secret: str, count: int, prefix: str = "pod", **fields
) -> list:
    """`count` runtime instances heard from now, as heartbeats would have left them (one bulk
    insert: the card's worlds have thousands); `fields` override any column (etag, transport,
    last_seen, sdk_version…)."""
    now = timezone.now()
    token = RuntimeToken.objects.get(token_hash=token_hash(token_secret))
    values = {
        "sdk_version": "0.2.0",
        "transport": "stream",
        "resolution": "fresh",
        "etag": "",
        "documents": {},
        "serving_since": now,
        "first_seen": now,
        "last_seen": now,
        **fields,
    }
    return RuntimeInstance.objects.bulk_create(
        RuntimeInstance(
            environment=environment,
            agent=agent,
            instance=f"{prefix}-{n}",
            token=token,
            **values,
        )
        for n in range(count)
    )
