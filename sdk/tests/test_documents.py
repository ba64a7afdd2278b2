"""The document validator as an ops person meets it in the editor and at publish."""

import copy

import pytest
from context_runtime.canonical import canonical_json, content_hash
from context_runtime.documents import (
    normalize_legacy_strategy,
    sensitive_sections_enabled,
    validate_document,
    validate_profile,
    validate_strategy,
)
from context_runtime.findings import Finding, blocking
from context_runtime.manifest import Manifest, validate_manifest
from context_runtime.vocabulary import (
    KNOWN_SECTIONS,
    KNOWN_SWITCHES,
    MAX_BODY_BYTES,
    PROFILE,
    STRATEGY,
)
from demo_world import BANK_PROFILE, DEMO_MANIFEST

# The example of docs/background.md § Strategies per task, exactly as the chapter prints it.
DOC_003_EXAMPLE = {
    "name": "after_sales_consultation",
    "version": 3,
    "required": ["task_state", "order_delivery", "applicable_policy"],
    "optional": ["recent_dialogue"],
    "allowed_tools": ["lookup_order", "search_policy"],
    "on_missing_order": "general_policy_only",
    "max_extra_reads": 2,
}
BUDGET = {"max_input_tokens": 8000, "reserve_output_tokens": 1000}


def demo_manifest(**overrides) -> Manifest:
    return Manifest.from_dict({**DEMO_MANIFEST, **overrides}, name="bank-uat")


def doc_003_strategy() -> dict:
    """That example in the contract's spelling, with the budget every strategy needs."""
    return {**normalize_legacy_strategy(DOC_003_EXAMPLE), "budget": dict(BUDGET)}


def codes_at(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(f.path, f.code) for f in findings]


# --------------------------------------------------------------------------- strategy


def test_doc_003_example__normalized_with_budget__valid_against_demo_manifest():
    findings = validate_strategy(doc_003_strategy(), demo_manifest())

    assert findings == []


def test_normalize_legacy_strategy__doc_003_example__on_missing_order_becomes_on_missing():
    body = normalize_legacy_strategy(DOC_003_EXAMPLE)

    assert body["on_missing"] == {"order_delivery": "general_policy_only"}
    assert "on_missing_order" not in body
    assert "name" not in body and "version" not in body
    assert DOC_003_EXAMPLE["on_missing_order"] == "general_policy_only"  # input untouched


def test_normalize_legacy_strategy__contradicting_on_missing__keeps_legacy_field_for_validator():
    body = {**DOC_003_EXAMPLE, "on_missing": {"order_delivery": "ask_the_user"}}

    normalized = normalize_legacy_strategy(body)

    assert normalized["on_missing_order"] == "general_policy_only"
    assert ("on_missing_order", "unknown_field") in codes_at(validate_strategy(normalized))


def test_doc_003_example__without_budget__only_the_missing_budget_is_reported():
    findings = validate_strategy(normalize_legacy_strategy(DOC_003_EXAMPLE), demo_manifest())

    assert codes_at(findings) == [("budget", "required")]


def test_doc_003_example__not_normalized__legacy_fields_explained():
    findings = validate_strategy({**DOC_003_EXAMPLE, "budget": BUDGET})

    by_path = {f.path: f for f in findings}
    assert set(by_path) == {"name", "version", "on_missing_order"}
    assert "on_missing" in by_path["on_missing_order"].message


def test_strategy__runtime_without_handlers__unknown_handler_at_on_missing_order_delivery():
    findings = validate_strategy(doc_003_strategy(), demo_manifest(handlers=[]))

    assert codes_at(findings) == [("on_missing.order_delivery", "unknown_handler")]
    assert "general_policy_only" in findings[0].message
    assert "bank-uat" in findings[0].message


def test_strategy__source_without_provider__unknown_source_names_source_and_runtime():
    manifest = demo_manifest(providers=["task_state", "applicable_policy", "recent_dialogue"])

    findings = validate_strategy(doc_003_strategy(), manifest)

    assert codes_at(findings) == [("required[1]", "unknown_source")]
    assert findings[0].message == "order_delivery has no provider in the bank-uat runtime."


