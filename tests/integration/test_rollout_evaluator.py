"""The guard loop of staged rollouts (traces.rollouts.tasks.evaluate_rollouts), run by a real
Celery worker over traces stored through the real ingest endpoint: a paired breach rolls
back with its evidence, good traffic moves the step on once (never twice when two runs
race), too little data extends the step once and then pauses, a provider failing both arms
pauses naming it."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from console.kernel.models import AuditRecord
from strategies.catalog.models import Environment
from strategies.delivery.models import ConfigPayload
from strategies.releases.models import Release, Rollout
from strategies.releases.services import rollout_start
from tests.conftest import beat_worker
from tests.factories import candidate, post_batch, runtime_token, task_in_arm, trace_payload
from tests.factories.releases import rollout_setup
from traces.rollouts import evaluator, tasks

STRATEGY = "after_sales_consultation"


def wait_for(condition, timeout=60.0, why=lambda: ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"condition not met in time: {why()}")


PLAN = [
    {"share": 0.5, "bake_seconds": 120},
    {"share": 1.0, "bake_seconds": 120},
]


def served(rollout, request_id, arm, *, status="ready", shadow=None, candidates=None):
    """A trace of the rollout as the SDK reports it: arm new served the new version with the
    control as its shadow, arm old the other way round."""
    new, old = rollout.version.number, rollout.control_version.number
    live, other = (new, old) if arm == "new" else (old, new)
    extra = {"candidates": candidates} if candidates is not None else {}
    return trace_payload(
        request_id,
        documents={STRATEGY: live},
        status=status,
        occurred_at=timezone.now().isoformat(),  # within the step (since its start)
        rollout={"id": rollout.key, "arm": arm, "step": rollout.step},
        task=task_in_arm(arm, rollout_id=rollout.key, share=rollout.share),
        shadow={
            "version": other,
            "status": "ready",
            "selected": ["task_state:T9", "P7-v2"],  # what live selected: no difference
            **(shadow or {}),
        },
        **extra,
    )


def ingest(client, secret, traces):
    for start in range(0, len(traces), 200):
        response = post_batch(client, secret, traces[start : start + 200])
        assert response.status_code == 200, response.content
        assert response.json()["accepted"] == len(traces[start : start + 200]), response.json()


def good_traffic(rollout, n_per_arm=120, prefix="g"):
    return [
        served(rollout, f"{prefix}-{arm}-{i}", arm)
        for arm in ("new", "old")
        for i in range(n_per_arm)
    ]


def bake_over(rollout):
    Rollout.objects.filter(pk=rollout.pk).update(
        step_started_at=timezone.now() - timedelta(seconds=rollout.bake_seconds + 5)
    )
    rollout.refresh_from_db()


def start(w, env_key="sg-test"):
    return rollout_start(version=w.strategy[3], environment=w.envs[env_key], actor=w.ops, plan=PLAN)


@pytest.fixture
def setup(transactional_db):
    w = rollout_setup()
    rollout = start(w)
    return w, rollout, runtime_token(w.envs["sg-test"])


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_paired_breach__real_worker__rolled_back_with_evidence_control_served(
    client, celery_worker_process, setup
):
    w, rollout, secret = setup
    # arm new: not usable in 12 of 120 requests where the old version (its shadow) was ready
    worse = [served(rollout, f"worse-{i}", "new", status="budget_exceeded") for i in range(12)]
    ingest(client, secret, good_traffic(rollout) + worse)

    tasks.evaluate_rollouts.apply_async(queue=celery_worker_process)

    wait_for(lambda: Rollout.objects.get(pk=rollout.pk).state != "running")
    rollout.refresh_from_db()
    assert (rollout.state, rollout.ended_by) == ("rolled_back", "guard:paired")
    assert rollout.evidence["guard"] == "paired"
    assert set(rollout.evidence["request_ids"]) <= {f"worse-{i}" for i in range(12)}
    assert len(rollout.evidence["request_ids"]) == 5
    audit = AuditRecord.objects.get(action="rollout.rollback")
    assert audit.actor_label == "guard:paired" and audit.after["evidence"]["guard"] == "paired"
    body = json.loads(
        bytes(ConfigPayload.objects.get(agent=w.agent, environment=w.envs["sg-test"]).body)
    )
    assert body["rollouts"] == {} and body["strategies"][STRATEGY]["version"] == 2
    assert (
        Release.objects.get(document__key=STRATEGY, environment=w.envs["sg-test"]).version.number
        == 2
    )


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_good_traffic_bake_over__real_worker__next_step_once_even_when_two_runs_race(
    client, celery_worker_process, setup
):
    w, rollout, secret = setup
    ingest(client, secret, good_traffic(rollout))
    bake_over(rollout)

    outcomes = []

    def run():
        try:
            outcomes.append(evaluator.rollouts_evaluate())
        finally:
            connection.close()

    tasks.evaluate_rollouts.apply_async(queue=celery_worker_process)
    tasks.evaluate_rollouts.apply_async(queue=celery_worker_process)  # a beat that fired twice
    racing = threading.Thread(target=run)
    racing.start()
    racing.join()
    wait_for(
        lambda: Rollout.objects.get(pk=rollout.pk).step == 1,
        why=lambda: (outcomes, Rollout.objects.get(pk=rollout.pk).guards),
    )
    time.sleep(3)  # the worker's second run has had its chance to double the step

    rollout.refresh_from_db()
    assert (rollout.state, rollout.step, rollout.share) == ("running", 1, 1.0)
    assert AuditRecord.objects.filter(action="rollout.step").count() == 1
    assert outcomes[0][rollout.key] in ("moved_on", "skipped", "baking")


@pytest.mark.django_db(transaction=True)
def test_too_little_data__extended_once_then_paused(client, setup):
    w, rollout, secret = setup
    ingest(client, secret, good_traffic(rollout, n_per_arm=10))
    bake_over(rollout)

    assert evaluator.rollouts_evaluate() == {rollout.key: "extended"}
    rollout.refresh_from_db()
    assert rollout.step_extended and rollout.state == "running"
    assert evaluator.rollouts_evaluate() == {rollout.key: "baking"}  # the bake doubled
    bake_over(rollout)

    assert evaluator.rollouts_evaluate() == {rollout.key: "paused"}
    rollout.refresh_from_db()
    assert rollout.state == "paused" and "Still too little data" in rollout.end_reason
    assert rollout.guards and {g["name"] for g in rollout.guards} >= {"minimum_data", "paired"}


@pytest.mark.django_db(transaction=True)
def test_provider_failing_both_versions__paused_naming_it_never_rolled_back(client, setup):
    w, rollout, secret = setup
    order_down = [
        candidate(),
        candidate("P7-v2", source="applicable_policy"),
        candidate(
            "order:A1042",
            source="order_delivery",
            decision="not_fetched",
            reason_code="provider_not_fetched",
        ),
    ]
    traces = [
        served(rollout, f"o-{arm}-{i}", arm, candidates=order_down if i % 3 == 0 else None)
        for arm in ("new", "old")
        for i in range(150)
    ]
    ingest(client, secret, traces)

    assert evaluator.rollouts_evaluate() == {rollout.key: "paused"}

    rollout.refresh_from_db()
    assert rollout.state == "paused"
    assert rollout.end_reason.startswith(
        "The order_delivery provider returned nothing for both versions in"
    )
    assert "for both versions" in rollout.end_reason
    assert not AuditRecord.objects.filter(action="rollout.rollback").exists()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_step_bake_over__beat_every_30s__the_step_ends_when_its_bake_does(
    client, settings, tmp_path
):
    # Given a worker running the beat at production's 30 s period, an environment that
    # judges on 20 traces an arm, and a rollout whose first step bakes 6 s
    w = rollout_setup()
    environment = w.envs["sg-test"]
    Environment.objects.filter(pk=environment.pk).update(guard_min_traces=20)
    secret = runtime_token(environment)
    bake = 6
    with beat_worker(settings, tmp_path / "beat-schedule", seconds=30):
        rollout = rollout_start(
            version=w.strategy[3],
            environment=environment,
            actor=w.ops,
            plan=[{"share": 0.5, "bake_seconds": bake}, {"share": 1.0, "bake_seconds": 3600}],
        )
        bake_end = rollout.step_started_at + timedelta(seconds=bake)
        # When good traffic arrives during the bake
        ingest(client, secret, good_traffic(rollout, n_per_arm=30))

        # Then the step moves on when its bake ends, not at the beat's next period
        wait_for(
            lambda: Rollout.objects.get(pk=rollout.pk).step == 1,
            timeout=40,
            why=lambda: Rollout.objects.get(pk=rollout.pk).guards,
        )
    rollout.refresh_from_db()
    (moved,) = [entry for entry in rollout.log if entry["action"] == "step"]
    late = (datetime.fromisoformat(moved["at"]) - bake_end).total_seconds()
    print(f"\nstep ended {late:.2f} s after its bake (beat every 30 s)")
    assert 0 <= late <= 2.0, rollout.log
