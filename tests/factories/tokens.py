"""Runtime tokens, created through the service the console's token page uses."""

from __future__ import annotations

from strategies.runtime.models import RuntimeToken
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
