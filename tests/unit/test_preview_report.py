"""The impact preview's replay and report (traces.previews.report), without a database: traces
made by the engine itself, as a runtime would record them, replayed with other versions and
checked against a brute-force run of the engine on the original candidates."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import msgspec
from context_runtime.engine import NOT_FETCHED, CandidateItem, Strategy, select

from traces.previews import report

V3 = {
    "required": ["task_state", "order_delivery", "applicable_policy"],
    "optional": ["recent_dialogue"],
    "on_missing": {"order_delivery": "general_policy_only"},
    "budget": {"max_input_tokens": 8000, "reserve_output_tokens": 1000},
}
V2 = {
    "required": ["task_state", "order_delivery"],
    "optional": ["applicable_policy"],
    "budget": {"max_input_tokens": 6000, "reserve_output_tokens": 800},
}
FIXED = 1_280
WINDOW = 128_000


def _with(body, **budget):
    return {**body, "budget": {**body["budget"], **budget}}


def _candidates(rng: random.Random, n: int) -> tuple[CandidateItem, ...]:
    scale = rng.uniform(0.85, 1.15)  # the demo traffic's size factors
    items = [
        CandidateItem(id=f"task:{n}", source="task_state", version="4", size=round(310 * scale)),
        CandidateItem(
            id=f"order:{n}", source="order_delivery", version="r1", size=round(640 * scale)
        ),
        CandidateItem(
            id="P7",
            source="applicable_policy",
            version="v2",
            size=round(2100 * scale),
            bundle="policy-P7",
        ),
        CandidateItem(
            id="chat",
            source="recent_dialogue",
            version="e",
            size=round(1150 * scale),
            relevance=0.8,
        ),
        CandidateItem(id="old", source="recent_dialogue", version="e0", size=900, relevance=0.05),
    ]
    if rng.random() < 0.1:
        items[1] = msgspec.structs.replace(items[1], size=None, version="", outcome=NOT_FETCHED)
    return tuple(items)


def _recorded(
    n: int,
    version: int,
    strategy: Strategy,
    items,
    *,
    engine="context_runtime test",
    truncated=False,
):
    """A trace as the runtime records it (what ingest stores), in the report's row shapes."""
    selection = select(
        strategy=strategy, candidates=items, context_window=WINDOW, fixed_input_tokens=FIXED
    )
    trace = (
        n,
        f"req-{n}",
        version,
        selection.status,
        selection.degradation or "",
        engine,
        FIXED if engine else None,
        0.2 if engine else None,
        WINDOW if engine else None,
        None,
        truncated,
    )
    rows = [
        (
            n,
            d.id,
            d.source,
            d.version,
            d.size,
            d.required,
            d.bundle or "",
            item.bundle or "",
            d.decision,
            d.reason_code,
            item.outcome,
            item.relevance,
            list(item.depends_on),
            list(item.conflicts_with),
            item.note,
        )
        for d, item in zip(selection.decisions, items, strict=True)
    ]
    return trace, rows


def _world(count=300, seed=7):
    rng = random.Random(seed)
    v3 = Strategy.from_body(V3)
    traces = [_recorded(n, 3, v3, items := _candidates(rng, n)) + (items,) for n in range(count)]
    return v3, traces


def _recorded_under_v2(count: int, *, seed: int):
    """v2 and `count` traces recorded under it (v2 asks no recent_dialogue)."""
    rng = random.Random(seed)
    v2 = Strategy.from_body(V2)
    traces = []
    for n in range(count):
        items = tuple(i for i in _candidates(rng, n) if i.source in v2.sources)
        traces.append((*_recorded(n, 2, v2, items), items))
    return v2, traces


def _run(live, candidate, traces, recorded=None):
    versions = report.Versions(
        recorded=recorded or {3: live}, live_number=3, live=live, candidate=candidate
    )
    return report.run(versions, ((t, rows) for t, rows, _ in traces))


