"""Staged rollout guard evaluation benchmark (issue 23: ≤ 50 ms per rollout at 1M traces/day).
A script, not a test:

    python -m tests.bench.bench_rollouts [--per-day 1000000] [--days 30] [--rollouts 20] [--runs 30]

Runs against a separate database (bench_rollouts, created and dropped here) on the server of
DATABASE_URL, and the Redis of REDIS_URL. Starts `--rollouts` staged rollouts (one strategy
each, in sg-test) through the real service, then fills rollout_counter with SQL
(generate_series): for each rollout, every minute of its current step's bake window (the
longest a step reads: a 30 min final bake, extended once: 60 minutes) carries per-day/1440
traces of that environment split between the arms by the step's share, with paired counts
and not-fetched maps; and `--days` days of finished steps of other rollouts beside them, so
the table has the size 30 days of 1M traces/day give. Then times, in process:

- one evaluator tick per rollout (`traces.rollouts.evaluator.rollout_evaluate` while the
  bake runs: the step's evidence, every guard, the states recorded for the page),
- its parts: `step_evidence` (the queries) and `guards.evaluate` (the statistics),

printing median and p95 in ms against the 50 ms target, and the machine's load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import timedelta

from tests.bench._database import BenchDatabase, django_setup, print_machine

BENCH_DB = os.environ.get("BENCH_ROLLOUTS_DB", "bench_rollouts")
TARGET_MS = 50.0

_FILL = """
INSERT INTO rollout_counter (
    rollout_key, step, minute, arm, environment_id, traces, usable, config_fallback, compared,
    paired_status, paired_required_lost, paired_tokens, not_fetched, not_fetched_both,
    outcomes, outcomes_bad, faults)
SELECT %(key)s, %(step)s, m, a.arm, %(environment)s, n, n - n / 50, n / 200, n,
       0, CASE WHEN i %% 97 = 0 THEN 1 ELSE 0 END, 0,
       jsonb_build_object('order_delivery', n / 60, 'applicable_policy', n / 150),
       jsonb_build_object('order_delivery', n / 90),
       jsonb_build_object('task:escalated', n / 30), jsonb_build_object('task:escalated', n / 40),
       '{}'::jsonb
FROM generate_series(%(start)s::timestamptz, %(end)s::timestamptz, interval '1 minute')
         WITH ORDINALITY AS s(m, i)
CROSS JOIN (VALUES ('new', %(new_share)s::float), ('old', 1 - %(new_share)s::float))
         AS a(arm, share)
CROSS JOIN LATERAL (SELECT greatest((%(per_minute)s * a.share)::int + (i %% 7)::int - 3, 0) AS n)
         AS base
