"""The Google ADK integration on the consultation A1042 (docs/background.md § Consultation
A1042), with a real ADK agent.

A real ``LlmAgent`` runs through a real ``Runner`` with ``InMemorySessionService``; its model
is a stub (``BaseLlm`` that records the request it is sent and answers a fixed text), so
nothing leaves the machine.  The configuration comes from a real ``ConfigClient`` and the
traces go through a real ``TraceReporter``, both against the fake console on 127.0.0.1.

What is asserted is what a user or an operator would notice: what the model was sent (the
preamble, the query context, the evidence), whether it was called at all, the agent's
answer, and the trace the console stored.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import time
from pathlib import Path

import pytest

pytest.importorskip("google.adk", reason="google-adk is not installed (the sdk's [adk] extra)")

from context_runtime.adk import (  # noqa: E402
    REFUSAL_PREFIX,
    ContextAssembly,
    ProviderRequest,
    Route,
)
from context_runtime.client import ConfigClient  # noqa: E402
from context_runtime.engine import NO_ACCESS, NOT_FETCHED, CandidateItem  # noqa: E402
from context_runtime.manifest_report import Registry  # noqa: E402
from context_runtime.reporter import TraceReporter  # noqa: E402
from fake_console import AGENT, PAYLOAD, TOKEN  # noqa: E402
from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.models import BaseLlm, LlmRequest, LlmResponse  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions import InMemorySessionService  # noqa: E402
from google.genai import types  # noqa: E402

APP = "adk-test"
PRINCIPAL = "shop-a/user-417"
QUESTION = "The kettle of order A1042 arrived with a cracked lid. Can I still return it?"
STRATEGY_KEY = "after_sales_consultation"
STUB_ANSWER = "Conditional answer from the stub model."

# The live configuration: the Bank profile of docs/background.md § Context sections (some on,
# some off) and the contract's after_sales_consultation v3, with policy P7 as an indivisible
# bundle.
CONSOLE_PAYLOAD = copy.deepcopy(PAYLOAD)
CONSOLE_PAYLOAD["profile"]["body"]["sections"] = {
    "user_context": {
        "high_level_profile": True,
        "communication_style": True,
        "user_emails": False,
        "personal_particulars": False,
    },
    "query_context": {
        "time_summary": True,
        "chat_topic": True,
        "state_of_mind_schedule": False,
    },
}
CONSOLE_PAYLOAD["strategies"][STRATEGY_KEY]["body"]["bundles"] = {"policy-P7": ["P7-"]}
CONSOLE_PAYLOAD["shadow"] = {
    STRATEGY_KEY: {
        "version": 4,
        "body": {**CONSOLE_PAYLOAD["strategies"][STRATEGY_KEY]["body"], "optional": []},
    }
}
ENABLED_USER = ["high_level_profile", "communication_style"]
ENABLED_QUERY = ["time_summary", "chat_topic"]

SECTION_TEXT = {
    "high_level_profile": "Owner of a small kitchenware shop.",
    "communication_style": "Short answers, plain English.",
    "user_emails": "owner@shop-a.example",  # switched off: must never reach the model
    "personal_particulars": "Born 1980.",  # switched off
    "time_summary": "The consultation takes place on 2026-11-30.",
    "chat_topic": "Return of a damaged kettle.",
    "state_of_mind_schedule": "Stressed on Mondays.",  # switched off
}

TASK_TEXT = "Task T9 (revision 4): return request for order A1042; quality not yet verified."
ORDER_TEXT = "Order A1042 (revision 12): one kettle, delivered 2026-11-20 to shop-a."
POLICY_TEXT = "Policy P7 v2: damaged goods may be returned within 30 days of delivery."
RECENT_TEXT = "User: the kettle arrived with a cracked lid."
OLD_TEXT = "An older introduction of the X200 blender."
GENERAL_NOTE = (
    "The order could not be read. Explain the general terms of policy P7 only; do not judge "
    "order A1042."
)


class StubModel(BaseLlm):
    """Records every request it receives and answers a fixed text."""

    model: str = "stub-model"
    requests: list = []

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False):
        self.requests.append(llm_request.model_copy(deep=True))
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=STUB_ANSWER)]))


class ListReporter:
    """A fake reporter: keeps what it was given."""

    def __init__(self, fail: bool = False):
        self.traces, self.fail = [], fail

    def report(self, trace, *, resolution=None, strategy=None):
        if self.fail:
            raise RuntimeError("the reporter is broken")
        self.traces.append((trace, resolution, strategy))
        return True


# ---------------------------------------------------------------- the runtime's code


def make_registry(
    order: str = "ok", policy: str = "ok", seen: list | None = None, handler: bool = True
) -> Registry:
    """The providers of consultation A1042.  ``order``: ok, timeout, no_access, slow;
    ``policy``: ok, conflict, huge; ``handler``: whether general_policy_only is implemented."""
    registry = Registry()
    seen = seen if seen is not None else []

    @registry.provider("task_state")
    def task_state(request: ProviderRequest):
        seen.append(request)
        return CandidateItem(
            id=f"task_state:{request.task_id}",
            source="task_state",
            version=str(request.task_revision),
            text=TASK_TEXT,
        )

    @registry.provider("order_delivery")
    async def order_delivery(request: ProviderRequest):
        if order == "slow":
            await asyncio.sleep(30)
        if order == "timeout":
            return CandidateItem(
                id="order:A1042",
                source="order_delivery",
                outcome=NOT_FETCHED,
                note="order service timed out after 2,000 ms",
            )
        if order == "no_access":
            return CandidateItem(
                id="order:A1042",
                source="order_delivery",
                outcome=NO_ACCESS,
                note="permission check unavailable",
            )
        return CandidateItem(
            id="order:A1042", source="order_delivery", version="r12", text=ORDER_TEXT
        )

    @registry.provider("applicable_policy")
    def applicable_policy(request: ProviderRequest):
        if policy == "conflict":
            return [
                CandidateItem(id="P7", source="applicable_policy", version="v1", text="30 days"),
                CandidateItem(id="P7", source="applicable_policy", version="v2", text="14 days"),
            ]
        size = 7_500 if policy == "huge" else None
        return {
            "id": "P7-v2",
            "source": "applicable_policy",
            "version": "v2",
            "text": POLICY_TEXT,
            "size": size,
        }

    @registry.provider("recent_dialogue")
    def recent_dialogue(request: ProviderRequest):
        return [
            CandidateItem(
                id="chat:e-318",
                source="recent_dialogue",
                version="e-318",
                relevance=0.82,
                text=RECENT_TEXT,
            ),
            CandidateItem(
                id="old-chat",
                source="recent_dialogue",
                version="e-311",
                relevance=0.05,
                text=OLD_TEXT,
                note="older product introduction",
            ),
        ]

    def general_policy_only(request: ProviderRequest, selection) -> str:
        assert selection.degradation == "general_policy_only"
        return GENERAL_NOTE

    if handler:
        registry.register_handler("general_policy_only", general_policy_only)

    for key in ENABLED_USER + ["user_emails", "personal_particulars"]:
        registry.register_section(key, "user_context")
    for key in ENABLED_QUERY + ["state_of_mind_schedule"]:
        registry.register_section(key, "query_context")
    return registry


def section_values(request: ProviderRequest, keys):
    # Returns more than asked, as a careless memory service might: only enabled ones may show.
    return dict(SECTION_TEXT)


def route(callback_context, llm_request):
    return Route(strategy=STRATEGY_KEY, task_id="T9", task_revision=4)


# ---------------------------------------------------------------- fixtures and helpers


@pytest.fixture
def client(console):
    config = ConfigClient(console.url, TOKEN, AGENT, poll_interval=30.0, timeout=2.0)
    assert config.start(wait=5.0), "the config client did not get the fake console's config"
    yield config
    config.stop()


@pytest.fixture
def reporter(console):
    sender = TraceReporter(console.url, TOKEN, flush_interval=0.02, close_at_exit=False)
    yield sender
    sender.close(timeout=2.0)


class Agent:
    """A real ADK agent wired to the SDK, with one session."""

    def __init__(self, assembly: ContextAssembly):
        self.model = StubModel()
        self.assembly = assembly
        self.sessions = InMemorySessionService()
        agent = LlmAgent(
            name="assistant",
            model=self.model,
            instruction="You answer after-sales questions from the evidence you are given.",
            before_model_callback=assembly.before_model_callback,
        )
        self.runner = Runner(app_name=APP, agent=agent, session_service=self.sessions)
        self.session = asyncio.run(self.sessions.create_session(app_name=APP, user_id=PRINCIPAL))

    def ask(self, text: str = QUESTION) -> tuple[str, str]:
        """One user turn; returns (final answer, invocation id)."""

        async def turn():
            answer, invocation = "", ""
            message = types.Content(role="user", parts=[types.Part(text=text)])
            async for event in self.runner.run_async(
                user_id=PRINCIPAL, session_id=self.session.id, new_message=message
            ):
                invocation = event.invocation_id
                if event.is_final_response() and event.content and event.content.parts:
                    answer = "".join(p.text or "" for p in event.content.parts)
            return answer, invocation

        return asyncio.run(turn())

    def stored_session(self):
        return asyncio.run(
            self.sessions.get_session(app_name=APP, user_id=PRINCIPAL, session_id=self.session.id)
        )


def make_agent(client, reporter, **registry_options) -> Agent:
    assembly = ContextAssembly(
        client=client,
        registry=make_registry(**registry_options),
        strategy_for=route,
        reporter=reporter,
        sections=section_values,
        context_window=128_000,
    )
    return Agent(assembly)


def stored_trace(console, reporter, request_id: str) -> dict:
    assert reporter.flush(timeout=5.0), "the reporter did not settle"
    assert request_id in console.stored, f"no trace {request_id}: {sorted(console.stored)}"
    return console.stored[request_id]


def text(content) -> str:
    return "".join(p.text or "" for p in content.parts)


def decisions(trace: dict) -> dict[str, str]:
    return {c["id"]: c["decision"] for c in trace["candidates"]}


# ---------------------------------------------------------------- a normal request


def test_consultation_A1042__ready__model_gets_enabled_sections_and_selected_evidence(
    console, client, reporter
):
    agent = make_agent(client, reporter)

    answer, invocation = agent.ask()

    assert answer == STUB_ANSWER
    (request,) = agent.model.requests
    first, ack, *_, current = request.contents
    # The preamble: a user turn with exactly the enabled user_context sections, in order.
    assert first.role == "user"
    preamble = text(first)
    assert preamble.startswith("<user-context>") and preamble.endswith("</user-context>")
    opened = [key for key in SECTION_TEXT if f"<{key}>" in preamble]
    assert opened == ENABLED_USER
    assert SECTION_TEXT["high_level_profile"] in preamble
    assert "owner@shop-a.example" not in preamble and "Born 1980" not in preamble
    assert ack.role == "model"
    # The current user turn: the query context first, then the user's own words.
    assert current.role == "user"
    turn = text(current)
    assert turn.startswith("<query-context>")
    assert turn.endswith(QUESTION)
    query = turn[: turn.index("</query-context>")]
    assert [key for key in SECTION_TEXT if f"<{key}>" in query] == ENABLED_QUERY
    for evidence in (TASK_TEXT, ORDER_TEXT, POLICY_TEXT, RECENT_TEXT):
        assert evidence in query
    assert OLD_TEXT not in str(request.contents)
    assert "Stressed on Mondays" not in str(request.contents)
    assert query.index(TASK_TEXT) < query.index(ORDER_TEXT) < query.index(POLICY_TEXT)

    trace = stored_trace(console, reporter, invocation)
    assert trace["status"] == "ready"
    assert trace["degradation"] is None
    assert trace["documents"] == {"profile": 7, STRATEGY_KEY: 3}
    assert trace["strategy"] == STRATEGY_KEY
    assert trace["config_fallback"] is False and trace["config_resolution"] == "fresh"
    assert trace["principal"] == PRINCIPAL
    assert trace["task"] == {"id": "T9", "revision": 4}
    assert trace["model"] == {
        "name": "stub-model",
        "adapter": "google-adk",
        "context_window": 128_000,
    }
    assert decisions(trace) == {
        "task_state:T9": "selected",
        "order:A1042": "selected",
        "P7-v2": "selected",
        "chat:e-318": "selected",
        "old-chat": "irrelevant",
    }
    old = next(c for c in trace["candidates"] if c["id"] == "old-chat")
    assert "older product introduction" in old["reason"]
    assert {"id": "order:A1042", "version": "r12"} in trace["sources"]
    assert {"id": "P7-v2", "version": "v2"} in trace["sources"]
    assert trace["budget"] == {"max_input_tokens": 8000, "reserve_output_tokens": 1000}
    estimate = trace["input_estimate"]
    assert estimate["unit"] == "token" and estimate["estimator"] == "chars/4"
    assert estimate["value"] >= (len(TASK_TEXT) + len(ORDER_TEXT) + len(POLICY_TEXT)) / 4
    # The shadow version (no optional sources) ran on the same candidates: the two
    # recent_dialogue candidates (positions 3 and 4) are not requested by it.
    assert trace["shadow"] == {
        "version": 4,
        "status": "ready",
        "selected": ["task_state:T9", "order:A1042", "P7-v2"],
        "degradation": None,
        "used_tokens": estimate["value"] - -(-len(RECENT_TEXT) // 4),
        "differences": [
            {
                "index": i,
                "decision": "not_requested",
                "reason_code": "source_not_read",
                "required": False,
            }
            for i in (3, 4)
        ],
        "differences_total": 2,
        "sources_not_fetched": [],
    }


def test_providers_get_the_trusted_principal_the_task_and_the_question(client):
    seen: list[ProviderRequest] = []
    assembly = ContextAssembly(
        client=client,
        registry=make_registry(seen=seen),
        strategy_for=route,
        reporter=ListReporter(),
    )
    agent = Agent(assembly)

    agent.ask()

    (request,) = seen
    assert request.principal == PRINCIPAL
    assert (request.task_id, request.task_revision) == ("T9", 4)
    assert request.question == QUESTION
    assert request.agent == AGENT and request.strategy == STRATEGY_KEY


def test_next_turn__assembled_again__the_stored_session_never_holds_the_injected_context(
    client,
):
    reporter = ListReporter()
    agent = make_agent(client, reporter)

    agent.ask()
    agent.ask("And who pays for the return shipping?")

    first, second = agent.model.requests
    preambles = [c for c in second.contents if text(c).startswith("<user-context>")]
    assert len(preambles) == 1  # one preamble, rebuilt for this call, not one per turn
    user_turns = [text(c) for c in second.contents if c.role == "user"]
    assert user_turns[-1].startswith("<query-context>")
    assert user_turns[-1].endswith("And who pays for the return shipping?")
    assert QUESTION in user_turns and not any(  # the earlier turn went back to the user's words
        t.startswith("<query-context>") and t.endswith(QUESTION) for t in user_turns
    )
    events = agent.stored_session().events
    assert not any("-context>" in text(e.content) for e in events if e.content)
    assert [t.status for t, _, _ in reporter.traces] == ["ready", "ready"]
    assert len({t.request_id for t, _, _ in reporter.traces}) == 2


# ---------------------------------------------------------------- degradation and failures


def test_order_service_times_out__general_policy_only_takes_over__trace_degraded(
    console, client, reporter
):
    agent = make_agent(client, reporter, order="timeout")

    answer, invocation = agent.ask()

    assert answer == STUB_ANSWER  # the model is called, for a general explanation
    (request,) = agent.model.requests
    turn = text(request.contents[-1])
    assert turn.startswith("<query-context>")
    assert '<degradation handler="general_policy_only">' in turn
    assert GENERAL_NOTE in turn
    assert "Missing: order_delivery (not available)." in turn
    assert POLICY_TEXT in turn and TASK_TEXT in turn
    assert ORDER_TEXT not in turn
    trace = stored_trace(console, reporter, invocation)
    assert trace["status"] == "degraded"
    assert trace["degradation"] == "general_policy_only"
    assert trace["documents"][STRATEGY_KEY] == 3
    order = next(c for c in trace["candidates"] if c["id"] == "order:A1042")
    assert order["decision"] == "not_fetched" and order["outcome"] == "not_fetched"
    assert "timed out" in order["reason"]


def test_order_service_times_out_without_the_handler__model_not_called__explicit_refusal(
    client,
):
    reporter = ListReporter()
    agent = make_agent(client, reporter, order="timeout", handler=False)

    answer, _ = agent.ask()

    assert agent.model.requests == []
    assert answer.startswith(REFUSAL_PREFIX) and "general_policy_only" in answer
    ((trace, _, _),) = reporter.traces
    assert trace.status == "missing_required_data" and trace.degradation is None


def test_permission_check_unavailable__model_not_called__explicit_refusal(
    console, client, reporter
):
    agent = make_agent(client, reporter, order="no_access")

    answer, invocation = agent.ask()

    assert agent.model.requests == []
    assert answer.startswith(f"{REFUSAL_PREFIX}:")
    assert "order_delivery" in answer
    assert ORDER_TEXT not in answer and POLICY_TEXT not in answer
    trace = stored_trace(console, reporter, invocation)
    assert trace["status"] == "missing_required_data"
    assert trace["degradation"] is None  # a handler never stands in for a permission
    assert trace["documents"][STRATEGY_KEY] == 3
    assert decisions(trace)["order:A1042"] == "no_access"


def test_two_policy_versions_disagree__source_conflict__model_not_called(client):
    reporter = ListReporter()
    agent = make_agent(client, reporter, policy="conflict")

    answer, _ = agent.ask()

    assert agent.model.requests == []
    assert answer.startswith(REFUSAL_PREFIX) and "P7" in answer and "verified" in answer
    ((trace, _, _),) = reporter.traces
    assert trace.status == "source_conflict"


def test_required_policy_does_not_fit_the_budget__budget_exceeded__model_not_called(client):
    reporter = ListReporter()
    agent = make_agent(client, reporter, policy="huge")

    answer, _ = agent.ask()

    assert agent.model.requests == []
    assert answer.startswith(REFUSAL_PREFIX) and "budget" in answer
    ((trace, _, _),) = reporter.traces
    assert trace.status == "budget_exceeded"
    assert {c.id: c.decision for c in trace.candidates}["P7-v2"] == "over_budget"


def test_slow_provider__cut_off_at_the_timeout__the_agent_does_not_hang(client):
    reporter = ListReporter()
    assembly = ContextAssembly(
        client=client,
        registry=make_registry(order="slow"),
        strategy_for=route,
        reporter=reporter,
        provider_timeout=0.3,
    )
    agent = Agent(assembly)

    started = time.monotonic()
    answer, _ = agent.ask()

    assert time.monotonic() - started < 5
    assert answer == STUB_ANSWER
    ((trace, _, _),) = reporter.traces
    assert trace.status == "degraded"
    assert {c.id: c.decision for c in trace.candidates}["order_delivery:unavailable"] == (
        "not_fetched"
    )


def test_no_live_configuration_for_the_strategy__explicit_refusal(client):
    reporter = ListReporter()
    assembly = ContextAssembly(
        client=client,
        registry=make_registry(),
        strategy_for="returns_and_refunds",  # not released for this agent
        reporter=reporter,
    )
    agent = Agent(assembly)

    answer, _ = agent.ask()

    assert agent.model.requests == []
    assert answer.startswith(REFUSAL_PREFIX) and "returns_and_refunds" in answer
    ((trace, _, _),) = reporter.traces
    assert trace.status == "missing_required_data"


def test_broken_reporter__the_agent_still_answers(client):
    agent = make_agent(client, ListReporter(fail=True))

    answer, _ = agent.ask()

    assert answer == STUB_ANSWER
    assert "<query-context>" in text(agent.model.requests[0].contents[-1])


def test_no_strategy_chosen__request_untouched_and_no_trace(client):
    reporter = ListReporter()
    assembly = ContextAssembly(
        client=client,
        registry=make_registry(),
        strategy_for=lambda callback_context, llm_request: None,
        reporter=reporter,
    )
    agent = Agent(assembly)

    agent.ask("hello")

    (request,) = agent.model.requests
    assert [text(c) for c in request.contents] == ["hello"]
    assert reporter.traces == []


# ---------------------------------------------------------------- the example


def test_example_agent_runs_against_a_console(console):
    path = Path(__file__).resolve().parents[1] / "examples" / "adk_agent.py"
    spec = importlib.util.spec_from_file_location("adk_agent_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    before = set(console.stored)

    answer = asyncio.run(
        example.run(console.url, TOKEN, AGENT, "Can I return A1042?", model=example.OfflineModel())
    )

    assert answer.startswith("[offline model]")
    assert "<user-context>" in answer and "<query-context>" in answer
    new = [console.stored[rid] for rid in set(console.stored) - before]
    assert [t["status"] for t in new] == ["ready"]
    assert new[0]["task"] == {"id": "T9", "revision": 4}  # from the session state
    assert console.manifests and "general_policy_only" in console.manifests[-1]["handlers"]


def test_example_agent__spool_dir__trace_delivered_through_the_spool(console, tmp_path):
    path = Path(__file__).resolve().parents[1] / "examples" / "adk_agent.py"
    spec = importlib.util.spec_from_file_location("adk_agent_example_spool", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    asyncio.run(
        example.run(
            console.url,
            TOKEN,
            AGENT,
            "Can I return A1042?",
            model=example.OfflineModel(),
            spool_dir=str(tmp_path / "spool"),
        )
    )

    assert [t["status"] for t in console.stored.values()] == ["ready"]
    assert list((tmp_path / "spool").glob("*.spool")) == []  # delivered, then removed
