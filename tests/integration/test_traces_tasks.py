"""Retention, rollups and key rotation — the periodic jobs run by a real Celery worker."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.utils import timezone

from tests.factories import post_batch, runtime_token, trace_payload, world
from tests.factories.traces import candidates_of, snapshots_allowed, traces_generated
from traces import crypto, services, tasks
from traces.models import HourlyRollup, Snapshot, Trace


def wait_for(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def ago(**delta) -> str:
    return (timezone.now() - timedelta(**delta)).isoformat()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("day_partitions_restored")
def test_purge_task__real_worker__expired_snapshot_and_old_traces_gone(
    client, celery_worker_process
):
    env = world()["environments"]["sg-test"]
    snapshots_allowed()
    post_batch(
        client,
        runtime_token(env),
        [
            trace_payload("fresh", occurred_at=ago(days=1), snapshot={"x": 1}),
            trace_payload("expired-snapshot", occurred_at=ago(days=2), snapshot={"x": 2}),
            *[trace_payload(f"old-{i}", occurred_at=ago(days=1)) for i in range(7)],
        ],
    )
    # Ingest refuses traces older than the retention: age them as time would.
    Trace.objects.filter(request_id__startswith="old-").update(occurred_at=ago(days=31))
    Snapshot.objects.filter(trace__request_id="expired-snapshot").update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )

    result = tasks.purge_expired.apply_async(queue=celery_worker_process)

    wait_for(lambda: not Trace.objects.filter(request_id__startswith="old-").exists())
    wait_for(lambda: Snapshot.objects.count() == 1)
    assert set(Trace.objects.values_list("request_id", flat=True)) == {"fresh", "expired-snapshot"}
    # 3 per kept trace, in its row; the old ones went with their traces
    assert len(candidates_of(Trace.objects.all())) == 6
    assert Snapshot.objects.get().trace.request_id == "fresh"
    assert result.id


@pytest.mark.django_db
def test_purge__small_batches__deletes_everything_past_a_shorter_retention(client):
    env = world()["environments"]["sg-test"]
    post_batch(
        client,
        runtime_token(env),
        [trace_payload(f"old-{i}", occurred_at=ago(days=1)) for i in range(5)],
    )
    # Shorter than prod's 30 days: its expired days are shared, so its rows go one by one.
    env.trace_retention_days = env.snapshot_retention_days = 7
    env.save()
    Trace.objects.update(occurred_at=ago(days=10))  # ingest refuses traces past retention
    assert services.traces_purge_expired(batch_size=2) == 5
    assert not Trace.objects.exists()  # and their candidates, kept in their rows, with them


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_rollup_task__real_worker__counts_per_hour_idempotent(client, celery_worker_process):
    env = world()["environments"]["sg-test"]
    last_hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    at = (last_hour + timedelta(minutes=10)).isoformat()
    post_batch(
        client,
        runtime_token(env),
        [
            trace_payload("a", occurred_at=at),
            trace_payload("b", occurred_at=at),
            trace_payload(
                "c", occurred_at=at, status="degraded", degradation="general_policy_only"
            ),
        ],
    )
    tasks.rollup_recent_hours.apply_async(queue=celery_worker_process)
    wait_for(lambda: HourlyRollup.objects.filter(hour=last_hour).exists())
    first_run_max_id = max(HourlyRollup.objects.values_list("id", flat=True))

    # Again: the hour is recomputed (new rows), and the counts must not double.
    tasks.rollup_recent_hours.apply_async(queue=celery_worker_process)
    wait_for(
        lambda: (
            HourlyRollup.objects.filter(hour=last_hour, id__gt=first_run_max_id).exists()
            and not HourlyRollup.objects.filter(hour=last_hour, id__lte=first_run_max_id).exists()
        )
    )
    rows = {
        (r.status, r.source, r.decision, r.reason): r.count
        for r in HourlyRollup.objects.filter(hour=last_hour, strategy_version=3)
    }
    assert rows[("ready", "", "", "")] == 2
    assert rows[("degraded", "", "", "")] == 1
    assert rows[("ready", "recent_dialogue", "irrelevant", "older product introduction")] == 2
    assert rows[("ready", "task_state", "selected", "required")] == 2
    assert rows[("ready", "applicable_policy", "selected", "required")] == 2


@pytest.mark.django_db
def test_snapshot_rotate__new_key_prepended__old_snapshots_reencrypted(client, settings):
    env = world()["environments"]["sg-test"]
    snapshots_allowed()
    post_batch(client, runtime_token(env), [trace_payload("r", snapshot={"kept": True})])
    old_key_id = Snapshot.objects.get().key_id
    new_key = Fernet.generate_key().decode()
    settings.SNAPSHOT_KEYS = [new_key, *settings.SNAPSHOT_KEYS]

    call_command("snapshot_rotate", stdout=open("/dev/null", "w"))  # noqa: SIM115

    snapshot = Snapshot.objects.get()
    assert snapshot.key_id == crypto.key_id(new_key) != old_key_id
    settings.SNAPSHOT_KEYS = [new_key]  # the old key can go now
    assert crypto.decrypt(snapshot.ciphertext) == b'{"kept":true}'


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("day_partitions_restored")
def test_partitions__maintain_creates_ahead__purge_drops_a_whole_old_day():
    from datetime import UTC

    from django.db import connection
    from django.utils import timezone

    from traces import partitions

    w = world()
    now = timezone.now()
    today = now.astimezone(UTC).date()
    old_day = today - timedelta(days=60)
    with connection.cursor() as cursor:
        traces_generated(  # a trace with its candidates, on a day long past every retention
            cursor,
            agent=w["agents"]["assistant_professional"],
            environment=w["environments"]["sg-test"],
            start=now - timedelta(days=60),
            every=timedelta(minutes=1),
            count=1,
        )
    assert len(candidates_of(Trace.objects.all())) == 2
    created = services.partitions_maintain(now=now, days_ahead=9)["created"]
    dropped = services.partitions_drop_expired(now=now)
    assert partitions.partition_name("traces_trace", old_day) in dropped
    assert partitions.partition_name("traces_trace", today + timedelta(days=9)) in created
    assert not Trace.objects.exists()  # its candidates went with its row
    with connection.cursor() as cursor:
        days = partitions.existing_days(cursor, "traces_trace")
    assert old_day not in days
    assert {today + timedelta(days=d) for d in range(10)} <= days
    assert min(days) >= today - timedelta(days=30)
