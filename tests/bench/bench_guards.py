"""Rollout guard evaluation benchmark (issue 23): `step_evidence` + `guards.evaluate` for one
rollout, at 1M traces/day of rollout counters kept 30 days. A script, not a test:

    python -m tests.bench.bench_guards [--per-day 1000000] [--days 30] [--runs 30]

Runs against a separate database (bench_guards, created and dropped here) on the server of
DATABASE_URL. Fills rollout_counter with SQL (generate_series), every minute carrying
per-day/1440 traces split between the arms at the step's share, with realistic maps
(sources not fetched per arm and in both versions, outcomes and bad outcomes, a rare fault):

- `hourly`: 30 days of back-to-back staged rollouts of one strategy (a new rollout every
  hour, four steps: shadow 10 min, 10% 10 min, 50% 10 min, 100% 30 min) — the table's
  background, and the step the evaluator reads most: the current 10 minutes;
- `watch`: a rollout whose step has run 7 days (the paired watch after completion);
- `month`: a rollout whose one step has run all 30 days — the worst case a step can be.

Then times, in process, step_evidence + evaluate for each (the evaluator's work per rollout
every 30 s; target ≤ 50 ms), evaluate alone (pure), and a `SELECT 1` round trip as the
baseline the ratios are against; then what counting rollout traces adds to storing them.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime, timedelta

from tests.bench._database import BenchDatabase, django_setup, print_machine
from tests.bench.bench_health import timed

BENCH_DB = os.environ.get("BENCH_GUARDS_DB", "bench_guards")

# One rollout's minutes: (rollout_key, step, share) per minute from a VALUES-free series.
_FILL = """
INSERT INTO rollout_counter (
    rollout_key, step, minute, arm, environment_id, traces, usable, config_fallback, compared,
    paired_status, paired_required_lost, paired_tokens, not_fetched, not_fetched_both,
    outcomes, outcomes_bad, faults)
SELECT k.key, k.step, m, a.arm, %(environment)s, t, t - t / 50, t / 200, t,
       CASE WHEN i %% 97 = 0 THEN 1 ELSE 0 END, 0, CASE WHEN i %% 89 = 0 THEN 1 ELSE 0 END,
       jsonb_build_object('order_delivery', t * (1 + (i %% 5)) / 100,
                          'applicable_policy', t / 150, 'recent_dialogue', t / 400),
       jsonb_build_object('order_delivery', t * (1 + (i %% 5)) / 100,
                          'applicable_policy', t / 160),
       jsonb_build_object('escalated', t / 3, 'rating', t / 10, 'task_completed', t / 2),
       jsonb_build_object('escalated', t / 30, 'rating', t / 100),
       CASE WHEN i %% 1000 = 0 THEN jsonb_build_object('rollout_version', 1) ELSE '{}'::jsonb END
FROM generate_series(%(start)s::timestamptz, %(end)s::timestamptz, interval '1 minute')
         WITH ORDINALITY AS s(m, i)
CROSS JOIN LATERAL (
    SELECT CASE WHEN %(hourly)s THEN 'ro-h' || (i / 60)::text ELSE %(key)s END AS key,
           CASE WHEN NOT %(hourly)s THEN %(step)s
                WHEN i %% 60 < 10 THEN 0 WHEN i %% 60 < 20 THEN 1
                WHEN i %% 60 < 30 THEN 2 ELSE 3 END AS step
) AS k
CROSS JOIN LATERAL (
    SELECT CASE WHEN NOT %(hourly)s THEN %(share)s::float
                ELSE (ARRAY[0.0, 0.1, 0.5, 1.0])[k.step + 1] END AS share
) AS sh
CROSS JOIN (VALUES ('new'), ('old')) AS a(arm)
CROSS JOIN LATERAL (
    SELECT (%(per_minute)s * CASE WHEN a.arm = 'new' THEN sh.share ELSE 1 - sh.share END)::int AS t
) AS n
WHERE n.t > 0
"""


def hours_fill(cursor) -> tuple[int, str]:
    """The hour table from the minutes, as ingest's statement keeps it (the minutes summed per
    hour), then both tables analysed; returns the minute rows' count and size."""
    from traces.rollouts.counters import MAPS, SCALARS

    cursor.execute(
        "CREATE AGGREGATE bench_counts_sum(jsonb) "
        "(sfunc = health_counts_add, stype = jsonb, initcond = '{}')"
    )
    cursor.execute(
        f"INSERT INTO rollout_counter_hour (rollout_key, step, hour, arm, environment_id, "
        f"{', '.join(SCALARS)}, {', '.join(MAPS)}) "
        f"SELECT rollout_key, step, date_trunc('hour', minute), arm, environment_id, "
        + ", ".join(f"sum({c})" for c in SCALARS)
        + ", "
        + ", ".join(f"bench_counts_sum({m})" for m in MAPS)
        + " FROM rollout_counter GROUP BY 1, 2, 3, 4, 5"
    )
    cursor.execute("ANALYZE rollout_counter")
    cursor.execute("ANALYZE rollout_counter_hour")
    cursor.execute(
        "SELECT count(*), pg_size_pretty(pg_total_relation_size('rollout_counter')) "
        "FROM rollout_counter"
    )
    return cursor.fetchone()


