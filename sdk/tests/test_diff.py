"""Compare two versions: the changes as a non-programmer reads them."""

import copy

import pytest
from context_runtime.diff import Change, diff_bodies
from context_runtime.documents import normalize_legacy_strategy
from context_runtime.vocabulary import PROFILE, STRATEGY
from demo_world import BANK_PROFILE

DEMO_V1 = {"required": ["task_state", "order_delivery"], "budget": {"max_input_tokens": 6000}}
DEMO_V3 = {
    **normalize_legacy_strategy(
        {
            "name": "after_sales_consultation",
            "version": 3,
            "required": ["task_state", "order_delivery", "applicable_policy"],
            "optional": ["recent_dialogue"],
            "allowed_tools": ["lookup_order", "search_policy"],
            "on_missing_order": "general_policy_only",
            "max_extra_reads": 2,
        }
    ),
    "budget": {"max_input_tokens": 8000, "reserve_output_tokens": 1000},
}


def summaries(changes: list[Change]) -> list[str]:
    return [c.summary for c in changes]


def test_diff__demo_strategy_v1_to_v3__lists_every_change_in_plain_words():
    changes = diff_bodies(STRATEGY, DEMO_V1, DEMO_V3)

    assert summaries(changes) == [
        "applicable_policy added to required sources",
        "recent_dialogue added to optional sources",
        "lookup_order added to allowed tools",
        "search_policy added to allowed tools",
        "When order_delivery is missing, use general_policy_only",
        "Max extra reads set to 2",
        "Budget › max input tokens changed from 6000 to 8000",
        "Budget › reserved output tokens set to 1000",
    ]


def test_diff__demo_strategy_v1_to_v3__paths_and_values_for_the_api():
    changes = {c.summary: c for c in diff_bodies(STRATEGY, DEMO_V1, DEMO_V3)}

    budget = changes["Budget › max input tokens changed from 6000 to 8000"]
    assert (budget.path, budget.kind, budget.before, budget.after) == (
        "budget.max_input_tokens",
        "changed",
        6000,
        8000,
    )
    added = changes["applicable_policy added to required sources"]
    assert added.as_dict() == {
        "path": "required",
        "kind": "added",
        "before": None,
        "after": "applicable_policy",
        "summary": "applicable_policy added to required sources",
    }


def test_diff__rollback_v3_to_v1__mirror_of_the_forward_diff():
    changes = diff_bodies(STRATEGY, DEMO_V3, DEMO_V1)

    assert summaries(changes)[:2] == [
        "applicable_policy removed from required sources",
        "recent_dialogue removed from optional sources",
    ]
    assert "Budget › reserved output tokens removed (was 1000)" in summaries(changes)
    assert [c.kind for c in changes].count("removed") == 7


def test_diff__same_body_different_key_order__no_changes():
    reordered = dict(reversed(list(DEMO_V3.items())))

    assert diff_bodies(STRATEGY, DEMO_V3, reordered) == []


def test_diff__required_sources_reordered__no_changes():
    after = {**DEMO_V3, "required": list(reversed(DEMO_V3["required"]))}

    assert diff_bodies(STRATEGY, DEMO_V3, after) == []


def test_diff__source_moved_from_optional_to_required__removed_and_added():
    after = {**DEMO_V3, "required": [*DEMO_V3["required"], "recent_dialogue"], "optional": []}

    assert summaries(diff_bodies(STRATEGY, DEMO_V3, after)) == [
        "recent_dialogue added to required sources",
        "recent_dialogue removed from optional sources",
    ]


def test_diff__no_previous_version__everything_added():
    changes = diff_bodies(STRATEGY, None, DEMO_V1)

    assert {c.kind for c in changes} == {"added"}
    assert summaries(changes) == [
        "task_state added to required sources",
        "order_delivery added to required sources",
        "Budget › max input tokens set to 6000",
    ]


def test_diff__nested_maps__one_change_per_key():
    before = {
        **DEMO_V3,
        "priority": {"recent_dialogue": 10},
        "depends_on": {"applicable_policy": ["order_delivery"]},
        "bundles": {"policy-P7": ["P7-"]},
        "snapshot": {"allowed": False},
    }
    after = {
        **DEMO_V3,
        "priority": {"recent_dialogue": 30},
        "depends_on": {"applicable_policy": ["task_state"]},
        "bundles": {"policy-P7": ["P7-", "P7-annex"]},
        "snapshot": {"allowed": True},
        "on_missing": {"order_delivery": "ask_for_order_number"},
    }

    assert summaries(diff_bodies(STRATEGY, before, after)) == [
        "Priority of recent_dialogue changed from 10 to 30",
        "P7-annex added to bundle policy-P7",
        "applicable_policy no longer depends on order_delivery",
        "applicable_policy now depends on task_state",
        "When order_delivery is missing, use ask_for_order_number instead of general_policy_only",
        "Snapshot › full request may be sent switched on",
    ]


def test_diff__number_replaced_by_boolean__reported_as_change():
    changes = diff_bodies(STRATEGY, {"max_extra_reads": 1}, {"max_extra_reads": True})

    assert summaries(changes) == ["Max extra reads changed from 1 to true"]


def test_diff__profile_sections_toggled__switched_on_and_off():
    after = copy.deepcopy(BANK_PROFILE)
    after["sections"]["user_context"]["user_emails"] = True
    after["sections"]["query_context"]["truth"] = False

    assert summaries(diff_bodies(PROFILE, BANK_PROFILE, after)) == [
        "user_emails (user context) switched on",
        "truth (query context) switched off",
    ]
    change = diff_bodies(PROFILE, BANK_PROFILE, after)[0]
    assert change.path == "sections.user_context.user_emails"


def test_diff__profile_switches_changed__named_by_switch():
    after = copy.deepcopy(BANK_PROFILE)
    after["switches"]["temporalAnchor.enabled"] = True
    after["switches"]["temporalAnchor.agentWhitelist"] = ["assistant_professional"]
    after["switches"]["queryRelatedContextInjectorMode"] = "persistent_injection"

    assert summaries(diff_bodies(PROFILE, BANK_PROFILE, after)) == [
        "temporalAnchor.enabled switched on",
        "assistant_professional added to temporalAnchor.agentWhitelist",
        "queryRelatedContextInjectorMode changed from default to persistent_injection",
    ]


def test_diff__new_profile__every_section_and_switch_added():
    changes = diff_bodies(PROFILE, None, BANK_PROFILE)

    assert len(changes) == 19 + 6
    assert changes[0].summary == "high_level_profile (user context) switched on"
    assert "user_emails (user context) added, switched off" in summaries(changes)


def test_diff__identical_bodies__no_changes():
    assert diff_bodies(PROFILE, BANK_PROFILE, copy.deepcopy(BANK_PROFILE)) == []
    assert diff_bodies(STRATEGY, None, None) == []


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ([], "x"),
        (None, [1, 2]),
        ({"required": [1, "a"]}, {"required": "a"}),
        ({"budget": {"max_input_tokens": {"x": [1]}}}, {"budget": None}),
        ({1: {2: 3}}, {"1": None}),
        ({"history": {}}, {"history": []}),
    ],
)
def test_diff__malformed_bodies__changes_without_exceptions(before, after):
    changes = diff_bodies(STRATEGY, before, after)

    assert changes
    assert all(c.summary for c in changes)
