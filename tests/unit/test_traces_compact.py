"""traces.compact: a trace's candidates in one compact value and back, exactly (issue 36.1).

The replay property (sdk/tests/test_replay_properties.py) again, with the candidates stored
through `encode`/`decode` in between: a stored trace must replay as the one the runtime sent.
"""

from __future__ import annotations

import importlib.util
import math
import random
from pathlib import Path

import msgspec
import pytest
from context_runtime import wire
from context_runtime.engine import EngineInputError, Strategy, select
from context_runtime.replay import Facts, facts, replay, replay_trace, trace_candidates
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traces import compact


def _replay_properties():
    """The SDK's replay property module (its generators), loaded from its file: the SDK's
    tests are no package."""
    path = Path(__file__).resolve().parents[2] / "sdk" / "tests" / "test_replay_properties.py"
    spec = importlib.util.spec_from_file_location("sdk_replay_properties", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PROPERTIES = _replay_properties()

texts = st.text(max_size=30)
candidates = st.builds(
    wire.Candidate,
    id=st.text(min_size=1, max_size=40),
    source=st.sampled_from(["task_state", "memory", "order_delivery"]) | texts,
    decision=st.sampled_from(["selected", "irrelevant", "over_budget", "no_access", "conflict"]),
    version=texts,
    size=st.none() | st.integers(0, 2**31 - 1),
    required=st.booleans(),
    bundle=st.none() | texts,
    reason=texts,
    outcome=st.none() | st.sampled_from(["fetched", "not_fetched", "no_access"]),
    relevance=st.none()
    | st.floats(0, 1)
    | st.integers(0, 1000).map(lambda n: n / 1000)
    | st.just(-0.0),
    depends_on=st.lists(texts, max_size=3).map(tuple),
    conflicts_with=st.lists(texts, max_size=3).map(tuple),
    note=texts,
    provider_bundle=st.none() | texts,
    reason_code=st.none() | st.sampled_from(list(wire.REASON_CODES)),
)


def realistic(count: int = 50, seed: int = 1) -> list[wire.Candidate]:
    """Candidates as bench_storage_shapes writes them (and a runtime sends them)."""
    rng = random.Random(seed)
    decisions = ["selected"] * 5 + ["irrelevant", "over_budget", "not_applicable", "not_fetched"]
    sources = ["task_state", "order_delivery", "applicable_policy", "recent_dialogue", "memory"]
    return [
        wire.Candidate(
            id=f"item-{seed}-{i}",
            source=sources[i % 5],
            decision=(decision := rng.choice(decisions)),
            version=f"v{i}",
            size=100 + i,
            required=i < 3,
            reason="" if decision == "selected" else "older product introduction",
            outcome="fetched",
            relevance=round(rng.random(), 3),
            reason_code="required",
        )
        for i in range(count)
    ]


def _same(a: list[wire.Candidate], b: list[wire.Candidate]) -> None:
    """Equal field for field, types included (None is not "", -0.0 is not 0.0)."""
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for name in wire.Candidate.__struct_fields__:
            left, right = getattr(x, name), getattr(y, name)
            assert type(left) is type(right), (name, left, right)
            if isinstance(left, float):
                assert math.copysign(1, left) == math.copysign(1, right), (name, left, right)
            assert left == right, (name, left, right)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(candidates, max_size=60))
def test_decode__any_candidates__the_same_field_for_field(items):
    _same(compact.decode(compact.encode(items)), items)
    _same(compact.unpack(compact.pack(items)), items)


@settings(
    max_examples=1_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(PROPERTIES.cases())
def test_replay__stored_through_the_compact_value__as_exact_as_the_wire(case):
    """The SDK's replay property, with the trace's candidates stored and read back between
    the wire and the replay: every other version decides on them as on the originals, and
    the recorded version reproduces the recorded facts."""
    recorded_body, items, other_body, arguments = case
    try:
        recorded = select(strategy=Strategy.from_body(recorded_body), candidates=items, **arguments)
    except EngineInputError:
        return
    sent = PROPERTIES._through_the_wire(recorded)
    stored = msgspec.structs.replace(
        sent, candidates=compact.decode(compact.encode(sent.candidates))
    )
    _same(list(stored.candidates), list(sent.candidates))

    again = replay_trace(recorded_body, stored)
    assert facts(again) == Facts.recorded(sent.status, sent.degradation, sent.candidates)
    try:
        expected = replay(other_body, trace_candidates(sent.candidates), sent.selection)
    except EngineInputError as refused:
        with pytest.raises(EngineInputError) as again_refused:
            replay(other_body, trace_candidates(stored.candidates), stored.selection)
        assert again_refused.value.findings == refused.findings
        return
    other = replay(other_body, trace_candidates(stored.candidates), stored.selection)
    assert facts(other) == facts(expected)
    assert [d.reason for d in other.decisions] == [d.reason for d in expected.decisions]


def test_encode__fifty_realistic_candidates__under_a_kilobyte():
    """What makes the shape fit issue 36's 2.7 KB per trace: the candidates in < 1 KB
    (about 13.4 KB today in rows and indexes)."""
    items = realistic()
    value = compact.encode(items)
    assert len(value) < 1024, len(value)
    assert compact.decode(value) == items


def test_encode__no_candidates__decodes_to_an_empty_list():
    assert compact.decode(compact.encode([])) == []


def test_encode__relevance_not_in_thousandths__kept_as_the_float_it_was():
    items = [wire.Candidate(id="a", source="s", decision="selected", relevance=1 / 3)]
    assert compact.decode(compact.encode(items))[0].relevance == 1 / 3


@pytest.mark.parametrize(
    "value",
    [b"", b"\x09rest", b"\x01not deflate at all", compact.encode(realistic(3))[:-4]],
    ids=["empty", "unknown format", "not deflate", "cut short"],
)
def test_decode__not_a_value_of_this_module__says_so(value):
    with pytest.raises(compact.CompactError):
        compact.decode(value)


def test_kinds__each_kind_once_in_first_appearance_selected_included():
    items = [
        wire.Candidate(id="1", source="memory", decision="irrelevant", reason="old"),
        wire.Candidate(id="2", source="memory", decision="irrelevant", reason="old"),
        wire.Candidate(id="3", source="memory", decision="selected"),
        wire.Candidate(id="4", source="order", decision="not_fetched", reason="timed out"),
    ]
    assert compact.kinds(items) == [
        ("memory", "irrelevant", "old"),
        ("memory", "selected", ""),
        ("order", "not_fetched", "timed out"),
    ]