def test_strategy__tool_missing_from_runtime__unknown_tool():
    findings = validate_strategy(doc_003_strategy(), demo_manifest(tools=["lookup_order"]))

    assert codes_at(findings) == [("allowed_tools[1]", "unknown_tool")]
    assert "search_policy" in findings[0].message


def test_strategy__no_manifest__runtime_checks_skipped():
    body = {**doc_003_strategy(), "allowed_tools": ["some_future_tool"]}

    assert validate_strategy(body) == []


def test_strategy__source_both_required_and_optional__overlap_at_optional_item():
    body = {**doc_003_strategy(), "optional": ["recent_dialogue", "task_state"]}

    findings = validate_strategy(body)

    assert codes_at(findings) == [("optional[1]", "overlap")]
    assert "task_state" in findings[0].message


@pytest.mark.parametrize(
    ("field", "items", "path"),
    [
        ("required", ["task_state", "order_delivery", "task_state"], "required[2]"),
        ("optional", ["recent_dialogue", "recent_dialogue"], "optional[1]"),
        ("allowed_tools", ["lookup_order", "lookup_order"], "allowed_tools[1]"),
    ],
)
def test_strategy__name_listed_twice__duplicate_at_second_occurrence(field, items, path):
    body = {**doc_003_strategy(), field: items}

    findings = validate_strategy(body)

    assert codes_at(findings) == [(path, "duplicate")]
    assert items[-1] in findings[0].message


def test_strategy__typo_in_field_name__unknown_field_suggests_the_right_name():
    body = {**doc_003_strategy(), "requried": ["task_state"]}

    findings = validate_strategy(body)

    assert codes_at(findings) == [("requried", "unknown_field")]
    assert "Did you mean required?" in findings[0].message


@pytest.mark.parametrize(
    ("patch", "path"),
    [
        ({"max_extra_reads": True}, "max_extra_reads"),
        ({"budget": {"max_input_tokens": True}}, "budget.max_input_tokens"),
        ({"priority": {"recent_dialogue": False}}, "priority.recent_dialogue"),
        ({"history": {"max_turns": True}}, "history.max_turns"),
    ],
)
def test_strategy__boolean_where_number_expected__invalid_type(patch, path):
    body = {**doc_003_strategy(), **patch}

    findings = validate_strategy(body)

    assert codes_at(findings) == [(path, "invalid_type")]
    assert "whole number" in findings[0].message


@pytest.mark.parametrize("reserve", [8000, 9000])
def test_strategy__reserve_not_below_max__out_of_range_at_reserve(reserve):
    body = {
        **doc_003_strategy(),
        "budget": {"max_input_tokens": 8000, "reserve_output_tokens": reserve},
    }

    findings = validate_strategy(body)

    assert codes_at(findings) == [("budget.reserve_output_tokens", "out_of_range")]
    assert "8,000" in findings[0].message


@pytest.mark.parametrize(
    ("patch", "path"),
    [
        ({"max_extra_reads": 11}, "max_extra_reads"),
        ({"max_extra_reads": -1}, "max_extra_reads"),
        ({"budget": {"max_input_tokens": 0}}, "budget.max_input_tokens"),
        ({"budget": {"max_input_tokens": 2_000_001}}, "budget.max_input_tokens"),
        ({"priority": {"recent_dialogue": 101}}, "priority.recent_dialogue"),
        ({"history": {"max_turns": 201}}, "history.max_turns"),
        ({"history": {"compress_after_tokens": -5}}, "history.compress_after_tokens"),
    ],
)
def test_strategy__number_outside_its_range__out_of_range(patch, path):
    findings = validate_strategy({**doc_003_strategy(), **patch})

    assert codes_at(findings) == [(path, "out_of_range")]


def test_strategy__all_optional_fields_well_formed__valid():
    body = {
        **doc_003_strategy(),
        "priority": {"recent_dialogue": 40},
        "bundles": {"policy-P7": ["P7-", "applicable_policy"]},
        "depends_on": {"applicable_policy": ["order_delivery"]},
        "history": {"max_turns": 20, "compress_after_tokens": 4000},
        "snapshot": {"allowed": False},
    }

    assert validate_strategy(body, demo_manifest()) == []


