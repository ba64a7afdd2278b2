"""Demo traces (DEMO.md): req-92 … req-97 plus deterministic background traffic.

Every trace is a seed scenario run through the selection engine with the configuration live
in its environment at its time (``ConfigHistory``, read from the release history), so its
decisions, reasons and status are the engine's — and a version's traces are its own: v2's in
sg-test before v3 went live there, v3's after. They are stored through the runtime's ingest
path (the encoded batch is parsed and stored as that environment's runtime would send it),
which writes the health counters too; request ids are stable, so re-running stores nothing
new: the requests already stored are not run again.
"""

from __future__ import annotations

import bisect
import random
from collections import defaultdict
from datetime import timedelta

import msgspec
import orjson
from context_runtime import wire
from context_runtime.client import FRESH, STALE, ConfigSnapshot, Resolution
from django.db.models import Q
from django.utils import timezone

from console.demo import traffic
from console.demo.documents import ENVIRONMENTS
from strategies.catalog.models import Agent, Environment
from strategies.delivery.config import payload_render
from strategies.documents.models import Document
from strategies.releases.models import ReleaseEvent
from strategies.runtime.auth import RuntimeIdentity
from traces import ingest, services
from traces.models import Trace

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
# sg-test's testers send more around a release: over v3's hours there and as many before
# (v2's), so its version-health page compares the two on enough requests to tell them apart.
WATCH_ENVIRONMENT = "sg-test"
WATCH_COUNT = 240
WATCH_SEED = 7


class ConfigHistory:
    """What each environment's runtime held over the demo's history: from each move of a
    release of the demo agent on, the payload with the versions live then (RUNTIME_API §1),
    as the SDK's snapshot. The newest stretch is the payload rendered now (its shadow and
    rollout included); earlier ones are that payload with the profile and strategies of then
    and no shadow or rollout (the demo's history has none)."""

    def __init__(self):
        agent = Agent.objects.get(key=traffic.AGENT)
        events = (
            ReleaseEvent.objects.moves()
            .filter(release__document__agent=agent)
            .select_related("release__document", "release__environment", "to_version")
            .order_by("occurred_at", "id")
        )
        by_env: dict[str, list] = defaultdict(list)
        for event in events:
            by_env[event.release.environment.key].append(event)
        self.stretches: dict[str, list[tuple]] = {}
        for env in Environment.objects.filter(key__in=[key for key, *_ in ENVIRONMENTS]):
            now = orjson.loads(payload_render(agent=agent, environment=env).body)
            live: dict[str, tuple] = {}  # document key → (kind, version)
            stretches = []
            for event in by_env[env.key]:
                document = event.release.document
                live[document.key] = (document.kind, event.to_version)
                stretches.append((event.occurred_at, _payload_with(now, live)))
            if stretches:
                stretches[-1] = (stretches[-1][0], now)
            self.stretches[env.key] = [
                (since, ConfigSnapshot.from_payload(payload))
                for since, payload in stretches
                if traffic.STRATEGY in payload["strategies"]
            ]

    def at(self, env_key: str, when) -> ConfigSnapshot | None:
        """The configuration `env_key`'s runtime served the strategy with at `when` (None
        before the strategy was first live there)."""
        stretches = self.stretches.get(env_key, [])
        i = bisect.bisect_right([since for since, _ in stretches], when)
        return stretches[i - 1][1] if i else None


def _payload_with(now: dict, live: dict[str, tuple]) -> dict:
    payload = {**now, "shadow": {}, "rollouts": {}, "profile": None, "strategies": {}}
    for key, (kind, version) in live.items():
        entry = {"version": version.number, "body": version.body}
        if kind == Document.Kind.PROFILE:
            payload["profile"] = entry
        else:
            payload["strategies"][key] = entry
    return payload


def _run(
    configs: ConfigHistory, stored: frozenset, env_key: str, seed_scenario, **fields
) -> wire.Trace | None:
    """The trace of one planned request; None when nothing was live or it is stored already
    (a second load runs no request through the engine again)."""
    config = configs.at(env_key, fields["occurred_at"])
    if config is None or fields["request_id"] in stored:
        return None
    return traffic.run(seed_scenario, config=config, **fields)


