"""Retention drops whole days as partitions (issue 31 item 10): a day every environment is
done with goes by DETACH + DROP, never row by row; rows are deleted only for an environment
whose retention is shorter than the partitions' (the longest), and only from the days in
between."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from tests.engines import pg_connect_kwargs
from tests.factories import world
from tests.factories.traces import candidates_of, traces_generated
from tests.runtime_sim import wait_until
from traces import partitions, services, tasks
from traces.models import RequestKey, Trace

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("day_partitions_restored"),
]

DAY = timedelta(days=1)


@contextmanager
def rows_deleted():
    """{table: rows} deleted from traces_trace while inside, whichever process deletes them
    (a trace's candidates are in its row: they go with it): a statement trigger on the
    parent counts its statement's rows (a dropped partition deletes none)."""
    counted: dict[str, int] = {}
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE retention_rows_deleted (tbl text, n bigint);"
            "CREATE FUNCTION retention_count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN INSERT INTO retention_rows_deleted SELECT TG_TABLE_NAME, count(*) FROM gone;"
            " RETURN NULL; END $$;"
            "CREATE TRIGGER retention_count AFTER DELETE ON traces_trace REFERENCING OLD TABLE"
            " AS gone FOR EACH STATEMENT EXECUTE FUNCTION retention_count_deleted();"
        )
    try:
        yield counted
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT tbl, sum(n) FROM retention_rows_deleted GROUP BY tbl")
            counted.update({tbl: int(n) for tbl, n in cursor.fetchall() if n})
            cursor.execute(
                "DROP TRIGGER retention_count ON traces_trace;"
                "DROP FUNCTION retention_count_deleted(); DROP TABLE retention_rows_deleted;"
            )


def day_tables(day) -> set[str]:
    """The tables of this day's partitions that still exist, attached or not (with a day of
    the candidate table migration 0013 dropped, left detached by an interrupted purge)."""
    names = [
        partitions.partition_name(parent, day)
        for parent in (*partitions.PARENTS, "traces_candidate")
    ]
    with connection.cursor() as cursor:
        cursor.execute("SELECT relname FROM pg_class WHERE relname = ANY(%s)", [names])
        return {name for (name,) in cursor.fetchall()}


@pytest.mark.worker
def test_purge_task__100k_traces_on_expired_days__days_dropped_as_partitions_no_row_deleted(
    celery_worker_process,
):
    # Given 100,000 traces (200,000 candidates) over four days past the 30-day retention,
    # and traces on the day the cut-off falls in and today
    w = world()
    agent, env = w["agents"]["assistant_professional"], w["environments"]["sg-test"]
    now = timezone.now()
    floor = partitions.retention_cutoff(now, env.trace_retention_days)
    expired_days = [(floor - DAY * n).date() for n in range(1, 5)]
    with connection.cursor() as cursor:
        traces_generated(
            cursor,
            agent=agent,
            environment=env,
            start=floor - 4 * DAY,
            every=4 * DAY / 100_000,
            count=100_000,
            prefix="old-",
        )
        # Past the exact retention or not, the cut-off's day is not over for every trace of it.
        traces_generated(
            cursor,
            agent=agent,
            environment=env,
            start=floor,
            every=timedelta(minutes=1),
            count=3,
            prefix="cutoff-day-",
        )
        traces_generated(
            cursor,
            agent=agent,
            environment=env,
            start=now - timedelta(hours=1),
            every=timedelta(minutes=1),
            count=3,
            prefix="today-",
        )
    assert Trace.objects.count() == 100_006

    # When the beat's purge runs in a real worker
    with rows_deleted() as deleted:
        tasks.purge_expired.apply_async(queue=celery_worker_process)
        assert wait_until(lambda: not any(day_tables(day) for day in expired_days), 120)
        assert wait_until(lambda: RequestKey.objects.count() == 6, 120)

    # Then the four days went as partitions, without one row deleted from them
    assert deleted == {}
    assert set(Trace.objects.values_list("request_id", flat=True)) == {
        *(f"cutoff-day-{n}" for n in range(3)),
        *(f"today-{n}" for n in range(3)),
    }
    assert len(candidates_of(Trace.objects.all())) == 12  # 2 per kept trace, in its row
    with connection.cursor() as cursor:
        days = partitions.existing_days(cursor, "traces_trace")
    assert floor.date() in days and not days & set(expired_days)


