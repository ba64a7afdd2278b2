"""Standing alerts benchmark (issue 35 item 4): one evaluation tick of 100 rules at 1M traces
a day (target: at most 100 ms a tick). A script, not a test:

    python -m tests.bench.bench_alerts [--per-day 1000000] [--days 30] [--rules 100] [--runs 20]

Runs against a separate database (bench_alerts, created and dropped here) on the server of
DATABASE_URL. Fills health_counter with SQL (generate_series): 10 (agent, environment) pairs
share `--per-day` traces; every minute of `--days` days carries their counts on the live rows
of the strategy and the profile and on a shadow row (what the evaluator must skip), with
realistic maps (statuses, config fallbacks, outcomes); health_counter_hour holds the same per
hour (the baselines read it). `--rules` rules spread over the pairs: rates over 5 to 60
minutes, traffic with a no-data rule, task_completed under its 7-day baseline (1 in 10).

Times `traces.alerts.services.alerts_evaluate(now=…)` in process: the first tick (rules move
from not judged to their level: writes, alerts fired) and the steady ticks after (the usual
case: nothing changes), against the same tick with one rule (the baseline of this run).
Prints median and p95 in ms and the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import timedelta

from tests.bench._database import BenchDatabase, django_setup, print_machine

BENCH_DB = os.environ.get("BENCH_ALERTS_DB", "bench_alerts")
DOC = "after_sales_consultation"
PAIRS = 10

_FILL = """
INSERT INTO {table} (
    agent_id, environment_id, document, version, arm, {time}, traces, failures, statuses,
    degraded, required_missing, config_fallback, tokens_sum, tokens_count, tokens_hist,
    compared, same_status, same_selected, required_kept, required_lost, token_delta_sum,
    token_delta_count, outcomes, faults)
SELECT %(agent)s, %(environment)s, d.document, 3, d.arm, m, n, f,
       jsonb_build_object('ready', n - f - g, 'degraded', g, 'missing_required_data', f - f / 3,
                          'budget_exceeded', f / 3),
       jsonb_build_object('general_policy_only', g),
       jsonb_build_object('applicable_policy:provider_not_fetched', f - f / 3),
       CASE WHEN i %% 7 = 0 THEN jsonb_build_object('stale', 1 * %(scale)s) ELSE '{{}}'::jsonb END,
       n * 6200.0, n, jsonb_build_object('13', n),
       0, 0, 0, '{{}}'::jsonb, '{{}}'::jsonb, 0, 0,
       jsonb_build_object('task_completed:true', n / 3, 'task_completed:false', n / 30,
                          'escalated:true', n / 50, 'escalated:false', n / 4),
       '{{}}'::jsonb
FROM generate_series(%(start)s::timestamptz, %(end)s::timestamptz, %(step)s::interval)
     WITH ORDINALITY AS s(m, i),
     LATERAL (SELECT %(per)s + (i %% 5)::bigint AS n) AS c,
     LATERAL (SELECT c.n / 20 + (i %% 3) AS f, c.n / 25 AS g) AS k,
     (VALUES ('{doc}', 'live'), ('profile', 'live'), ('{doc}', 'shadow')) AS d(document, arm)