def scenario(
    now, configs: ConfigHistory, stored: frozenset = frozenset()
) -> dict[str, list[wire.Trace]]:
    """The six traces support will paste, by environment."""
    by_env: dict[str, list[wire.Trace]] = defaultdict(list)
    for request_id, env_key, minutes_ago, seed_scenario, request in SUPPORT_TRACES:
        trace = _run(
            configs,
            stored,
            env_key,
            seed_scenario,
            request_id=request_id,
            occurred_at=now - timedelta(minutes=minutes_ago),
            request=request,
        )
        if trace is not None:
            by_env[env_key].append(trace)
    return by_env


def _resolution(rng: random.Random) -> Resolution:
    # Now and then the runtime could not reach the console and ran on its last good copy.
    if rng.random() < 0.03:
        return Resolution(STALE, round(rng.uniform(90, 900), 1), True)
    return Resolution(FRESH, round(rng.uniform(0, 30), 1), False)


def background(
    now, configs: ConfigHistory, stored: frozenset = frozenset()
) -> dict[str, list[wire.Trace]]:
    """Weighted-random seed scenarios over the last days, each run with what was live in its
    environment at its time; then sg-test's release watch. Ids and contents come from seeded
    random generators, so every run produces the same request ids."""
    rng = random.Random(BACKGROUND_SEED)
    keys, weights = list(ENVIRONMENT_WEIGHTS), list(ENVIRONMENT_WEIGHTS.values())
    planned = []
    for n in range(BACKGROUND_COUNT):
        (env_key,) = rng.choices(keys, weights=weights)
        seed_scenario, request = traffic.pick(rng, n)
        occurred_at = now - timedelta(minutes=60 + rng.randrange(BACKGROUND_DAYS * 24 * 60 - 60))
        planned.append((env_key, n, seed_scenario, request, occurred_at, _resolution(rng)))
    planned.extend(_watch(now, configs))
    by_env: dict[str, list[wire.Trace]] = defaultdict(list)
    for env_key, n, seed_scenario, request, occurred_at, resolution in planned:
        trace = _run(
            configs,
            stored,
            env_key,
            seed_scenario,
            request_id=f"bg-{env_key}-{n:04d}",
            occurred_at=occurred_at,
            request=request,
            resolution=resolution,
        )
        if trace is not None:
            by_env[env_key].append(trace)
    return by_env


def _watch(now, configs: ConfigHistory) -> list[tuple]:
    """sg-test's release watch: WATCH_COUNT requests spread over the hours since the newest
    strategy release there and as many hours before it (numbered after the background's)."""
    stretches = configs.stretches.get(WATCH_ENVIRONMENT, [])
    if len(stretches) < 2:
        return []
    span = now - stretches[-1][0]
    rng = random.Random(WATCH_SEED)
    minutes = int(2 * span.total_seconds() // 60) - 60
    planned = []
    for i in range(WATCH_COUNT):
        n = BACKGROUND_COUNT + i
        seed_scenario, request = traffic.pick(rng, n)
        occurred_at = now - timedelta(minutes=60 + rng.randrange(max(minutes, 1)))
        planned.append(
            (WATCH_ENVIRONMENT, n, seed_scenario, request, occurred_at, _resolution(rng))
        )
    return planned


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
    configs = ConfigHistory()
    stored = frozenset(
        Trace.objects.filter(
            Q(request_id__startswith="bg-")
            | Q(request_id__in=[request_id for request_id, *_ in SUPPORT_TRACES])
        ).values_list("request_id", flat=True)
    )
    accepted = 0
    for part in (scenario(now, configs, stored), background(now, configs, stored)):
        for env_key, traces in part.items():
            result = ingest_as_runtime(environments[env_key], traces)
            if result.rejected:
                raise RuntimeError(f"demo traces rejected: {result.as_dict()['rejected'][:3]}")
            accepted += result.accepted
    services.rollup_recent_hours(lookback_hours=24 * (BACKGROUND_DAYS + 1), now=now)
    if stdout is not None:
        stdout.write(f"Demo traces: {accepted} new, produced by the selection engine.")
