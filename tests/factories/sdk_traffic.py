"""Traffic as a runtime built on the SDK makes it: fetch the agent's configuration from the
console's runtime endpoint, run each request of the demo's scenarios through the selection
engine — the version ``context_runtime.rollouts.serve`` gives (a rollout's arm, or live),
and the shadow beside it through ``replay.shadow_run`` (``console.demo.traffic.run``) — and post the traces to the ingest endpoint in batches."""

from __future__ import annotations

import random
from datetime import datetime

import msgspec
from context_runtime import wire
from context_runtime.client import ConfigSnapshot
from django.test import Client
from django.utils import timezone

from console.demo import traffic
from tests.factories.tokens import bearer
from tests.factories.traces import post_batch

CONFIG_URL = "/api/v1/runtime/config/" + traffic.AGENT


def runtime_config(client, secret: str) -> dict:
    """The agent's configuration as the environment's runtime fetches it."""
    response = client.get(CONFIG_URL, **bearer(secret))
    assert response.status_code == 200, response.content
    return response.json()


def sdk_traffic(
    secret: str,
    *,
    count: int,
    prefix: str,
    seed: int = 22,
    occurred_at: datetime | None = None,
    client=None,
) -> list[wire.Trace]:
    """``count`` requests of the demo's weighted scenarios (the same ones for the same
    ``seed``), run by the engine with the configuration served now, stored through the
    ingest endpoint; request ids ``<prefix><n>``. Returns the traces sent."""
    client = client or Client()
    config = ConfigSnapshot.from_payload(runtime_config(client, secret))
    rng = random.Random(seed)
    at = occurred_at or timezone.now()
    traces = []
    for n in range(count):
        scenario, request = traffic.pick(rng, n)
        traces.append(
            traffic.run(
                scenario,
                config=config,
                request_id=f"{prefix}{n}",
                occurred_at=at,
                request=request,
            )
        )
    for start in range(0, count, 200):
        body = msgspec.json.encode({"traces": traces[start : start + 200]})
        response = post_batch(client, secret, body=body)
        assert response.status_code in (200, 202), response.content
        assert response.json()["rejected"] == [], response.content
    return traces
