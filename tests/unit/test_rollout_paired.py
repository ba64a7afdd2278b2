"""One request under both versions (traces.rollouts.counters.paired_view): which way the
new version was worse, from the served version's decisions and its shadow block, for either
arm; and which sources neither version had."""

from __future__ import annotations

import msgspec
from context_runtime.wire import Trace as WireTrace

from tests.factories import candidate, trace_payload
from traces.rollouts.counters import not_fetched_sources, paired_view


def wire(**fields) -> WireTrace:
    return msgspec.json.decode(msgspec.json.encode(trace_payload("r1", **fields)), type=WireTrace)


def view(arm, trace: WireTrace):
    return paired_view(
        arm=arm,
        status=trace.status,
        candidates=trace.candidates,
        tokens=trace.input_estimate.value if trace.input_estimate else None,
        shadow=trace.shadow,
    )


SHADOW = {"version": 3, "status": "ready", "selected": ["task_state:T9", "P7-v2"]}


def test_paired_view__the_same_decisions__nothing_worse():
    result = view("new", wire(shadow=SHADOW))
    assert result.compared and result.worse == ()


def test_paired_view__no_shadow_status__not_compared():
    assert not view("new", wire(shadow={"version": 3})).compared


def test_paired_view__arm_old__the_shadow_is_the_new_version():
    # live (old) ready, the shadow (new) failed and dropped the required P7-v2, 9000 tokens
    trace = wire(
        shadow={
            **SHADOW,
            "status": "budget_exceeded",
            "selected": ["task_state:T9"],
            "used_tokens": 9000,
        }
    )
    assert view("old", trace).worse == ("status", "required_lost", "tokens")
    # the same block on arm new means the OLD version was the worse one: nothing to count
    assert view("new", trace).worse == ()


def test_paired_view__a_required_item_the_other_version_does_not_require__not_lost():
    trace = wire(
        shadow={
            **SHADOW,
            "selected": ["task_state:T9"],
            "differences": [{"index": 1, "decision": "irrelevant", "required": False}],
        }
    )
    assert "required_lost" not in view("old", trace).worse


def test_paired_view__not_fetched_source__both_only_if_the_other_version_reads_it():
    candidates = [
        candidate(),
        candidate("order:A1", source="order_delivery", decision="not_fetched", required=False),
    ]
    read = wire(candidates=candidates, shadow=SHADOW)
    assert not_fetched_sources(read.candidates) == {"order_delivery"}
    assert view("new", read).not_fetched_both == {"order_delivery"}
    unread = wire(
        candidates=candidates,
        shadow={
            **SHADOW,
            "differences": [
                {"index": 1, "decision": "not_requested", "reason_code": "source_not_read"}
            ],
        },
    )
    assert view("new", unread).not_fetched_both == frozenset()
