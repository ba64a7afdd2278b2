"""Checking a draft against a regression set (issue 35): target ≤ 1 s for 1,000 members,
measured against the engine's own replay speed in the same run. A script, not a test:

    python -m tests.bench.bench_regressions [--members 1000] [--candidates 50] [--rounds 5]

Pure (no database: the checker takes the members' rows as the selectors read them in one
query). Builds N members from requests the engine decided with a v3-like strategy — the
consultation's task, order and policy bundle plus old dialogue turns — each with three
expectations, then times, best and median of the rounds:

- the floor: `context_runtime.replay.Replay.run_facts` on candidates already rebuilt, one per
  member (the engine alone);
- the checker, as a set is checked again (the editor as you type, the release pages, the
  go-live judgement): `traces.regressions.checks.check` of a draft (a smaller budget) over the
  same stored members, decoded once per process (`checks.decoded`) — the replay and the
  expectations judged;
- the checker's first check in a process: the same with every snapshot decoded (JSON-shaped
  rows → wire structs → engine items → the engine's check of them).
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time

import msgspec
from context_runtime import replay as engine_replay
from context_runtime import wire
from context_runtime.engine import CandidateItem, Strategy, select

from traces.regressions import checks

TARGET_S = 1.0
V3 = {
    "required": ["task_state", "order_delivery", "applicable_policy"],
    "optional": ["recent_dialogue"],
    "budget": {"max_input_tokens": 8000, "reserve_output_tokens": 1000},
}
DRAFT = {**V3, "budget": {"max_input_tokens": 4000, "reserve_output_tokens": 1000}}


def candidates(rng: random.Random, count: int) -> list[CandidateItem]:
    items = [
        CandidateItem(id="task_state:T9", source="task_state", version="4", size=310),
        CandidateItem(id="order:A1042", source="order_delivery", version="r12", size=640),
        CandidateItem(
            id="P7", source="applicable_policy", version="v2", size=2100, bundle="policy-P7"
        ),
    ]
    for i in range(count - len(items)):
        items.append(
            CandidateItem(
                id=f"chat:e-{i}",
                source="recent_dialogue",
                version=f"e-{i}",
                size=rng.randrange(40, 400),
                relevance=round(rng.random(), 2),
            )
        )
    return items


def member(rng: random.Random, n: int, count: int) -> checks.MemberCase:
    selection = select(strategy=V3, candidates=candidates(rng, count), fixed_input_tokens=1280)
    snapshot = {
        "selection": msgspec.to_builtins(selection.selection_info()),
        "candidates": msgspec.to_builtins(selection.wire_candidates()),
        "status": selection.status,
        "degradation": selection.degradation or "",
        "input_tokens": selection.input_estimate,
        "sources": sorted(Strategy.from_body(V3).sources),
        "references": {},
    }
    expectations = [
        {"kind": "item_selected", "item": "P7"},
        {"kind": "status_in", "statuses": ["ready", "degraded"]},
        {"kind": "input_tokens_at_most", "tokens": 7000},
    ]
    stamp = "2026-12-07T00:00:00+00:00"  # a stored member's added_at
    return checks.MemberCase(n, f"req-{n}", "sg-test", snapshot, expectations, stamp)


def timed(function, rounds: int) -> tuple[float, float]:
    function()  # warm-up
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times), statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(35)
    members = [member(rng, n, args.candidates) for n in range(args.members)]
    draft = Strategy.from_body(DRAFT)
    rebuilt = [
        engine_replay.Replay(
            engine_replay.trace_candidates(
                msgspec.convert(m.snapshot["candidates"], type=list[wire.Candidate])
            ),
            msgspec.convert(m.snapshot["selection"], type=wire.SelectionInfo),
        )
        for m in members
    ]

    def engine_alone():
        for request in rebuilt:
            request.run_facts(draft)

    def checker():
        return checks.check(draft, members, label="the draft")

    def first_checker():
        checks.decoded_forget()
        return checker()

    floor_best, floor_median = timed(engine_alone, args.rounds)
    check_best, check_median = timed(checker, args.rounds)
    first_best, first_median = timed(first_checker, args.rounds)
    outcomes = checks.totals(checker()).as_dict()
    print(f"machine: {platform.node()} · {platform.machine()} · Python {platform.python_version()}")
    print(f"{args.members} members × {args.candidates} candidates, 3 expectations each")
    print(f"engine alone (replay facts):  best {floor_best:.3f} s · median {floor_median:.3f} s")
    print(
        f"checker (draft vs the set):   best {check_best:.3f} s · median {check_median:.3f} s"
        f" · ratio {check_median / floor_median:.2f} · target ≤ {TARGET_S:.1f} s"
    )
    print(
        f"first check (every snapshot decoded): best {first_best:.3f} s · median"
        f" {first_median:.3f} s · ratio {first_median / floor_median:.2f}"
    )
    print(f"outcomes: {outcomes}")
    return 0 if max(check_median, first_median) <= TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
