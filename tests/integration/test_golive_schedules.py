"""Scheduled go-lives (issue 34 item 2): a publish scheduled for a time fires when the beat's
task runs after it (the clock advanced), judged again at that moment as the requester; it is
refused with the reason, notified, when a freeze began meanwhile; bad input is refused at its
field with nothing saved; two claimers at once fire it once; a claim whose worker died is
taken over and still fires once."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from console.kernel.audit import AuditAction
from console.kernel.clock import clock_set
from console.kernel.errors import Conflict, Forbidden, NotFound, ValidationFailed
from console.kernel.models import AuditRecord
from strategies.delivery.models import SCHEDULE_ENDED_EVENT, Webhook, WebhookDelivery
from strategies.releases.models import ApprovalRequest, ReleaseEvent, Rollout, ScheduledGoLive
from strategies.releases.services.calendar import change_hours_set, freeze_window_create
from strategies.releases.services.schedules import (
    scheduled_golive_cancel,
    scheduled_golive_create,
    scheduled_golive_fire,
    schedules_claim_due,
    schedules_run_due,
)
from tests.factories.releases import rollout_setup
from tests.integration.test_rollouts import FAST, live_number

NOON = datetime(2026, 12, 23, 12, 0, tzinfo=UTC)


@pytest.fixture
def world(db, clock):
    clock.set(NOON)
    setup = rollout_setup()
    Webhook.objects.create(
        environment=setup.envs["sg-test"],
        url="http://127.0.0.1:9/",
        secret="s",
        events=[SCHEDULE_ENDED_EVENT],
    )
    return setup


def schedule(world, env="sg-test", *, minutes=30, version=3, **extra):
    return scheduled_golive_create(
        version=world.strategy[version],
        environment=world.envs[env],
        actor=world.ops,
        run_at=NOON + timedelta(minutes=minutes),
        **extra,
    )


def notified(schedule) -> list[dict]:
    import json

    return [
        json.loads(bytes(d.body))
        for d in WebhookDelivery.objects.filter(event=SCHEDULE_ENDED_EVENT)
        if json.loads(bytes(d.body))["schedule"] == schedule.pk
    ]


def test_schedule__its_time_comes__publishes_as_the_requester_audited_and_notified(world, clock):
    sg = world.envs["sg-test"]
    planned = schedule(world, reason="Release train 51")

    assert schedules_run_due() == 0  # not yet
    clock.advance(timedelta(minutes=30))
    assert schedules_run_due() == 1

    planned.refresh_from_db()
    assert planned.state == ScheduledGoLive.State.DONE
    assert live_number(sg) == 3
    assert planned.release_event.actor == "ops"
    assert planned.release_event.reason == "Release train 51"
    assert AuditRecord.objects.filter(action=AuditAction.SCHEDULE_FIRE).count() == 1
    assert notified(planned)[0]["state"] == "done"
    assert schedules_run_due() == 0  # never twice


def test_schedule__a_freeze_began_meanwhile__refused_with_the_reason_notified(world, clock):
    sg = world.envs["sg-test"]
    planned = schedule(world, minutes=90)
    freeze_window_create(
        environment=sg,
        starts_at=NOON + timedelta(minutes=60),
        ends_at=NOON + timedelta(days=3),
        reason="Payments incident freeze",
        actor=world.admin,
    )

    clock.advance(timedelta(minutes=91))
    schedules_run_due()

    planned.refresh_from_db()
    assert planned.state == ScheduledGoLive.State.REFUSED
    assert planned.outcome_code == "frozen"
    assert "Payments incident freeze" in planned.outcome
    assert live_number(sg) == 2
    assert AuditRecord.objects.filter(action=AuditAction.SCHEDULE_REFUSE).count() == 1
    assert notified(planned)[0]["code"] == "frozen"


def test_schedule__requester_lost_the_right_meanwhile__refused(world, clock):
    from console.kernel.models import Grant

    planned = schedule(world)
    Grant.objects.filter(user=world.ops).delete()
    from console.kernel.policy import forget_cached_grants

    forget_cached_grants(world.ops)

    clock.advance(timedelta(minutes=31))
    schedules_run_due()

    planned.refresh_from_db()
    assert planned.state == ScheduledGoLive.State.REFUSED
    assert planned.outcome_code in ("forbidden", "not_found")


def test_schedule__protected_environment__becomes_an_approval_request(world, clock):
    planned = schedule(world, "prod")
    clock.advance(timedelta(minutes=31))
    schedules_run_due()
    planned.refresh_from_db()
    assert planned.state == ScheduledGoLive.State.DONE
    assert planned.approval.status == ApprovalRequest.Status.PENDING
    assert live_number(world.envs["prod"]) == 2


def test_schedule__rollout_start__starts_the_rollout_at_its_time(world, clock):
    planned = schedule(world, kind="rollout_start", plan=FAST, unit="task")
    clock.advance(timedelta(minutes=31))
    schedules_run_due()
    planned.refresh_from_db()
    assert planned.state == ScheduledGoLive.State.DONE
    assert planned.rollout.state == Rollout.State.RUNNING


@pytest.mark.parametrize(
    ("run_at", "code"),
    [
        (NOON - timedelta(minutes=1), "in_the_past"),
        (NOON + timedelta(hours=30), "frozen"),  # inside the freeze set below
        (NOON + timedelta(days=5, hours=8), "outside_change_hours"),  # Monday 20:00 London
    ],
)
def test_schedule__bad_time__field_error_nothing_saved(world, run_at, code):
    sg = world.envs["sg-test"]
    freeze_window_create(
        environment=sg,
        starts_at=NOON + timedelta(days=1),
        ends_at=NOON + timedelta(days=2),
        reason="Year-end freeze",
        actor=world.admin,
    )
    if code == "outside_change_hours":
        change_hours_set(
            environment=sg,
            days=[0, 1, 2, 3, 4],
            opens_at="09:00",
            closes_at="17:00",
            time_zone="Europe/London",
            actor=world.admin,
        )

    with pytest.raises(ValidationFailed) as refused:
        scheduled_golive_create(
            version=world.strategy[3], environment=sg, actor=world.ops, run_at=run_at
        )

    assert refused.value.code == code
    assert refused.value.details[0]["path"] == "run_at"
    assert not ScheduledGoLive.objects.exists()


def test_schedule__runtime_cannot_serve_it__refused_now_nothing_saved(world):
    with pytest.raises(ValidationFailed) as refused:
        schedule(world, "bank-uat")  # its runtime lacks the handler v3 needs
    assert refused.value.code == "not_schedulable"
    assert not ScheduledGoLive.objects.exists()


def test_schedule__no_right_to_publish__refused_now(world, make_user):
    viewer = make_user("viewer", viewer=world.agent)
    with pytest.raises((Forbidden, NotFound)):
        scheduled_golive_create(
            version=world.strategy[3],
            environment=world.envs["sg-test"],
            actor=viewer,
            run_at=NOON + timedelta(hours=1),
        )
    assert not ScheduledGoLive.objects.exists()


def test_schedule__cancel__by_requester_or_admin_not_another_operator(world, clock):
    planned = schedule(world)
    with pytest.raises(Forbidden):
        scheduled_golive_cancel(schedule=planned, actor=world.ops2)
    scheduled_golive_cancel(schedule=planned, actor=world.admin)
    planned.refresh_from_db()
    assert planned.state == ScheduledGoLive.State.CANCELLED
    with pytest.raises(Conflict):
        scheduled_golive_cancel(schedule=planned, actor=world.ops)
    clock.advance(timedelta(hours=1))
    assert schedules_run_due() == 0
    assert live_number(world.envs["sg-test"]) == 2
    assert AuditRecord.objects.filter(action=AuditAction.SCHEDULE_CANCEL).count() == 1


def test_schedule__worker_died_after_its_claim__taken_over_after_the_timeout_fired_once(
    world, clock, settings
):
    planned = schedule(world)
    clock.advance(timedelta(minutes=31))
    [(schedule_id, dead_claim)] = schedules_claim_due()  # …and the worker dies here

    assert schedules_run_due() == 0  # not yet timed out: nobody takes it
    clock.advance(timedelta(seconds=settings.SCHEDULES_CLAIM_TIMEOUT_SECONDS + 1))
    assert schedules_run_due() == 1
    # The dead worker's claim, should it wake, fires nothing
    assert scheduled_golive_fire(schedule_id=schedule_id, claim=dead_claim) is None

    planned.refresh_from_db()
    assert planned.state == ScheduledGoLive.State.DONE
    assert ReleaseEvent.objects.filter(release__environment=world.envs["sg-test"]).count() == 2


@pytest.mark.django_db(transaction=True)
def test_schedule__two_workers_claim_at_once__it_fires_once(clock):
    clock.set(NOON)
    world = rollout_setup()
    schedule(world)
    clock.advance(timedelta(minutes=31))
    results, barrier = [], threading.Barrier(2)

    def worker():
        try:
            barrier.wait()
            results.append(schedules_run_due())
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(results) == [0, 1]
    sg = world.envs["sg-test"]
    assert ReleaseEvent.objects.filter(release__environment=sg).count() == 2  # v2, then v3 once
    assert live_number(sg) == 3
    clock_set(None)


def test_schedule__environment_requires_a_change_record__its_time_sends_the_request_nothing_live(
    world, clock, settings
):
    """Issue 34, items 1 and 2 together: at its time a scheduled publish asks the judgement
    again, which wants an external change record; the request goes to the change system and
    the schedule says so — never "live" while nothing went live."""
    from strategies.releases.models import ChangeRecord
    from strategies.releases.services.changes import change_system_configure
    from tests.change_system import ChangeSystem

    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True  # the change system is on 127.0.0.1
    sg = world.envs["sg-test"]
    before = live_number(sg)
    system = ChangeSystem()
    try:
        change_system_configure(
            environment=sg, actor=world.admin, url=system.url, requires_change_record=True
        )
        planned = schedule(world)
        clock.advance(timedelta(minutes=30))
        assert schedules_run_due() == 1
    finally:
        system.close()

    planned.refresh_from_db()
    record = ChangeRecord.objects.get(environment=sg)
    assert planned.state == ScheduledGoLive.State.DONE
    assert planned.outcome_code == "change_record_requested"
    assert record.public_id in planned.outcome and "once it approves" in planned.outcome
    assert record.state == ChangeRecord.State.WAITING and planned.release_event is None
    assert live_number(sg) == before
