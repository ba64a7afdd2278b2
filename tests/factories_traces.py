"""Builders for trace payloads and runtime tokens (tests of the traces app)."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from strategies.catalog.models import Agent, Environment

INGEST_URL = "/api/v1/runtime/traces"


def world() -> dict:
    """Two agents and two environments, enough for scope tests."""
    agents = {
        key: Agent.objects.get_or_create(key=key, defaults={"name": key})[0]
        for key in ("assistant_professional", "assistant_lite")
    }
    environments = {
        key: Environment.objects.get_or_create(
            key=key, defaults={"name": key, "position": position}
        )[0]
        for position, key in enumerate(("sg-test", "prod"), start=1)
    }
    return {"agents": agents, "environments": environments}


def runtime_token(environment, *, capabilities=("traces:write",), agents=()) -> str:
    from strategies.runtime.tokens import runtime_token_create

    _, secret = runtime_token_create(
        name=f"test-{environment.key}",
        environment=environment,
        capabilities=list(capabilities),
        agents=list(agents),
    )
    return secret


def candidate(item="task_state:T9", **overrides) -> dict:
    data = {
        "id": item,
        "source": "task_state",
        "version": "4",
        "size": 310,
        "required": True,
        "decision": "selected",
        "reason": "required",
    }
    data.update(overrides)
    return data


def trace_payload(request_id="req-1", **overrides) -> dict:
    data = {
        "request_id": request_id,
        "agent": "assistant_professional",
        "occurred_at": datetime(2026, 11, 30, 9, 12, 44, tzinfo=UTC).isoformat(),
        "documents": {"profile": 7, "after_sales_consultation": 3},
        "strategy": "after_sales_consultation",
        "config_fallback": False,
        "task": {"id": "T9", "revision": 4},
        "principal": "shop-a/user-417",
        "model": {"name": "model-x", "adapter": "adapter-x", "context_window": 128000},
        "status": "ready",
        "degradation": None,
        "budget": {"max_input_tokens": 8000},
        "input_estimate": {"value": 6200, "unit": "token", "estimator": "adapter-x"},
        "sources": [{"id": "order:A1042", "version": "r12"}, {"id": "P7", "version": "v2"}],
        "candidates": [
            candidate(),
            candidate(
                "P7-v2",
                source="applicable_policy",
                version="v2",
                size=2100,
                bundle="policy-P7",
            ),
            candidate(
                "old-chat",
                source="recent_dialogue",
                version="e-311",
                size=900,
                required=False,
                decision="irrelevant",
                reason="older product introduction",
            ),
        ],
        "shadow": None,
        "snapshot": None,
    }
    data.update(overrides)
    return data


def post_batch(client, secret: str | None, traces=None, *, body: bytes | None = None, **headers):
    if body is None:
        body = orjson.dumps({"traces": traces or []})
    if secret is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {secret}"
    return client.post(INGEST_URL, data=body, content_type="application/json", **headers)
