"""Properties of the selection engine over generated strategies and candidates.

The generator builds valid input only (the bad-input tests cover the rest): dependencies
point from a source to earlier sources, and from an item to items of earlier sources or
earlier items of its own, so no circle can form; bundles group whole sources; extra versions
of an item carry no dependencies of their own.
"""

from __future__ import annotations

import copy

from context_runtime import wire
from context_runtime.engine import CandidateItem, Strategy, select
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SOURCES = ("task_state", "order_delivery", "applicable_policy", "recent_dialogue", "memory")
# Always optional, never bundled and nothing depends on it: where an "added optional item"
# comes from in the monotonicity property.
EXTRA = "extra_notes"
OUTCOMES = ("fetched",) * 6 + ("not_fetched", "no_access", "not_applicable")
PROPERTY_SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def strategy_bodies(draw) -> dict:
    required = [s for s in SOURCES if draw(st.booleans())]
    optional = [s for s in SOURCES if s not in required] + [EXTRA]
    body: dict = {"required": required, "optional": optional}
    priority = {s: draw(st.integers(0, 100)) for s in optional if draw(st.booleans())}
    if priority:
        body["priority"] = priority
    depends_on = {}
    for k, source in enumerate(SOURCES[1:], start=1):
        if draw(st.integers(0, 3)) == 0:
            depends_on[source] = [draw(st.sampled_from(SOURCES[:k]))]
    if depends_on:
        body["depends_on"] = depends_on
    bundles = {f"all-{s}": [s] for s in SOURCES if draw(st.integers(0, 3)) == 0}
    if bundles:
        body["bundles"] = bundles
    on_missing = {
        s: draw(st.sampled_from(["general_policy_only", "ask_again"]))
        for s in (*SOURCES, EXTRA)
        if draw(st.integers(0, 2)) == 0
    }
    if on_missing:
        body["on_missing"] = on_missing
    maximum = draw(st.integers(1, 20_000))
    body["budget"] = {
        "max_input_tokens": maximum,
        "reserve_output_tokens": draw(st.integers(0, min(maximum - 1, 2000))),
    }
    return body


@st.composite
def candidate_lists(draw) -> list[CandidateItem]:
    # Half the lists are healthy (everything fetched, no conflict), so that every status,
    # ``ready`` included, comes up often.
    troubled = draw(st.booleans())
    outcomes = st.sampled_from(OUTCOMES) if troubled else st.just("fetched")
    conflicts = troubled and draw(st.integers(0, 3)) == 0
    items: list[CandidateItem] = []
    count = draw(st.integers(0, 24))
    for n in range(count + (0 if troubled else len(SOURCES))):
        # A healthy list starts with an item from every source.
        source = SOURCES[n] if not troubled and n < len(SOURCES) else draw(st.sampled_from(SOURCES))
        rank = SOURCES.index(source)
        earlier = [
            c.id
            for k, c in enumerate(items)
            if SOURCES.index(c.source) < rank or (c.source == source and k < n)
        ]
        depends_on = ()
        if earlier and draw(st.integers(0, 5)) == 0:
            depends_on = tuple(draw(st.lists(st.sampled_from(earlier), max_size=2, unique=True)))
        conflicts_with = ()
        if conflicts and items and draw(st.integers(0, 7)) == 0:
            conflicts_with = (draw(st.sampled_from([c.id for c in items])),)
        item = CandidateItem(
            id=f"{source}:{n}",
            source=source,
            version=f"v{n}",
            size=draw(st.integers(0, 800)),
            relevance=draw(st.none() | st.floats(0, 1)),
            depends_on=depends_on,
            conflicts_with=conflicts_with,
            outcome=draw(outcomes),
        )
        items.append(item)
        if draw(st.integers(0, 7)) == 0:  # another version: usually one not in effect
            other = draw(st.sampled_from(OUTCOMES)) if conflicts else "not_applicable"
            items.append(
                CandidateItem(
                    id=item.id,
                    source=source,
                    version=f"v{n}b",
                    size=draw(st.integers(0, 1500)),
                    outcome=other,
                )
            )
    return items