def test_strategy__dependency_cycle__one_cycle_finding_naming_the_loop():
    body = {
        **doc_003_strategy(),
        "depends_on": {
            "applicable_policy": ["order_delivery"],
            "order_delivery": ["task_state"],
            "task_state": ["applicable_policy"],
        },
    }

    findings = validate_strategy(body)

    assert codes_at(findings) == [("depends_on.applicable_policy", "cycle")]
    assert "applicable_policy → order_delivery → task_state → applicable_policy" in (
        findings[0].message
    )


def test_strategy__source_depends_on_itself__cycle_at_that_item():
    body = {**doc_003_strategy(), "depends_on": {"task_state": ["task_state"]}}

    assert codes_at(validate_strategy(body)) == [("depends_on.task_state[0]", "cycle")]


def test_strategy__references_to_undeclared_sources__reported_at_each_reference():
    body = {
        **doc_003_strategy(),
        "priority": {"memory": 10},
        "depends_on": {"order_delivery": ["knowledge"]},
        "on_missing": {"memory": "general_policy_only"},
    }

    findings = validate_strategy(body)

    assert codes_at(findings) == [
        ("priority.memory", "invalid_reference"),
        ("depends_on.order_delivery[0]", "not_declared"),
        ("on_missing.memory", "not_declared"),
    ]


def test_strategy__empty_bundle_and_unknown_history_key__both_refused():
    body = {**doc_003_strategy(), "bundles": {"policy-P7": []}, "history": {"keep_turns": 3}}

    assert codes_at(validate_strategy(body)) == [
        ("bundles.policy-P7", "empty"),
        ("history.keep_turns", "unknown_field"),
    ]


def test_strategy__several_problems__findings_in_document_order():
    body = {
        "zzz": 1,
        "budget": {"max_input_tokens": "lots"},
        "required": ["task_state", 7],
        "max_extra_reads": 99,
    }

    paths = [f.path for f in validate_strategy(body)]

    assert paths == ["required[1]", "max_extra_reads", "budget.max_input_tokens", "zzz"]


def test_strategy__missing_required_list__required_finding():
    findings = validate_strategy({"budget": BUDGET})

    assert codes_at(findings) == [("required", "required")]


def test_strategy__body_over_64_kib__too_large():
    body = {**doc_003_strategy(), "bundles": {"big": ["x" * 1000] * 70}}

    findings = validate_strategy(body)

    assert len(canonical_json(body)) > MAX_BODY_BYTES
    assert ("", "too_large") in codes_at(findings)


GARBAGE = [
    None,
    [],
    "x",
    42,
    True,
    {"required": "a"},
    {"required": [None, [], {}], "optional": "b", "budget": []},
    {"required": ["a"], "depends_on": {"a": [["a"]], "b": None}, "priority": [1]},
    {"required": ["a"], "budget": {"max_input_tokens": float("nan")}, "history": "long"},
    {"required": ["a"], "on_missing": {"a": {"handler": "x"}}, "snapshot": {"allowed": "yes"}},
    {"sections": {"user_context": [], "query_context": {"truth": None}, "x": 1}},
    {"sections": "all", "switches": {"temporalAnchor.agentWhitelist": "everyone", 3: 4}},
    {"switches": [["nested", {"deep": [[[]]]}]]},
    {1: 2, None: 3},
]


@pytest.mark.parametrize("body", GARBAGE, ids=[repr(g)[:40] for g in GARBAGE])
def test_validators__garbage_input__findings_instead_of_exceptions(body):
    for kind in (STRATEGY, PROFILE):
        findings = validate_document(kind, body, demo_manifest(), agent_keys=frozenset({"a"}))

        assert findings, f"{kind} accepted {body!r}"
        assert all(isinstance(f, Finding) and f.message for f in findings)


def test_validators__deeply_nested_input__no_exception():
    deep: list = []
    for _ in range(5000):
        deep = [deep]

    assert validate_strategy({"required": deep})
    assert validate_profile({"sections": deep})


