"""What a shadow strategy version adds to a request (target: ≤ 0.1 ms median at 50
candidates, against the same request without it).

    python sdk/bench/bench_shadow.py [--seconds 0.5] [--rounds 5]

Two levels, each measured with and without the shadow in the same run, rounds alternating so
drift on a shared machine hits both alike:

- ``engine``: live's ``select()`` (bench_engine's 50 candidates, 1,500 tokens of fixed input)
  alone, and followed by ``replay.shadow_run`` — the shadow equal to live (the A/A case),
  the shadow with ``max_input_tokens`` 4000 (it decides otherwise), and a shadow that reads
  fewer sources (its candidates are checked again);
- ``adk`` (when google-adk is installed): a whole ``ContextAssembly.assemble`` — the config
  read, 50 candidates from async providers, the selection, the trace — with no shadow
  released and with the A/A shadow released.

Printed per case: the median and p99 per request, the median added by the shadow (ms) and
the ratio to the same request without it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, too
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import BODY, candidates, p99, timed  # noqa: E402
from context_runtime.engine import Strategy, select  # noqa: E402
from context_runtime.replay import shadow_run  # noqa: E402

TARGET_MS = 0.1
COUNT = 50
FIXED = 1_500
SMALLER = {**BODY, "budget": {**BODY["budget"], "max_input_tokens": 4000}}
FEWER = {  # policy_faq no longer read
    **BODY,
    "optional": ["recent_dialogue", "memory"],
    "priority": {"recent_dialogue": 40, "memory": 60},
}


def engine_cases() -> dict:
    live = Strategy.from_body(BODY)
    items = tuple(candidates(COUNT))

    def request(shadow: Strategy | None):
        def call():
            selection = select(
                strategy=live, candidates=items, context_window=128_000, fixed_input_tokens=FIXED
            )
            if shadow is not None:
                shadow_run(selection, shadow, version=4, live_strategy=live)

        return call

    cases = {
        "without shadow": request(None),
        "A/A shadow (v3 = live)": request(live),
        "shadow max 4000": request(Strategy.from_body(SMALLER)),
        "shadow reads fewer": request(Strategy.from_body(FEWER)),
    }
    selection = select(
        strategy=live, candidates=items, context_window=128_000, fixed_input_tokens=FIXED
    )
    aa = shadow_run(selection, live, version=3, live_strategy=live)
    assert aa.differences_total == 0 and aa.status == selection.status
    other = shadow_run(selection, Strategy.from_body(SMALLER), version=4, live_strategy=live)
    assert other.differences_total > 0, "the smaller budget must decide otherwise"
    return cases


def adk_cases() -> dict | None:
    try:
        from context_runtime.adk import ContextAssembly
        from context_runtime.client import FRESH, ConfigSnapshot, Document
        from context_runtime.manifest_report import Registry
        from google.adk.models import LlmRequest
        from google.genai import types
    except ImportError:
        return None
    items = candidates(COUNT)
    by_source: dict[str, list] = {}
    for item in items:
        by_source.setdefault(item.source, []).append(item)
    registry = Registry()
    for source, found in by_source.items():

        async def provide(request, found=found):
            return found

        registry.register_provider(source, provide)

    async def general_policy_only(request, selection):
        return None

    registry.register_handler("general_policy_only", general_policy_only)

    class Client:
        def __init__(self, shadows):
            self._snapshot = ConfigSnapshot(
                agent="assistant_professional",
                environment="sg-test",
                strategies={"consultation": Document("consultation", 3, BODY)},
                shadows=shadows,
                source="console",
                state=FRESH,
                confirmed=time.monotonic(),
            )

        def snapshot(self):
            return self._snapshot

    class Context:
        invocation_id = None
        user_id = "shop-a/user-417"
        state: dict = {}
        user_content = None
        session = None

    def assembly(shadows):
        return ContextAssembly(
            client=Client(shadows),
            registry=registry,
            strategy_for="consultation",
            context_window=128_000,
            provider_timeout=None,
        )

    history = "h" * (FIXED * 4)

    def request(assembled):
        loop = asyncio.new_event_loop()

        def call():
            llm_request = LlmRequest(
                model="stub-model",
                contents=[types.Content(role="user", parts=[types.Part(text=history)])],
            )
            loop.run_until_complete(assembled.assemble(Context(), llm_request))

        return call

    return {
        "without shadow": request(assembly({})),
        "A/A shadow (v3 = live)": request(
            assembly({"consultation": Document("consultation", 3, BODY)})
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="per case and round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    levels = {"engine": engine_cases()}
    adk = adk_cases()
    if adk is not None:
        levels["adk"] = adk
    samples = {(level, name): [] for level, cases in levels.items() for name in cases}
    for _ in range(args.rounds):
        for level, cases in levels.items():
            for name, call in cases.items():
                samples[level, name] += timed(call, args.seconds)

    print(
        f"bench_shadow — {datetime.now(UTC):%Y-%m-%d %H:%M UTC}, {platform.node()}, "
        f"Python {platform.python_version()}, {platform.machine()}, {COUNT} candidates, "
        f"{args.rounds} rounds × {args.seconds:g} s per case, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    if adk is None:
        print("(google-adk not installed: the adk level is left out)")
    print(
        f"{'level':<7} {'case':<24} {'calls':>8} {'median ms':>10} {'p99 ms':>8}"
        f" {'added ms':>9} {'× without':>10}  target"
    )
    for level, cases in levels.items():
        base = statistics.median(samples[level, "without shadow"])
        for name in cases:
            runs = samples[level, name]
            median = statistics.median(runs)
            added = median - base
            target = "—"
            if name.startswith("A/A"):
                target = f"added ≤ {TARGET_MS:g} ms {'✓' if added <= TARGET_MS else '✗'}"
            print(
                f"{level:<7} {name:<24} {len(runs):>8,} {median:>10.4f} {p99(runs):>8.4f}"
                f" {added:>9.4f} {median / base:>10.2f}  {target}"
            )


if __name__ == "__main__":
    main()