calls = st.fixed_dictionaries(
    {
        "context_window": st.none() | st.integers(2000, 128_000),
        "max_input_tokens": st.none() | st.integers(1, 30_000),
        "fixed_input_tokens": st.integers(0, 500),
        "relevance_threshold": st.floats(0, 0.5),
    }
)


def run(body, candidates, arguments):
    return select(strategy=Strategy.from_body(body), candidates=candidates, **arguments)


@PROPERTY_SETTINGS
@given(strategy_bodies(), candidate_lists(), calls)
def test_selection__any_valid_input__selected_sizes_never_exceed_the_budget(body, items, arguments):
    selection = run(body, items, arguments)

    assert sum(item.size for item in selection.selected) == selection.used_tokens
    assert selection.used_tokens <= selection.available_tokens
    budget = body["budget"]
    ceiling = min(
        budget["max_input_tokens"],
        arguments["context_window"] or budget["max_input_tokens"],
        arguments["max_input_tokens"] or budget["max_input_tokens"],
    )
    assert selection.input_estimate <= max(
        ceiling - budget["reserve_output_tokens"], arguments["fixed_input_tokens"]
    )


@PROPERTY_SETTINGS
@given(strategy_bodies(), candidate_lists(), calls)
def test_selection__status_ready__every_required_item_selected(body, items, arguments):
    selection = run(body, items, arguments)

    if selection.status == "ready":
        assert all(d.decision == "selected" for d in selection.decisions if d.required)
        assert selection.degradation is None
        assert selection.problems == ()


@PROPERTY_SETTINGS
@given(strategy_bodies(), candidate_lists(), calls)
def test_selection__usable_status__no_required_item_dropped(body, items, arguments):
    selection = run(body, items, arguments)

    dropped = {"over_budget", "conflict", "no_access", "irrelevant"}
    if selection.usable:
        assert not [d for d in selection.decisions if d.required and d.decision in dropped]
    if any(d.decision == "conflict" for d in selection.decisions):
        assert selection.status == "source_conflict"
    if selection.status == "degraded":
        assert selection.degradation in body["on_missing"].values()
    else:
        assert selection.degradation is None


@PROPERTY_SETTINGS
@given(strategy_bodies(), candidate_lists(), calls)
def test_selection__every_candidate__exactly_one_decision_with_a_short_reason(
    body, items, arguments
):
    selection = run(body, items, arguments)

    assert [(d.id, d.version) for d in selection.decisions] == [(c.id, c.version) for c in items]
    assert all(d.decision in wire.DECISIONS for d in selection.decisions)
    assert all(0 < len(d.reason) <= wire.MAX_REASON_CHARS for d in selection.decisions)
    chosen = [i for i, d in enumerate(selection.decisions) if d.decision == "selected"]
    assert sorted(map(id, selection.selected)) == sorted(id(items[i]) for i in chosen)
    assert selection.status in wire.STATUSES


@PROPERTY_SETTINGS
@given(strategy_bodies(), candidate_lists(), calls)
def test_selection__same_input_twice__same_output(body, items, arguments):
    first = run(body, items, arguments)
    again = select(strategy=copy.deepcopy(body), candidates=list(items), **arguments)

    assert first == again
    assert first.wire_candidates() == again.wire_candidates()


@PROPERTY_SETTINGS
@given(
    strategy_bodies(),
    candidate_lists(),
    calls,
    st.integers(0, 3000),
    st.none() | st.floats(0, 1),
    st.sampled_from(OUTCOMES),
)
def test_selection__optional_item_added__no_required_item_removed(
    body, items, arguments, size, relevance, outcome
):
    before = run(body, items, arguments)
    added = CandidateItem(
        id="extra_notes:new", source=EXTRA, size=size, relevance=relevance, outcome=outcome
    )

    after = run(body, [*items, added], arguments)

    kept = after.decisions[: len(items)]
    for old, new in zip(before.decisions, kept, strict=True):
        assert new.required == old.required
        if old.required and old.decision == "selected":
            assert new.decision == "selected"
    if before.status == "ready" and after.status != "ready":
        # Only a failing optional source with a handler can change a ready verdict.
        assert (after.status, added.outcome) == ("degraded", "not_fetched")
