"""The wire's rollout fields (docs/runtime-contract.md §1 `rollouts`, §3 `rollout`): optional,
so an older runtime's trace and an older console's payload still decode, and bounded."""

from __future__ import annotations

import msgspec
import pytest
from context_runtime import wire

TRACE = {
    "request_id": "req-1",
    "agent": "assistant",
    "occurred_at": "2026-12-02T12:00:00Z",
    "status": "ready",
}
ENTRY = {"id": "ro-7", "version": 4, "body": {}, "share": 0.1, "unit": "task", "step": 2}


def decode_trace(**fields) -> wire.Trace:
    return msgspec.json.decode(msgspec.json.encode({**TRACE, **fields}), type=wire.Trace)


def test_trace__without_rollout__decodes_as_none():
    assert decode_trace().rollout is None
    assert decode_trace(rollout=None).rollout is None


def test_trace__rollout_block__decodes():
    rollout = decode_trace(rollout={"id": "ro-7", "arm": "new", "step": 2}).rollout

    assert rollout == wire.TraceRollout(id="ro-7", arm="new", step=2)


def test_trace__arm_it_does_not_know__decodes_for_the_console_to_count_as_a_fault():
    # The console stores it and counts a runtime fault (traces.rollouts.counters): refusing
    # the trace here would lose it and hide the runtime's mistake.
    assert decode_trace(rollout={"id": "ro-7", "arm": "both", "step": 2}).rollout.arm == "both"


@pytest.mark.parametrize(
    ("block", "where"),
    [
        ({"id": "ro-7", "arm": "", "step": 2}, "$.rollout.arm"),
        ({"id": "ro-7", "arm": "a" * 11, "step": 2}, "$.rollout.arm"),
        ({"id": "", "arm": "new", "step": 2}, "$.rollout.id"),
        ({"id": "r" * 101, "arm": "new", "step": 2}, "$.rollout.id"),
        ({"id": "ro-7", "arm": "old", "step": -1}, "$.rollout.step"),
        ({"arm": "old", "step": 0}, "$.rollout"),
    ],
)
def test_trace__bad_rollout_block__refused_with_its_path(block, where):
    with pytest.raises(msgspec.ValidationError, match=rf"\{where}"):
        decode_trace(rollout=block)


def test_arms__new_and_old():
    assert wire.ARMS == ("new", "old") == (wire.ARM_NEW, wire.ARM_OLD)
    assert wire.ROLLOUT_UNITS == ("task", "principal")


def test_rollouts_map__decodes_entries():
    rollouts = msgspec.convert({"after_sales": ENTRY}, wire.Rollouts)

    assert rollouts["after_sales"] == wire.Rollout(**ENTRY)


@pytest.mark.parametrize(
    "change",
    [{"share": 1.5}, {"share": -0.1}, {"unit": "tenant"}, {"body": None}, {"version": -1}],
)
def test_rollout_entry__out_of_bounds__refused(change):
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({**ENTRY, **change}, wire.Rollout)


def test_rollout_entry__missing_body__refused():
    entry = {k: v for k, v in ENTRY.items() if k != "body"}

    with pytest.raises(msgspec.ValidationError, match="body"):
        msgspec.convert(entry, wire.Rollout)
