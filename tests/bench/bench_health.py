"""Version-health page benchmark (issue 22): the page and its API at 30 days × 1M traces/day
of counters. A script, not a test:

    python -m tests.bench.bench_health [--per-day 1000000] [--days 30] [--runs 20]

Runs against a separate database (bench_health, created and dropped here) on the server of
DATABASE_URL. Fills health_counter with SQL (generate_series): for each of two environments,
every minute of `--days` days carries per-day/1440 traces on the live rows of two documents
(the strategy and the profile) and on the strategy's shadow row, with realistic maps
(statuses, degradation handlers, required items left out by source and reason code, config
fallbacks, token histograms, outcomes, agreement). The strategy's live version went live 6
days ago, replacing the one before: the page compares 6 days against 6 days — the widest
window it reads but one (7 days). Then times, in process with Django's test client (the
whole view: middleware, policy, queries, template) and as the selector alone:

- the version-health page and its API (target ≤ 200 ms),
- the releases page (one glance per live release),
- the trace page's pattern card (its selector),

printing median and p95 in ms and the rows the page read.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import UTC, datetime, timedelta

from tests.bench._database import BenchDatabase, django_setup, print_machine

BENCH_DB = os.environ.get("BENCH_HEALTH_DB", "bench_health")
DOC = "after_sales_consultation"

# Per minute and row: counts derived from the minute number, so the figures vary.
_FILL = """
INSERT INTO health_counter (
    agent_id, environment_id, document, version, arm, minute, traces, failures, statuses,
    degraded, required_missing, config_fallback, tokens_sum, tokens_count, tokens_hist,
    compared, same_status, same_selected, required_kept, required_lost, token_delta_sum,
    token_delta_count, outcomes, faults)
SELECT %(agent)s, %(environment)s, d.document,
       CASE WHEN d.document = 'profile' THEN 1
            WHEN m < %(released_at)s THEN 2 ELSE 3 END,
       d.arm, m,
       n, f,
       jsonb_build_object('ready', n - f - g, 'degraded', g, 'missing_required_data', f - f / 3,
                          'budget_exceeded', f / 3),
       jsonb_build_object('general_policy_only', g),
       jsonb_build_object('applicable_policy:provider_not_fetched', f - f / 3,
                          'order_delivery:provider_no_access', f / 3,
                          'task_state:over_budget_required', f / 5),
       CASE WHEN i %% 7 = 0 THEN jsonb_build_object('stale', 3) ELSE '{}'::jsonb END,
       n * 6200.0, n,
       jsonb_build_object('12', n / 10, '13', n - n / 10 - n / 20, '14', n / 20),
       CASE WHEN d.arm = 'shadow' THEN n ELSE 0 END,
       CASE WHEN d.arm = 'shadow' THEN n - f / 2 ELSE 0 END,
       CASE WHEN d.arm = 'shadow' THEN n - f ELSE 0 END,
       CASE WHEN d.arm = 'shadow' THEN jsonb_build_object('task_state', n, 'applicable_policy', n - f)
            ELSE '{}'::jsonb END,
       CASE WHEN d.arm = 'shadow' THEN jsonb_build_object('applicable_policy', f)
            ELSE '{}'::jsonb END,
       CASE WHEN d.arm = 'shadow' THEN -150.0 * n ELSE 0 END,
       CASE WHEN d.arm = 'shadow' THEN n ELSE 0 END,
       CASE WHEN d.arm = 'live' THEN jsonb_build_object('task:completed', n / 3, 'task:escalated',
                                                         n / 30, 'rating:5', n / 10)
            ELSE '{}'::jsonb END,
       '{}'::jsonb
FROM generate_series(%(start)s::timestamptz, %(end)s::timestamptz, interval '1 minute')
         WITH ORDINALITY AS s(m, i)