def test_report__budget_4000__lists_exactly_the_traces_that_become_budget_exceeded():
    v3, traces = _world(count=45)  # every cell under IDS_PER_CELL: the lists are whole
    draft = Strategy.from_body(_with(V3, max_input_tokens=4000))
    result = _run(v3, draft, traces)
    listed = set()
    count = 0
    for old, row in result["status_matrix"].items():
        cell = row.get("budget_exceeded")
        if cell and old != "budget_exceeded":
            listed |= set(cell["ids"])
            count += cell["count"]
    brute = {
        f"req-{t[0]}"
        for t, _, items in traces
        if t[report.T_STATUS] != "budget_exceeded"
        and select(
            strategy=draft, candidates=items, context_window=WINDOW, fixed_input_tokens=FIXED
        ).status
        == "budget_exceeded"
    }
    assert result["fidelity"]["share"] == 1.0 and not result["withheld"]
    assert count == len(brute) > 0
    assert listed == brute


def test_report__budget_6000__no_status_change_but_changed_decisions_listed():
    v3, traces = _world()
    draft = Strategy.from_body(_with(V3, max_input_tokens=6000))
    result = _run(v3, draft, traces)
    changes = {
        (old, new): cell["count"]
        for old, row in result["status_matrix"].items()
        for new, cell in row.items()
        if old != new
    }
    assert changes == {}
    assert result["changed"]["count"] > 0
    assert result["sources"]["recent_dialogue"]["optional_dropped"]


def test_report__trace_without_replay_fields__counted_apart_never_compared():
    v3, traces = _world(count=20)
    rng = random.Random(1)
    old_runtime = _recorded(999, 3, v3, _candidates(rng, 999), engine="")
    result = _run(v3, v3, [*traces, (*old_runtime, ())])
    assert result["not_previewable"]["no_replay_fields"] == {"count": 1, "ids": ["req-999"]}
    assert result["previewed"] == 20


def test_report__truncated_or_refused_trace__counted_apart_each_for_its_reason():
    """Issue 21.4 traces: one that kept 500 of its candidates, one whose input the runtime
    refused. Replaying part of a request's candidates would decide otherwise, and a refused
    request has no decisions: neither is compared, each is named."""
    v3, traces = _world(count=20)
    rng = random.Random(2)
    truncated, rows = _recorded(998, 3, v3, _candidates(rng, 998), truncated=True)
    refused = (997, "req-997", 3, "input_refused", "", "", None, None, None, None, False)

    draft = Strategy.from_body(_with(V3, max_input_tokens=4000))
    result = _run(v3, draft, [*traces, (truncated, rows[:3], ()), (refused, [], ())])

    assert result["not_previewable"]["truncated"] == {"count": 1, "ids": ["req-998"]}
    assert result["not_previewable"]["input_refused"] == {"count": 1, "ids": ["req-997"]}
    assert report.not_previewable_count(result) == 2
    assert result["previewed"] == 20
    assert result["fidelity"]["checked"] == 20


def test_report__source_the_recorded_version_never_asked__not_previewable_per_source():
    v2, traces = _recorded_under_v2(30, seed=3)
    needs_dialogue = Strategy.from_body({**V2, "required": [*V2["required"], "recent_dialogue"]})
    result = report.run(
        report.Versions(recorded={2: v2}, live_number=2, live=v2, candidate=needs_dialogue),
        ((t, rows) for t, rows, _ in traces),
    )
    entry = result["not_previewable"]["sources"]["recent_dialogue"]
    assert (entry["traces"], entry["with_candidates"], entry["recorded_versions"]) == (30, 0, [2])
    assert result["previewed"] == 0 and "budget_exceeded" not in str(result["status_matrix"])


def test_report__replay_does_not_reproduce__numbers_withheld_and_mismatches_named():
    v3, traces = _world(count=50)
    trace, rows, items = traces[0]
    tampered = [(*rows[0][:8], "over_budget", *rows[0][9:]), *rows[1:]]
    result = _run(v3, v3, [(trace, tampered, items), *traces[1:]])
    assert result["withheld"] is True and "status_matrix" not in result
    (mismatch,) = result["fidelity"]["mismatches"]
    assert mismatch["request_id"] == "req-0"
    assert mismatch["trace_engine"] == "context_runtime test"
    assert mismatch["console_engine"] == report.CONSOLE_ENGINE