WHERE a.share > 0
"""


def timed(fn, runs: int) -> tuple[float, float]:
    """(median, p95) of `fn()` in ms over `runs` calls, after one warm-up."""
    fn()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95) - 1]


def world(rollouts: int):
    """The rollout setup of the tests, with `rollouts` strategies rolling out in sg-test."""
    from strategies.releases.services import rollout_start
    from tests.factories import DocumentFactory, frozen_versions, publish, strategy_body
    from tests.factories.releases import rollout_setup

    setup = rollout_setup()
    sg = setup.envs["sg-test"]
    started = []
    plan = [{"share": 0.1, "bake_seconds": 7200}, {"share": 1.0, "bake_seconds": 1800}]
    for index in range(rollouts):
        document = DocumentFactory(agent=setup.agent, key=f"bench_strategy_{index}")
        bodies = [strategy_body(budget={"max_input_tokens": n}) for n in (6000, 7000)]
        numbered = frozen_versions(document, bodies, actor=setup.ops)
        versions = [numbered[1], numbered[2]]
        publish(versions[0], sg, actor=setup.ops)
        started.append(
            rollout_start(version=versions[1], environment=sg, actor=setup.ops, plan=plan)
        )
    return setup, started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-day", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--rollouts", type=int, default=20)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--keep", action="store_true", help="do not drop the bench database")
    args = parser.parse_args()

    database = BenchDatabase(BENCH_DB)
    print_machine(f"load {os.getloadavg()}")
    try:
        database.create()
        django_setup(database.url)
        from django.db import connection
        from django.utils import timezone

        from strategies.releases.models import Rollout
        from traces.rollouts import evaluator, guards
        from traces.rollouts.selectors import step_evidence

        setup, rollouts = world(args.rollouts)
        sg = setup.envs["sg-test"]
        per_minute = args.per_day // 1440
        now = timezone.now().replace(second=0, microsecond=0)
        started = time.perf_counter()
        with connection.cursor() as cursor:
            for rollout in rollouts:
                # The current step: the last 60 minutes (a 30 min bake extended once).
                cursor.execute(
                    _FILL,
                    {
                        "key": rollout.key,
                        "step": 0,
                        "environment": sg.pk,
                        "start": now - timedelta(minutes=59),
                        "end": now,
                        "new_share": 0.1,
                        "per_minute": per_minute,
                    },
                )
            # 30 days of finished steps of earlier rollouts, one step a day, beside them.
            for day in range(args.days):
                cursor.execute(
                    _FILL,
                    {
                        "key": f"ro-old-{day}",
                        "step": day % 4,
                        "environment": sg.pk,
                        "start": now - timedelta(days=day + 1),
                        "end": now - timedelta(days=day),
                        "new_share": 0.5,
                        "per_minute": per_minute,
                    },
                )
            from tests.bench.bench_guards import hours_fill

            rows, size = hours_fill(cursor)
        print(
            f"\nfilled {rows:,} rollout counter rows ({size}) in "
            f"{time.perf_counter() - started:.1f} s: {per_minute} traces a minute "
            f"(≈{per_minute * 1440:,}/day), {args.rollouts} running rollouts × 60 minutes, "
            f"{args.days} days of earlier steps"
        )
        Rollout.objects.filter(pk__in=[r.pk for r in rollouts]).update(
            step_started_at=now - timedelta(minutes=59)
        )
        rollouts = list(
            Rollout.objects.filter(pk__in=[r.pk for r in rollouts]).select_related(
                "document__agent", "environment", "version", "control_version"
            )
        )
        first = rollouts[0]
        evidence = step_evidence(
            rollout_key=first.key, step=first.step, since=first.step_started_at
        )
        print(
            f"one step's evidence: new {evidence.new.traces:,} traces, old "
            f"{evidence.old.traces:,}; guards: "
            + ", ".join(f"{r.name} {r.state}" for r in guards.evaluate(evidence, sg))
        )
        print(f"\n{'what':<52} {'median ms':>10} {'p95 ms':>8}")

        def select_one():
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")

        rows_out = [
            ("baseline: one SELECT 1 round trip", timed(select_one, args.runs)),
            (
                "step_evidence (queries)",
                timed(
                    lambda: step_evidence(
                        rollout_key=first.key, step=first.step, since=first.step_started_at
                    ),
                    args.runs,
                ),
            ),
            (
                "guards.evaluate (statistics)",
                timed(lambda: guards.evaluate(evidence, sg), args.runs),
            ),
            (
                "evaluator tick, one rollout (evidence+guards+record)",
                timed(lambda: evaluator.rollout_evaluate(first), args.runs),
            ),
        ]
        whole = timed(
            lambda: [evaluator.rollout_evaluate(r) for r in rollouts], max(args.runs // 5, 3)
        )
        rows_out.append(
            (
                f"evaluator tick, {len(rollouts)} rollouts, per rollout",
                tuple(v / len(rollouts) for v in whole),
            )
        )
        for what, (median, p95) in rows_out:
            print(f"{what:<52} {median:>10.2f} {p95:>8.2f}")
        print(f"\ntarget: ≤ {TARGET_MS:.0f} ms per rollout · load after {os.getloadavg()}")
    finally:
        if not args.keep:
            database.drop()


if __name__ == "__main__":
    main()