CROSS JOIN LATERAL (SELECT %(per_minute)s + (i %% 37)::int - 18 AS n) AS base
CROSS JOIN LATERAL (SELECT (n * (2 + (i %% 11)) / 100)::int AS f, (n / 40)::int AS g) AS bad
CROSS JOIN (VALUES ('%(doc)s', 'live'), ('profile', 'live'), ('%(doc)s', 'shadow')) AS d(document, arm)
WHERE d.arm = 'live' OR d.document <> 'profile'
"""


def timed(fn, runs: int) -> tuple[float, float]:
    fn()  # warm: the first call pays for imports and plans
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[max(0, int(len(samples) * 0.95) - 1)]


def world(now: datetime, released_at: datetime):
    """An agent, two environments, the strategy v1–v3 and the profile; v2 live from 20 days
    ago, v3 from `released_at` (release events written with their times), and a support user."""
    from django.db import connection

    from tests.factories import user_with_grants
    from tests.factories.documents import (
        AgentFactory,
        DocumentFactory,
        EnvironmentFactory,
        FrozenVersionFactory,
    )

    agent = AgentFactory(key="assistant_professional")
    envs = [EnvironmentFactory(key=key, position=i) for i, key in enumerate(("sg-test", "prod"))]
    strategy = DocumentFactory(agent=agent, key=DOC)
    profile = DocumentFactory(agent=agent, profile=True)
    versions = {n: FrozenVersionFactory(document=strategy, number=n) for n in (1, 2, 3)}
    versions["profile"] = FrozenVersionFactory(document=profile, number=1)
    with connection.cursor() as cursor:
        for env in envs:
            for document, version, events in (
                (
                    strategy,
                    versions[3],
                    [
                        (1, None, versions[2], now - timedelta(days=20)),
                        (2, versions[2], versions[3], released_at),
                    ],
                ),
                (
                    profile,
                    versions["profile"],
                    [(1, None, versions["profile"], now - timedelta(days=25))],
                ),
            ):
                cursor.execute(
                    "INSERT INTO strategies_release (document_id, environment_id, version_id, "
                    "revision, updated_at, updated_by, unreviewed) VALUES (%s, %s, %s, %s, %s, "
                    "'bench', false) RETURNING id",
                    [document.pk, env.pk, version.pk, len(events), events[-1][3]],
                )
                (release_id,) = cursor.fetchone()
                for revision, before, after, when in events:
                    cursor.execute(
                        "INSERT INTO strategies_releaseevent (release_id, revision, action, "
                        "from_version_id, to_version_id, actor, approved_by, reason, "
                        "unreviewed, occurred_at) VALUES (%s, %s, 'publish', %s, %s, 'bench', "
                        "'', '', false, %s)",
                        [release_id, revision, before.pk if before else None, after.pk, when],
                    )
    support = user_with_grants("bench-support", support=agent)
    return agent, envs, support


class _Identity:
    """What trace_batch_store asks of the runtime token's identity."""

    def __init__(self, environment):
        self.environment_id, self.environment_key = environment.pk, environment.key

    def covers_agent(self, key: str) -> bool:
        return True


