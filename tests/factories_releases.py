"""Builders for the releases tests: the demo environments and documents, users, tokens."""

from __future__ import annotations

import copy
from dataclasses import dataclass

from console.demo import data


@dataclass
class ReleaseWorld:
    agent: object
    envs: dict
    profile: dict  # version number → Version
    strategy: dict
    ops: object
    ops2: object
    admin: object


def release_world(make_user) -> ReleaseWorld:
    """Agents, environments and manifests of DEMO.md, profile v1 and strategy v1–v3 (frozen),
    nothing released yet; ops (operator), ops2 (operator + approve), admin (everything)."""
    from console.demo import documents as demo
    from console.demo.releases import demo_versions
    from console.models import Role
    from console.policy import Capability
    from strategies.catalog.models import Agent, Environment
    from strategies.delivery.config import cache_clear_all

    cache_clear_all()  # Redis outlives the test database between runs
    demo.load()
    Role.objects.get_or_create(
        name="approver",
        defaults={"capabilities": [Capability.VIEW_CONFIG.value, Capability.APPROVE.value]},
    )
    ops = make_user("ops", operator="assistant_professional")
    ops2 = make_user("ops2", operator="assistant_professional", approver="assistant_professional")
    admin = make_user("admin", admin=None)
    profile, strategy = demo_versions()
    return ReleaseWorld(
        agent=Agent.objects.get(key="assistant_professional"),
        envs={e.key: e for e in Environment.objects.all()},
        profile=profile,
        strategy=strategy,
        ops=ops,
        ops2=ops2,
        admin=admin,
    )


def runtime_token(environment, capabilities=("config:read", "manifest:write"), agents=()) -> str:
    from strategies.runtime.tokens import runtime_token_create

    _, secret = runtime_token_create(
        name=f"test {environment.key}",
        environment=environment,
        capabilities=list(capabilities),
        agents=list(agents),
    )
    return secret


def bearer(secret: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def manifest_without_handler() -> dict:
    body = copy.deepcopy(data.DEMO_MANIFEST)
    body["handlers"] = []
    return body


def profile_with_sensitive_on() -> dict:
    body = copy.deepcopy(data.BANK_PROFILE)
    body["sections"]["user_context"]["personal_particulars"] = True
    return body
