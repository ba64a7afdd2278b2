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

The traces of the last hour are there too (what sample request ids are read from: the
failing ones, a share of the rest), and each environment has a webhook hearing alert.fired
and alert.resolved (outbox rows written; their messages go to a queue of this run's own,
emptied at the end).

Times `traces.alerts.services.alerts_evaluate(now=…)` in process: the first tick (rules move
from not judged to their level: writes, alerts fired) and the steady ticks after (the usual
case: nothing changes), against the same tick with one rule (the baseline of this run); then
the tick where 50 of the 100 rules fire at once (alerts, sample request ids, outbox rows),
`--runs` times from the same state (the alerts and outbox rows removed between runs, not
timed). Prints median and p95 in ms and the ratios to the steady tick.
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


_TRACES = """
INSERT INTO traces_trace (
    request_id, occurred_at, received_at, strategy, strategy_version, documents,
    config_fallback, config_resolution, task_id, principal, model_name, model_adapter, status,
    degradation, input_estimate_unit, input_estimate_estimator, sources, agent_id,
    environment_id)
SELECT 'bench-' || %(pair)s || '-' || i, %(now)s::timestamptz - (i * %(gap)s) * interval '1 ms',
       %(now)s::timestamptz, '{doc}', 3, '{{}}'::jsonb, i %% 40 = 0,
       CASE WHEN i %% 40 = 0 THEN 'cached' ELSE 'fresh' END, '', '', '', '',
       CASE WHEN i %% 20 = 0 THEN 'missing_required_data'
            WHEN i %% 25 = 0 THEN 'degraded' WHEN i %% 60 = 0 THEN 'budget_exceeded'
            ELSE 'ready' END,
       '', '', '', '[]'::jsonb, %(agent)s, %(environment)s
FROM generate_series(1, %(count)s) AS s(i)
"""


def traces_fill(pairs, *, per_day: int, now, minutes: int = 60) -> int:
    """The traces of the last `minutes` of every pair (sample request ids are read here)."""
    from django.db import connection

    from traces import partitions

    count = per_day // PAIRS // 1440 * minutes
    gap = minutes * 60_000 // max(count, 1)
    with connection.cursor() as cursor:
        partitions.ensure_range(cursor, today=now.date(), days_back=1, days_ahead=1)
        for n, (agent, env) in enumerate(pairs):
            cursor.execute(
                _TRACES.format(doc=DOC),
                {"pair": n, "now": now, "gap": gap, "count": count, "agent": agent.pk,
                 "environment": env.pk},
            )  # fmt: skip
        cursor.execute("ANALYZE traces_trace")
    return count * len(pairs)


def webhooks_register(envs) -> None:
    from strategies.delivery.models import Webhook

    for env in envs:
        Webhook.objects.create(
            environment=env,
            url="http://127.0.0.1:9/bench-alerts",
            events=["alert.fired", "alert.resolved"],
            secret="whsec_bench",
        )


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
    webhooks_register(envs)
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
        from django.conf import settings
        from django.db import connection
        from django.test.utils import CaptureQueriesContext
        from django.utils import timezone

        from traces.alerts.models import AlertRule
        from traces.alerts.services import alerts_evaluate

        settings.CELERY_TASK_DEFAULT_QUEUE = QUEUE  # outbox messages: emptied at the end
        now = timezone.now().replace(second=0, microsecond=0)
        pairs = world(args.rules)
        started = time.perf_counter()
        rows = fill(pairs, per_day=args.per_day, days=args.days, now=now)
        traces = traces_fill(pairs, per_day=args.per_day, now=now)
        print(
            f"counters: {rows:,} rows ({args.per_day:,} traces/day over {PAIRS} pairs, "
            f"{args.days} days), {traces:,} traces of the last hour, in "
            f"{time.perf_counter() - started:.0f} s; {args.rules} rules"
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
        firing = fired_at_once(args.runs, tick_at)
        keep = AlertRule.objects.order_by("pk").first().pk
        AlertRule.objects.exclude(pk=keep).update(enabled=False)
        one = timed(args.runs, lambda: alerts_evaluate(now=tick_at))
        print(f"1 rule, steady tick (baseline):  {figures(one)}")
        print(
            f"ratio {args.rules} rules / 1 rule: "
            f"{statistics.median(steady) / statistics.median(one):.2f} (target: ≤ 100 ms a tick)"
        )
        print(
            f"ratio firing tick / steady tick ({args.rules} rules): "
            f"{statistics.median(firing) / statistics.median(steady):.2f} "
            f"(target: ≤ 100 ms the whole tick)"
        )
    finally:
        queue_empty()
        if not args.keep:
            database.drop()


def fired_at_once(runs: int, tick_at) -> list[float]:
    """The tick where the rules that fired in the first tick (50 of 100) all fire again: each
    run from the same state — no alert, no outbox row, every rule not judged yet (reset, not
    timed)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from strategies.delivery.models import WebhookDelivery
    from traces.alerts.models import Alert, AlertRule
    from traces.alerts.services import alerts_evaluate

    def reset() -> None:
        WebhookDelivery.objects.all().delete()
        Alert.objects.all().delete()
        AlertRule.objects.update(level="unknown", level_since=None)

    # A first run, untimed, warms the caches and counts the queries: the query log formats
    # every statement (the 50 alerts' INSERT too), which must not be timed.
    reset()
    with CaptureQueriesContext(connection) as queries:
        alerts_evaluate(now=tick_at)
    spent, cpu, fired, deliveries, samples = [], [], 0, 0, 0
    for _ in range(runs):
        reset()
        started, cpu_started = time.perf_counter(), time.process_time()
        tick = alerts_evaluate(now=tick_at)
        spent.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - cpu_started) * 1000)
        fired, deliveries = len(tick.fired), len(tick.deliveries)
        samples = sum(bool(ids) for ids in Alert.objects.values_list("request_ids", flat=True))
    print(
        f"{fired} of {AlertRule.objects.count()} rules fire in one tick: {figures(spent)} "
        f"({len(queries)} queries; {deliveries} outbox rows; {samples} alerts with sample "
        f"request ids); this process's CPU in it: median {statistics.median(cpu):.1f} ms (the "
        f"rest: waiting on PostgreSQL, Redis, and the cores other processes hold)"
    )
    return spent


QUEUE = f"bench-alerts-{os.getpid()}"


def queue_empty() -> None:
    """Drop the outbox messages this run queued (no worker hears its queue)."""
    try:
        from celery import current_app

        with current_app.connection_for_write() as conn:
            conn.default_channel.queue_delete(QUEUE)
    except Exception as exc:  # noqa: BLE001 - a broker gone at the end is not the figure
        print(f"(queue {QUEUE} not emptied: {exc})")


if __name__ == "__main__":
    main()