def test_validation_error__as_dict__api_error_detail_shape():
    finding = validate_strategy({"budget": BUDGET})[0]

    assert finding.as_dict() == {
        "path": "required",
        "code": "required",
        "message": finding.message,
        "severity": "error",
    }


# --------------------------------------------------------------------------- profile


def test_bank_profile__against_demo_manifest__no_findings():
    assert validate_profile(BANK_PROFILE, demo_manifest()) == []


def test_bank_profile__without_manifest__no_findings():
    assert validate_profile(BANK_PROFILE) == []


def test_bank_profile__matches_document_000_bank_column():
    sections = BANK_PROFILE["sections"]

    assert sum(len(block) for block in sections.values()) == 19
    assert [k for k, on in sections["user_context"].items() if on] == [
        "high_level_profile",
        "communication_style",
        "real_time_update_from_chat",
        "chat_messages_memories",
        "memory_retention",
    ]
    assert [k for k, on in sections["query_context"].items() if not on] == [
        "personal_particulars_details",
        "state_of_mind_schedule",
    ]
    assert {b: tuple(s) for b, s in sections.items()} == KNOWN_SECTIONS
    assert set(BANK_PROFILE["switches"]) == set(KNOWN_SWITCHES)


def test_profile__user_emails_switched_on__one_flag_and_nothing_blocking():
    body = copy.deepcopy(BANK_PROFILE)
    body["sections"]["user_context"]["user_emails"] = True

    findings = validate_profile(body, demo_manifest())

    assert codes_at(findings) == [("sections.user_context.user_emails", "sensitive_section")]
    assert findings[0].severity == "flag"
    assert findings[0].message.startswith("user_emails is sensitive")
    assert blocking(findings) == []
    assert sensitive_sections_enabled(body, demo_manifest()) == ["user_emails"]


def test_profile__sensitive_section_on_without_manifest__still_flagged():
    body = copy.deepcopy(BANK_PROFILE)
    body["sections"]["query_context"]["state_of_mind_schedule"] = True

    findings = validate_profile(body)

    assert [(f.code, f.severity) for f in findings] == [("sensitive_section", "flag")]


def test_sensitive_sections_enabled__bank_profile__none():
    assert sensitive_sections_enabled(BANK_PROFILE, demo_manifest()) == []


def test_profile__section_unknown_to_runtime__unknown_section():
    manifest = Manifest.from_dict(
        {
            **DEMO_MANIFEST,
            "sections": [s for s in DEMO_MANIFEST["sections"] if s["key"] != "truth"],
        },
        name="bank-uat",
    )

    findings = validate_profile(BANK_PROFILE, manifest)

    assert codes_at(findings) == [("sections.query_context.truth", "unknown_section")]
    assert "bank-uat" in findings[0].message


def test_profile__section_under_wrong_block__unknown_section_says_where_it_belongs():
    body = {"sections": {"user_context": {"time_summary": True}}}

    findings = validate_profile(body, demo_manifest())

    assert codes_at(findings) == [("sections.user_context.time_summary", "unknown_section")]
    assert "query_context" in findings[0].message


def test_profile__unknown_block_and_non_bool_toggle__reported():
    body = {"sections": {"user_context": {"truth": "yes"}, "system": {}}}

    findings = validate_profile(body)

    assert codes_at(findings) == [
        ("sections.user_context.truth", "unknown_section"),
        ("sections.user_context.truth", "invalid_type"),
        ("sections.system", "unknown_block"),
    ]


def test_profile__injector_mode_not_a_choice__invalid_choice_lists_choices():
    body = copy.deepcopy(BANK_PROFILE)
    body["switches"]["queryRelatedContextInjectorMode"] = "persistent"

    findings = validate_profile(body)

    assert codes_at(findings) == [("switches.queryRelatedContextInjectorMode", "invalid_choice")]
    assert '"persistent_injection"' in findings[0].message


def test_profile__boolean_switch_given_text__invalid_type():
    body = copy.deepcopy(BANK_PROFILE)
    body["switches"]["historyCompression.enabled"] = "true"

    assert codes_at(validate_profile(body)) == [
        ("switches.historyCompression.enabled", "invalid_type")
    ]


