"""The shadow run (``context_runtime.replay.shadow_run``): a shadow strategy version decided on
live's candidates with live's arguments, compared with live (issue 22, item 2).

What a reader of the trace relies on: an identical version never disagrees (the A/A
calibration); a different one names each candidate it decided otherwise by its position in
the trace's candidates, with its own decision and reason code; a source live never asked for
is named, never fetched; the block goes over the wire and older runtimes' blocks still read.
The ADK path (fixed input, provider and model calls) is in ``test_adk_shadow.py``.
"""

from __future__ import annotations

import msgspec
from context_runtime import wire
from context_runtime.engine import CandidateItem, CharacterEstimator, Strategy, select
from context_runtime.replay import NOT_REQUESTED, shadow_run
from hypothesis import HealthCheck, given, settings
from test_replay_properties import cases

V3 = {
    "required": ["task_state", "order_delivery", "applicable_policy"],
    "optional": ["recent_dialogue"],
    "bundles": {"policy-P7": ["P7-"]},
    "on_missing": {"order_delivery": "general_policy_only"},
    "budget": {"max_input_tokens": 8000, "reserve_output_tokens": 1000},
}
CANDIDATES = (
    CandidateItem(id="task_state:T9", source="task_state", version="4", size=310),
    CandidateItem(id="order:A1042", source="order_delivery", version="r12", size=640),
    CandidateItem(id="P7-v2", source="applicable_policy", version="v2", size=2100),
    CandidateItem(id="chat:e-318", source="recent_dialogue", size=120, relevance=0.82),
    CandidateItem(id="old-chat", source="recent_dialogue", size=900, relevance=0.05),
)


def live(body=V3, candidates=CANDIDATES, **arguments):
    arguments = {"context_window": 128_000, "fixed_input_tokens": 0, **arguments}
    return select(strategy=Strategy.from_body(body), candidates=candidates, **arguments)


def shadow(selection, body, *, live_body=V3, **options):
    return shadow_run(
        selection,
        Strategy.from_body(body),
        version=4,
        live_strategy=Strategy.from_body(live_body),
        **options,
    )


def trace_of(selection, shadow_result) -> wire.Trace:
    """The trace as the console receives it (through its JSON)."""
    trace = wire.Trace(
        request_id="req-1",
        agent="assistant_professional",
        occurred_at="2026-12-02T10:00:00Z",
        shadow=shadow_result,
        **selection.trace_fields(),
    )
    return msgspec.json.decode(msgspec.json.encode(trace), type=wire.Trace)


def test_shadow__same_version_and_fixed_input__agrees_with_no_differences():
    # 4,500 tokens of history: live is over budget; a shadow charged no fixed input (the bug
    # measured on main) would say ready.
    selection = live(fixed_input_tokens=4_500)

    result = shadow(selection, V3)

    assert selection.status == "budget_exceeded"
    assert result.status == "budget_exceeded"
    assert result.selected == list(selection.selected_ids)
    assert result.differences == () and result.differences_total == 0
    assert result.used_tokens == selection.input_estimate
    assert result.sources_not_fetched == ()


def test_shadow__smaller_budget__differences_name_positions_decisions_and_reason_codes():
    selection = live(fixed_input_tokens=2_000)
    smaller = {**V3, "budget": {"max_input_tokens": 4000, "reserve_output_tokens": 1000}}

    result = shadow(selection, smaller)

    assert selection.status == "ready"
    assert result.status == "budget_exceeded"
    assert result.used_tokens == 2_000 + 310 + 640  # what still fitted: task and order
    trace = trace_of(selection, result)
    named = {
        trace.candidates[d.index].id: (d.decision, d.reason_code, d.required)
        for d in trace.shadow.differences
    }
    assert named == {
        "P7-v2": ("over_budget", "over_budget_bundle", True),
        "chat:e-318": ("over_budget", "over_budget_optional", False),
    }
    assert trace.shadow.differences_total == 2


