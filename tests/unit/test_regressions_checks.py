"""The regression checker (traces.regressions.checks): each expectation kind passes, fails with
the decisions side by side, or is not checkable — never passed — when the body reads a source
the request never fetched. Pure: no database."""

from __future__ import annotations

import msgspec
import pytest
from context_runtime.engine import CandidateItem, Strategy, select

from traces.regressions import checks

V1 = {"required": ["task_state", "order_delivery"], "budget": {"max_input_tokens": 6000}}
V3 = {
    "required": ["task_state", "order_delivery", "applicable_policy"],
    "optional": ["recent_dialogue"],
    "budget": {"max_input_tokens": 8000, "reserve_output_tokens": 1000},
}
ITEMS = (
    CandidateItem(id="task_state:T9", source="task_state", version="4", size=310),
    CandidateItem(id="order:A1042", source="order_delivery", version="r12", size=640),
    CandidateItem(id="P7", source="applicable_policy", version="v2", size=2100, bundle="policy-P7"),
    CandidateItem(
        id="chat:e-318", source="recent_dialogue", version="e-318", size=1150, relevance=0.82
    ),
)
FIXED = 1280


def snapshot(body: dict, items=ITEMS) -> dict:
    """A member's snapshot of a request the runtime decided with `body`."""
    selection = select(strategy=body, candidates=items, fixed_input_tokens=FIXED)
    return {
        "selection": msgspec.to_builtins(selection.selection_info()),
        "candidates": msgspec.to_builtins(selection.wire_candidates()),
        "status": selection.status,
        "degradation": selection.degradation or "",
        "input_tokens": selection.input_estimate,
        "sources": sorted(Strategy.from_body(body).sources),
        "references": {},
    }


def member(*expectations, recorded=V3, snap=None) -> checks.MemberCase:
    return checks.MemberCase(1, "req-92", "sg-test", snap or snapshot(recorded), expectations)


def test_item_selected__kept_by_the_recorded_version__passes():
    (result,) = checks.check(V3, [member({"kind": "item_selected", "item": "P7"})])
    assert result.outcome == checks.PASSED
    assert result.status == "ready"


def test_item_selected__by_its_bundle__passes():
    (result,) = checks.check(V3, [member({"kind": "item_selected", "item": "policy-P7"})])
    assert result.outcome == checks.PASSED


def test_item_selected__a_version_that_does_not_read_it__fails_with_decisions():
    (result,) = checks.check(V1, [member({"kind": "item_selected", "item": "P7"})], label="v1")
    assert result.outcome == checks.FAILED
    (expectation,) = result.results
    assert "P7 is not selected by v1" in expectation.message
    (decision,) = expectation.decisions
    assert decision.item == "P7"
    assert decision.recorded.startswith("selected")
    assert decision.checked.startswith("not_requested")


def test_item_selected__over_a_smaller_budget__fails_naming_the_decision():
    small = {**V3, "budget": {"max_input_tokens": 4000, "reserve_output_tokens": 1000}}
    (result,) = checks.check(small, [member({"kind": "item_selected", "item": "P7"})])
    assert result.outcome == checks.FAILED
    assert "over_budget" in result.results[0].decisions[0].checked


def test_source_not_excluded__passes_then_fails_for_its_reason():
    e = {
        "kind": "source_not_excluded",
        "source": "recent_dialogue",
        "reason": "over_budget_optional",
    }
    (kept,) = checks.check(V3, [member(e)])
    assert kept.outcome == checks.PASSED
    tight = {**V3, "budget": {"max_input_tokens": 5400, "reserve_output_tokens": 1000}}
    (cut,) = checks.check(tight, [member(e)])
    assert cut.outcome == checks.FAILED, cut
    assert cut.results[0].decisions[0].item == "chat:e-318"


def test_source_not_excluded__another_reason__passes():
    e = {"kind": "source_not_excluded", "source": "recent_dialogue", "reason": "below_threshold"}
    tight = {**V3, "budget": {"max_input_tokens": 5400, "reserve_output_tokens": 1000}}
    (result,) = checks.check(tight, [member(e)])
    assert result.outcome == checks.PASSED


def test_status_in__passes_and_fails():
    e = {"kind": "status_in", "statuses": ["ready", "degraded"]}
    (ok,) = checks.check(V3, [member(e)])
    assert ok.outcome == checks.PASSED
    small = {**V3, "budget": {"max_input_tokens": 3000, "reserve_output_tokens": 1000}}
    (bad,) = checks.check(small, [member(e)])
    assert bad.outcome == checks.FAILED
    assert "budget_exceeded" in bad.results[0].message


def test_input_tokens_at_most__passes_and_fails():
    recorded = snapshot(V3)["input_tokens"]
    (ok,) = checks.check(V3, [member({"kind": "input_tokens_at_most", "tokens": recorded})])
    assert ok.outcome == checks.PASSED
    (bad,) = checks.check(V3, [member({"kind": "input_tokens_at_most", "tokens": recorded - 1})])
    assert bad.outcome == checks.FAILED
    assert f"{recorded:,} input tokens" in bad.results[0].message


