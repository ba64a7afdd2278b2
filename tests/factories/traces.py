"""Trace payloads as a runtime sends them, posting them, and trace rows for reads."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta

import factory
import orjson
from context_runtime import rollouts, wire
from context_runtime.engine import CandidateItem, Strategy, select
from context_runtime.replay import shadow_run
from context_runtime.reporter import encode_trace
from django.utils import timezone

from tests.factories.documents import (
    STRATEGY_KEY,
    AgentFactory,
    DocumentFactory,
    EnvironmentFactory,
    FrozenVersionFactory,
    strategy_body,
)
from traces.models import RequestKey, Status, Trace

INGEST_URL = "/api/v1/runtime/traces"


def world() -> dict:
    """Two agents and two environments, enough for scope tests:
    {"agents": {key: Agent}, "environments": {key: Environment}}."""
    agents = {
        key: AgentFactory(key=key, name=key) for key in ("assistant_professional", "assistant_lite")
    }
    environments = {
        key: EnvironmentFactory(key=key, name=key, position=position)
        for position, key in enumerate(("sg-test", "prod"), start=1)
    }
    return {"agents": agents, "environments": environments}


def candidate(item="task_state:T9", **overrides) -> dict:
    """One candidate of a trace payload: selected and required unless overridden."""
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
    """One trace in the wire form (docs/runtime-contract.md): after_sales_consultation v3 of
    assistant_professional, ready, with three candidates; keywords replace fields."""
    data = {
        "request_id": request_id,
        "agent": "assistant_professional",
        # Recent: ingest refuses an occurred_at older than the environment's retention.
        "occurred_at": (timezone.now() - timedelta(minutes=1)).isoformat(),
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


def task_in_arm(arm: str, *, rollout_id: str, share: float, start: int = 0) -> dict:
    """A trace's `task` whose unit the console assigns `arm` of `rollout_id` at `share` (the
    SDK's rule, context_runtime.rollouts.request_arm): the first of T<start>, T<start+1>, …
    In a paired watch (`arm` "watch") a unit the watch runs its shadow on."""
    return {"id": _unit_in_arm(arm, rollout_id, share, start), "revision": 4}


@functools.cache
def _unit_in_arm(arm: str, rollout_id: str, share: float, start: int) -> str:
    phase = wire.PHASE_WATCH if arm == "watch" else wire.PHASE_ROLLOUT
    wanted = wire.ARM_NEW if arm == "watch" else arm
    for n in range(start, start + 10_000):
        if rollouts.request_arm(rollout_id, share=share, unit=f"T{n}", phase=phase) == wanted:
            return f"T{n}"
    raise AssertionError(f"no unit in arm {arm} of {rollout_id} at share {share}")


def snapshots_allowed(agent="assistant_professional", *, number=3, key=STRATEGY_KEY):
    """The strategy version trace_payload names (after_sales_consultation v3), frozen with
    `"snapshot": {"allowed": true}`: ingest keeps a snapshot only when it says so."""
    document = DocumentFactory(agent=AgentFactory(key=agent), key=key)
    return FrozenVersionFactory(
        document=document, number=number, body=strategy_body(snapshot={"allowed": True})
    )


def post_batch(client, secret: str | None, traces=None, *, body: bytes | None = None, **headers):
    """POST a batch to the ingest endpoint as a runtime does (`body` sends raw bytes)."""
    if body is None:
        body = orjson.dumps({"traces": traces or []})
    if secret is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {secret}"
    return client.post(INGEST_URL, data=body, content_type="application/json", **headers)


def candidates_of(*traces) -> list:
    """The stored candidates of these traces (each a Trace or a queryset of them), in trace
    and position order: what tests once read from the candidate table."""
    from traces.stored import trace_candidates

    found = []
    for each in traces:
        for trace in each if hasattr(each, "model") else [each]:
            found += trace_candidates(trace)
    return found


class TraceFactory(factory.django.DjangoModelFactory):
    """A trace row written directly, without candidates (tests of reads; ingest goes through
    `post_batch`)."""

    class Meta:
        model = Trace
        skip_postgeneration_save = True

    request_id = factory.Sequence(lambda n: f"req-{n}")
    agent = factory.SubFactory(AgentFactory, key="assistant_professional")
    environment = factory.SubFactory(EnvironmentFactory, key="sg-test")
    occurred_at = factory.LazyFunction(lambda: datetime(2026, 11, 30, 9, 12, 44, tzinfo=UTC))
    strategy = "after_sales_consultation"
    strategy_version = 3
    profile_version = 1
    documents = factory.LazyAttribute(
        lambda o: {"profile": o.profile_version, o.strategy: o.strategy_version}
    )
    status = Status.READY

    @factory.post_generation
    def request_key(trace, create, extracted, **kwargs):
        """Every stored trace has its request key: ingest writes both in one statement, and
        migration 0005 wrote them for the traces stored before."""
        if create:
            RequestKey.objects.create(
                environment_id=trace.environment_id,
                request_id=trace.request_id,
                trace_id=trace.pk,
                occurred_at=trace.occurred_at,
            )


SHADOW_LIVE_BODY = {
    "required": ["task_state", "order_delivery", "applicable_policy"],
    "optional": ["recent_dialogue"],
    "on_missing": {"order_delivery": "general_policy_only"},
    "budget": {"max_input_tokens": 8000, "reserve_output_tokens": 1000},
}


def shadowed_trace(
    request_id: str, *, shadow_version: int, shadow_body: dict, fixed_input_tokens: int = 2000
) -> bytes:
    """A batch of one trace as the SDK reports it: after_sales_consultation v3 live (the
    contract's body) and ``shadow_body`` released as ``shadow_version``, decided by the SDK's
    own shadow run on live's candidates."""
    items = (
        CandidateItem(id="task_state:T9", source="task_state", version="4", size=310),
        CandidateItem(id="order:A1042", source="order_delivery", version="r12", size=640),
        CandidateItem(id="P7-v2", source="applicable_policy", version="v2", size=2100),
        CandidateItem(id="chat:e-318", source="recent_dialogue", size=120, relevance=0.82),
        CandidateItem(id="old-chat", source="recent_dialogue", size=900, relevance=0.05),
    )
    live_strategy = Strategy.from_body(SHADOW_LIVE_BODY)
    live = select(
        strategy=live_strategy,
        candidates=items,
        context_window=128_000,
        fixed_input_tokens=fixed_input_tokens,
    )
    shadow = shadow_run(
        live, Strategy.from_body(shadow_body), version=shadow_version, live_strategy=live_strategy
    )
    trace = wire.Trace(
        request_id=request_id,
        agent="assistant_professional",
        occurred_at=timezone.now() - timedelta(minutes=1),
        documents={"profile": 7, "after_sales_consultation": 3},
        strategy="after_sales_consultation",
        sources=[wire.SourceRef(id=i.id, version=i.version) for i in live.selected],
        shadow=shadow,
        **live.trace_fields(),
    )
    return b'{"traces":[' + encode_trace(trace) + b"]}"


def foreign_source_trace(request_id: str, strategy_body: dict) -> bytes:
    """A batch of one trace as the SDK reports it when a provider also returned an item of a
    source the strategy does not read (issue 32.3): `weather:SG`, recorded not_requested.
    after_sales_consultation v3 decided with `strategy_body` (the version's body)."""
    selection = select(
        strategy=Strategy.from_body(strategy_body),
        candidates=[
            CandidateItem(id="task_state:T9", source="task_state", version="4", size=310),
            CandidateItem(id="order:A1042", source="order_delivery", version="r12", size=640),
            CandidateItem(id="P7-v2", source="applicable_policy", version="v2", size=2100),
            CandidateItem(id="weather:SG", source="weather", version="w1", size=40),
        ],
        context_window=128_000,
    )
    trace = wire.Trace(
        request_id=request_id,
        agent="assistant_professional",
        occurred_at=timezone.now() - timedelta(minutes=1),
        documents={STRATEGY_KEY: 3},
        strategy=STRATEGY_KEY,
        **selection.trace_fields(),
    )
    return b'{"traces":[' + encode_trace(trace) + b"]}"


_GENERATE = """
INSERT INTO traces_trace (request_id, agent_id, environment_id, occurred_at, received_at,
    strategy, strategy_version, profile_version, documents, config_fallback, config_resolution,
    task_id, task_revision, principal, model_name, model_adapter, model_context_window, status,
    degradation, budget_max_input_tokens, input_estimate, input_estimate_unit,
    input_estimate_estimator, sources, packed_candidates, kinds)
SELECT %(prefix)s || n, %(agent)s, %(env)s, %(start)s + n * %(every)s, now(),
    %(strategy)s, 3, 7, '{}', false, 'fresh', 'T' || n, 4, 'user-' || n %% 100, 'model-x',
    'adapter-x', 128000, 'ready', '', 8000, 6200, 'token', 'adapter-x', '[]', %(packed)s, '{}'
FROM generate_series(0, %(count)s - 1) AS n;
INSERT INTO traces_request_key (environment_id, request_id, trace_id, occurred_at)
SELECT environment_id, request_id, id, occurred_at FROM traces_trace
WHERE environment_id = %(env)s AND request_id LIKE %(prefix)s || '%%'
    AND occurred_at >= %(start)s AND occurred_at < %(start)s + %(count)s * %(every)s;
"""


def traces_generated(
    cursor,
    *,
    agent,
    environment,
    start: datetime,
    every: timedelta,
    count: int,
    candidates: int = 2,
    prefix: str = "gen-",
    strategy: str = STRATEGY_KEY,
) -> None:
    """`count` stored traces (with their candidates and request keys) written by SQL in one
    go, the n-th at `start` + n × `every`: a large world in seconds, for tests of storage
    and retention. Their days' partitions are made first, as the ingest makes them: an
    earlier test's retention may have dropped old days."""
    from context_runtime import wire

    from traces import compact, partitions

    selected = [
        wire.Candidate(
            id=f"item-{p}", source="task_state", decision="selected", version="v1", size=100,
            required=True, reason="required",
        )
        for p in range(candidates)
    ]  # fmt: skip
    first, last = start.date(), (start + every * max(count - 1, 0)).date()
    partitions.ensure_days(
        cursor, {first + timedelta(days=n) for n in range((last - first).days + 1)}
    )
    cursor.execute(
        _GENERATE,
        {
            "prefix": prefix,
            "agent": agent.pk,
            "env": environment.pk,
            "start": start,
            "every": every,
            "count": count,
            "packed": compact.encode(selected),
            "strategy": strategy,
        },
    )
