"""Runtime tokens, created through the service the console's token page uses."""

from __future__ import annotations

from django.utils import timezone

from strategies.runtime.auth import token_hash
from strategies.runtime.models import RuntimeInstance, RuntimeToken
from strategies.runtime.tokens import runtime_token_create


def runtime_token(environment, capabilities=RuntimeToken.CAPABILITIES, agents=()) -> str:
    """A token for `environment`'s runtime (every capability unless given, every agent unless
    `agents`); returns the secret, shown once."""
    _, secret = runtime_token_create(
        name=f"test {environment.key}",
        environment=environment,
        capabilities=list(capabilities),
        all_agents=not agents,
        agents=list(agents),
    )
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