def test_same_as_recorded__same_version_passes_another_fails_side_by_side():
    snap = snapshot(V3)
    from context_runtime import wire

    wired = msgspec.convert(snap["candidates"], type=list[wire.Candidate])
    snap["references"]["3"] = checks.facts_dump(
        checks.Facts.recorded(snap["status"], snap["degradation"], wired)
    )
    e = {"kind": "same_as_recorded", "version": 3}
    (same,) = checks.check(V3, [member(e, snap=snap)])
    assert same.outcome == checks.PASSED
    (other,) = checks.check(V1, [member(e, snap=snap)], label="v1")
    assert other.outcome == checks.FAILED
    assert "v1 decides differently from v3" in other.results[0].message
    assert {d.item for d in other.results[0].decisions} == {"P7", "chat:e-318"}


def test_same_as_recorded__without_kept_decisions__not_checkable():
    (result,) = checks.check(V3, [member({"kind": "same_as_recorded", "version": 2})])
    assert result.outcome == checks.NOT_CHECKABLE


def test_a_source_never_fetched__not_checkable_never_passed():
    recorded_v1 = snapshot(V1, ITEMS[:2])
    e = {"kind": "item_selected", "item": "order:A1042"}
    (result,) = checks.check(V3, [member(e, snap=recorded_v1)], label="the draft")
    assert result.outcome == checks.NOT_CHECKABLE
    assert "applicable_policy" in result.why_not
    assert "never fetched" in result.why_not
    assert all(r.outcome == checks.NOT_CHECKABLE for r in result.results)


def test_a_broken_snapshot__not_checkable():
    snap = snapshot(V3)
    del snap["selection"]
    (result,) = checks.check(V3, [member({"kind": "item_selected", "item": "P7"}, snap=snap)])
    assert result.outcome == checks.NOT_CHECKABLE


def test_member_outcome__the_worst_of_its_expectations():
    (result,) = checks.check(
        V1,
        [
            member(
                {"kind": "status_in", "statuses": ["ready"]},
                {"kind": "item_selected", "item": "P7"},
            )
        ],
    )
    assert [r.outcome for r in result.results] == [checks.PASSED, checks.FAILED]
    assert result.outcome == checks.FAILED


def test_an_invalid_body__refused_before_any_member():
    with pytest.raises(checks.EngineInputError):
        checks.check({"required": "nope"}, [member({"kind": "item_selected", "item": "P7"})])


# --- the validator ----------------------------------------------------------------------------
def _findings(expectations, *, current=V3, recorded=V3):
    from context_runtime import wire

    wired = msgspec.convert(snapshot(recorded)["candidates"], type=list[wire.Candidate])
    return checks.expectations_findings(
        expectations,
        candidates=wired,
        recorded_sources=Strategy.from_body(recorded).sources,
        current_sources=Strategy.from_body(current).sources,
        versions=[1, 2, 3],
    )


@pytest.mark.parametrize(
    ("expectations", "path", "code"),
    [
        ([], "expectations", "required"),
        ([{"kind": "vibes"}], "expectations[0].kind", "unknown_kind"),
        ([{"kind": "item_selected", "item": "P9"}], "expectations[0].item", "unknown_item"),
        (
            [{"kind": "source_not_excluded", "source": "memory"}],
            "expectations[0].source",
            "unknown_source",
        ),
        (
            [{"kind": "source_not_excluded", "source": "task_state", "reason": "because"}],
            "expectations[0].reason",
            "unknown_reason",
        ),
        ([{"kind": "status_in", "statuses": ["fine"]}], "expectations[0].statuses[0]", None),
        ([{"kind": "input_tokens_at_most", "tokens": 0}], "expectations[0].tokens", "invalid"),
        ([{"kind": "same_as_recorded", "version": 9}], "expectations[0].version", None),
        ([{"kind": "item_selected", "item": "P7", "x": 1}], "expectations[0].x", None),
    ],
)
def test_expectations__bad_input__a_finding_at_the_field(expectations, path, code):
    findings = _findings(expectations)
    assert path in [f.path for f in findings]
    if code:
        assert code in [f.code for f in findings]


def test_expectations__an_item_the_current_strategy_does_not_read__refused():
    findings = _findings([{"kind": "item_selected", "item": "P7"}], current=V1)
    assert [(f.path, f.code) for f in findings] == [("expectations[0].item", "unknown_source")]


def test_expectations__valid__no_findings():
    assert not _findings(
        [
            {"kind": "item_selected", "item": "policy-P7"},
            {"kind": "source_not_excluded", "source": "recent_dialogue", "reason": ""},
            {"kind": "status_in", "statuses": ["ready"]},
            {"kind": "input_tokens_at_most", "tokens": 6000},
            {"kind": "same_as_recorded", "version": 3},
        ]
    )


def test_a_stored_member__is_decoded_once_and_checked_again_without_its_snapshot():
    checks.decoded_forget()
    e = {"kind": "item_selected", "item": "P7"}
    stamp = "2026-12-07T00:00:00+00:00"
    (first,) = checks.check(
        V3, [checks.MemberCase(7, "req-7", "sg-test", snapshot(V3), [e], stamp)]
    )
    # Checked again (the editor as you type): the kept decoded form, no snapshot read.
    again = checks.MemberCase(7, "req-7", "sg-test", None, [e], stamp)
    (second,) = checks.check(V1, [again], label="v1")
    assert first.outcome == checks.PASSED
    assert second.outcome == checks.FAILED
    assert "P7 is not selected by v1" in second.results[0].message
    assert list(checks.decoded_known([(7, stamp), (8, stamp)])) == [(7, stamp)]
    checks.decoded_forget()