def ingest_cost(environment, batches: int, traces: int, candidates: int) -> None:
    """The counters' share of storing a batch: trace_batch_store (parse excluded) with the
    counters and with them switched off, interleaved batch by batch, wall time in process."""
    import orjson

    from tests.bench.bench_traces import payloads
    from traces import services
    from traces.health import counters
    from traces.ingest import parse_batch

    start = datetime.now(UTC) - timedelta(hours=6)
    record = services.counters_record_batch
    spent = {"with": 0.0, "without": 0.0}
    counted = {"with": 0.0}
    for i in range(batches):
        for arm in ("with", "without") if i % 2 == 0 else ("without", "with"):
            body = orjson.dumps({"traces": payloads(traces, candidates, f"{arm}{i}", start)})
            batch = parse_batch(body)
            services.counters_record_batch = (
                record if arm == "with" else (lambda cursor, **kwargs: 0)
            )
            began = time.perf_counter()
            services.trace_batch_store(identity=_Identity(environment), batch=batch)
            spent[arm] += time.perf_counter() - began
            if arm == "with":  # the counters alone, on the same batch (rolled back)
                from django.db import connection, transaction

                traced = [t for _, t in batch.valid]
                with transaction.atomic(), connection.cursor() as cursor:
                    began = time.perf_counter()
                    counters.counters_record_batch(
                        cursor,
                        environment=environment,
                        agent_ids={"assistant_professional": environment.agent_id},
                        traces=traced,
                    )
                    counted["with"] += time.perf_counter() - began
                    transaction.set_rollback(True)
    services.counters_record_batch = record
    per = batches * traces
    print(
        f"\ningest cost ({batches} batches of {traces} traces × {candidates} candidates, "
        f"store only, in process):\n"
        f"   with counters    {spent['with'] / per * 1e6:7.1f} µs/trace\n"
        f"   without counters {spent['without'] / per * 1e6:7.1f} µs/trace\n"
        f"   counters alone   {counted['with'] / per * 1e6:7.1f} µs/trace = "
        f"{counted['with'] / spent['with']:.1%} of storing with them (target ≤ 5%)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-day", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--keep", action="store_true", help="do not drop the bench database")
    parser.add_argument("--ingest-batches", type=int, default=10, help="0: skip the ingest cost")
    args = parser.parse_args()

    database = BenchDatabase(BENCH_DB)
    print_machine(f"database {BENCH_DB}")
    try:
        database.create()
        django_setup(database.url)
        from django.db import connection
        from django.test import Client
        from django.test.utils import CaptureQueriesContext
        from django.utils import timezone

        from strategies.documents.models import Document
        from traces.health import selectors
        from traces.health.counters import COUNTER_MAPS, COUNTER_SCALARS

        now = timezone.now().replace(second=0, microsecond=0)
        released_at = now - timedelta(days=6)
        agent, envs, support = world(now, released_at)
        per_minute = args.per_day // 1440
        started = time.perf_counter()
        with connection.cursor() as cursor:
            for env in envs:
                cursor.execute(
                    _FILL.replace("%(doc)s", DOC),
                    {
                        "agent": agent.pk,
                        "environment": env.pk,
                        "released_at": released_at,
                        "start": now - timedelta(days=args.days),
                        "end": now - timedelta(minutes=1),
                        "per_minute": per_minute,
                    },
                )
            # The hour table, as ingest's statement keeps it: the minutes summed per hour.
            cursor.execute(
                "CREATE AGGREGATE bench_counts_sum(jsonb) "
                "(sfunc = health_counts_add, stype = jsonb, initcond = '{}')"
            )
            maps = ", ".join(f"bench_counts_sum({m})" for m in COUNTER_MAPS)
            sums = ", ".join(f"sum({c})" for c in COUNTER_SCALARS)
            cursor.execute(
                f"INSERT INTO health_counter_hour (agent_id, environment_id, document, version, "
                f"arm, hour, {', '.join(COUNTER_SCALARS)}, {', '.join(COUNTER_MAPS)}) "
                f"SELECT agent_id, environment_id, document, version, arm, "
                f"date_trunc('hour', minute), {sums}, {maps} FROM health_counter "
                "GROUP BY 1, 2, 3, 4, 5, 6"
            )
            cursor.execute("ANALYZE health_counter")
            cursor.execute("ANALYZE health_counter_hour")
            cursor.execute(
                "SELECT count(*), pg_size_pretty(pg_total_relation_size('health_counter')) FROM health_counter"
            )
            rows, size = cursor.fetchone()
        print(
            f"\nfilled {rows:,} counter rows ({size}) in {time.perf_counter() - started:.1f} s: "
            f"{args.days} days × 1,440 minutes × {per_minute} traces a minute "
            f"(≈{per_minute * 1440:,}/day) × 2 environments × (2 live documents + 1 shadow)"
        )

        environment = envs[0]
        document = Document.objects.get(agent=agent, key=DOC)
        if args.ingest_batches:
            envs[1].agent_id = agent.pk  # the bench's one agent, for the counters call
            ingest_cost(envs[1], args.ingest_batches, 500, 50)
        client = Client()
        client.force_login(support)
        page_url = f"/agents/{agent.key}/health/{environment.key}/{DOC}/"
        api_url = f"/api/v1/agents/{agent.key}/health/{environment.key}/{DOC}/"

        def selector():
            return selectors.version_health(
                user=support, agent=agent, environment=environment, document=document
            )

        health = selector()
        with CaptureQueriesContext(connection) as queries:
            response = client.get(page_url)
        assert response.status_code == 200, response.status_code
        assert b"Live: v3" in response.content
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM health_counter WHERE agent_id = %s AND environment_id = %s "
                "AND document = %s AND minute >= %s",
                [agent.pk, environment.pk, DOC, health.series_start],
            )
            (read,) = cursor.fetchone()
            # The page's figure against the minute rows summed directly.
            cursor.execute(
                "SELECT sum(traces) FROM health_counter WHERE agent_id = %s "
                "AND environment_id = %s AND document = %s AND arm = 'live' AND version = 3 "
                "AND minute >= %s",
                [agent.pk, environment.pk, DOC, health.live.since],
            )
            (direct,) = cursor.fetchone()
        assert health.live.traces == direct, (health.live.traces, direct)
        live = health.live
        print(
            f"\nversion-health page: v3 over {health.window} ({live.traces:,} traces) against "
            f"v2 over the same span before ({health.previous.traces:,}), shadow "
            f"({health.shadows[0].traces:,}); {read:,} counter rows in its window "
            f"({len(health.columns)} columns; whole hours read from the hour table), "
            f"{len(queries)} queries for the whole page"
        )
        with CaptureQueriesContext(connection) as queries:
            selector()
        slowest = sorted(queries.captured_queries, key=lambda q: -float(q["time"]))[:4]
        print(
            "   slowest queries of the selector: "
            + ", ".join(
                f"{float(q['time']) * 1000:.0f} ms ({q['sql'][:40].split()[0]}…{q['sql'][-60:]!r})"
                for q in slowest
            )
        )
        for name, fn in (
            ("selector (version_health)", selector),
            ("page GET (whole view)", lambda: client.get(page_url)),
            ("API GET (whole view)", lambda: client.get(api_url)),
            ("page GET, last 24 hours", lambda: client.get(page_url + "?hours=24")),
            ("releases page (glances)", lambda: client.get("/releases/")),
        ):
            median, p95 = timed(fn, args.runs)
            verdict = "✓" if p95 <= 200 else "✗"
            print(
                f"   {name:<30} median {median:7.1f} ms · p95 {p95:7.1f} ms  (≤ 200 ms {verdict})"
            )
    finally:
        if not args.keep:
            database.drop()


if __name__ == "__main__":
    main()
