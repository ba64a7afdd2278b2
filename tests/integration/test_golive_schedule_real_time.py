"""Issue 34 item 2's done-when, on the real clock: a publish scheduled a few seconds ahead is
fired by a real Celery worker running the beat (SCHEDULES_POLL_SECONDS=2) within 60 s of its
time."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from strategies.releases.models import ScheduledGoLive
from strategies.releases.services.schedules import scheduled_golive_create
from tests.conftest import celery_worker
from tests.factories.releases import rollout_setup
from tests.integration.test_rollouts import live_number

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_scheduled_publish__real_time_and_worker__fires_within_60_seconds(settings, tmp_path):
    world = rollout_setup()
    sg = world.envs["sg-test"]
    run_at = timezone.now() + timedelta(seconds=5)
    planned = scheduled_golive_create(
        version=world.strategy[3], environment=sg, actor=world.ops, run_at=run_at
    )

    with celery_worker(
        beat_schedule=tmp_path / "beat-schedule",
        CACHE_PREFIX=settings.CACHES["default"]["KEY_PREFIX"],
        SCHEDULES_POLL_SECONDS="2",
    ):
        deadline = run_at + timedelta(seconds=60)
        while timezone.now() < deadline:
            planned.refresh_from_db()
            if planned.state not in ScheduledGoLive.OPEN_STATES:
                break
            time.sleep(0.5)

    assert planned.state == ScheduledGoLive.State.DONE, planned.outcome
    assert planned.finished_at - run_at < timedelta(seconds=60)
    assert planned.finished_at >= run_at
    assert live_number(sg) == 3