def test_purge__shorter_retention__its_expired_days_deleted_by_rows_shared_days_kept():
    # Given prod keeping 30 days and sg-test 7: a day both are done with, a day only sg-test is
    w = world()
    agent = w["agents"]["assistant_professional"]
    prod, sg_test = w["environments"]["prod"], w["environments"]["sg-test"]
    sg_test.trace_retention_days = sg_test.snapshot_retention_days = 7
    sg_test.save()
    now = timezone.now()
    floor = partitions.retention_cutoff(now, prod.trace_retention_days)
    short_cutoff = partitions.retention_cutoff(now, 7)
    with connection.cursor() as cursor:
        for env in (prod, sg_test):
            for label, start in (
                ("past-both", floor - DAY),
                ("past-short", short_cutoff - 2 * DAY),
                ("short-cutoff-day", short_cutoff),
            ):
                traces_generated(
                    cursor,
                    agent=agent,
                    environment=env,
                    start=start + timedelta(hours=1),
                    every=timedelta(minutes=1),
                    count=40,
                    prefix=f"{env.key}-{label}-",
                )

    # When the purge runs
    with rows_deleted() as deleted:
        result = tasks.purge_expired()

    # Then the day both are done with went as a partition; sg-test's rows of the day only
    # it is done with were deleted (40 traces, their 80 candidates with them), nothing else
    assert partitions.partition_name("traces_trace", (floor - DAY).date()) in result["days_dropped"]
    assert deleted == {"traces_trace": 40}
    assert result["traces"] == 40
    kept = set(Trace.objects.values_list("request_id", flat=True))
    assert {r.rsplit("-", 1)[0] for r in kept} == {
        "prod-past-short",
        "prod-short-cutoff-day",
        "sg-test-short-cutoff-day",
    }
    assert RequestKey.objects.count() == len(kept) == 120
    assert len(candidates_of(Trace.objects.all())) == 2 * 120


def test_drop__a_day_left_half_detached_and_one_detached_not_dropped__both_finished():
    # Given an expired day whose trace partition an interrupted DETACH … CONCURRENTLY left
    # pending, and whose candidate partition (of the table migration 0013 dropped) a purge
    # before the migration detached but never dropped
    world()
    now = timezone.now()
    day = (partitions.retention_cutoff(now, 30) - 3 * DAY).date()
    trace_day = partitions.partition_name("traces_trace", day)
    candidate_day = partitions.partition_name("traces_candidate", day)
    # The test database as this process reaches it (TCP, or the embedded engine's socket)
    conninfo = {**pg_connect_kwargs(), "autocommit": True}
    with connection.cursor() as cursor:
        partitions.ensure_days(cursor, [day])  # an earlier test's purge may have dropped it
        cursor.execute(f"CREATE TABLE {candidate_day} (trace_id bigint, position smallint)")

    def detach_pending() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = %s::regclass",
                [trace_day],
            )
            return cursor.fetchone() == (True,)

    with psycopg.connect(**conninfo) as reader, psycopg.connect(**conninfo) as dropper:
        reader.autocommit = False
        reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT count(*) FROM traces_trace")  # a snapshot the detach waits for
        dropper.execute("SET statement_timeout = '60s'")  # whatever goes wrong, never for ever
        detaching = ThreadPoolExecutor(max_workers=1).submit(
            dropper.execute, f"ALTER TABLE traces_trace DETACH PARTITION {trace_day} CONCURRENTLY"
        )
        # Interrupted once its first transaction has marked the detach pending, however long
        # that takes on a busy machine
        assert wait_until(detach_pending, 30)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_cancel_backend(%s)", [dropper.info.backend_pid])
        with pytest.raises(psycopg.errors.QueryCanceled):
            detaching.result(timeout=30)
        reader.rollback()
    assert detach_pending()

    # When the purge drops the expired days
    dropped = services.partitions_drop_expired(now=now)

    # Then both are gone, and the day can be made again (traces only: candidates are in them)
    assert {trace_day, candidate_day} <= set(dropped)
    assert day_tables(day) == set()
    with connection.cursor() as cursor:
        partitions.ensure_days(cursor, [day])
    assert day_tables(day) == {trace_day}