def rollouts(now: datetime):
    """The rollout rows the selector looks the step's share up in: one per case."""
    from strategies.releases.models import Rollout
    from tests.factories.documents import (
        AgentFactory,
        DocumentFactory,
        EnvironmentFactory,
        FrozenVersionFactory,
    )

    agent = AgentFactory(key="assistant_professional")
    environment = EnvironmentFactory(key="sg-test", position=1)
    made = {}
    for key, document, plan, step in (
        ("ro-h719", "after_sales_consultation", [0.0, 0.1, 0.5, 1.0], 2),
        ("ro-watch", "refund_policy", [0.1, 1.0, 1.0], 2),
        ("ro-month", "order_status", [0.5], 0),
    ):
        doc = DocumentFactory(agent=agent, key=document)
        old, new = (FrozenVersionFactory(document=doc, number=n) for n in (1, 2))
        made[key] = Rollout.objects.create(
            key=key,
            document=doc,
            environment=environment,
            version=new,
            control_version=old,
            plan=[{"share": share, "bake_seconds": 600} for share in plan],
            plan_hash="bench",
            state=Rollout.State.RUNNING,
            step=step,
            step_started_at=now,
            started_by="bench",
        )
    return environment, made


def ingest_cost(environment, batches: int, traces: int, candidates: int) -> None:
    """What counting a rollout's traces costs the ingest: trace_batch_store (parse excluded)
    of batches whose every trace is in rollout ro-h719 (its arm the one the console assigns
    its task, half new; a shadow block each), with the rollout evidence (the claims'
    check and the counters) and with it switched off, interleaved batch by batch."""
    import orjson
    from context_runtime.rollouts import request_arm

    from tests.bench.bench_health import _Identity
    from tests.bench.bench_traces import payloads
    from traces import services
    from traces.ingest import parse_batch
    from traces.rollouts.counters import RolloutClaims

    start = datetime.now(UTC) - timedelta(hours=6)
    writes, judge = services.rollout_writes, services.rollout_claims_judge

    def no_claims(**kwargs):
        return RolloutClaims({}, {})

    spent = {"with": 0.0, "without": 0.0}
    for i in range(batches):
        for arm in ("with", "without") if i % 2 == 0 else ("without", "with"):
            items = payloads(traces, candidates, f"{arm}{i}", start)
            for n, item in enumerate(items):
                # the arm the console assigns the trace's task at step 2 (share 0.5)
                side = request_arm("ro-h719", share=0.5, unit=item["task"]["id"])
                item["documents"]["after_sales_consultation"] = 2 if side == "new" else 1
                item["rollout"] = {"id": "ro-h719", "arm": side, "step": 2}
                selected = [c["id"] for c in item["candidates"] if c["decision"] == "selected"]
                item["shadow"] = {
                    "version": 1 if side == "new" else 2,
                    "status": "ready",
                    "selected": selected[: len(selected) - n % 2],
                    "used_tokens": 6000 + n % 3 * 700,
                }
            batch = parse_batch(orjson.dumps({"traces": items}))
            services.rollout_writes = writes if arm == "with" else (lambda **kwargs: [])
            services.rollout_claims_judge = judge if arm == "with" else no_claims
            began = time.perf_counter()
            services.trace_batch_store(identity=_Identity(environment), batch=batch)
            spent[arm] += time.perf_counter() - began
    services.rollout_writes, services.rollout_claims_judge = writes, judge
    per = batches * traces
    extra = spent["with"] - spent["without"]
    print(
        f"\ningest cost ({batches} batches of {traces} rollout traces × {candidates} "
        f"candidates, store only, in process):\n"
        f"   with rollout evidence    {spent['with'] / per * 1e6:7.1f} µs/trace\n"
        f"   without them             {spent['without'] / per * 1e6:7.1f} µs/trace\n"
        f"   the difference           {extra / per * 1e6:7.1f} µs/trace = "
        f"{extra / spent['without']:.1%} of storing without them"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-day", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--keep", action="store_true", help="do not drop the bench database")
    parser.add_argument("--ingest-batches", type=int, default=10, help="0: skip the ingest cost")
    args = parser.parse_args()

    database = BenchDatabase(BENCH_DB)
    print_machine(f"load {os.getloadavg()}")
    try:
        database.create()
        django_setup(database.url)
        from django.db import connection
        from django.utils import timezone

        from traces.rollouts import guards
        from traces.rollouts.selectors import step_evidence

        now = timezone.now().replace(second=0, microsecond=0)
        environment, _ = rollouts(now)
        per_minute = args.per_day // 1440
        month = now - timedelta(days=args.days)
        # the last hourly rollout's step 2 began 20 minutes into its hour
        hour_start = month + timedelta(minutes=(args.days * 1440 // 60 - 1) * 60)
        cases = {
            # name: (fill arguments, step_evidence arguments)
            "hourly": (
                {"hourly": True, "key": "", "step": 0, "share": 0.0, "start": month},
                {"rollout_key": "ro-h719", "step": 2, "since": hour_start + timedelta(minutes=20)},
            ),
            "watch": (
                {
                    "hourly": False,
                    "key": "ro-watch",
                    "step": 2,
                    "share": 1.0,
                    "start": now - timedelta(days=7),
                },
                {"rollout_key": "ro-watch", "step": 2, "since": now - timedelta(days=7)},
            ),
            "month": (
                {"hourly": False, "key": "ro-month", "step": 0, "share": 0.5, "start": month},
                {"rollout_key": "ro-month", "step": 0, "since": month},
            ),
        }
        started = time.perf_counter()
        with connection.cursor() as cursor:
            for fill, _ in cases.values():
                cursor.execute(
                    _FILL,
                    {
                        **fill,
                        "environment": environment.pk,
                        "end": now - timedelta(minutes=1),
                        "per_minute": per_minute,
                    },
                )
            rows, size = hours_fill(cursor)
        print(
            f"\nfilled {rows:,} rollout counter rows ({size}) in "
            f"{time.perf_counter() - started:.1f} s: {args.days} days of minutes × "
            f"{per_minute} traces a minute (≈{per_minute * 1440:,}/day) per rollout"
        )

        def round_trip():
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                cursor.fetchone()

        base, _ = timed(round_trip, args.runs)
        print(f"\nbaseline: SELECT 1 round trip median {base:.2f} ms")
        settings = guards.GuardSettings()
        for name, (_, ask) in cases.items():
            evidence = step_evidence(**ask)
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*), coalesce(sum(traces), 0) FROM rollout_counter "
                    "WHERE rollout_key = %s AND step = %s "
                    "AND minute >= date_trunc('minute', %s::timestamptz)",
                    [ask["rollout_key"], ask["step"], ask["since"]],
                )
                read, direct = cursor.fetchone()
            assert evidence.new.traces + evidence.old.traces == direct, (evidence, direct)
            results = guards.evaluate(evidence, settings)
            pure, _ = timed(
                lambda evidence=evidence: guards.evaluate(evidence, settings), args.runs
            )
            median, p95 = timed(
                lambda ask=ask: guards.evaluate(step_evidence(**ask), settings), args.runs
            )
            verdict = "✓" if p95 <= 50 else "✗"
            states = ",".join(sorted({r.state for r in results}))
            print(
                f"   {name:<7} {read:>7,} minutes, {direct:>11,} traces: "
                f"step_evidence+evaluate median {median:6.1f} ms · p95 {p95:6.1f} ms "
                f"(≤ 50 ms {verdict}; {median / base:5.0f}× the round trip) · evaluate alone "
                f"{pure:5.2f} ms · states {states}"
            )
        if args.ingest_batches:
            ingest_cost(environment, args.ingest_batches, 500, 50)
        print(f"\nload after: {os.getloadavg()}")
    finally:
        if not args.keep:
            database.drop()


if __name__ == "__main__":
    main()