def test_profile__whitelist_names_unknown_agent__invalid_reference_at_item():
    body = copy.deepcopy(BANK_PROFILE)
    body["switches"]["temporalAnchor.agentWhitelist"] = ["assistant_professional", "ghost"]

    findings = validate_profile(body, agent_keys=frozenset({"assistant_professional"}))

    assert codes_at(findings) == [
        ("switches.temporalAnchor.agentWhitelist[1]", "invalid_reference")
    ]
    assert "ghost" in findings[0].message


def test_profile__switch_typo_without_manifest__unknown_switch_with_suggestion():
    body = {"sections": {}, "switches": {"toolPrefilter.enable": True}}

    findings = validate_profile(body)

    assert codes_at(findings) == [("switches.toolPrefilter.enable", "unknown_switch")]
    assert "toolPrefilter.enabled" in findings[0].message


def test_profile__switch_runtime_does_not_report__unknown_switch():
    manifest = demo_manifest(
        switches=[s for s in KNOWN_SWITCHES if s != "historyCompression.enabled"]
    )

    findings = validate_profile(BANK_PROFILE, manifest)

    assert codes_at(findings) == [("switches.historyCompression.enabled", "unknown_switch")]


def test_profile__extra_switch_runtime_reports__accepted():
    manifest = demo_manifest(switches=[*KNOWN_SWITCHES, "systemReminder.enabled"])
    body = copy.deepcopy(BANK_PROFILE)
    body["switches"]["systemReminder.enabled"] = True

    assert validate_profile(body, manifest) == []


# --------------------------------------------------------------------------- others


def test_validate_document__dispatches_by_kind():
    assert validate_document(STRATEGY, doc_003_strategy(), demo_manifest()) == []
    assert validate_document(PROFILE, BANK_PROFILE, demo_manifest(), agent_keys=frozenset()) == []
    with pytest.raises(ValueError, match="Unknown document kind"):
        validate_document("recipe", {})


def test_content_hash__same_content_different_key_order__same_hash():
    reordered = dict(reversed(list(doc_003_strategy().items())))

    assert content_hash(reordered) == content_hash(doc_003_strategy())
    assert content_hash({**doc_003_strategy(), "max_extra_reads": 3}) != content_hash(
        doc_003_strategy()
    )
    assert canonical_json({"b": "é", "a": 1}) == '{"a":1,"b":"é"}'.encode()


def test_manifest__round_trip__same_manifest():
    manifest = Manifest.from_dict(DEMO_MANIFEST, name="demo")

    assert Manifest.from_dict(manifest.to_dict(), name="demo") == manifest
    assert hash(Manifest.from_dict(manifest.to_dict(), name="demo")) == hash(manifest)
    assert manifest.sections["user_emails"] == ("user_context", True)
    assert manifest.sections["truth"] == ("query_context", False)
    assert len(manifest.sections) == 19


def test_manifest__malformed__value_error_names_the_problem():
    assert validate_manifest({**DEMO_MANIFEST, "tools": "lookup_order"})
    with pytest.raises(ValueError, match="tools"):
        Manifest.from_dict({**DEMO_MANIFEST, "tools": "lookup_order"})


# --- text no store keeps (issue 19, item 8) ----------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "body", "path"),
    [
        (STRATEGY, {**doc_003_strategy(), "optional": ["a\x00b"]}, "optional[0]"),
        (STRATEGY, {**doc_003_strategy(), "optional": ["a\ud800b"]}, "optional[0]"),
        (STRATEGY, {**doc_003_strategy(), "on_missing": {"a\x00b": "x"}}, "on_missing.'a\\x00b'"),
        (PROFILE, {**BANK_PROFILE, "switches": {"a\udfffb": True}}, "switches.'a\\udfffb'"),
    ],
    ids=["nul-in-string", "surrogate-in-string", "nul-in-key", "surrogate-in-profile-key"],
)
def test_validate_document__unstorable_text__only_invalid_text_at_its_path(kind, body, path):
    # Only that finding: another message would repeat the text, and the body has no hash.
    findings = validate_document(kind, body)

    assert [(f.path, f.code) for f in findings] == [(path, "invalid_text")]
    assert all("\x00" not in f.message and "\ud800" not in f.message for f in findings)
