"""Retention benchmark (issue 31 item 10): the purge of days past the retention. A script,
not a test:

    python -m tests.bench.bench_retention [--traces 100000] [--candidates 10] [--days 4]

Runs against a separate database (bench_retention, created and dropped here) on the server
of DATABASE_URL. Writes `--traces` traces (their candidates packed in the row since issue 36,
and their request keys) over `--days` days past the 30-day retention, then times, in one
run, on the same data:

1. the purge as it is (`traces.tasks.purge_expired`'s trace steps: drop the expired days as
   partitions, then the row deletes and the request keys);
2. the baseline: what the purge did before (a batched row DELETE of every trace past an
   exact cut-off, 5,000 ids a transaction — and of their candidate rows, before migration
   0013 moved them into the trace row), then the drop of the days it left empty.

For each: the time, the trace rows deleted (the database's own `tup_deleted`, less the
request keys), and the partitions dropped.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime, timedelta

from tests.bench._database import BenchDatabase, django_setup, print_machine

BENCH_DB = os.environ.get("BENCH_RETENTION_DB", "bench_retention")


def tuples_deleted() -> int:
    """Rows deleted from the database's own tables (the catalog's, which a DROP TABLE deletes
    from, left out), with this session's pending counts flushed."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    time.sleep(0.5)  # the flush happens when the session goes idle
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT tup_deleted - (SELECT sum(n_tup_del) FROM pg_stat_sys_tables)"
            " FROM pg_stat_database WHERE datname = current_database()"
        )
        return int(cursor.fetchone()[0])


def fill(agent, env, *, now: datetime, traces: int, candidates: int, days: int) -> datetime:
    """The traces over `days` days ending where the 30-day retention's kept days begin;
    returns that cut-off."""
    from django.db import connection

    from tests.factories.traces import traces_generated
    from traces import partitions

    floor = partitions.retention_cutoff(now, env.trace_retention_days)
    start = floor - timedelta(days=days)
    with connection.cursor() as cursor:
        partitions.ensure_days(cursor, [(start + timedelta(days=d)).date() for d in range(days)])
        traces_generated(
            cursor,
            agent=agent,
            environment=env,
            start=start,
            every=timedelta(days=days) / traces,
            count=traces,
            candidates=candidates,
        )
        for table in ("traces_trace", "traces_request_key"):
            cursor.execute(f"VACUUM ANALYZE {table}")
    return floor


def purge_now(now: datetime) -> list[str]:
    from traces import services

    started = time.perf_counter()
    dropped = services.partitions_drop_expired(now=now)
    print(f"   (of which the drop of the days: {(time.perf_counter() - started) * 1000:.0f} ms;")
    started = time.perf_counter()
    services.traces_purge_expired(now=now)
    print(f"    the request keys' batched DELETE: {(time.perf_counter() - started) * 1000:.0f} ms)")
    return dropped


def purge_before(now: datetime, env) -> list[str]:
    """The purge before issue 31: every trace past the exact cut-off deleted by rows, then
    the (now empty) days dropped."""
    from django.db import connection

    from traces import services
    from traces.services import _delete_in_batches

    cutoff = now - timedelta(days=env.trace_retention_days)
    _delete_in_batches(
        "SELECT id FROM traces_trace WHERE environment_id = %s AND occurred_at < %s",
        [env.pk, cutoff],
        [
            ("DELETE FROM traces_snapshot WHERE trace_id = ANY(%s)", []),
            ("DELETE FROM traces_trace WHERE id = ANY(%s) AND occurred_at < %s", [cutoff]),
        ],
        services.PURGE_BATCH,
    )
    services.traces_purge_expired(now=now)  # the request keys, as before
    # A dropped table's counts not yet flushed are lost with it: flush them first (as the
    # session goes idle after this statement, a millisecond).
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    return services.partitions_drop_expired(now=now)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=100_000)
    parser.add_argument("--candidates", type=int, default=10)
    parser.add_argument("--days", type=int, default=4)
    parser.add_argument("--keep", action="store_true", help="do not drop the bench database")
    args = parser.parse_args()

    database = BenchDatabase(BENCH_DB)
    print_machine(f"database {BENCH_DB}")
    database.create()
    django_setup(database.url)
    from strategies.catalog.models import Agent, Environment

    agent = Agent.objects.create(key="assistant_professional", name="AP")
    env = Environment.objects.create(key="sg-test", name="SG test", position=1)
    print(
        f"\n{args.traces:,} traces × {args.candidates} candidates over {args.days} days past "
        f"the {env.trace_retention_days}-day retention"
    )
    try:
        from traces import services

        services.partitions_drop_expired()  # the old days migrate made: each run drops its own
        results = {}
        for name, purge in (
            ("drop days (now)", purge_now),
            ("DELETE rows (before)", lambda now: purge_before(now, env)),
        ):
            now = datetime.now(UTC)
            started = time.perf_counter()
            fill(
                agent, env, now=now, traces=args.traces, candidates=args.candidates, days=args.days
            )
            filled = time.perf_counter() - started
            before = tuples_deleted()
            started = time.perf_counter()
            dropped = purge(now)
            took = time.perf_counter() - started
            rows = tuples_deleted() - before - args.traces  # less the request keys
            results[name] = took
            print(
                f"   {name:<22} {took * 1000:>8.0f} ms · trace rows deleted "
                f"{rows:,} · partitions dropped {len(dropped)} (filled in {filled:.0f} s)"
            )
        now_ms, before_ms = results["drop days (now)"], results["DELETE rows (before)"]
        print(f"   ratio now/before = {now_ms / before_ms:.3f}")
    finally:
        if not args.keep:
            database.drop()


if __name__ == "__main__":
    main()
