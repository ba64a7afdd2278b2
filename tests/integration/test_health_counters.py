"""Health counters written at ingest (traces.health.counters): each counter, the shadow arm's
agreement with live, an unknown shadow version counted as a runtime fault, a batch
aggregated into one row per minute, outcomes, and the 30-day retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from context_runtime.wire import Trace as WireTrace
from django.db import connection
from django.utils import timezone

from tests.factories import (
    ReleaseFactory,
    candidate,
    post_batch,
    runtime_token,
    shadow_history,
    trace_payload,
    world,
)
from tests.factories.documents import DocumentFactory, FrozenVersionFactory
from traces.health import counters, services
from traces.health.models import HealthCounter, HealthCounterHour

pytestmark = pytest.mark.django_db

MINUTE = (timezone.now() - timedelta(minutes=3)).replace(second=5, microsecond=0)


@pytest.fixture
def env():
    data = world()
    document = DocumentFactory(
        agent=data["agents"]["assistant_professional"], key="after_sales_consultation"
    )
    data["strategy"] = {n: FrozenVersionFactory(document=document, number=n) for n in (3, 4)}
    # v3 live in sg-test, v4 its shadow since an hour before the traces of these tests
    data["release"] = ReleaseFactory(
        version=data["strategy"][3], environment=data["environments"]["sg-test"]
    )
    shadow_history(data["release"], (data["strategy"][4], MINUTE - timedelta(hours=1), None))
    return data


@pytest.fixture
def secret(env):
    return runtime_token(env["environments"]["sg-test"])


def at(seconds: int = 0) -> str:
    return (MINUTE + timedelta(seconds=seconds)).isoformat()


def row(document="after_sales_consultation", version=3, arm="live") -> HealthCounter:
    return HealthCounter.objects.get(document=document, version=version, arm=arm)


def missing_required(request_id, *, source="applicable_policy", code="provider_not_fetched"):
    return trace_payload(
        request_id,
        occurred_at=at(),
        status="missing_required_data",
        candidates=[
            candidate(),
            candidate(
                "P7-v2",
                source=source,
                decision="not_fetched",
                reason="timeout",
                reason_code=code,
            ),
            # A second required item of the same source and code: still one trace.
            candidate("P8", source=source, decision="not_fetched", reason_code=code),
        ],
    )


def test_ingest__batch__one_row_per_minute_document_and_version_counting_each_trace(client, secret):
    batch = [
        trace_payload("r1", occurred_at=at(1)),
        trace_payload("r2", occurred_at=at(20)),
        trace_payload(
            "r3", occurred_at=at(40), status="degraded", degradation="drop_optional_first"
        ),
        missing_required("r4"),
        trace_payload("r5", occurred_at=at(61)),  # the next minute
    ]
    assert post_batch(client, secret, batch).json()["accepted"] == 5

    # Two documents (profile v7, strategy v3) × two minutes, live arm only.
    assert HealthCounter.objects.count() == 4
    first = HealthCounter.objects.get(
        document="after_sales_consultation", minute=MINUTE.replace(second=0)
    )
    assert (first.traces, first.failures) == (4, 1)
    assert first.statuses == {"ready": 2, "degraded": 1, "missing_required_data": 1}
    assert first.degraded == {"drop_optional_first": 1}
    assert first.required_missing == {"applicable_policy:provider_not_fetched": 1}
    assert (first.tokens_sum, first.tokens_count) == (4 * 6200, 4)
    assert first.tokens_hist == {str((6200).bit_length()): 4}  # 4096 ≤ 6200 < 8192
    profile = HealthCounter.objects.get(document="profile", minute=MINUTE.replace(second=0))
    assert (profile.version, profile.traces, profile.statuses) == (7, 4, first.statuses)
    # The same statement added them to their hour (both minutes in one hour, or two).
    hours = HealthCounterHour.objects.filter(document="after_sales_consultation")
    assert sum(h.traces for h in hours) == 5
    assert sum(h.failures for h in hours) == 1
    if hours.count() == 1:
        assert hours[0].statuses == {"ready": 3, "degraded": 1, "missing_required_data": 1}


def test_ingest__trace_is_counted_in_the_same_commit__figures_visible_at_once(client, secret):
    post_batch(client, secret, [trace_payload("r1", occurred_at=at())])
    # No task, no wait: the row is there as soon as the ingest answered.
    assert row().traces == 1
    post_batch(client, secret, [trace_payload("r2", occurred_at=at())])
    assert row().traces == 2


def test_ingest__duplicate__not_counted_twice(client, secret):
    post_batch(client, secret, [trace_payload("r1", occurred_at=at())])
    post_batch(client, secret, [trace_payload("r1", occurred_at=at()), trace_payload("r1")])
    assert row().traces == 1


def test_ingest__config_fallback__counted_by_resolution(client, secret):
    batch = [
        trace_payload("r1", occurred_at=at(), config_fallback=True, config_resolution="stale"),
        trace_payload("r2", occurred_at=at(), config_fallback=True, config_resolution="stale"),
        trace_payload("r3", occurred_at=at(), config_fallback=True),  # older runtime: no reason
        trace_payload("r4", occurred_at=at(), config_resolution="fresh"),
    ]
    post_batch(client, secret, batch)
    assert row().config_fallback == {"stale": 2, "fallback": 1}


def shadow_block(version=4, status="ready", selected=("task_state:T9", "P7-v2")):
    return {"version": version, "status": status, "selected": list(selected)}


def test_ingest__shadow__counted_on_its_arm_with_agreement(client, secret):
    batch = [
        trace_payload("agree", occurred_at=at(), shadow=shadow_block()),
        # The shadow failed where live was ready, and dropped a required item of live's.
        trace_payload(
            "differ",
            occurred_at=at(),
            shadow=shadow_block(status="missing_required_data", selected=["task_state:T9"]),
        ),
    ]
    assert post_batch(client, secret, batch).json()["accepted"] == 2
    shadow = row(version=4, arm="shadow")
    assert (shadow.traces, shadow.compared, shadow.same_status, shadow.same_selected) == (
        2,
        2,
        1,
        1,
    )
    assert shadow.statuses == {"ready": 1, "missing_required_data": 1}
    assert shadow.required_lost == {"applicable_policy": 1}
    assert shadow.required_kept == {"task_state": 2, "applicable_policy": 1}
    assert row().traces == 2  # live counted as usual
    assert row().faults == {}


def test_ingest__shadow_of_a_version_never_released__stored_not_counted_and_a_fault(client, secret):
    response = post_batch(
        client, secret, [trace_payload("ghost", occurred_at=at(), shadow=shadow_block(version=9))]
    )
    assert response.json()["accepted"] == 1  # stored
    assert not HealthCounter.objects.filter(arm="shadow").exists()
    assert row().faults == {counters.FAULT_SHADOW_VERSION_UNKNOWN: 1}
    assert row().traces == 1


def wire_trace(payload: dict, **shadow) -> WireTrace:
    trace = msgspec.json.decode(msgspec.json.encode(payload), type=WireTrace)
    if shadow:
        trace.shadow = shadow  # the extended block, as newer runtimes send it
    return trace


def test_batch_counts__extended_shadow_block__differences_tokens_and_degradation(env):
    environment = env["environments"]["sg-test"]
    agent_ids = {"assistant_professional": env["agents"]["assistant_professional"].pk}
    payload = trace_payload("x", occurred_at=at())
    extended = {
        "version": 4,
        "status": "degraded",
        "selected": ["task_state:T9"],
        "degradation": "drop_optional_first",
        "used_tokens": 5000,
        "differences": [
            {"index": 1, "decision": "over_budget", "reason_code": "over_budget_required"},
            {"index": 1, "decision": "over_budget", "reason_code": "over_budget_required"},
            {"index": 99, "decision": "selected"},  # out of range: ignored
        ],
        "differences_total": 1,
    }
    rows = counters.batch_counts(
        environment=environment,
        agent_ids=agent_ids,
        traces=[wire_trace(payload, **extended)],
    )
    (shadow,) = [c for key, c in rows.items() if key[4] == "shadow"]
    assert shadow.scalars["compared"] == 1
    assert shadow.scalars["same_status"] == 0
    assert shadow.scalars["same_selected"] == 0
    assert shadow.scalars["token_delta_sum"] == 5000 - 6200
    assert dict(shadow.maps["degraded"]) == {"drop_optional_first": 1}
    assert dict(shadow.maps["required_missing"]) == {"applicable_policy:over_budget_required": 1}
    assert dict(shadow.maps["tokens_hist"]) == {str((5000).bit_length()): 1}

    # Written twice: the maps and sums add up in the database.
    with connection.cursor() as cursor:
        counters.counters_write(cursor, rows)
        counters.counters_write(cursor, rows)
    stored = row(version=4, arm="shadow")
    assert stored.required_missing == {"applicable_policy:over_budget_required": 2}
    assert (stored.traces, stored.token_delta_sum) == (2, 2 * (5000 - 6200))


def test_shadow_release_known__only_while_it_ran_as_shadow_there_and_a_grace_after(env):
    environment = env["environments"]["sg-test"]
    agent = env["agents"]["assistant_professional"]
    v3, v4 = env["strategy"][3], env["strategy"][4]
    known = counters.shadow_release_known
    key = "after_sales_consultation"
    now = timezone.now()
    # v4 runs as shadow (the fixture) since an hour before MINUTE
    assert known(environment, key, 4, now, agent=agent)
    assert not known(environment, key, 4, MINUTE - timedelta(hours=2), agent=agent)  # before
    assert not known(environment, key, 9, now, agent=agent)  # never a shadow
    assert not known(environment, key, 3, now, agent=agent)  # live, never its shadow
    assert not known(environment, key, 4, now, agent=env["agents"]["assistant_lite"])
    assert not known(env["environments"]["prod"], key, 4, now, agent=agent)

    # In prod v3 ran as shadow for ten minutes two hours ago
    stopped = now - timedelta(hours=2)
    uat = ReleaseFactory(version=v4, environment=env["environments"]["prod"])
    shadow_history(uat, (v3, stopped - timedelta(minutes=10), stopped))
    bank_uat = env["environments"]["prod"]
    assert known(bank_uat, key, 3, stopped - timedelta(minutes=5), agent=agent)
    # a runtime still on its kept copy just after the stop: within the grace
    assert known(bank_uat, key, 3, stopped + counters.SHADOW_GRACE, agent=agent)
    assert not known(bank_uat, key, 3, stopped + counters.SHADOW_GRACE * 2, agent=agent)


def test_outcome_writes__counted_on_the_traces_live_rows(client, secret, env):
    post_batch(client, secret, [trace_payload("r1", occurred_at=at())])
    environment_id = env["environments"]["sg-test"].pk
    counted, writes = counters.outcome_writes(
        [
            (environment_id, "assistant_professional", "r1", "task", "completed"),
            (environment_id, "assistant_professional", "r1", "rating", "4"),
            (environment_id, "assistant_lite", "r1", "task", "completed"),  # not its agent
            (environment_id, "assistant_professional", "nope", "task", "completed"),
            (env["environments"]["prod"].pk, "assistant_professional", "r1", "task", "x"),
        ]
    )
    with connection.cursor() as cursor:
        counters.counters_write_tables(cursor, writes)
    assert len(counted) == 2
    assert row().outcomes == {"task:completed": 1, "rating:4": 1}
    assert row("profile", 7).outcomes == {"task:completed": 1, "rating:4": 1}
    assert row().traces == 1  # outcomes add no traces


def test_purge__rows_older_than_30_days_go(env):
    old = datetime(2026, 1, 1, tzinfo=UTC)
    now = old + timedelta(days=31)
    keep = now - timedelta(days=29)
    for minute in (old, keep):
        HealthCounter.objects.create(
            agent_id=1, environment_id=1, document="d", version=1, arm="live", minute=minute
        )
        HealthCounterHour.objects.create(
            agent_id=1, environment_id=1, document="d", version=1, arm="live", hour=minute
        )
    assert services.counters_purge_expired(now=now) == 2
    assert list(HealthCounter.objects.values_list("minute", flat=True)) == [keep]
    assert list(HealthCounterHour.objects.values_list("hour", flat=True)) == [keep]


def test_purge_task__scheduled_by_beat_and_runs(settings):
    from traces.health.tasks import purge_expired

    tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "health.purge_expired" in tasks
    HealthCounter.objects.create(
        agent_id=1,
        environment_id=1,
        document="d",
        version=1,
        arm="live",
        minute=timezone.now() - timedelta(days=31),
    )
    assert purge_expired() == 1
