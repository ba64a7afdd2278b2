"""Malformed candidates: a clear error naming the item, never a wrong selection."""

from __future__ import annotations

import pytest
from context_runtime.engine import CandidateItem, EngineInputError, Strategy, select

STRATEGY = Strategy.from_body(
    {
        "required": ["task_state", "order_delivery", "applicable_policy"],
        "optional": ["recent_dialogue"],
        "depends_on": {"recent_dialogue": ["task_state"]},
        "budget": {"max_input_tokens": 8000, "reserve_output_tokens": 1000},
    }
)
TASK = CandidateItem(id="task_state:T9", source="task_state", version="4", size=310)
ORDER = CandidateItem(id="order:A1042", source="order_delivery", version="r12", size=640)
POLICY = CandidateItem(id="P7-v2", source="applicable_policy", version="v2", size=2100)


def rejected(*candidates, **arguments) -> list:
    with pytest.raises(EngineInputError) as error:
        select(strategy=STRATEGY, candidates=list(candidates), **arguments)
    return error.value.findings


def test_candidate__negative_size__error_names_the_item_and_field():
    broken = CandidateItem(id="P7-v2", source="applicable_policy", version="v2", size=-5)

    (finding,) = rejected(TASK, ORDER, broken)

    assert (finding.path, finding.code) == ("candidates[2].size", "negative_size")
    assert finding.message == "The size of P7-v2 is -5 tokens; a size is 0 or more."


def test_candidate__same_id_and_version_twice__duplicate_id_names_both_places():
    (finding,) = rejected(TASK, ORDER, POLICY, ORDER)

    assert (finding.path, finding.code) == ("candidates[3].id", "duplicate_id")
    assert "order:A1042 r12 comes twice (candidates[1] and candidates[3])" in finding.message


def test_candidate__same_id_from_two_sources__duplicate_id():
    clash = CandidateItem(id="order:A1042", source="recent_dialogue", size=10)

    (finding,) = rejected(TASK, ORDER, POLICY, clash)

    assert (finding.path, finding.code) == ("candidates[3].id", "duplicate_id")
    assert "order_delivery" in finding.message and "recent_dialogue" in finding.message


def test_candidate__source_the_strategy_does_not_read__recorded_not_requested_not_weighed():
    """Issue 32: a provider's item of a source the strategy does not declare used to be
    refused (or left out of the trace by the ADK assembly); it is recorded, never weighed."""
    stray = CandidateItem(id="weather:SG", source="weather", size=40)

    selection = select(strategy=STRATEGY, candidates=[TASK, stray, ORDER, POLICY])

    assert selection.status == "ready"
    assert [d.id for d in selection.decisions] == [
        "task_state:T9",
        "weather:SG",
        "order:A1042",
        "P7-v2",
    ]
    left_out = selection.decisions[1]
    assert (left_out.decision, left_out.reason_code, left_out.required) == (
        "not_requested",
        "source_not_read",
        False,
    )
    assert "does not read weather" in left_out.reason
    assert selection.selected_ids == ("task_state:T9", "order:A1042", "P7-v2")
    assert selection.used_tokens == 310 + 640 + 2100  # the stray's 40 are not counted
    assert [c.id for c in selection.trace_fields()["candidates"]][1] == "weather:SG"


def test_candidate__source_that_is_no_key__unknown_source_names_item_and_source():
    stray = CandidateItem(id="weather:SG", source="", size=40)

    (finding,) = rejected(TASK, ORDER, POLICY, stray)

    assert (finding.path, finding.code) == ("candidates[3].source", "unknown_source")


def test_candidate__malformed_item_of_a_source_not_read__still_refused():
    stray = CandidateItem(id="weather:SG", source="weather", size=-1)

    (finding,) = rejected(TASK, ORDER, POLICY, stray)

    assert (finding.path, finding.code) == ("candidates[3].size", "negative_size")