def test_shadow__source_live_did_not_read__named_not_fetched__live_only_source_not_requested():
    selection = live()
    # Reads memory (live never asked its provider) and no longer reads recent_dialogue.
    other = {**V3, "optional": ["memory"]}

    result = shadow(selection, other)

    assert result.sources_not_fetched == ("memory",)
    assert result.status == "ready"
    by_index = {d.index: d for d in result.differences}
    assert sorted(by_index) == [3, 4]  # the two recent_dialogue candidates
    for d in by_index.values():
        assert (d.decision, d.reason_code) == (NOT_REQUESTED.decision, NOT_REQUESTED.reason_code)
        assert d.required is False


def test_shadow__same_version_custom_estimator__sizes_items_as_live_did():
    texts = (
        CandidateItem(id="task_state:T9", source="task_state", text="t" * 3000),
        CandidateItem(id="order:A1042", source="order_delivery", text="o" * 6000),
        CandidateItem(id="P7-v2", source="applicable_policy", text="p" * 9000),
    )
    estimator = CharacterEstimator(chars_per_token=2)  # 9,000 tokens: over live's budget
    selection = live(candidates=texts, estimator=estimator)

    result = shadow(selection, V3, estimator=estimator)

    assert selection.status == "budget_exceeded"
    assert result.status == "budget_exceeded" and result.differences_total == 0


def test_shadow__more_candidates_than_a_trace_holds__indexes_what_is_sent_counts_the_rest():
    many = CANDIDATES[:3] + tuple(
        CandidateItem(id=f"chat:{n}", source="recent_dialogue", size=1, relevance=0.5)
        for n in range(wire.MAX_CANDIDATES_PER_TRACE + 100)
    )
    selection = live(candidates=many)
    without_dialogue = {**V3, "optional": []}

    result = shadow(selection, without_dialogue)
    trace = trace_of(selection, result)

    assert trace.candidates_truncated
    # Every dialogue candidate differs (not requested); 50 are named, all are counted.
    assert trace.shadow.differences_total == len(many) - 3
    assert len(trace.shadow.differences) == wire.MAX_SHADOW_DIFFERENCES
    for d in trace.shadow.differences:
        assert trace.candidates[d.index].source == "recent_dialogue"


def test_shadow_block_of_an_older_runtime__still_decodes_without_the_new_fields():
    old = (
        b'{"request_id":"req-1","agent":"a","occurred_at":"2026-12-02T10:00:00Z",'
        b'"status":"ready","shadow":{"version":4,"status":"ready","selected":["P7-v2"]}}'
    )

    trace = msgspec.json.decode(old, type=wire.Trace)

    assert trace.shadow.version == 4 and trace.shadow.selected == ["P7-v2"]
    assert trace.shadow.differences == () and trace.shadow.differences_total is None
    assert trace.shadow.used_tokens is None and trace.shadow.degradation is None


@settings(max_examples=1_500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_shadow__any_two_versions__agrees_exactly_when_every_decision_does(case):
    """For random strategies, candidates and arguments: the same version never differs, and
    another version's differences are exactly the candidates it decides otherwise."""
    from context_runtime.engine import EngineInputError
    from context_runtime.replay import facts

    live_body, candidates, other_body, arguments = case
    try:
        selection = select(
            strategy=Strategy.from_body(live_body), candidates=candidates, **arguments
        )
    except EngineInputError:
        return
    same = shadow(selection, live_body, live_body=live_body)
    assert same.status == selection.status and same.differences_total == 0
    assert same.selected == list(selection.selected_ids)
    try:
        other = shadow(selection, other_body, live_body=live_body)
    except EngineInputError:
        return
    reads = {*other_body["required"], *other_body["optional"]}
    fresh = select(
        strategy=Strategy.from_body(other_body),
        candidates=[c for c in candidates if c.source in reads],
        **arguments,
    )
    assert (other.status, other.degradation) == (fresh.status, fresh.degradation)
    assert other.used_tokens == fresh.input_estimate
    theirs = facts(fresh, of=selection.candidates).candidates
    ours = facts(selection).candidates
    differing = [
        i
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True))
        if (a.decision, a.reason_code, a.required) != (b.decision, b.reason_code, b.required)
    ]
    assert [d.index for d in other.differences] == differing[: wire.MAX_SHADOW_DIFFERENCES]
    assert other.differences_total == len(differing)
