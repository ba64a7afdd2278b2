"""Demo traces (DEMO.md): req-92 … req-97 plus deterministic background traffic.

Written through the real ingest path (parse → COPY), so re-running stores nothing new:
every request_id comes back as a duplicate.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import orjson
from context_runtime import wire
from django.utils import timezone

from strategies.catalog.models import Environment
from strategies.runtime.auth import RuntimeIdentity
from traces import ingest, services

STRATEGY = "after_sales_consultation"
MODEL = {"name": "model-x", "adapter": "adapter-x", "context_window": 128000}


def _c(item, source, version, size, decision, reason, *, required=False, bundle=None) -> dict:
    candidate = {
        "id": item,
        "source": source,
        "version": version,
        "size": size,
        "required": required,
        "decision": decision,
        "reason": reason,
    }
    if bundle:
        candidate["bundle"] = bundle
    return candidate


def _trace(request_id, env, at, *, version=3, status="ready", estimate, candidates, **extra):
    trace = {
        "request_id": request_id,
        "agent": "assistant_professional",
        "environment": env,
        "occurred_at": at.isoformat(),
        "documents": {"profile": 1, STRATEGY: version},
        "strategy": STRATEGY,
        "config_fallback": False,
        "principal": "shop-a/user-417",
        "model": MODEL,
        "status": status,
        "degradation": None,
        "budget": {
            "max_input_tokens": 8000 if version == 3 else 6000,
            "reserve_output_tokens": 1000,
        },
        "input_estimate": {"value": estimate, "unit": "token", "estimator": "adapter-x"},
        "candidates": candidates,
        "shadow": None,
        "snapshot": None,
    }
    trace.update(extra)
    return trace


def _sources(order: str, revision: str) -> list[dict]:
    """Source versions as document 003 lists them: order revision, policy, permission epoch."""
    return [
        {"id": f"order:{order}", "version": revision},
        {"id": "P7", "version": "v2"},
        {"id": "permission", "version": "epoch-7"},
    ]


def _snapshot(question: str, evidence: list[str]) -> dict:
    return {
        "model": "model-x",
        "messages": [
            {
                "role": "system",
                "content": "You are the bank's after-sales assistant. Cite evidence.",
            },
            {"role": "user", "content": "<evidence>" + " | ".join(evidence) + "</evidence>"},
            {"role": "model", "content": "Understood."},
            {"role": "user", "content": question},
        ],
        "tools": ["lookup_order", "search_policy"],
    }


def scenario(now: datetime) -> dict[str, list[dict]]:
    """The six traces support will paste, by environment."""
    task = _c("task_state:T9", "task_state", "4", 310, "selected", "required", required=True)
    order = _c("order:A1042", "order_delivery", "r12", 640, "selected", "required", required=True)
    policy = _c(
        "P7-v2",
        "applicable_policy",
        "v2",
        2100,
        "selected",
        "required",
        required=True,
        bundle="policy-P7",
    )
    dialogue = _c(
        "chat:e-318", "recent_dialogue", "e-318", 1150, "selected", "recent turns on A1042"
    )
    old_chat = _c(
        "old-chat", "recent_dialogue", "e-311", 900, "irrelevant", "older product introduction"
    )
    base = {"task": {"id": "T9", "revision": 4}}
    sources = _sources("A1042", "r12")
    sg_test = [
        _trace(
            "req-92",
            "sg-test",
            now - timedelta(minutes=42),
            estimate=6200,
            candidates=[task, order, policy, dialogue, old_chat],
            sources=sources,
            snapshot=_snapshot(
                "Is my A1042 delivery covered by the return policy?",
                ["order A1042 r12: delivered 2026-11-02, quality not yet verified", "P7 v2 §3"],
            ),
            **base,
        ),
        _trace(
            "req-93",
            "sg-test",
            now - timedelta(minutes=37),
            status="degraded",
            degradation="general_policy_only",
            estimate=3900,
            candidates=[
                task,
                _c(
                    "order:A1042",
                    "order_delivery",
                    "",
                    None,
                    "not_fetched",
                    "order service timed out after 2,000 ms",
                    required=True,
                ),
                policy,
                dialogue,
            ],
            sources=[{"id": "P7", "version": "v2"}, {"id": "permission", "version": "epoch-7"}],
            **base,
        ),
        _trace(
            "req-94",
            "sg-test",
            now - timedelta(minutes=31),
            status="budget_exceeded",
            estimate=12150,
            candidates=[
                task,
                order,
                _c(
                    "P7-v2#terms",
                    "applicable_policy",
                    "v2",
                    2300,
                    "over_budget",
                    "indivisible bundle policy-P7 (7,500 tokens) does not fit the 4,050 left",
                    required=True,
                    bundle="policy-P7",
                ),
                _c(
                    "P7-v2#annex-b",
                    "applicable_policy",
                    "v2",
                    5200,
                    "over_budget",
                    "indivisible bundle policy-P7 (7,500 tokens) does not fit the 4,050 left",
                    required=True,
                    bundle="policy-P7",
                ),
                old_chat,
            ],
            sources=sources,
            snapshot=_snapshot(
                "Which clauses of the policy apply to my refund?",
                ["order A1042 r12", "(policy P7 bundle left out: over budget)"],
            ),
            **base,
        ),
        _trace(
            "req-95",
            "sg-test",
            now - timedelta(minutes=24),
            status="source_conflict",
            estimate=5400,
            candidates=[
                task,
                order,
                _c(
                    "P7-v2",
                    "applicable_policy",
                    "v2",
                    2100,
                    "conflict",
                    "P7 v2 and v3 both claim to apply on the order date 2026-11-02",
                    required=True,
                    bundle="policy-P7",
                ),
                _c(
                    "P7-v3",
                    "applicable_policy",
                    "v3",
                    2250,
                    "conflict",
                    "P7 v2 and v3 both claim to apply on the order date 2026-11-02",
                    required=True,
                    bundle="policy-P7",
                ),
            ],
            sources=[*sources, {"id": "P7", "version": "v3"}],
            **base,
        ),
        _trace(
            "req-97",
            "sg-test",
            now - timedelta(minutes=9),
            estimate=6050,
            candidates=[
                _c("task_state:T11", "task_state", "2", 280, "selected", "required", required=True),
                _c(
                    "order:A1077",
                    "order_delivery",
                    "r3",
                    610,
                    "selected",
                    "required",
                    required=True,
                ),
                policy,
                _c(
                    "chat:e-402",
                    "recent_dialogue",
                    "e-402",
                    1020,
                    "selected",
                    "recent turns on A1077",
                ),
            ],
            task={"id": "T11", "revision": 2},
            principal="shop-a/user-903",
            sources=_sources("A1077", "r3"),
        ),
    ]
    prod = [
        _trace(
            "req-96",
            "prod",
            now - timedelta(minutes=16),
            version=2,
            status="missing_required_data",
            estimate=2400,
            candidates=[
                task,
                _c(
                    "order:A1042",
                    "order_delivery",
                    "",
                    None,
                    "no_access",
                    "permission check unavailable; never defaulted to allow",
                    required=True,
                ),
                _c("P7-v2", "applicable_policy", "v2", 2100, "selected", "optional, fits"),
            ],
            sources=[{"id": "P7", "version": "v2"}],
            **base,
        ),
    ]
    return {"sg-test": sg_test, "prod": prod}


# Background traffic: (environment, strategy version, weight per status).
_ENV_VERSIONS = {"sg-test": [3, 3, 3, 2], "bank-uat": [2, 2, 1], "prod": [2, 2, 2, 1]}
_STATUS_WEIGHTS = [
    ("ready", 80),
    ("degraded", 7),
    ("budget_exceeded", 5),
    ("missing_required_data", 5),
    ("source_conflict", 3),
]


def background(now: datetime, *, count: int = 360, seed: int = 6) -> dict[str, list[dict]]:
    """Deterministic request ids and contents; times spread over the last three days."""
    rng = random.Random(seed)
    statuses = [s for s, w in _STATUS_WEIGHTS for _ in range(w)]
    by_env: dict[str, list[dict]] = {env: [] for env in _ENV_VERSIONS}
    for n in range(count):
        env = rng.choice(list(_ENV_VERSIONS))
        version = rng.choice(_ENV_VERSIONS[env])
        status = rng.choice(statuses)
        order = f"A{1100 + rng.randrange(800)}"
        at = now - timedelta(minutes=60 + rng.randrange(3 * 24 * 60))
        candidates = [
            _c(
                f"task_state:T{20 + n}",
                "task_state",
                str(rng.randrange(1, 9)),
                300,
                "selected",
                "required",
                required=True,
            ),
            _c(
                f"order:{order}",
                "order_delivery",
                f"r{rng.randrange(1, 30)}",
                600,
                "selected",
                "required",
                required=True,
            ),
            _c(
                "P7-v2",
                "applicable_policy",
                "v2",
                2100,
                "selected",
                "required" if version == 3 else "optional, fits",
                required=version == 3,
                bundle="policy-P7",
            ),
            _c(
                f"chat:e-{500 + n}",
                "recent_dialogue",
                f"e-{500 + n}",
                900,
                rng.choice(["selected", "irrelevant", "over_budget"]),
                "by relevance and budget",
            ),
            _c("memory:pref", "memory", "m-2", 250, "not_applicable", "not used by this task"),
        ]
        extra = {}
        if status == "degraded":
            candidates[1] = _c(
                f"order:{order}",
                "order_delivery",
                "",
                None,
                "not_fetched",
                "order service timed out",
                required=True,
            )
            extra["degradation"] = "general_policy_only"
        elif status == "missing_required_data":
            candidates[1] = _c(
                f"order:{order}",
                "order_delivery",
                "",
                None,
                "no_access",
                "permission check unavailable",
                required=True,
            )
        elif status == "budget_exceeded":
            candidates[2] = _c(
                "P7-v2",
                "applicable_policy",
                "v2",
                7400,
                "over_budget",
                "indivisible bundle does not fit",
                required=True,
                bundle="policy-P7",
            )
        elif status == "source_conflict":
            candidates[2] = _c(
                "P7-v2",
                "applicable_policy",
                "v2",
                2100,
                "conflict",
                "v2 and v3 both apply on the order date",
                required=True,
            )
            candidates.append(
                _c(
                    "P7-v3",
                    "applicable_policy",
                    "v3",
                    2250,
                    "conflict",
                    "v2 and v3 both apply on the order date",
                    required=True,
                )
            )
        by_env[env].append(
            _trace(
                f"bg-{env}-{n:04d}",
                env,
                at,
                version=version,
                status=status,
                estimate=rng.randrange(2500, 7800),
                candidates=candidates,
                task={"id": f"T{20 + n}", "revision": rng.randrange(1, 6)},
                principal=f"shop-{rng.choice('abc')}/user-{rng.randrange(100, 999)}",
                sources=[
                    {"id": f"order:{order}", "version": f"r{rng.randrange(1, 30)}"},
                    {"id": "P7", "version": "v2"},
                ],
                config_fallback=rng.random() < 0.03,
                **extra,
            )
        )
    lite = by_env.setdefault("sg-test", [])
    for n in range(12):
        lite.append(
            {
                "request_id": f"lite-{n:03d}",
                "agent": "assistant_lite",
                "occurred_at": (now - timedelta(hours=2 + n * 5)).isoformat(),
                "documents": {"profile": 1},
                "status": "ready",
                "model": MODEL,
                "candidates": [
                    _c("memory:pref", "memory", "m-2", 250, "selected", "profile memory")
                ],
            }
        )
    return by_env


def ingest_as_runtime(environment, traces: list[dict]) -> services.IngestResult:
    """Send traces through the runtime's ingest path, as that environment's runtime would."""
    identity = RuntimeIdentity(
        token_id=0,
        name="demo-runtime",
        environment_id=environment.pk,
        environment_key=environment.key,
        agent_keys=frozenset(),
        capabilities=frozenset({"traces:write"}),
    )
    total = services.IngestResult()
    for start in range(0, len(traces), wire.MAX_TRACES_PER_BATCH):
        chunk = traces[start : start + wire.MAX_TRACES_PER_BATCH]
        batch = ingest.parse_batch(orjson.dumps({"traces": chunk}))
        result = services.trace_batch_store(identity=identity, batch=batch)
        total.accepted += result.accepted
        total.duplicates += result.duplicates
        total.rejected += result.rejected
    return total


def load(stdout=None) -> None:
    now = timezone.now().replace(microsecond=0)
    environments = {e.key: e for e in Environment.objects.all()}
    accepted = 0
    for part in (scenario(now), background(now)):
        for env_key, traces in part.items():
            if env_key in environments:
                result = ingest_as_runtime(environments[env_key], traces)
                if result.rejected:
                    raise RuntimeError(f"demo traces rejected: {result.as_dict()['rejected'][:3]}")
                accepted += result.accepted
    services.rollup_recent_hours(lookback_hours=24 * 4, now=now)
    if stdout is not None:
        stdout.write(f"Demo traces: {accepted} new.")