def test_stratified_quotas__more_than_the_limit__rare_statuses_kept_whole():
    quotas = report.stratified_quotas(
        {"ready": 150_000, "budget_exceeded": 900, "degraded": 40_000}, limit=100_000
    )
    assert quotas["budget_exceeded"] == 900
    assert sum(quotas.values()) <= 100_000 and quotas["ready"] >= quotas["degraded"] - 1


def test_wilson__small_sample__interval_contains_the_rate():
    low, high = report.wilson(3, 100)
    assert low < 0.03 < high and low >= 0 and high < 0.1


def test_report__sharded_by_trace_and_merged__same_report_as_one_run_exact_p95():
    v3, traces = _world(count=400)  # cells over IDS_PER_CELL: the merged id lists are cut
    draft = Strategy.from_body(_with(V3, max_input_tokens=4000))
    versions = report.Versions(recorded={3: v3}, live_number=3, live=v3, candidate=draft)
    at = datetime(2026, 12, 1, tzinfo=UTC)
    timed = [(t, rows, at + timedelta(seconds=t[report.T_ID])) for t, rows, _ in traces]
    whole = report.Replay(versions)
    for t, rows, when in timed:
        whole.add(t, rows, when)
    shards = [report.Replay(versions) for _ in range(3)]
    for t, rows, when in timed:
        shards[t[report.T_ID] % 3].add(t, rows, when)
    merged = shards[0]
    for shard in shards[1:]:
        # A shard's part goes through the database as JSON.
        merged.merge(json.loads(json.dumps(shard.state())))

    result, expected = merged.report(), whole.report()

    assert result == expected
    assert result["previewed"] == 400 and result["tokens"]["new"]["p95"] is not None
    assert (
        max(len(c["ids"]) for row in result["status_matrix"].values() for c in row.values()) == 50
    )


def test_report__identical_requests__worked_out_once_counted_every_time():
    v3, traces = _world(count=30)
    draft = Strategy.from_body(_with(V3, max_input_tokens=4000))
    versions = report.Versions(recorded={3: v3}, live_number=3, live=v3, candidate=draft)
    trace, rows, _ = traces[0]
    copies = [((n, f"copy-{n}", *trace[2:]), [(n, *row[1:]) for row in rows]) for n in range(5)]
    run = report.Replay(versions)
    for t, r in [(t, r) for t, r, _ in traces] + copies:
        run.add(t, r)

    result = run.report()

    assert run.memo_hits == 5 and result["previewed"] == 35
    status = trace[report.T_STATUS]
    new = next(
        new for new, cell in result["status_matrix"][status].items() if "req-0" in cell["ids"]
    )
    assert {f"copy-{n}" for n in range(5)} <= set(result["status_matrix"][status][new]["ids"])


def test_report__traces_lacking_two_sources__each_counted_apart_once():
    # Given traces recorded under v2, which asks neither recent_dialogue nor a fourth source,
    # and a candidate that needs both: each trace lacks two sources
    v2, traces = _recorded_under_v2(12, seed=5)
    both = Strategy.from_body(
        {**V2, "required": [*V2["required"], "recent_dialogue"], "optional": ["faq"]}
    )
    # When the preview runs
    result = report.run(
        report.Versions(recorded={2: v2}, live_number=2, live=v2, candidate=both),
        ((t, rows) for t, rows, _ in traces),
    )
    # Then each source names all 12 traces, and the page's "Not previewable (N traces)"
    # counts 12 traces, not 24
    sources = result["not_previewable"]["sources"]
    assert {s: e["traces"] for s, e in sources.items()} == {"recent_dialogue": 12, "faq": 12}
    assert report.not_previewable_count(result) == 12
    assert result["not_previewable"]["unasked_sources"]["count"] == 12


def test_not_previewable_count__report_stored_before_distinct_counts__never_adds_overlaps():
    stored = {
        "not_previewable": {
            "truncated": {"count": 3, "ids": []},
            "sources": {"a": {"traces": 221}, "b": {"traces": 24}},
        }
    }
    assert report.not_previewable_count(stored) == 3 + 221
