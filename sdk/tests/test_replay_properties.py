"""Exact replay: a trace holds what the engine needs to decide again, with any strategy.

The property (issue 20): for random strategies S and S′ and candidates C,
``replay(S′, trace(select(S, C)))`` equals ``select(S′, C)`` — decisions, reason codes,
statuses, degradations and group labels — where the trace went through its JSON wire form
as the console receives it. C is what the providers returned under S; under S′ the runtime
would not have asked the providers of sources S′ does not read, so the fresh selection is
made on the candidates of the sources S′ reads, as the replay does.

The generators reach every rule that made cross-version replay inexact before the replay
fields: bundles shared by several strategy entries (merged group labels such as
``all-a+pfx-b``), provider bundles beside them, item and source dependencies, flagged and
version conflicts, a non-default relevance threshold, fixed input and the call's own cap.
"""

from __future__ import annotations

import msgspec
from context_runtime import wire
from context_runtime.engine import CandidateItem, EngineInputError, Strategy, select
from context_runtime.replay import (
    NOT_REQUESTED,
    Facts,
    NotReplayable,
    facts,
    replay,
    replay_trace,
    sources_never_requested,
    trace_candidates,
)
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

SOURCES = ("task_state", "order_delivery", "applicable_policy", "recent_dialogue", "memory")
OUTCOMES = ("fetched",) * 6 + ("not_fetched", "no_access", "not_applicable")
PROVIDER_BUNDLES = ("pb-terms", "pb-order", "pb-chat")
# Ten thousand cases (the bar); each is three selections and a JSON round trip.
REPLAY_SETTINGS = settings(
    max_examples=10_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def strategy_bodies(draw, sources=SOURCES) -> dict:
    """A valid strategy over some of the sources: dependencies point to earlier sources,
    bundles name sources or id prefixes (which may overlap, so bundles share items)."""
    reads = [s for s in sources if draw(st.integers(0, 4))] or [sources[0]]
    required = [s for s in reads if draw(st.booleans())]
    optional = [s for s in reads if s not in required]
    body: dict = {"required": required, "optional": optional}
    priority = {s: draw(st.integers(0, 100)) for s in optional if draw(st.booleans())}
    if priority:
        body["priority"] = priority
    depends_on = {}
    for k, source in enumerate(reads[1:], start=1):
        if draw(st.integers(0, 3)) == 0:
            depends_on[source] = [draw(st.sampled_from(reads[:k]))]
    if depends_on:
        body["depends_on"] = depends_on
    bundles = {}
    for s in reads:
        pick = draw(st.integers(0, 5))
        if pick == 0:
            bundles[f"all-{s}"] = [s]
        elif pick == 1:  # an id prefix: some items of the source, maybe shared with all-<s>
            bundles[f"pfx-{s}"] = [f"{s}:{draw(st.integers(0, 3))}"]
    if bundles:
        body["bundles"] = bundles
    on_missing = {
        s: draw(st.sampled_from(["general_policy_only", "ask_again"]))
        for s in reads
        if draw(st.integers(0, 2)) == 0
    }
    if on_missing:
        body["on_missing"] = on_missing
    maximum = draw(st.integers(1, 12_000))
    body["budget"] = {
        "max_input_tokens": maximum,
        "reserve_output_tokens": draw(st.integers(0, min(maximum - 1, 1500))),
    }
    return body


@st.composite
def candidate_lists(draw, sources: tuple[str, ...]) -> list[CandidateItem]:
    """What the providers of ``sources`` returned: acyclic item links, other versions of an
    item (usually not in effect, sometimes in conflict), provider bundles, flagged conflicts,
    sizes given or estimated from a text."""
    troubled = draw(st.booleans())
    outcomes = st.sampled_from(OUTCOMES) if troubled else st.just("fetched")
    conflicts = troubled and draw(st.integers(0, 3)) == 0
    items: list[CandidateItem] = []
    for n in range(draw(st.integers(0, 20))):
        source = draw(st.sampled_from(sources))
        rank = sources.index(source)
        earlier = [c.id for c in items if sources.index(c.source) <= rank]
        depends_on = ()
        if earlier and draw(st.integers(0, 5)) == 0:
            depends_on = tuple(draw(st.lists(st.sampled_from(earlier), max_size=2, unique=True)))
        conflicts_with = ()
        if conflicts and items and draw(st.integers(0, 6)) == 0:
            conflicts_with = (draw(st.sampled_from([c.id for c in items])),)
        sized = draw(st.integers(0, 4)) > 0
        item = CandidateItem(
            id=f"{source}:{n}",
            source=source,
            version=f"v{n}",
            size=draw(st.integers(0, 900)) if sized else None,
            text=None if sized else "x" * draw(st.integers(0, 2000)),
            relevance=draw(st.none() | st.floats(0, 1)),
            bundle=draw(st.none() | st.sampled_from(PROVIDER_BUNDLES)),
            depends_on=depends_on,
            conflicts_with=conflicts_with,
            outcome=draw(outcomes),
            note=draw(st.sampled_from(["", "older product introduction"])),
        )
        items.append(item)
        if draw(st.integers(0, 7)) == 0:
            other = draw(st.sampled_from(OUTCOMES)) if conflicts else "not_applicable"
            items.append(
                CandidateItem(
                    id=item.id,
                    source=source,
                    version=f"v{n}b",
                    size=draw(st.integers(0, 1500)),
                    outcome=other,
                )
            )
    return items


calls = st.fixed_dictionaries(
    {
        "context_window": st.none() | st.integers(1000, 128_000),
        "max_input_tokens": st.none() | st.integers(1, 15_000),
        "fixed_input_tokens": st.integers(0, 3000),
        "relevance_threshold": st.sampled_from([0.0, 0.2, 0.35, 0.5, 0.9]) | st.floats(0, 1),
    }
)


@st.composite
def cases(draw):
    recorded = draw(strategy_bodies())
    reads = tuple(s for s in SOURCES if s in {*recorded["required"], *recorded["optional"]})
    candidates = draw(candidate_lists(reads))
    # S′: often a close edit of S (the usual draft), sometimes anything at all.
    if draw(st.booleans()):
        other = dict(recorded)
        other["budget"] = {
            **recorded["budget"],
            "max_input_tokens": draw(
                st.integers(recorded["budget"]["reserve_output_tokens"] + 1, 12_000)
            ),
        }
        if draw(st.booleans()) and other.get("bundles"):
            other["bundles"] = dict(list(other["bundles"].items())[1:])  # a bundle dropped
            if not other["bundles"]:
                del other["bundles"]
    else:
        other = draw(strategy_bodies())
    return recorded, candidates, other, draw(calls)


def _through_the_wire(selection) -> wire.Trace:
    trace = wire.Trace(
        request_id="req-1",
        agent="assistant_professional",
        occurred_at="2026-12-01T10:00:00Z",
        **selection.trace_fields(),
    )
    return msgspec.json.decode(msgspec.json.encode(trace), type=wire.Trace)


def _fresh(body: dict, candidates: list[CandidateItem], arguments: dict):
    reads = {*body["required"], *body["optional"]}
    asked = [c for c in candidates if c.source in reads]
    return select(strategy=Strategy.from_body(body), candidates=asked, **arguments)


@REPLAY_SETTINGS
@given(cases())
def test_replay__another_version__equals_a_fresh_selection_on_the_same_candidates(case):
    recorded_body, candidates, other_body, arguments = case
    try:
        recorded = select(
            strategy=Strategy.from_body(recorded_body), candidates=candidates, **arguments
        )
    except EngineInputError:
        event("the recorded selection refused its input (no trace)")
        return
    trace = _through_the_wire(recorded)
    rebuilt = trace_candidates(trace.candidates)

    try:
        fresh = _fresh(other_body, candidates, arguments)
    except EngineInputError as refused:
        try:
            replay(other_body, rebuilt, trace.selection)
        except EngineInputError as again:
            assert again.findings == refused.findings
            event("both refused (a dependency circle under S′)")
            return
        raise AssertionError("the replay decided where a fresh selection refused") from None
    again = replay(other_body, rebuilt, trace.selection)

    assert facts(again) == facts(fresh)
    assert (again.used_tokens, again.available_tokens, again.max_input_tokens) == (
        fresh.used_tokens,
        fresh.available_tokens,
        fresh.max_input_tokens,
    )
    assert [d.reason for d in again.decisions] == [d.reason for d in fresh.decisions]
    event(f"status {fresh.status}")
    if any("+" in (d.bundle or "") for d in fresh.decisions):
        event("merged bundle groups")


@settings(max_examples=2_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_replay__the_recorded_version__reproduces_the_recorded_facts(case):
    recorded_body, candidates, _, arguments = case
    try:
        recorded = select(
            strategy=Strategy.from_body(recorded_body), candidates=candidates, **arguments
        )
    except EngineInputError:
        return
    trace = _through_the_wire(recorded)

    again = replay_trace(recorded_body, trace)

    assert facts(again) == Facts.recorded(trace.status, trace.degradation, trace.candidates)
    assert again.input_estimate == trace.input_estimate.value
    assert again.engine == trace.selection.engine


def test_replay__reason_codes__one_per_candidate_from_the_closed_list():
    body = {
        "required": ["task_state", "applicable_policy"],
        "optional": ["recent_dialogue"],
        "bundles": {"policy-P7": ["P7"], "terms": ["P7#terms"]},
        "budget": {"max_input_tokens": 3000},
    }
    candidates = [
        CandidateItem(id="task_state:T9", source="task_state", size=300),
        CandidateItem(id="P7#terms", source="applicable_policy", size=2100),
        CandidateItem(id="chat:1", source="recent_dialogue", size=100, relevance=0.9),
        CandidateItem(id="chat:2", source="recent_dialogue", size=900, relevance=0.8),
        CandidateItem(id="chat:3", source="recent_dialogue", size=10, relevance=0.05),
        CandidateItem(id="chat:4", source="recent_dialogue", outcome="not_fetched"),
    ]

    selection = select(strategy=body, candidates=candidates)

    assert [(d.id, d.decision, d.reason_code, d.bundle) for d in selection.decisions] == [
        ("task_state:T9", "selected", "required", None),
        ("P7#terms", "selected", "required", "policy-P7+terms"),
        ("chat:1", "selected", "optional_fits", None),
        ("chat:2", "over_budget", "over_budget_optional", None),
        ("chat:3", "irrelevant", "below_threshold", None),
        ("chat:4", "not_fetched", "provider_not_fetched", None),
    ]
    wired = selection.wire_candidates()
    assert [c.provider_bundle for c in wired] == [None] * 6
    assert {d.reason_code for d in selection.decisions} <= set(wire.REASON_CODES)


def test_replay__merged_bundle_label__rebuilt_from_the_provider_bundle_not_the_group():
    """Before the replay fields, P7's group label came back as its bundle and the draft that
    drops the `terms` bundle still saw `policy-P7+terms` (18–44% of traces wrong)."""
    body = {
        "required": ["applicable_policy"],
        "bundles": {"terms": ["P7"]},
        "budget": {"max_input_tokens": 8000},
    }
    p7 = CandidateItem(id="P7", source="applicable_policy", size=100, bundle="policy-P7")
    trace = _through_the_wire(select(strategy=body, candidates=[p7]))
    assert trace.candidates[0].bundle == "policy-P7+terms"
    assert trace.candidates[0].provider_bundle == "policy-P7"

    draft = {**body, "bundles": {}}
    again = replay(draft, trace_candidates(trace.candidates), trace.selection)

    assert again.decisions[0].bundle == "policy-P7"


def test_replay__threshold_recorded__a_non_default_threshold_replays_exactly():
    body = {
        "required": ["task_state"],
        "optional": ["recent_dialogue"],
        "budget": {"max_input_tokens": 8000},
    }
    chat = CandidateItem(id="chat:1", source="recent_dialogue", size=100, relevance=0.3)
    task = CandidateItem(id="task:1", source="task_state", size=100)
    trace = _through_the_wire(
        select(strategy=body, candidates=[task, chat], relevance_threshold=0.35)
    )
    assert trace.selection.relevance_threshold == 0.35

    again = replay_trace(body, trace)

    assert again.decisions[1].decision == "irrelevant"


def test_replay__version_without_a_source__its_candidates_not_requested():
    recorded = {
        "required": ["task_state"],
        "optional": ["recent_dialogue"],
        "budget": {"max_input_tokens": 8000},
    }
    draft = {"required": ["task_state"], "budget": {"max_input_tokens": 8000}}
    items = [
        CandidateItem(id="task:1", source="task_state", size=100),
        CandidateItem(id="chat:1", source="recent_dialogue", size=100, relevance=0.9),
    ]
    trace = _through_the_wire(select(strategy=recorded, candidates=items))
    rebuilt = trace_candidates(trace.candidates)

    again = replay(draft, rebuilt, trace.selection)

    assert facts(again, of=rebuilt).candidates[1] == NOT_REQUESTED
    assert facts(again, of=rebuilt).candidates[0].decision == "selected"


def test_sources_never_requested__a_new_required_source__named():
    v2 = {
        "required": ["task_state", "order_delivery"],
        "optional": ["applicable_policy"],
        "budget": {"max_input_tokens": 6000},
    }
    draft = {
        "required": ["task_state", "order_delivery", "memory"],
        "optional": ["knowledge"],
        "budget": {"max_input_tokens": 6000},
    }

    assert sources_never_requested(v2, draft) == ("memory", "knowledge")
    assert sources_never_requested(draft, v2) == ("applicable_policy",)


def test_replay_trace__an_older_runtime_without_replay_fields__not_replayable():
    trace = wire.Trace(
        request_id="req-1",
        agent="a",
        occurred_at="2026-12-01T10:00:00Z",
        status="ready",
        candidates=[wire.Candidate(id="x", source="task_state", decision="selected")],
    )
    body = {"required": ["task_state"], "budget": {"max_input_tokens": 100}}

    try:
        replay_trace(body, trace)
    except NotReplayable as refused:
        assert "selection" in str(refused)
    else:
        raise AssertionError("replayed a trace without replay fields")
