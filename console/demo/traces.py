"""Demo traces (DEMO.md): req-92 … req-97 plus deterministic background traffic.

Every trace is a seed scenario run through the selection engine with the live configuration
of its environment (``console.demo.traffic``), so its decisions, reasons and status are the
engine's. They are stored through the runtime's ingest path (the encoded batch is parsed and
stored as that environment's runtime would send it); request ids are stable, so re-running
stores nothing new: every one comes back as a duplicate.
"""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import timedelta

import msgspec
import orjson
from context_runtime import wire
from context_runtime.client import FRESH, STALE, ConfigSnapshot, Resolution
from django.utils import timezone

from console.demo import traffic
from console.demo.documents import ENVIRONMENTS
from strategies.catalog.models import Agent, Environment
from strategies.delivery.config import payload_render
from strategies.runtime.auth import RuntimeIdentity
from traces import ingest, services

# DEMO.md's trace table: request_id, environment, minutes ago, scenario, request. The
# environment is chosen for what is live there: sg-test runs v3 (policy required, budget
# 8,000, general_policy_only for a missing order), prod runs v2.
SUPPORT_TRACES = (
    ("req-92", "sg-test", 42, traffic.CONSULTATION, traffic.SEED),
    ("req-93", "sg-test", 37, traffic.ORDER_TIMEOUT, traffic.SEED),
    ("req-94", "sg-test", 31, traffic.POLICY_TOO_LARGE, traffic.SEED),
    ("req-95", "sg-test", 24, traffic.POLICY_CONFLICT, traffic.SEED),
    ("req-96", "prod", 16, traffic.PERMISSION_UNAVAILABLE, traffic.SEED),
    (
        "req-97",
        "sg-test",
        9,
        traffic.CONSULTATION,
        traffic.Request(
            task="T11", revision=2, order="A1077", order_revision="r3", principal="shop-a/user-903"
        ),
    ),
)

# Background traffic: how many, over how many days, and how it is spread over environments.
BACKGROUND_COUNT = 360
BACKGROUND_DAYS = 7
BACKGROUND_SEED = 6
ENVIRONMENT_WEIGHTS = {"sg-test": 4, "bank-uat": 3, "prod": 3}


def live_configs() -> dict[str, ConfigSnapshot]:
    """The configuration of the demo agent in each environment where the strategy is live,
    as a runtime there would hold it now (the SDK's snapshot of the runtime payload,
    RUNTIME_API §1)."""
    agent = Agent.objects.get(key=traffic.AGENT)
    configs = {}
    for env in Environment.objects.filter(key__in=[key for key, *_ in ENVIRONMENTS]):
        config = orjson.loads(payload_render(agent=agent, environment=env).body)
        if traffic.STRATEGY in config["strategies"]:
            configs[env.key] = ConfigSnapshot.from_payload(config)
    return configs


def scenario(now, configs: dict[str, ConfigSnapshot]) -> dict[str, list[wire.Trace]]:
    """The six traces support will paste, by environment."""
    by_env: dict[str, list[wire.Trace]] = defaultdict(list)
    for request_id, env_key, minutes_ago, seed_scenario, request in SUPPORT_TRACES:
        if env_key not in configs:
            continue
        by_env[env_key].append(
            traffic.run(
                seed_scenario,
                config=configs[env_key],
                request_id=request_id,
                occurred_at=now - timedelta(minutes=minutes_ago),
                request=request,
            )
        )
    return by_env


def background(now, configs: dict[str, ConfigSnapshot]) -> dict[str, list[wire.Trace]]:
    """Weighted-random seed scenarios over the last days; ids and contents come from a
    seeded random generator, so every run produces the same request ids."""
    rng = random.Random(BACKGROUND_SEED)
    keys, weights = list(ENVIRONMENT_WEIGHTS), list(ENVIRONMENT_WEIGHTS.values())
    by_env: dict[str, list[wire.Trace]] = defaultdict(list)
    for n in range(BACKGROUND_COUNT):
        (env_key,) = rng.choices(keys, weights=weights)
        seed_scenario, request = traffic.pick(rng, n)
        occurred_at = now - timedelta(minutes=60 + rng.randrange(BACKGROUND_DAYS * 24 * 60 - 60))
        # Now and then the runtime could not reach the console and ran on its last good copy.
        if rng.random() < 0.03:
            resolution = Resolution(STALE, round(rng.uniform(90, 900), 1), True)
        else:
            resolution = Resolution(FRESH, round(rng.uniform(0, 30), 1), False)
        if env_key in configs:
            by_env[env_key].append(
                traffic.run(
                    seed_scenario,
                    config=configs[env_key],
                    request_id=f"bg-{env_key}-{n:04d}",
                    occurred_at=occurred_at,
                    request=request,
                    resolution=resolution,
                )
            )
    return by_env


def demo_identity(environment, name: str, capability: str) -> RuntimeIdentity:
    """What the demo loader stores as: a runtime of `environment` with one capability."""
    return RuntimeIdentity(
        token_id=0,
        name=f"{name} ({environment.key})",
        environment_id=environment.pk,
        environment_key=environment.key,
        all_agents=True,
        agent_keys=frozenset(),
        capabilities=frozenset({capability}),
    )


def ingest_as_runtime(environment, traces: list[wire.Trace]) -> services.IngestResult:
    """Store traces through the runtime's ingest path, as that environment's runtime would
    send them (encoded batches, parsed and stored with a traces:write identity there)."""
    identity = demo_identity(environment, "demo loader", "traces:write")
    total = services.IngestResult()
    for start in range(0, len(traces), wire.MAX_TRACES_PER_BATCH):
        chunk = traces[start : start + wire.MAX_TRACES_PER_BATCH]
        batch = ingest.parse_batch(msgspec.json.encode({"traces": chunk}))
        result = services.trace_batch_store(identity=identity, batch=batch)
        total.accepted += result.accepted
        total.duplicates += result.duplicates
        total.rejected += result.rejected
    return total


def load(*, stdout=None) -> None:
    now = timezone.now().replace(microsecond=0)
    environments = {e.key: e for e in Environment.objects.all()}
    configs = live_configs()
    accepted = 0
    for part in (scenario(now, configs), background(now, configs)):
        for env_key, traces in part.items():
            result = ingest_as_runtime(environments[env_key], traces)
            if result.rejected:
                raise RuntimeError(f"demo traces rejected: {result.as_dict()['rejected'][:3]}")
            accepted += result.accepted
    services.rollup_recent_hours(lookback_hours=24 * (BACKGROUND_DAYS + 1), now=now)
    if stdout is not None:
        stdout.write(f"Demo traces: {accepted} new, produced by the selection engine.")
