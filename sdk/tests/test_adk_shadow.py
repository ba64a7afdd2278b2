"""The shadow on the ADK path (issue 22, items 2 and 6): ``ContextAssembly`` runs the shadow
strategy version on live's candidates with live's fixed input, window, threshold and
estimator, and never calls a provider, the model or a tool for it.

The A/A calibration: with the shadow version equal to the live one, 10,000 requests whose
history (the fixed input) grows from 0 to 90 % of the budget agree on every one — same
status, same selected set, no differences. On ``main`` the shadow was charged no fixed input
and agreed on 2 of 6 such requests. The requests go through
``ContextAssembly.before_model_callback`` exactly as ADK calls it (a full ``Runner`` per
request would take minutes); one test drives a real ``Runner`` with a stub model that calls a
tool, to count model, tool and provider calls with and without the shadow.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import random
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("google.adk", reason="google-adk is not installed (the sdk's [adk] extra)")

from context_runtime import wire  # noqa: E402
from context_runtime.adk import ContextAssembly, ProviderRequest, Route  # noqa: E402
from context_runtime.engine import NO_ACCESS, NOT_FETCHED, CandidateItem  # noqa: E402
from context_runtime.manifest_report import Registry  # noqa: E402
from fake_console import PAYLOAD  # noqa: E402
from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.models import BaseLlm, LlmRequest, LlmResponse  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions import InMemorySessionService  # noqa: E402
from google.genai import types  # noqa: E402

KEY = "after_sales_consultation"
PRINCIPAL = "shop-a/user-417"
V3 = PAYLOAD["strategies"][KEY]["body"]
BUDGET = V3["budget"]["max_input_tokens"]  # 8,000
SOURCES = ("task_state", "order_delivery", "applicable_policy", "recent_dialogue")
A_A_REQUESTS = 10_000


def payload_with_shadow(version: int, body: dict) -> dict:
    payload = copy.deepcopy(PAYLOAD)
    payload["strategies"][KEY]["body"]["bundles"] = {"policy-P7": ["P7-"]}
    body = {**copy.deepcopy(body), "bundles": {"policy-P7": ["P7-"]}}
    payload["shadow"] = {KEY: {"version": version, "body": body}}
    return payload


class Providers:
    """The consultation's providers, varied per request (by its id) so that every status
    occurs: sizes, texts the estimator sizes, the order sometimes unreadable or not
    accessible, dialogue turns of mixed relevance. Counts every call. ``seed``: the same
    answers for every request instead."""

    def __init__(self, seed: str | None = None):
        self.calls: collections.Counter = collections.Counter()
        self.seed = seed

    def registry(self) -> Registry:
        registry = Registry()
        for source in (*SOURCES, "memory"):
            registry.register_provider(source, self._provider(source))
        registry.register_handler("general_policy_only", self._handler)
        return registry

    def _provider(self, source: str):
        async def provide(request: ProviderRequest):
            self.calls[source] += 1
            rng = random.Random(self.seed if self.seed is not None else request.request_id)
            return getattr(self, source)(rng)

        return provide

    async def _handler(self, request, selection) -> str:
        self.calls["general_policy_only"] += 1
        return "Explain the general terms only."

    def task_state(self, rng):
        return CandidateItem(id="task_state:T9", source="task_state", size=rng.randint(100, 600))

    def order_delivery(self, rng):
        roll = rng.random()
        if roll < 0.08:
            return CandidateItem(id="order:A1042", source="order_delivery", outcome=NOT_FETCHED)
        if roll < 0.11:
            return CandidateItem(id="order:A1042", source="order_delivery", outcome=NO_ACCESS)
        return CandidateItem(
            id="order:A1042",
            source="order_delivery",
            version="r12",
            text="o" * rng.randint(400, 3000),
        )

    def applicable_policy(self, rng):
        return [
            CandidateItem(
                id="P7-v2#terms", source="applicable_policy", size=rng.randint(300, 1500)
            ),
            CandidateItem(id="P7-v2#annex", source="applicable_policy", size=rng.randint(50, 500)),
        ]

    def recent_dialogue(self, rng):
        return [
            CandidateItem(
                id=f"chat:e-{n}",
                source="recent_dialogue",
                size=rng.randint(20, 800) if n % 3 else None,
                text=None if n % 3 else "c" * rng.randint(40, 2000),
                relevance=round(rng.random(), 2),
            )
            for n in range(rng.randint(0, 10))
        ]

    def memory(self, rng):  # read by no version: must never be called
        return CandidateItem(id="memory:1", source="memory", size=10)


@dataclass
class CallbackContext:
    """What ADK's CallbackContext gives ``before_model_callback`` (the attributes the
    assembly reads)."""

    invocation_id: str
    user_id: str = PRINCIPAL
    state: dict = field(default_factory=dict)
    user_content: Any = None
    session: Any = None


def model_request(n: int, history_tokens: int) -> LlmRequest:
    """A model request as ADK builds it: the instruction, ``history_tokens`` of earlier turns
    (the chars/4 estimator's tokens), the user's question."""
    turns = []
    left = history_tokens * 4
    while left > 0:
        chunk = min(left, 4_000)
        role = "user" if len(turns) % 2 == 0 else "model"
        turns.append(types.Content(role=role, parts=[types.Part(text="h" * chunk)]))
        left -= chunk
    question = types.Content(role="user", parts=[types.Part(text=f"Question {n}")])
    return LlmRequest(
        model="stub-model",
        contents=[*turns, question],
        config=types.GenerateContentConfig(system_instruction="Answer from the evidence."),
    )


class Keep:
    """A reporter that keeps every trace."""

    def __init__(self):
        self.traces: list[wire.Trace] = []

    def report(self, trace, *, resolution=None, strategy=None):
        self.traces.append(trace)
        return True


def route(callback_context, llm_request):
    return Route(strategy=KEY, task_id="T9", task_revision=4)


def assemble_all(
    client, providers: Providers, count: int, *, strategy_for=route, state=lambda n: {}
) -> list[wire.Trace]:
    """``count`` model calls through the ADK callback, history 0–90 % of the budget; the
    traces reported. ``state(n)``: the session state of request ``n``."""
    reporter = Keep()
    assembly = ContextAssembly(
        client=client,
        registry=providers.registry(),
        strategy_for=strategy_for,
        reporter=reporter,
        context_window=128_000,
        provider_timeout=None,
    )

    async def run():
        for n in range(count):
            history = BUDGET * (n * 37 % 91) // 100  # 0 … 90 % of the budget, spread out
            context = CallbackContext(invocation_id=f"e-{n}", state=state(n))
            await assembly.before_model_callback(context, model_request(n, history))

    asyncio.run(run())
    return reporter.traces


def disagrees(trace: wire.Trace) -> bool:
    """The shadow decided otherwise than live: status, handler, selected set, any candidate,
    tokens, or it lacked a source."""
    shadow = trace.shadow
    return (
        shadow.status != trace.status
        or shadow.degradation != trace.degradation
        or set(shadow.selected) != {s.id for s in trace.sources}
        or bool(shadow.differences)
        or shadow.differences_total != 0
        or shadow.used_tokens != int(trace.input_estimate.value)
        or bool(shadow.sources_not_fetched)
    )


def test_a_a__shadow_equal_to_live__10000_adk_requests__agree_on_every_one(config):
    client = config(payload_with_shadow(3, V3))  # the shadow is v3 itself
    providers = Providers()
    started = time.monotonic()

    traces = assemble_all(client, providers, A_A_REQUESTS)

    assert len(traces) == A_A_REQUESTS
    statuses = collections.Counter(t.status for t in traces)
    # Every status the engine gives occurs, budget_exceeded among them (the fixed input).
    assert {"ready", "degraded", "budget_exceeded", "missing_required_data"} <= set(statuses)
    for trace in traces:
        assert trace.shadow is not None and trace.shadow.version == trace.documents[KEY] == 3
    disagreements = [t.request_id for t in traces if disagrees(t)]
    assert disagreements == [], f"{len(disagreements)} of {A_A_REQUESTS} disagree"
    # No extra provider call: each source asked once per request, memory (read by neither
    # version) never; the handler only for live's degraded requests.
    assert providers.calls == {
        **dict.fromkeys(SOURCES, A_A_REQUESTS),
        "general_policy_only": statuses["degraded"],
    }
    assert time.monotonic() - started < 60


def test_a_a__live_handler_fails__shadow_ends_as_live_did__no_false_disagreement(config):
    # The runtime's handler raises: live's degraded requests end missing their data. The
    # shadow runs no handler; had it served, the same handler would have failed alike.
    client = config(payload_with_shadow(3, V3))
    providers = Providers()

    async def broken(request, selection):
        raise RuntimeError("policy service down")

    providers._handler = broken

    traces = assemble_all(client, providers, 400)

    failed = [t for t in traces if t.status == "missing_required_data" and t.degradation is None]
    assert failed, "some requests should need the handler"
    for trace in traces:
        assert (trace.shadow.status, trace.shadow.degradation) == (
            trace.status,
            trace.degradation,
        ), trace.request_id


def test_shadow_v3_with_max_input_tokens_4000__disagrees_on_some__names_candidates_and_codes(
    config,
):
    smaller = {**V3, "budget": {"max_input_tokens": 4000, "reserve_output_tokens": 1000}}
    client = config(payload_with_shadow(4, smaller))

    traces = assemble_all(client, Providers(), 500)

    disagreeing = [t for t in traces if t.shadow.status != t.status or t.shadow.differences_total]
    assert 0 < len(disagreeing) < len(traces)
    codes = collections.Counter()
    for trace in disagreeing:
        assert trace.shadow.version == 4
        for d in trace.shadow.differences:
            live = trace.candidates[d.index]
            assert (d.decision, d.reason_code) != (live.decision, live.reason_code)
            codes[d.reason_code] += 1
        assert trace.shadow.differences_total == len(trace.shadow.differences)
    assert codes["over_budget_required"] > 0 and codes["over_budget_optional"] > 0
    # A smaller budget never uses more tokens than live did.
    assert all(t.shadow.used_tokens <= t.input_estimate.value for t in traces)


# ---------------------------------------------------------------- a real Runner with a tool


class ToolCallingModel(BaseLlm):
    """Asks for the ``lookup_order`` tool first, then answers; counts its calls."""

    model: str = "stub-model"
    calls: int = 0

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False):
        self.calls += 1
        last = llm_request.contents[-1]
        if any(p.function_response for p in last.parts or ()):
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="Done.")]))
            return
        call = types.FunctionCall(name="lookup_order", args={"order_id": "A1042"})
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(function_call=call)])
        )


def run_agent_turn(client) -> tuple[ToolCallingModel, Providers, list[str], list[wire.Trace]]:
    providers = Providers(seed="the same for both runs")
    tool_calls: list[str] = []
    reporter = Keep()

    def lookup_order(order_id: str) -> dict:
        """Look an order up."""
        tool_calls.append(order_id)
        return {"order_id": order_id, "state": "delivered"}

    assembly = ContextAssembly(
        client=client,
        registry=providers.registry(),
        strategy_for=route,
        reporter=reporter,
    )
    model = ToolCallingModel()
    agent = LlmAgent(
        name="assistant",
        model=model,
        tools=[lookup_order],
        before_model_callback=assembly.before_model_callback,
    )
    sessions = InMemorySessionService()
    runner = Runner(app_name="shadow-test", agent=agent, session_service=sessions)

    async def turn():
        session = await sessions.create_session(app_name="shadow-test", user_id=PRINCIPAL)
        message = types.Content(role="user", parts=[types.Part(text="Where is order A1042?")])
        async for _ in runner.run_async(
            user_id=PRINCIPAL, session_id=session.id, new_message=message
        ):
            pass

    asyncio.run(turn())
    return model, providers, tool_calls, reporter.traces


def test_runner_with_a_tool__shadow_released__no_extra_model_tool_or_provider_call(config):
    without = copy.deepcopy(PAYLOAD)
    without["strategies"][KEY]["body"]["bundles"] = {"policy-P7": ["P7-"]}
    reads_more = {**V3, "optional": ["recent_dialogue", "memory"]}

    plain = run_agent_turn(config(without))
    shadowed = run_agent_turn(config(payload_with_shadow(4, reads_more)))

    (model, providers, tools, traces), (model_s, providers_s, tools_s, traces_s) = plain, shadowed
    assert model.calls == model_s.calls == 2  # the tool round, then the answer
    assert tools == tools_s == ["A1042"]
    assert providers.calls == providers_s.calls  # memory, read by the shadow only: never
    assert providers_s.calls["memory"] == 0
    assert [t.shadow for t in traces] == [None, None]
    assert [t.shadow.sources_not_fetched for t in traces_s] == [("memory",), ("memory",)]
