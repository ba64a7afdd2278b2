"""The selection engine as a runtime meets it on the consultation A1042 (docs/background.md §
Consultation A1042).

Each test is a scenario an operator would recognise from docs/background.md: what the model
gets, what is left out and why, and whether the runtime may go ahead.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest
from context_runtime import wire
from context_runtime.engine import (
    CandidateItem,
    CharacterEstimator,
    EngineInputError,
    Strategy,
    context_sections,
    select,
)

# after_sales_consultation v3 (docs/background.md § Strategies per task, in the contract's
# spelling), with the bundle the strategy marks as required evidence: the full terms of
# policy P7.
CONSULTATION = {
    "required": ["task_state", "order_delivery", "applicable_policy"],
    "optional": ["recent_dialogue"],
    "bundles": {"policy-P7": ["P7-"]},
    "allowed_tools": ["lookup_order", "search_policy"],
    "on_missing": {"order_delivery": "general_policy_only"},
    "max_extra_reads": 2,
    "budget": {"max_input_tokens": 8000, "reserve_output_tokens": 1000},
}
STRATEGY = Strategy.from_body(CONSULTATION)

TASK = CandidateItem(id="task_state:T9", source="task_state", version="4", size=310)
ORDER = CandidateItem(id="order:A1042", source="order_delivery", version="r12", size=640)
POLICY = CandidateItem(id="P7-v2", source="applicable_policy", version="v2", size=2100)
RECENT = CandidateItem(
    id="chat:e-318", source="recent_dialogue", version="e-318", size=1150, relevance=0.82
)
OLD_INTRO = CandidateItem(
    id="old-chat",
    source="recent_dialogue",
    version="e-311",
    size=900,
    relevance=0.05,
    note="older product introduction",
)
A1042 = [TASK, ORDER, POLICY, RECENT, OLD_INTRO]


def strategy(**changes) -> Strategy:
    return Strategy.from_body({**CONSULTATION, **changes})


def decided(selection) -> dict[str, tuple[str, str]]:
    return {d.id: (d.decision, d.reason) for d in selection.decisions}


def decision_of(selection, item_id: str) -> str:
    return decided(selection)[item_id][0]


def findings_of(error: pytest.ExceptionInfo) -> list[tuple[str, str]]:
    return [(f.path, f.code) for f in error.value.findings]


# --------------------------------------------------------------------------- a normal request


def test_consultation_A1042__all_sources_answer__ready_with_evidence_in_order():
    selection = select(strategy=STRATEGY, candidates=A1042, context_window=128_000)

    assert selection.status == "ready"
    assert selection.usable
    assert selection.degradation is None
    assert selection.selected_ids == ("task_state:T9", "order:A1042", "P7-v2", "chat:e-318")
    assert selection.input_estimate == 310 + 640 + 2100 + 1150
    assert selection.available_tokens == 7000
    assert selection.reason == "every required item is selected; 4,200 of 7,000 tokens used"


def test_consultation_A1042__every_candidate__one_decision_with_a_reason_in_input_order():
    selection = select(strategy=STRATEGY, candidates=A1042)

    assert [d.id for d in selection.decisions] == [c.id for c in A1042]
    assert decided(selection) == {
        "task_state:T9": ("selected", "required"),
        "order:A1042": ("selected", "required"),
        "P7-v2": ("selected", "required"),
        "chat:e-318": ("selected", "optional, priority 0, relevance 0.82, fits the budget"),
        "old-chat": (
            "irrelevant",
            "relevance 0.05 is below the threshold 0.20 (older product introduction)",
        ),
    }


def test_task_state_T9__candidates_arrive_shuffled__required_first_in_strategy_order():
    shuffled = [OLD_INTRO, RECENT, POLICY, ORDER, TASK]

    selection = select(strategy=STRATEGY, candidates=shuffled)

    assert selection.selected_ids == ("task_state:T9", "order:A1042", "P7-v2", "chat:e-318")


def test_order_A1042_r12__selected__trace_carries_its_version_and_required_flag():
    selection = select(strategy=STRATEGY, candidates=A1042)

    order = next(c for c in selection.wire_candidates() if c.id == "order:A1042")
    assert (order.source, order.version, order.size, order.required) == (
        "order_delivery",
        "r12",
        640,
        True,
    )
    assert order.decision == "selected"


def test_old_product_introduction__in_the_trace__carries_what_a_replay_needs():
    selection = select(strategy=STRATEGY, candidates=A1042)

    old = next(c for c in selection.wire_candidates() if c.id == OLD_INTRO.id)
    assert (old.decision, old.outcome, old.relevance, old.note) == (
        "irrelevant",
        OLD_INTRO.outcome,
        OLD_INTRO.relevance,
        OLD_INTRO.note,
    )
    # Replaying from the trace alone gives the same decisions.
    replayed = select(
        strategy=STRATEGY,
        candidates=[
            CandidateItem(
                id=c.id,
                source=c.source,
                version=c.version,
                size=c.size,
                relevance=c.relevance,
                bundle=next(i.bundle for i in A1042 if i.id == c.id),
                depends_on=tuple(c.depends_on),
                conflicts_with=tuple(c.conflicts_with),
                outcome=c.outcome,
                note=c.note,
            )
            for c in selection.wire_candidates()
        ],
    )
    assert replayed.decisions == selection.decisions


def test_consultation_A1042__trace_fields__a_valid_trace_for_the_console():
    selection = select(strategy=STRATEGY, candidates=A1042, context_window=128_000)

    trace = wire.Trace(
        request_id="req-92",
        agent="assistant_professional",
        occurred_at=datetime(2026, 11, 30, 9, 12, 44, tzinfo=UTC),
        **selection.trace_fields(),
    )
    decoded = msgspec.json.decode(msgspec.json.encode(trace), type=wire.Trace)  # validates
    assert decoded.status == "ready"
    assert decoded.input_estimate.value == 4200
    assert decoded.input_estimate.estimator == "chars/4"
    assert decoded.budget.max_input_tokens == 8000
    assert [c.decision for c in decoded.candidates] == [
        "selected",
        "selected",
        "selected",
        "selected",
        "irrelevant",
    ]


def test_consultation_A1042__shadow_strategy__shadow_result_lists_its_selection():
    shadow = select(strategy=strategy(optional=[]), candidates=[TASK, ORDER, POLICY])

    result = shadow.shadow_result(version=4)

    assert result == wire.ShadowResult(
        version=4, status="ready", selected=["task_state:T9", "order:A1042", "P7-v2"]
    )


def test_consultation_A1042__same_input_twice__equal_selections():
    first = select(strategy=STRATEGY, candidates=A1042)
    again = select(strategy=CONSULTATION, candidates=list(A1042))

    assert first == again


# --------------------------------------------------------------------------- the budget


def test_budget__client_declares_a_huge_window__strategy_budget_still_applies():
    selection = select(
        strategy=STRATEGY, candidates=A1042, context_window=2_000_000, max_input_tokens=10**9
    )

    assert selection.max_input_tokens == 8000
    assert selection.available_tokens == 7000


def test_budget__small_model_window__room_is_the_window_less_the_output_reserve():
    selection = select(strategy=STRATEGY, candidates=A1042, context_window=4500)

    assert selection.available_tokens == 3500
    assert selection.selected_ids == ("task_state:T9", "order:A1042", "P7-v2")
    assert decided(selection)["chat:e-318"] == (
        "over_budget",
        "optional, priority 0: 1,150 tokens do not fit the 450 left",
    )
    assert selection.status == "ready"  # optional history over budget may be left out


def test_budget__system_prompt_and_question__counted_before_any_item():
    selection = select(strategy=STRATEGY, candidates=A1042, fixed_input_tokens=3000)

    assert selection.available_tokens == 4000
    assert decision_of(selection, "chat:e-318") == "over_budget"
    assert selection.input_estimate == 3000 + 310 + 640 + 2100


def test_budget__required_item_does_not_fit__budget_exceeded_and_never_usable():
    big_order = CandidateItem(id="order:A1042", source="order_delivery", version="r12", size=6800)

    selection = select(strategy=STRATEGY, candidates=[TASK, big_order, POLICY])

    assert selection.status == "budget_exceeded"
    assert not selection.usable
    assert decided(selection)["order:A1042"] == (
        "over_budget",
        "required, but its 6,800 tokens do not fit the 6,690 left",
    )
    assert selection.reason.startswith("order:A1042: required, but its 6,800 tokens")


def test_budget__large_optional_item_skipped__a_smaller_one_after_it_still_fits():
    long_chat = CandidateItem(id="chat:e-300", source="recent_dialogue", size=4000, relevance=0.9)
    short_chat = CandidateItem(id="chat:e-301", source="recent_dialogue", size=500, relevance=0.5)

    selection = select(strategy=STRATEGY, candidates=[TASK, ORDER, POLICY, long_chat, short_chat])

    assert decision_of(selection, "chat:e-300") == "over_budget"
    assert decision_of(selection, "chat:e-301") == "selected"


def test_optional_sources__priorities_set__higher_priority_chosen_first_whatever_the_score():
    body = {
        **CONSULTATION,
        "optional": ["recent_dialogue", "memory"],
        "priority": {"memory": 60, "recent_dialogue": 40},
    }
    chat = CandidateItem(id="chat:e-318", source="recent_dialogue", size=3000, relevance=0.99)
    memory = CandidateItem(id="memory:m-1", source="memory", size=3000, relevance=0.3)

    selection = select(strategy=body, candidates=[TASK, ORDER, POLICY, chat, memory])

    assert decided(selection)["memory:m-1"] == (
        "selected",
        "optional, priority 60, relevance 0.30, fits the budget",
    )
    assert decision_of(selection, "chat:e-318") == "over_budget"


def test_optional_items__same_priority__higher_relevance_then_id_first():
    items = [
        CandidateItem(id="chat:b", source="recent_dialogue", size=1, relevance=0.5),
        CandidateItem(id="chat:a", source="recent_dialogue", size=1, relevance=0.5),
        CandidateItem(id="chat:c", source="recent_dialogue", size=1, relevance=0.9),
        CandidateItem(id="chat:unscored", source="recent_dialogue", size=1),
    ]

    selection = select(strategy=STRATEGY, candidates=[TASK, ORDER, POLICY, *items])

    assert selection.selected_ids[3:] == ("chat:c", "chat:a", "chat:b", "chat:unscored")


# --------------------------------------------------------------------------- bundles


def test_policy_bundle_P7_v2__does_not_fit__whole_bundle_over_budget_never_truncated():
    terms = CandidateItem(id="P7-v2#terms", source="applicable_policy", version="v2", size=2300)
    annex = CandidateItem(id="P7-v2#annex-b", source="applicable_policy", version="v2", size=5200)

    selection = select(
        strategy=STRATEGY, candidates=[TASK, ORDER, terms, annex], fixed_input_tokens=2000
    )

    assert selection.status == "budget_exceeded"
    expected = "indivisible bundle policy-P7 (7,500 tokens) does not fit the 4,050 left"
    assert decided(selection)["P7-v2#terms"] == ("over_budget", expected)
    assert decided(selection)["P7-v2#annex-b"] == ("over_budget", expected)
    assert selection.selected_ids == ("task_state:T9", "order:A1042")  # terms alone: never


def test_policy_bundle_P7_v2__fits__all_members_selected_together():
    terms = CandidateItem(id="P7-v2#terms", source="applicable_policy", version="v2", size=2300)
    annex = CandidateItem(id="P7-v2#annex-b", source="applicable_policy", version="v2", size=2200)

    selection = select(strategy=STRATEGY, candidates=[TASK, ORDER, terms, annex])

    assert selection.status == "ready"
    assert {d.bundle for d in selection.decisions if d.id.startswith("P7-")} == {"policy-P7"}
    assert selection.selected_ids[2:] == ("P7-v2#terms", "P7-v2#annex-b")


def test_policy_bundle_P7_v2__annex_not_fetched__terms_not_used_alone():
    terms = CandidateItem(id="P7-v2#terms", source="applicable_policy", version="v2", size=2300)
    annex = CandidateItem(
        id="P7-v2#annex-b", source="applicable_policy", version="v2", outcome="not_fetched"
    )

    selection = select(strategy=STRATEGY, candidates=[TASK, ORDER, terms, annex])

    assert selection.status == "missing_required_data"
    assert decided(selection)["P7-v2#terms"] == (
        "dependency_missing",
        "bundle policy-P7 is incomplete: P7-v2#annex-b was not fetched",
    )


def test_optional_bundle__holds_a_required_item__required_as_a_whole():
    body = {**CONSULTATION, "bundles": {"order-with-notes": ["order:A1042"]}}
    notes = CandidateItem(
        id="order:A1042#notes", source="recent_dialogue", size=200, relevance=0.01
    )

    selection = select(strategy=body, candidates=[TASK, ORDER, POLICY, notes])

    assert decided(selection)["order:A1042#notes"] == (
        "selected",
        "required: bundle order-with-notes holds required items",
    )
    assert next(d for d in selection.decisions if d.id == "order:A1042#notes").required


def test_provider_bundle__no_strategy_bundle_matches__kept_together():
    part_1 = CandidateItem(id="chat:e-1", source="recent_dialogue", size=400, bundle="thread-9")
    part_2 = CandidateItem(id="chat:e-2", source="recent_dialogue", size=5000, bundle="thread-9")

    selection = select(strategy=STRATEGY, candidates=[TASK, ORDER, POLICY, part_1, part_2])

    assert decided(selection)["chat:e-1"] == (
        "over_budget",
        "indivisible bundle thread-9 (5,400 tokens) does not fit the 3,950 left",
    )


def test_two_bundles__share_an_item__chosen_together_or_not_at_all():
    body = {**CONSULTATION, "bundles": {"policy-P7": ["P7-"], "returns": ["P7-v2#returns", "faq"]}}
    terms = CandidateItem(id="P7-v2#terms", source="applicable_policy", size=1000)
    returns = CandidateItem(id="P7-v2#returns", source="applicable_policy", size=1000)
    faq = CandidateItem(id="faq:returns", source="recent_dialogue", size=5500)

    selection = select(strategy=body, candidates=[TASK, ORDER, terms, returns, faq])

    assert {d.bundle for d in selection.decisions[2:]} == {"policy-P7+returns"}
    assert [d.decision for d in selection.decisions[2:]] == ["over_budget"] * 3
    assert selection.status == "budget_exceeded"  # the policy is never sent without its faq


# --------------------------------------------------------------------------- conflicts


def test_P7_v2_vs_P7_v3__both_claim_to_apply__source_conflict_not_a_silent_pick():
    v2 = CandidateItem(id="P7", source="applicable_policy", version="v2", size=2100)
    v3 = CandidateItem(id="P7", source="applicable_policy", version="v3", size=1900)

    selection = select(strategy=STRATEGY, candidates=[TASK, ORDER, v2, v3])

    assert selection.status == "source_conflict"
    assert not selection.usable
    assert [(d.version, d.decision, d.reason) for d in selection.decisions[2:]] == [
        ("v2", "conflict", "P7 v2 and P7 v3 both claim to apply"),
        ("v3", "conflict", "P7 v2 and P7 v3 both claim to apply"),
    ]
    assert selection.reason == "P7: P7 v2 and P7 v3 both claim to apply"


def test_P7_v2_vs_P7_v3__provider_flags_the_conflict__both_in_conflict():
    v2 = CandidateItem(
        id="P7-v2", source="applicable_policy", version="v2", size=2100, conflicts_with=("P7-v3",)
    )
    v3 = CandidateItem(id="P7-v3", source="applicable_policy", version="v3", size=2250)

    selection = select(strategy=STRATEGY, candidates=[TASK, ORDER, v2, v3])

    assert selection.status == "source_conflict"
    reason = "the applicable_policy provider reports that P7-v2 v2 conflicts with P7-v3 v3"
    assert decided(selection)["P7-v2"] == ("conflict", reason)
    assert decided(selection)["P7-v3"] == ("conflict", reason)
    assert decision_of(selection, "order:A1042") == "selected"  # the rest is still shown


def test_P7_v2_vs_P7_v3__v3_not_in_effect_on_the_order_date__v2_used_no_conflict():
    v2 = CandidateItem(id="P7", source="applicable_policy", version="v2", size=2100)
    v3 = CandidateItem(
        id="P7",
        source="applicable_policy",
        version="v3",
        outcome="not_applicable",
        note="in effect from 2026-12-01, after the order date",
    )

    selection = select(strategy=STRATEGY, candidates=[TASK, ORDER, v2, v3])

    assert selection.status == "ready"
    assert [(d.version, d.decision) for d in selection.decisions[2:]] == [
        ("v2", "selected"),
        ("v3", "not_applicable"),
    ]
    assert selection.decisions[3].reason == (
        "does not apply: in effect from 2026-12-01, after the order date"
    )


def test_conflict_and_missing_order__both_at_once__source_conflict_comes_first():
    v2 = CandidateItem(id="P7", source="applicable_policy", version="v2", size=2100)
    v3 = CandidateItem(id="P7", source="applicable_policy", version="v3", size=1900)
    order = CandidateItem(id="order:A1042", source="order_delivery", outcome="no_access")

    selection = select(strategy=STRATEGY, candidates=[TASK, order, v2, v3])

    assert selection.status == "source_conflict"
    assert selection.problems[-1].startswith("order:A1042: no access")


# --------------------------------------------------------------------------- missing sources


def test_order_service_timeout__handler_general_policy_only__degraded_and_recorded():
    timed_out = CandidateItem(
        id="order:A1042",
        source="order_delivery",
        outcome="not_fetched",
        note="order service timed out after 2,000 ms",
    )

    selection = select(strategy=STRATEGY, candidates=[TASK, timed_out, POLICY, RECENT])

    assert selection.status == "degraded"
    assert selection.degradation == "general_policy_only"
    assert selection.usable  # the handler takes over: a general explanation, not a verdict
    assert decided(selection)["order:A1042"] == (
        "not_fetched",
        "not fetched: order service timed out after 2,000 ms; general_policy_only takes over",
    )
    assert selection.selected_ids == ("task_state:T9", "P7-v2", "chat:e-318")
    assert selection.trace_fields()["degradation"] == "general_policy_only"


def test_order_service_timeout__no_handler__missing_required_data():
    timed_out = CandidateItem(id="order:A1042", source="order_delivery", outcome="not_fetched")

    selection = select(
        strategy=strategy(on_missing={}), candidates=[TASK, timed_out, POLICY, RECENT]
    )

    assert selection.status == "missing_required_data"
    assert not selection.usable
    assert decided(selection)["order:A1042"] == (
        "not_fetched",
        "the order_delivery provider did not answer (not fetched)",
    )


def test_order_provider__returns_nothing__handler_takes_over():
    selection = select(strategy=STRATEGY, candidates=[TASK, POLICY])

    assert selection.status == "degraded"
    assert selection.degradation == "general_policy_only"
    assert selection.reason == (
        "required source order_delivery returned nothing that applies "
        "(on_missing: general_policy_only)"
    )


def test_order_service_timeout__policy_depends_on_the_order__handler_covers_both():
    body = {**CONSULTATION, "depends_on": {"applicable_policy": ["order_delivery"]}}
    timed_out = CandidateItem(id="order:A1042", source="order_delivery", outcome="not_fetched")

    selection = select(strategy=body, candidates=[TASK, timed_out, POLICY])

    assert decided(selection)["P7-v2"] == (
        "dependency_missing",
        "needs order_delivery, which was not selected (not fetched)",
    )
    assert (selection.status, selection.degradation) == ("degraded", "general_policy_only")


def test_optional_history_provider_fails__source_has_a_handler__degraded():
    body = {**CONSULTATION, "on_missing": {"recent_dialogue": "answer_without_history"}}
    failed = CandidateItem(id="chat:e-318", source="recent_dialogue", outcome="not_fetched")

    selection = select(strategy=body, candidates=[TASK, ORDER, POLICY, failed])

    assert (selection.status, selection.degradation) == ("degraded", "answer_without_history")
    assert selection.selected_ids == ("task_state:T9", "order:A1042", "P7-v2")


def test_optional_history_provider_fails__no_handler__still_ready():
    failed = CandidateItem(id="chat:e-318", source="recent_dialogue", outcome="not_fetched")

    selection = select(strategy=STRATEGY, candidates=[TASK, ORDER, POLICY, failed])

    assert selection.status == "ready"
    assert decision_of(selection, "chat:e-318") == "not_fetched"


def test_permission_check_unavailable__order_item_no_access__missing_required_data():
    # The strategy has a handler for a missing order; a permission failure is not "missing".
    unchecked = CandidateItem(
        id="order:A1042",
        source="order_delivery",
        version="r12",
        size=640,
        outcome="no_access",
        note="permission check unavailable",
    )

    selection = select(strategy=STRATEGY, candidates=[TASK, unchecked, POLICY])

    assert selection.status == "missing_required_data"
    assert selection.degradation is None
    assert not selection.usable
    assert "order:A1042" not in selection.selected_ids
    assert decided(selection)["order:A1042"] == (
        "no_access",
        "no access: permission check unavailable; required, and never assumed allowed",
    )


def test_optional_history__no_access__left_out_and_still_ready():
    private = CandidateItem(id="chat:e-200", source="recent_dialogue", outcome="no_access")

    selection = select(strategy=STRATEGY, candidates=[TASK, ORDER, POLICY, private])

    assert selection.status == "ready"
    assert decided(selection)["chat:e-200"] == ("no_access", "no access for this principal")


def test_two_missing_sources__different_handlers__missing_required_data():
    body = {
        **CONSULTATION,
        "on_missing": {"order_delivery": "general_policy_only", "task_state": "ask_for_task"},
    }

    selection = select(strategy=body, candidates=[POLICY])

    assert selection.status == "missing_required_data"
    assert selection.problems[0] == (
        "missing sources name different handlers (task_state → ask_for_task, "
        "order_delivery → general_policy_only); one request can take one only"
    )


# --------------------------------------------------------------------------- relevance


def test_old_product_introduction__low_relevance__irrelevant_and_left_out():
    selection = select(strategy=STRATEGY, candidates=A1042)

    assert decision_of(selection, "old-chat") == "irrelevant"
    assert "old-chat" not in selection.selected_ids


def test_old_product_introduction__caller_lowers_the_threshold__selected():
    selection = select(strategy=STRATEGY, candidates=A1042, relevance_threshold=0.01)

    assert decision_of(selection, "old-chat") == "selected"


def test_required_policy__scored_low_by_the_retriever__still_selected():
    low = CandidateItem(
        id="P7-v2", source="applicable_policy", version="v2", size=2100, relevance=0.01
    )

    selection = select(strategy=STRATEGY, candidates=[TASK, ORDER, low])

    assert decided(selection)["P7-v2"] == ("selected", "required")


# --------------------------------------------------------------------------- dependencies


def test_policy_faq__needs_applicable_policy_which_did_not_fit__dependency_missing():
    body = {
        **CONSULTATION,
        "optional": ["recent_dialogue", "policy_faq"],
        "depends_on": {"policy_faq": ["applicable_policy"]},
    }
    huge_policy = CandidateItem(id="P7-v2", source="applicable_policy", version="v2", size=9000)
    faq = CandidateItem(id="faq:returns", source="policy_faq", size=100)

    selection = select(strategy=body, candidates=[TASK, ORDER, huge_policy, faq])

    assert decided(selection)["faq:returns"] == (
        "dependency_missing",
        "needs applicable_policy, which was not selected (over budget)",
    )
    assert selection.status == "budget_exceeded"


def test_chat_summary__cites_an_event_no_longer_there__dependency_missing():
    summary = CandidateItem(
        id="summary:e-300..e-318", source="recent_dialogue", size=300, depends_on=("chat:e-305",)
    )

    selection = select(strategy=STRATEGY, candidates=[TASK, ORDER, POLICY, summary])

    assert decided(selection)["summary:e-300..e-318"] == (
        "dependency_missing",
        "needs chat:e-305, which is not among the candidates",
    )
    assert selection.status == "ready"


def test_optional_item__depends_on_a_lower_priority_one__both_selected():
    body = {
        **CONSULTATION,
        "optional": ["recent_dialogue", "memory"],
        "priority": {"memory": 90, "recent_dialogue": 10},
    }
    memory = CandidateItem(id="memory:m-1", source="memory", size=100, depends_on=("chat:e-318",))

    selection = select(strategy=body, candidates=[TASK, ORDER, POLICY, memory, RECENT])

    assert decision_of(selection, "memory:m-1") == "selected"
    assert selection.selected_ids[-2:] == ("chat:e-318", "memory:m-1")  # dependency first


def test_required_policy__depends_on_an_optional_item__that_item_becomes_required():
    category = CandidateItem(id="chat:category", source="recent_dialogue", size=50, relevance=0.0)
    policy = CandidateItem(
        id="P7-v2", source="applicable_policy", size=2100, depends_on=("chat:category",)
    )

    selection = select(strategy=STRATEGY, candidates=[TASK, ORDER, policy, category])

    assert decided(selection)["chat:category"] == ("selected", "required: P7-v2 needs it")
    assert selection.status == "ready"


# --------------------------------------------------------------------------- estimation


def test_item_without_size__default_estimator__four_characters_a_token():
    note = CandidateItem(id="chat:e-319", source="recent_dialogue", text="x" * 401)

    selection = select(strategy=STRATEGY, candidates=[TASK, ORDER, POLICY, note])

    assert decided_size(selection, "chat:e-319") == 101
    assert selection.estimator == "chars/4"


def test_item_without_size__runtime_tokenizer__its_name_in_the_estimate():
    class WordEstimator:
        name = "words-x"

        def estimate(self, text: str) -> int:
            return len(text.split())

    note = CandidateItem(id="chat:e-319", source="recent_dialogue", text="one two three")

    selection = select(
        strategy=STRATEGY, candidates=[TASK, ORDER, POLICY, note], estimator=WordEstimator()
    )

    assert decided_size(selection, "chat:e-319") == 3
    assert selection.trace_fields()["input_estimate"].estimator == "words-x"


def test_character_estimator__three_characters_a_token__named_after_it():
    assert CharacterEstimator(chars_per_token=3).name == "chars/3"
    assert CharacterEstimator(chars_per_token=3).estimate("abcdefg") == 3


def decided_size(selection, item_id: str) -> int | None:
    return next(d.size for d in selection.decisions if d.id == item_id)


# --------------------------------------------------------------------------- the strategy


def test_strategy__document_003_spelling__on_missing_order_read_as_order_delivery():
    legacy = {**CONSULTATION, "on_missing_order": "general_policy_only"}
    del legacy["on_missing"]

    assert Strategy.from_body(legacy).on_missing == {"order_delivery": "general_policy_only"}


def test_strategy__field_from_a_newer_console__ignored():
    newer = {**CONSULTATION, "freshness_window_minutes": 30}

    assert Strategy.from_body(newer) == STRATEGY


def test_strategy__reserve_not_below_maximum__error_names_the_field():
    bad = {**CONSULTATION, "budget": {"max_input_tokens": 1000, "reserve_output_tokens": 1000}}

    with pytest.raises(EngineInputError) as error:
        Strategy.from_body(bad)

    assert findings_of(error) == [("strategy.budget.reserve_output_tokens", "out_of_range")]


# --------------------------------------------------------------------------- the profile


BANK_PROFILE = {
    "sections": {
        "query_context": {
            "state_of_mind_schedule": False,
            "truth": True,
            "time_summary": True,
            "chat_topic": True,
            "predicted_query_memory": True,
            "detailed_profile": True,
            "fact_memory": True,
            "contact_list": True,
            "personal_particulars_details": False,
        },
        "user_context": {
            "user_emails": False,
            "high_level_profile": True,
            "communication_style": True,
            "real_time_update_from_chat": True,
            "chat_messages_memories": True,
            "memory_retention": True,
            "personal_particulars": False,
        },
    },
    "switches": {"temporalAnchor.enabled": False},
}


def test_context_sections__bank_profile__enabled_sections_per_block_in_document_000_order():
    assert context_sections(BANK_PROFILE) == {
        "user_context": [
            "high_level_profile",
            "communication_style",
            "real_time_update_from_chat",
            "chat_messages_memories",
            "memory_retention",
        ],
        "query_context": [
            "time_summary",
            "chat_topic",
            "predicted_query_memory",
            "detailed_profile",
            "fact_memory",
            "truth",
            "contact_list",
        ],
    }


def test_context_sections__toggle_not_exactly_true__section_stays_off():
    profile = {"sections": {"user_context": {"personal_particulars": "yes", "shop_notes": True}}}

    assert context_sections(profile) == {"user_context": ["shop_notes"], "query_context": []}


def test_context_sections__sections_not_an_object__error_names_the_path():
    with pytest.raises(EngineInputError) as error:
        context_sections({"sections": ["high_level_profile"]})

    assert findings_of(error) == [("profile.sections", "invalid_type")]
