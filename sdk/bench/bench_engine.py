"""What one selection costs on the request path (targets: median ≤ 0.1 ms for 50 candidates,
≤ 1 ms for 500).

    python sdk/bench/bench_engine.py [--seconds 0.5] [--rounds 5]

Each case times ``select()`` one call at a time (``perf_counter_ns`` around the call) over a
realistic mix for the consultation of docs/background.md § Consultation A1042: the required
task, order and policy bundle, then optional dialogue turns with relevance scores, some
irrelevant, some not fetched, more than the budget holds. The strategy is read once
(``Strategy.from_body``), as a runtime does per config ETag. In the same run, as the
baseline, the same candidates are sorted by priority, relevance and id — the least any
selection must do — and the ratio is printed. Rounds alternate engine and baseline so drift
on a shared machine hits both alike.

Extra rows (no target): the same call with dependencies in play (the allocator then orders
units by what they need), and with the strategy body passed as a dict (validated per call).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, too

from context_runtime.engine import CandidateItem, Strategy, select  # noqa: E402

BODY = {
    "required": ["task_state", "order_delivery", "applicable_policy"],
    "optional": ["recent_dialogue", "memory", "policy_faq"],
    "priority": {"recent_dialogue": 40, "memory": 60, "policy_faq": 20},
    "bundles": {"policy-P7": ["P7-"]},
    "on_missing": {"order_delivery": "general_policy_only"},
    "budget": {"max_input_tokens": 8000, "reserve_output_tokens": 1000},
}
WITH_DEPENDENCIES = {**BODY, "depends_on": {"policy_faq": ["applicable_policy"]}}
TARGET_MS = {50: 0.1, 500: 1.0}


def candidates(count: int, *, dependencies: bool = False) -> list[CandidateItem]:
    """``count`` candidates: 5 required (task, order, a 3-part policy bundle), the rest optional."""
    items = [
        CandidateItem(id="task_state:T9", source="task_state", version="4", size=310),
        CandidateItem(id="order:A1042", source="order_delivery", version="r12", size=640),
        CandidateItem(id="P7-v2#terms", source="applicable_policy", version="v2", size=1400),
        CandidateItem(id="P7-v2#annex-a", source="applicable_policy", version="v2", size=500),
        CandidateItem(id="P7-v2#annex-b", source="applicable_policy", version="v2", size=200),
    ]
    sources = ("recent_dialogue", "memory", "policy_faq")
    for n in range(count - len(items)):
        source = sources[n % 3]
        outcome = "not_fetched" if n % 17 == 0 else "fetched"
        needs = ("P7-v2#terms",) if dependencies and source == "policy_faq" else ()
        items.append(
            CandidateItem(
                id=f"{source}:e-{n:04d}",
                source=source,
                version=f"e-{n}",
                size=40 + (n * 37) % 400,
                relevance=((n * 7919) % 100) / 100,
                outcome=outcome,
                depends_on=needs,
            )
        )
    return items


def baseline(items, priority):
    return sorted(items, key=lambda c: (-priority.get(c.source, 0), -(c.relevance or 0), c.id))


def timed(call, seconds: float) -> list[float]:
    """Per-call times in ms for about ``seconds``, after a warm-up."""
    for _ in range(50):
        call()
    samples = []
    clock = time.perf_counter_ns
    stop = clock() + int(seconds * 1e9)
    # The garbage collector stays on, as in a runtime: its pauses belong in the p99.
    while clock() < stop:
        started = clock()
        call()
        samples.append((clock() - started) / 1e6)
    return samples


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="per case and round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    strategy = Strategy.from_body(BODY)
    with_dependencies = Strategy.from_body(WITH_DEPENDENCIES)
    priority = dict(BODY["priority"])
    cases = []
    for count in (50, 500):
        items = candidates(count)
        linked = candidates(count, dependencies=True)
        cases.append(
            (
                count,
                {
                    "select": lambda items=items: select(strategy=strategy, candidates=items),
                    "baseline": lambda items=items: baseline(items, priority),
                    "with dependencies": lambda linked=linked: select(
                        strategy=with_dependencies, candidates=linked
                    ),
                    "strategy as a dict": lambda items=items: select(
                        strategy=BODY, candidates=items
                    ),
                },
            )
        )
        check = select(strategy=strategy, candidates=items)
        decided = {d.decision for d in check.decisions}
        assert check.status == "ready" and {"over_budget", "irrelevant"} <= decided, decided

    samples = {(count, name): [] for count, calls in cases for name in calls}
    for _ in range(args.rounds):
        for count, calls in cases:
            for name, call in calls.items():
                samples[count, name] += timed(call, args.seconds)

    print(
        f"bench_engine — {datetime.now(UTC):%Y-%m-%d %H:%M UTC}, {platform.node()}, "
        f"Python {platform.python_version()}, {platform.machine()}, "
        f"{args.rounds} rounds × {args.seconds:g} s per case, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'candidates':>10}  {'case':<20} {'calls':>8} {'median ms':>10} {'p99 ms':>8}"
        f" {'× baseline':>11}  target"
    )
    for count, calls in cases:
        base = statistics.median(samples[count, "baseline"])
        for name in calls:
            runs = samples[count, name]
            median = statistics.median(runs)
            if name == "select":
                verdict = "✓" if median <= TARGET_MS[count] else "✗"
                target = f"median ≤ {TARGET_MS[count]:g} ms {verdict}"
            else:
                target = "—"
            ratio = "1.0" if name == "baseline" else f"{median / base:.1f}"
            print(
                f"{count:>10}  {name:<20} {len(runs):>8,} {median:>10.4f} {p99(runs):>8.4f}"
                f" {ratio:>11}  {target}"
            )


if __name__ == "__main__":
    main()
