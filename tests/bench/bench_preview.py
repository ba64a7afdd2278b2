"""Impact preview: the replay and report of N traces × 50 candidates (issue 20).

Baseline, measured in the same run: rebuilding each trace's candidates and one `select()` in
memory (what a replay cannot do with less). The preview replays each trace up to three times
(recorded version for fidelity — shared with the live one when they are the same version —
and the candidate version) and aggregates the report.

    python -m tests.bench.bench_preview [traces]

Not yet here: the database read (the window's day partitions, two queries per 1,000 traces,
traces.previews.selectors.window_batches), which needs the replay columns of the storage
branch; the end-to-end figure is added once they are on main.
"""

from __future__ import annotations

import random
import sys
import time
import tracemalloc

from context_runtime.engine import CandidateItem, Strategy, select

from traces.previews import report

BODY = {
    "required": ["task_state", "order_delivery", "applicable_policy"],
    "optional": ["recent_dialogue", "memory", "knowledge"],
    "on_missing": {"order_delivery": "general_policy_only"},
    "budget": {"max_input_tokens": 8000, "reserve_output_tokens": 1000},
}
DRAFT = {**BODY, "budget": {"max_input_tokens": 4000, "reserve_output_tokens": 1000}}
FIXED, WINDOW = 1280, 128_000


def traces(n: int, rng: random.Random):
    strategy = Strategy.from_body(BODY)
    for t in range(n):
        items = [
            CandidateItem(id=f"task:{t}", source="task_state", size=rng.randrange(200, 400)),
            CandidateItem(id=f"order:{t}", source="order_delivery", size=rng.randrange(400, 800)),
            CandidateItem(
                id="P7",
                source="applicable_policy",
                size=rng.randrange(1500, 2500),
                bundle="policy-P7",
            ),
        ]
        for i in range(47):
            source = ("recent_dialogue", "memory", "knowledge")[i % 3]
            items.append(
                CandidateItem(
                    id=f"{source}:{i}",
                    source=source,
                    size=rng.randrange(20, 200),
                    relevance=round(rng.random(), 2),
                )
            )
        s = select(
            strategy=strategy, candidates=items, context_window=WINDOW, fixed_input_tokens=FIXED
        )
        trace = (t, f"req-{t}", 3, s.status, s.degradation or "", "bench", FIXED, 0.2, WINDOW, None)
        rows = [
            (
                t,
                d.id,
                d.source,
                d.version,
                d.size,
                d.required,
                d.bundle or "",
                it.bundle or "",
                d.decision,
                getattr(d, "reason_code", None) or "",
                it.outcome,
                it.relevance,
                [],
                [],
                it.note,
            )
            for d, it in zip(s.decisions, items, strict=True)
        ]
        yield trace, rows


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    data = list(traces(n, random.Random(20)))
    live = Strategy.from_body(BODY)
    draft = Strategy.from_body(DRAFT)

    started = time.perf_counter()
    for trace, rows in data:
        items = [report.candidate_item(r) for r in rows]
        select(strategy=live, candidates=items, **_arguments(trace))
    baseline = time.perf_counter() - started

    versions = report.Versions(recorded={3: live}, live_number=3, live=live, candidate=draft)
    started = time.perf_counter()
    result = report.run(versions, iter(data))
    replay = time.perf_counter() - started
    # Memory in a second run: tracemalloc slows every allocation, so never while timing.
    tracemalloc.start()
    report.run(versions, iter(data[: min(n, 2_000)]))
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    print(f"{n:,} traces × 50 candidates")
    print(f"baseline rebuild + select():   {baseline:6.2f} s")
    print(f"replay + report (2 selects):   {replay:6.2f} s  = {replay / baseline:.2f}× baseline")
    print(f"report's own peak over 2,000 traces (tracemalloc, input excluded): {peak:.1f} MiB")
    print(f"fidelity {result['fidelity']['share']}, previewed {result['previewed']:,}")


if __name__ == "__main__":
    main()
