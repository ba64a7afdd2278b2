"""Every request leaves a trace (issue 21.4, 21.8): a provider's malformed item, a request with
5,000 candidates, the sections rendered — through a real ADK agent, the real reporter and the
fake console; and a console older than the ``input_refused`` status still gets a record."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pytest.importorskip("google.adk", reason="google-adk is not installed (the sdk's [adk] extra)")

from context_runtime import replay, wire  # noqa: E402
from context_runtime.adk import (
    REFUSAL_PREFIX,  # noqa: E402
    ContextAssembly,  # noqa: E402
)
from context_runtime.client import ConfigClient  # noqa: E402
from context_runtime.engine import CandidateItem, EngineInputError, select  # noqa: E402
from context_runtime.reporter import TraceReporter  # noqa: E402
from fake_console import (
    AGENT,  # noqa: E402
    TOKEN,  # noqa: E402
)
from test_adk import (  # noqa: E402
    CONSOLE_PAYLOAD,  # noqa: F401  (the fake console serves it to this module too)
    ENABLED_QUERY,
    ENABLED_USER,
    Agent,
    make_registry,
    route,
    section_values,
    stored_trace,
)

STRATEGY = {
    "required": ["task_state"],
    "optional": ["recent_dialogue"],
    "budget": {"max_input_tokens": 2_000_000, "reserve_output_tokens": 0},
}


@pytest.fixture
def client(console):
    config = ConfigClient(console.url, TOKEN, AGENT, poll_interval=30.0, timeout=2.0)
    assert config.start(wait=5.0)
    yield config
    config.stop()


@pytest.fixture
def reporter(console):
    sender = TraceReporter(console.url, TOKEN, flush_interval=0.02, close_at_exit=False)
    yield sender
    sender.close(timeout=2.0)


def agent_with(client, reporter, registry) -> Agent:
    return Agent(
        ContextAssembly(
            client=client,
            registry=registry,
            strategy_for=route,
            reporter=reporter,
            sections=section_values,
            context_window=128_000,
        )
    )


def nan_dialogue(registry):
    registry._providers.pop("recent_dialogue")  # the consultation's, replaced by a broken one

    @registry.provider("recent_dialogue")
    def recent_dialogue(request):
        return CandidateItem(
            id="chat:e-318", source="recent_dialogue", relevance=float("nan"), text="hi"
        )

    return registry


def test_provider_returns_a_nan_relevance__model_not_called__trace_says_input_refused(
    console, client, reporter
):
    agent = agent_with(client, reporter, nan_dialogue(make_registry()))

    answer, invocation = agent.ask()

    assert agent.model.requests == []
    assert answer.startswith(REFUSAL_PREFIX) and "malformed" in answer
    trace = stored_trace(console, reporter, invocation)
    assert trace["status"] == "input_refused"
    (error,) = trace["input_errors"]
    assert error["path"].endswith(".relevance")
    assert (error["source"], error["item"]) == ("recent_dialogue", "chat:e-318")
    assert "nan" in error["message"]
    assert trace["input_errors_total"] == 1
    assert trace["candidates"] == [] and trace["sections"] is None


def test_ready_request__trace_names_the_sections_rendered_never_their_values(
    console, client, reporter
):
    agent = agent_with(client, reporter, make_registry())

    _, invocation = agent.ask()

    trace = stored_trace(console, reporter, invocation)
    assert trace["sections"] == {"user_context": ENABLED_USER, "query_context": ENABLED_QUERY}
    assert "Owner of a small kitchenware shop" not in str(trace)


def five_thousand(request_id: str = "req-5000") -> wire.Trace:
    items = [CandidateItem(id="task_state:T9", source="task_state", size=10)] + [
        CandidateItem(id=f"turn-{i:04d}", source="recent_dialogue", size=10, relevance=0.1)
        for i in range(4_999)
    ]
    selection = select(strategy=STRATEGY, candidates=items)
    return wire.Trace(
        request_id=request_id,
        agent=AGENT,
        occurred_at=datetime.now(UTC),
        documents={"after_sales_consultation": 3},
        strategy="after_sales_consultation",
        **selection.trace_fields(),
    )


def test_5000_candidates__reported__console_gets_500_that_matter_and_all_counts(console, reporter):
    assert reporter.report(five_thousand())
    assert reporter.flush(timeout=5.0)

    stored = console.stored["req-5000"]
    assert len(stored["candidates"]) == wire.MAX_CANDIDATES_PER_TRACE
    assert stored["candidates"][0]["id"] == "task_state:T9"  # the selected one is kept
    assert stored["candidates_truncated"] is True
    assert stored["candidate_counts"] == {"selected": 1, "irrelevant": 4_999}
    assert reporter.stats()["rejected"] == 0


def test_trace_built_by_hand_with_too_many_candidates__reporter_truncates_instead_of_dropping(
    console, reporter
):
    many = [
        wire.Candidate(id=f"i{n}", source="recent_dialogue", decision="irrelevant")
        for n in range(800)
    ]
    missing = wire.Candidate(id="T9", source="task_state", decision="not_fetched", required=True)
    by_hand = wire.Trace(
        request_id="req-hand",
        agent=AGENT,
        occurred_at=datetime.now(UTC),
        status="missing_required_data",
        candidates=[*many, missing],
    )

    assert reporter.report(by_hand)
    assert reporter.flush(timeout=5.0)

    stored = console.stored["req-hand"]
    assert len(stored["candidates"]) == 500
    assert stored["candidates"][-1]["id"] == "T9"  # the required item missing is never cut
    assert stored["candidate_counts"] == {"irrelevant": 800, "not_fetched": 1}


def test_older_console_rejects_input_refused__resent_as_missing_required_data(console, reporter):
    console.statuses = set(wire.STATUSES) - {"input_refused"}
    items = [CandidateItem(id="x", source="recent_dialogue", size=-1)]
    with pytest.raises(EngineInputError) as caught:
        select(strategy=STRATEGY, candidates=items)
    trace = wire.Trace(
        request_id="req-refused",
        agent=AGENT,
        occurred_at=datetime.now(UTC),
        **caught.value.trace_fields(items),
    )

    assert reporter.report(trace)
    assert reporter.flush(timeout=5.0)

    stored = console.stored["req-refused"]
    assert stored["status"] == "missing_required_data"
    assert stored["input_errors"][0]["source"] == "recent_dialogue"  # rides along, ignored
    stats = reporter.stats()
    assert (stats["downgraded"], stats["rejected"], stats["delivered"]) == (1, 0, 1)


def test_replay__truncated_or_refused_trace__not_replayable_with_the_reason():
    truncated = five_thousand()
    refused = wire.Trace(
        request_id="r",
        agent=AGENT,
        occurred_at=datetime.now(UTC),
        status="input_refused",
        input_errors=[wire.InputError(path="candidates[0].size", message="negative")],
    )

    with pytest.raises(replay.NotReplayable, match="only part of its candidates"):
        replay.replay_trace(STRATEGY, truncated)
    with pytest.raises(replay.NotReplayable, match="refused"):
        replay.replay_trace(STRATEGY, refused)
    with pytest.raises(replay.NotReplayable):
        replay.trace_candidates(truncated.candidates, truncated=True)