def test_candidates__dependency_cycle__error_shows_the_circle():
    terms = CandidateItem(
        id="P7-terms", source="applicable_policy", size=10, depends_on=("P7-annex",)
    )
    annex = CandidateItem(
        id="P7-annex", source="applicable_policy", size=10, depends_on=("P7-terms",)
    )

    (finding,) = rejected(TASK, ORDER, terms, annex)

    assert (finding.path, finding.code) == ("candidates[2].depends_on", "dependency_cycle")
    assert finding.message.startswith("P7-terms → P7-annex → P7-terms:")


def test_candidate__depends_on_itself__dependency_cycle():
    loop = CandidateItem(id="P7-v2", source="applicable_policy", size=10, depends_on=("P7-v2",))

    (finding,) = rejected(TASK, ORDER, loop)

    assert (finding.path, finding.code) == ("candidates[2].depends_on", "dependency_cycle")
    assert "P7-v2 depends on itself" in finding.message


def test_candidates__circle_through_the_strategy__dependency_cycle_names_the_items():
    # recent_dialogue depends on task_state (strategy); the task item depends on a chat item.
    task = CandidateItem(id="task_state:T9", source="task_state", size=10, depends_on=("chat:e-1",))
    chat = CandidateItem(id="chat:e-1", source="recent_dialogue", size=10)

    (finding,) = rejected(task, ORDER, POLICY, chat)

    assert finding.code == "dependency_cycle"
    assert "task_state:T9" in finding.message and "chat:e-1" in finding.message


def test_candidates__several_problems__all_reported_at_once():
    findings = rejected(
        CandidateItem(id="task_state:T9", source="task_state", size=-1),
        CandidateItem(id="order:A1042", source="", size=640),
        CandidateItem(id="P7-v2", source="applicable_policy", relevance=1.5, size=1),
        CandidateItem(id="chat:e-1", source="recent_dialogue"),
    )

    assert [(f.path, f.code) for f in findings] == [
        ("candidates[0].size", "negative_size"),
        ("candidates[1].source", "unknown_source"),
        ("candidates[2].relevance", "out_of_range"),
        ("candidates[3].size", "missing_size"),
    ]


def test_candidate__conflict_flag_names_an_absent_item__unknown_reference():
    flagged = CandidateItem(
        id="P7-v2", source="applicable_policy", size=10, conflicts_with=("P7-v9",)
    )

    (finding,) = rejected(TASK, ORDER, flagged)

    assert (finding.path, finding.code) == ("candidates[2].conflicts_with[0]", "unknown_reference")
    assert "P7-v2" in finding.message and "P7-v9" in finding.message


def test_candidate__not_a_candidate_item__invalid_type():
    (finding,) = rejected(TASK, ORDER, {"id": "P7-v2", "source": "applicable_policy"})

    assert (finding.path, finding.code) == ("candidates[2]", "invalid_type")


def test_candidate__outcome_misspelt__invalid_choice():
    odd = CandidateItem(id="P7-v2", source="applicable_policy", size=10, outcome="timeout")

    (finding,) = rejected(TASK, ORDER, odd)

    assert (finding.path, finding.code) == ("candidates[2].outcome", "invalid_choice")


def test_estimator__negative_estimate__error_names_the_item():
    class Broken:
        name = "broken"

        def estimate(self, text):
            return -1

    note = CandidateItem(id="chat:e-1", source="recent_dialogue", text="hello")

    (finding,) = rejected(TASK, ORDER, POLICY, note, estimator=Broken())

    assert (finding.path, finding.code) == ("candidates[3].text", "invalid_estimate")
    assert "broken" in finding.message and "chat:e-1" in finding.message


def test_arguments__zero_window_and_threshold_above_one__both_reported():
    findings = rejected(TASK, ORDER, POLICY, context_window=0, relevance_threshold=2)

    assert [(f.path, f.code) for f in findings] == [
        ("context_window", "out_of_range"),
        ("relevance_threshold", "out_of_range"),
    ]


def test_strategy_body__required_missing__error_path_under_strategy():
    with pytest.raises(EngineInputError) as error:
        select(strategy={"budget": {"max_input_tokens": 100}}, candidates=[])

    assert [(f.path, f.code) for f in error.value.findings] == [("strategy.required", "required")]
    assert "strategy.required" in str(error.value)
