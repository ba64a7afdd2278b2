"""The trace page's replay (issue 20, item 2): target ≤ 50 ms for a 50-candidate trace. A
script, not a test:

    python -m tests.bench.bench_replay [--candidates 50] [--samples 200]

Runs against a separate database (bench_replay, or $BENCH_REPLAY_DB; created and dropped
here) on the server of DATABASE_URL, with the demo world loaded and one trace of N
candidates made by the engine with the strategy live in sg-test (v3) and stored through the
runtime's ingest. Measures, in process, p50/p95 of:

- the engine alone: `context_runtime.replay.replay` on candidates already in memory (the
  floor, measured in the same run);
- the selector: `traces.replay.trace_replay` (the version and the candidates read from the
  database, rebuilt, replayed, compared with the record);
- the whole view: GET /traces/<id>/replay as htmx asks it (middleware, policy, selector, the
  access-log row, the fragment rendered), with the recorded version and with a draft; and
  the trace page itself in the same run, as the baseline of a page of this console.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from datetime import timedelta

from tests.bench._database import BenchDatabase, django_setup, print_machine

BENCH_DB = os.environ.get("BENCH_REPLAY_DB", "bench_replay")
TARGET_MS = 50.0


def timed(function, samples: int) -> tuple[float, float]:
    """p50 and p95 in ms over `samples` calls, after a few warm-up calls."""
    for _ in range(5):
        function()
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        function()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def candidates(count: int):
    """A consultation's candidates: the task, the order, the policy bundle, and old dialogue
    turns with relevance scores (most of them), as the demo's providers return them."""
    from context_runtime.engine import CandidateItem

    rng = random.Random(20)
    items = [
        CandidateItem(id="task_state:T9", source="task_state", version="4", size=310),
        CandidateItem(id="order:A1042", source="order_delivery", version="r12", size=640),
        CandidateItem(
            id="P7-v2", source="applicable_policy", version="v2", size=2100, bundle="policy-P7"
        ),
        CandidateItem(
            id="P7-v2#terms",
            source="applicable_policy",
            version="v2",
            size=300,
            bundle="policy-P7",
        ),
    ]
    for n in range(count - len(items)):
        items.append(
            CandidateItem(
                id=f"turn-{n}",
                source="recent_dialogue",
                version=f"e-{300 + n}",
                size=rng.randrange(30, 220),
                relevance=round(rng.random(), 3),
                note="an earlier turn",
            )
        )
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--keep", action="store_true", help="do not drop the bench database")
    args = parser.parse_args()

    database = BenchDatabase(BENCH_DB)
    print_machine(f"database {BENCH_DB}")
    quiet = {"DEBUG": "false", "LOG_LEVEL": "WARNING"}
    database.create(("load_demo", "--quiet-logins"), env=quiet)
    django_setup(database.url, **quiet)
    from context_runtime import replay as engine_replay
    from context_runtime import wire
    from context_runtime.engine import Strategy, select
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.utils import timezone

    from console.demo.traces import ingest_as_runtime
    from strategies.catalog.models import Environment
    from strategies.documents import services as documents
    from strategies.documents.models import Document
    from traces import replay
    from traces.models import Trace

    try:
        document = Document.objects.get(
            agent__key="assistant_professional", key="after_sales_consultation"
        )
        v3 = document.versions.get(number=3)
        strategy = Strategy.from_body(v3.body)
        items = candidates(args.candidates)
        selection = select(
            strategy=strategy, candidates=items, context_window=128_000, fixed_input_tokens=1_200
        )
        trace = wire.Trace(
            request_id="bench-replay",
            agent="assistant_professional",
            occurred_at=timezone.now() - timedelta(minutes=1),
            documents={"profile": 1, "after_sales_consultation": 3},
            strategy="after_sales_consultation",
            **selection.trace_fields(),
        )
        result = ingest_as_runtime(Environment.objects.get(key="sg-test"), [trace])
        assert result.accepted == 1, result.as_dict()
        body = {**v3.body, "budget": {**v3.body["budget"], "max_input_tokens": 4000}}
        draft = documents.draft_create(document=document, body=body, actor=None, note="bench")
        stored = Trace.objects.select_related("agent", "environment").get(request_id="bench-replay")
        user = get_user_model().objects.get(username="support")
        check = replay.trace_replay(user=user, trace=stored)
        assert check.reproduces, "the recorded version must reproduce the record"
        print(
            f"\ntrace of {args.candidates} candidates, status {stored.status}; "
            f"the draft (max_input_tokens 4000) gives "
            f"{replay.trace_replay(user=user, trace=stored, version=str(draft.number)).status}"
        )

        rebuilt = engine_replay.trace_candidates(trace.candidates)
        floor = timed(
            lambda: engine_replay.replay(strategy, rebuilt, trace.selection), args.samples
        )
        selector = timed(lambda: replay.trace_replay(user=user, trace=stored), args.samples)
        client = Client()
        client.force_login(user)
        url = "/traces/bench-replay/replay"

        def view(version):
            def get():
                response = client.get(url, {"version": version}, headers={"HX-Request": "true"})
                assert response.status_code == 200, response.status_code

            return get

        def trace_page():
            assert client.get("/traces/bench-replay/").status_code == 200

        baseline = timed(trace_page, args.samples)
        page = timed(view("3"), args.samples)
        page_draft = timed(view(str(draft.number)), args.samples)
        print(
            f"   engine alone (replay in memory):     p50 {floor[0]:6.2f} ms · p95 {floor[1]:6.2f} ms"
        )
        print(
            f"   selector (database + replay + diff): p50 {selector[0]:6.2f} ms · p95 {selector[1]:6.2f} ms"
        )
        print(
            f"   view, recorded version (htmx):       p50 {page[0]:6.2f} ms · p95 {page[1]:6.2f} ms"
        )
        print(
            f"   view, a draft (htmx):                p50 {page_draft[0]:6.2f} ms · p95 {page_draft[1]:6.2f} ms"
        )
        print(
            f"   the trace page itself (same run):    p50 {baseline[0]:6.2f} ms · "
            f"p95 {baseline[1]:6.2f} ms"
        )
        worst = max(page[1], page_draft[1])
        verdict = "ok" if worst <= TARGET_MS else "OVER"
        print(
            f"   ratios: selector/engine = {selector[0] / floor[0]:.1f} · replay view/trace "
            f"page (p50) = {page[0] / baseline[0]:.2f} and {page_draft[0] / baseline[0]:.2f} · "
            f"view p95 {worst:.1f} ms against the target ≤ {TARGET_MS:.0f} ms: {verdict}"
        )
    finally:
        if args.keep:
            from django.db import connections

            connections.close_all()
        else:
            database.drop()


if __name__ == "__main__":
    main()
