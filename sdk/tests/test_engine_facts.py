"""The engine's fast entry: ``decide_run`` / ``Replay.run_facts`` decide without writing the
reason texts, and ``shadow_run`` compares through it (docs/PERFORMANCE.md, issue 22's 0.1 ms).

What must hold: on any input the fast entry gives exactly what the normal path gives — every
decision, reason code, group label, required flag, status, degradation, problem, selected id
and token count, and each reason text when it is read; the shadow it compares equals
``shadow_result`` on a full selection; what one version left on the checked candidates (who
belongs with whom) never changes another version's selection.
"""

from __future__ import annotations

from context_runtime import wire
from context_runtime.engine import DEFAULT_ESTIMATOR, EngineInputError, Strategy, select
from context_runtime.engine._selection import decide, decide_run
from context_runtime.replay import Replay, facts, shadow_result, shadow_run, sources_never_requested
from hypothesis import HealthCheck, given, settings
from test_replay_properties import cases

FAST_SETTINGS = settings(
    max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _live(body, candidates, arguments):
    try:
        return select(strategy=Strategy.from_body(body), candidates=candidates, **arguments)
    except EngineInputError:
        return None


@FAST_SETTINGS
@given(cases())
def test_run_facts__any_version__equals_the_full_selection(case):
    live_body, candidates, other_body, arguments = case
    live = _live(live_body, candidates, arguments)
    if live is None:
        return
    for body in (live_body, other_body):
        strategy = Strategy.from_body(body)
        try:
            full = Replay(candidates, live.selection_info()).run(strategy)
        except EngineInputError:
            continue
        fast = Replay(candidates, live.selection_info()).run_facts(strategy)

        assert facts(fast, of=candidates) == facts(full, of=candidates)
        assert (fast.status, fast.degradation, fast.problems) == (
            full.status,
            full.degradation,
            full.problems,
        )
        assert fast.selected_ids == full.selected_ids
        assert (fast.used_tokens, fast.available_tokens, fast.input_estimate) == (
            full.used_tokens,
            full.available_tokens,
            full.input_estimate,
        )
        assert [fast.reason(i) for i in range(len(fast.items))] == [
            d.reason for d in full.decisions
        ]
        assert fast.selection() == full


@FAST_SETTINGS
@given(cases())
def test_shadow_run__any_two_versions__equals_the_comparison_of_full_selections(case):
    live_body, candidates, other_body, arguments = case
    live = _live(live_body, candidates, arguments)
    if live is None:
        return
    live_strategy = Strategy.from_body(live_body)
    for body in (live_body, other_body):
        strategy = Strategy.from_body(body)
        try:
            full = Replay(live.candidates, live.selection_info()).run(strategy)
        except EngineInputError:
            continue
        expected = shadow_result(
            live,
            full,
            version=4,
            sources_not_fetched=sources_never_requested(live_strategy, strategy),
        )
        assert shadow_run(live, strategy, version=4, live_strategy=live_strategy) == expected


@FAST_SETTINGS
@given(cases())
def test_checked_candidates__shared_by_two_versions__neither_changes_the_other(case):
    """Who belongs with whom is kept on the checked candidates per strategy: a version decided
    after another on the same check decides as it does on a check of its own."""
    live_body, candidates, other_body, arguments = case
    live = _live(live_body, candidates, arguments)
    if live is None:
        return
    arguments = {
        "context_window": None,
        "max_input_tokens": None,
        "fixed_input_tokens": 0,
        "relevance_threshold": 0.2,
        "estimator": DEFAULT_ESTIMATOR,
        **arguments,
    }
    other = Strategy.from_body(other_body)
    if not other.sources >= {c.source for c in live.candidates}:
        return  # another check: nothing shared
    try:
        own = select(strategy=other, candidates=live.candidates, **arguments)
    except EngineInputError:
        return
    shared = decide(other, live.candidates, live.checked, **arguments)
    assert shared == own
    again = decide(Strategy.from_body(live_body), live.candidates, live.checked, **arguments)
    assert again == live
    assert decide_run(other, live.candidates, live.checked, **arguments).selection() == own


def test_shadow_run__more_candidates_than_a_trace_holds__same_as_the_full_comparison():
    from context_runtime.engine import CandidateItem
    from test_shadow import CANDIDATES, V3, live

    extra = tuple(
        CandidateItem(id=f"chat:x-{n}", source="recent_dialogue", size=30, relevance=0.5)
        for n in range(wire.MAX_CANDIDATES_PER_TRACE + 20)
    )
    selection = live(candidates=CANDIDATES + extra)
    smaller = Strategy.from_body({**V3, "budget": {"max_input_tokens": 4000}})
    full = Replay(selection.candidates, selection.selection_info()).run(smaller)
    expected = shadow_result(selection, full, version=4)
    got = shadow_run(selection, smaller, version=4, live_strategy=Strategy.from_body(V3))
    assert got == expected and got.differences_total > 0