"""


def world(rule_count: int):
    from tests.factories.documents import AgentFactory, DocumentFactory, EnvironmentFactory
    from traces.alerts.models import AlertRule

    agents = [AgentFactory(key=f"agent_{n}") for n in range(PAIRS // 2)]
    envs = [EnvironmentFactory(key=key, position=i) for i, key in enumerate(("sg-test", "prod"))]
    for agent in agents:
        DocumentFactory(agent=agent, key=DOC)
    pairs = [(a, e) for a in agents for e in envs]
    shapes = [
        dict(metric="missing_required_data", comparison="above", warning_threshold=0.01,
             alert_threshold=0.02, window_minutes=10),
        dict(metric="fallback_resolution", comparison="above", alert_threshold=0.05,
             window_minutes=5),
        dict(metric="failed", comparison="above", warning_threshold=0.05, alert_threshold=0.1,
             window_minutes=60),
        dict(metric="traffic", comparison="below", alert_threshold=1, window_minutes=10,
             no_data_minutes=10),
        dict(metric="task_completed", comparison="below", baseline=True, alert_threshold=0.2,
             window_minutes=30),
    ]  # fmt: skip
    rules = []
    for n in range(rule_count):
        agent, env = pairs[n % len(pairs)]
        shape = shapes[n % len(shapes)] if n % 10 else shapes[4]
        if n % 10 != 0 and shape["metric"] == "task_completed":
            shape = shapes[0]
        rules.append(AlertRule(agent=agent, environment=env, name=f"rule {n}", **shape))
    AlertRule.objects.bulk_create(rules)
    return pairs


def fill(pairs, *, per_day: int, days: int, now) -> int:
    from django.db import connection

    per_pair_minute = per_day // PAIRS // 1440
    rows = 0
    with connection.cursor() as cursor:
        for agent, env in pairs:
            for table, column, step, scale, start in (
                ("health_counter", "minute", "1 minute", 1, now - timedelta(days=days)),
                ("health_counter_hour", "hour", "1 hour", 60, now - timedelta(days=days)),
            ):
                start = start.replace(minute=0) if column == "hour" else start
                cursor.execute(
                    _FILL.format(table=table, time=column, doc=DOC),
                    {
                        "agent": agent.pk,
                        "environment": env.pk,
                        "start": start,
                        "end": now,
                        "step": step,
                        "per": per_pair_minute * scale,
                        "scale": scale,
                    },
                )
                rows += cursor.rowcount
        cursor.execute("ANALYZE health_counter; ANALYZE health_counter_hour")
    return rows


def timed(runs: int, tick) -> list[float]:
    spent = []
    for _ in range(runs):
        started = time.perf_counter()
        tick()
        spent.append((time.perf_counter() - started) * 1000)
    return spent


def figures(spent: list[float]) -> str:
    p95 = sorted(spent)[max(int(len(spent) * 0.95) - 1, 0)]
    return f"median {statistics.median(spent):6.1f} ms · p95 {p95:6.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-day", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--rules", type=int, default=100)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--keep", action="store_true", help="do not drop the bench database")
    args = parser.parse_args()

    database = BenchDatabase(BENCH_DB)
    print_machine(f"database {BENCH_DB}")
    try:
        database.create()
        django_setup(database.url)
        from django.db import connection
        from django.test.utils import CaptureQueriesContext
        from django.utils import timezone

        from traces.alerts.models import AlertRule
        from traces.alerts.services import alerts_evaluate

        now = timezone.now().replace(second=0, microsecond=0)
        pairs = world(args.rules)
        started = time.perf_counter()
        rows = fill(pairs, per_day=args.per_day, days=args.days, now=now)
        print(
            f"counters: {rows:,} rows ({args.per_day:,} traces/day over {PAIRS} pairs, "
            f"{args.days} days) in {time.perf_counter() - started:.0f} s; {args.rules} rules"
        )
        tick_at = now + timedelta(seconds=30)
        with CaptureQueriesContext(connection) as queries:
            first = timed(1, lambda: alerts_evaluate(now=tick_at))
        levels = dict.fromkeys(("ok", "warning", "alert", "no_data", "unknown"), 0)
        for level in AlertRule.objects.values_list("level", flat=True):
            levels[level] += 1
        print(f"first tick (levels set, alerts fired): {first[0]:6.1f} ms, {len(queries)} queries")
        print("  levels: " + ", ".join(f"{k} {v}" for k, v in levels.items()))
        with CaptureQueriesContext(connection) as queries:
            alerts_evaluate(now=tick_at)
        steady = timed(args.runs, lambda: alerts_evaluate(now=tick_at))
        print(f"{args.rules} rules, steady tick: {figures(steady)} ({len(queries)} queries)")
        keep = AlertRule.objects.order_by("pk").first().pk
        AlertRule.objects.exclude(pk=keep).update(enabled=False)
        one = timed(args.runs, lambda: alerts_evaluate(now=tick_at))
        print(f"1 rule, steady tick (baseline):  {figures(one)}")
        print(
            f"ratio {args.rules} rules / 1 rule: "
            f"{statistics.median(steady) / statistics.median(one):.2f} (target: ≤ 100 ms a tick)"
        )
    finally:
        if not args.keep:
            database.drop()


if __name__ == "__main__":
    main()
