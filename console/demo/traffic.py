"""Simulated demo traffic: the seed's requests as provider outputs, run through the engine.

A scenario is what the providers returned for one request of the consultation (docs/background.md §
Consultation A1042)
(task T9 revision 4, order A1042 r12, policy P7 v2 as the indivisible bundle ``policy-P7``,
the recent dialogue with an older product introduction) and what went wrong with them:
nothing, an order service timeout, a policy bundle too large, two policy versions that both
apply, a permission check that did not answer. :func:`run` hands the candidates to the
selection engine with an environment's live configuration (the runtime payload of
RUNTIME_API §1) and returns the trace the runtime would report. Every decision, reason,
status and estimate in it is the engine's; nothing here says what should be selected.

Used by the demo loader (``console.demo.traces``: req-92 … req-97 and the background
traffic) and by ``manage.py demo_traffic`` (live traffic against a running console).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import msgspec
from context_runtime import rollouts, wire
from context_runtime.client import FRESH, ConfigSnapshot, Resolution
from context_runtime.engine import (
    DEGRADED,
    FETCHED,
    NO_ACCESS,
    NOT_FETCHED,
    READY,
    CandidateItem,
    Strategy,
    context_sections,
    select,
)

AGENT = "assistant_professional"
STRATEGY = "after_sales_consultation"
MODEL = wire.ModelInfo(name="model-x", adapter="adapter-x", context_window=128_000)
# What the request holds besides the candidates: system prompt, tool definitions and the
# question, plus each contextSection the profile switches on (docs/background.md § The
# assembled context).
PROMPT_TOKENS = 1_280
SECTION_TOKENS = 60


@dataclass(frozen=True)
class Request:
    """Who asks about which task and order; the seed's request A1042 unless told otherwise.
    ``size_factor`` scales what the providers return (background traffic varies it)."""

    task: str = "T9"
    revision: int = 4
    order: str = "A1042"
    order_revision: str = "r12"
    principal: str = "shop-a/user-417"
    size_factor: float = 1.0


SEED = Request()


@dataclass(frozen=True)
class Scenario:
    """What the providers returned for the seed request; ``weight``: how often the
    background traffic picks it."""

    name: str
    weight: int
    candidates: tuple[CandidateItem, ...]


_as = msgspec.structs.replace
_TASK = CandidateItem(id="task_state:T9", source="task_state", version="4", size=310)
_ORDER = CandidateItem(
    id="order:A1042",
    source="order_delivery",
    version="r12",
    size=640,
    note="quality not yet verified",
)
_POLICY = CandidateItem(
    id="P7", source="applicable_policy", version="v2", size=2100, bundle="policy-P7"
)
_DIALOGUE = CandidateItem(
    id="chat:e-318", source="recent_dialogue", version="e-318", size=1150, relevance=0.82
)
_OLD_CHAT = CandidateItem(
    id="old-chat",
    source="recent_dialogue",
    version="e-311",
    size=900,
    relevance=0.05,
    note="older product introduction",
)

CONSULTATION = Scenario("consultation", 75, (_TASK, _ORDER, _POLICY, _DIALOGUE, _OLD_CHAT))
ORDER_TIMEOUT = Scenario(
    "order_timeout",
    8,
    (
        _TASK,
        _as(
            _ORDER,
            version="",
            size=None,
            outcome=NOT_FETCHED,
            note="order service timed out after 2,000 ms",
        ),
        _POLICY,
        _DIALOGUE,
    ),
)
POLICY_TOO_LARGE = Scenario(
    "policy_too_large",
    5,
    (
        _TASK,
        _ORDER,
        _as(_POLICY, id="P7#terms", size=2300),
        _as(_POLICY, id="P7#annex-b", size=5200),
        _OLD_CHAT,
    ),
)
POLICY_CONFLICT = Scenario(
    "policy_conflict", 4, (_TASK, _ORDER, _POLICY, _as(_POLICY, version="v3", size=2250), _DIALOGUE)
)
PERMISSION_UNAVAILABLE = Scenario(
    "permission_unavailable",
    8,
    (
        _TASK,
        _as(_ORDER, version="", size=None, outcome=NO_ACCESS, note="permission check unavailable"),
        _POLICY,
    ),
)
SCENARIOS = (CONSULTATION, ORDER_TIMEOUT, POLICY_TOO_LARGE, POLICY_CONFLICT, PERMISSION_UNAVAILABLE)


def pick(rng: random.Random, n: int) -> tuple[Scenario, Request]:
    """A weighted-random scenario and a request of task ``T<n>`` for it."""
    (scenario,) = rng.choices(SCENARIOS, weights=[s.weight for s in SCENARIOS])
    request = Request(
        task=f"T{20 + n}",
        revision=rng.randrange(1, 6),
        order=f"A{1100 + rng.randrange(800)}",
        order_revision=f"r{rng.randrange(1, 30)}",
        principal=f"shop-{rng.choice('abc')}/user-{rng.randrange(100, 1000)}",
        size_factor=round(rng.uniform(0.85, 1.15), 2),
    )
    return scenario, request


def run(
    scenario: Scenario,
    *,
    config: Mapping | ConfigSnapshot,
    request_id: str,
    occurred_at: datetime,
    request: Request = SEED,
    resolution: Resolution | None = None,
) -> wire.Trace:
    """The trace of one request: ``scenario``'s candidates for ``request`` through the engine
    with ``config``, the agent's live configuration — the runtime payload (RUNTIME_API §1) or
    the SDK's snapshot of it (pass the snapshot when running many requests: a payload is
    checked on every call). ``resolution`` says where the runtime's configuration came from
    (default: fresh).

    What the request serves is the SDK's decision (``context_runtime.rollouts.serve``): the
    live version with the payload's shadow beside it, or during a staged rollout the version
    of the request's arm (by its task) with the other arm as the shadow and the trace's
    ``rollout`` block. A runtime asks only the providers of the served strategy's sources, so
    candidates of other sources are left out. Raises ``KeyError`` when the configuration has
    no version of the strategy.
    """
    snapshot = config if isinstance(config, ConfigSnapshot) else ConfigSnapshot.from_payload(config)
    serving = rollouts.serve(
        snapshot, STRATEGY, request_id=request_id, task_id=request.task, principal=request.principal
    )
    if serving.document is None:
        raise KeyError(STRATEGY)
    strategy = Strategy.from_body(serving.document.body)
    profile = snapshot.profile
    fixed = PROMPT_TOKENS
    sections = context_sections(profile.body) if profile is not None else {}
    fixed += SECTION_TOKENS * sum(len(keys) for keys in sections.values())
    candidates = tuple(
        _for(item, request) for item in scenario.candidates if item.source in strategy.sources
    )
    selection = select(
        strategy=strategy,
        candidates=candidates,
        context_window=MODEL.context_window,
        fixed_input_tokens=fixed,
    )
    fields = selection.trace_fields()  # the candidates carry the replay fields
    documents = {STRATEGY: serving.document.version}
    if profile is not None:
        documents["profile"] = profile.version
    # On live's candidates with live's arguments: a shadow asks no provider of its own.
    shadow = serving.run_shadow(selection)
    resolution = resolution or Resolution(FRESH, 0.0, False)
    return wire.Trace(
        request_id=request_id,
        agent=snapshot.agent or AGENT,
        environment=snapshot.environment,
        occurred_at=occurred_at,
        documents=documents,
        strategy=STRATEGY,
        task=wire.Task(id=request.task, revision=request.revision),
        principal=request.principal,
        model=MODEL,
        sources=[wire.SourceRef(id=item.id, version=item.version) for item in selection.selected],
        shadow=shadow,
        rollout=serving.rollout,
        sections=_rendered(sections, selection.status),
        **resolution.trace_fields(),
        **fields,
    )


def _rendered(sections: Mapping[str, list[str]], status: str) -> wire.Sections | None:
    """The contextSections that went into the model request, as the SDK's ContextAssembly
    reports them (``context_runtime.adk``): only when the model was called (``ready`` or
    ``degraded``), each block's switched-on keys — the demo application has a value for every
    section. A refused request reports none."""
    if status not in (READY, DEGRADED):
        return None
    return wire.Sections(
        user_context=tuple(sections.get("user_context", ())[: wire.MAX_SECTIONS_PER_BLOCK]),
        query_context=tuple(sections.get("query_context", ())[: wire.MAX_SECTIONS_PER_BLOCK]),
    )


def _for(item: CandidateItem, request: Request) -> CandidateItem:
    """The seed's item as the providers return it for ``request``."""
    changes: dict = {}
    if item.source == "task_state":
        changes = {"id": f"task_state:{request.task}", "version": str(request.revision)}
    elif item.source == "order_delivery":
        changes = {"id": f"order:{request.order}"}
        if item.outcome == FETCHED:
            changes["version"] = request.order_revision
    if item.size is not None and request.size_factor != 1.0:
        changes["size"] = round(item.size * request.size_factor)
    return _as(item, **changes) if changes else item


# --- outcomes: how a request turned out, reported after the answer (RUNTIME_API §3b) --------
OUTCOME_SHARE = 0.6  # the share of requests whose outcome the demo application reports


def outcomes_of(request_id: str, status: str) -> list[tuple[str, object]]:
    """The outcomes the demo's application reports for a request (none for some): drawn from
    a generator seeded by the request id, so every run tells the same story. A request that
    was not `ready` more often ends with a person, a low rating and no resolution."""
    rng = random.Random(f"outcome-{request_id}")
    if rng.random() >= OUTCOME_SHARE:
        return []
    ready = status == "ready"
    completed = rng.random() < (0.9 if ready else 0.35)
    escalated = not completed and rng.random() < (0.5 if ready else 0.8)
    outcomes: list[tuple[str, object]] = [("task_completed", completed), ("escalated", escalated)]
    if rng.random() < 0.7:  # not everyone rates
        low, high = (3, 5) if completed else (1, 3)
        outcomes.append(("rating", rng.randint(low, high)))
    if completed:
        outcomes.append(("resolution", rng.choice(("refund", "replacement", "explained"))))
    elif rng.random() < 0.5:
        outcomes.append(("resolution", "other"))
    return outcomes
