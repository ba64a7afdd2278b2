"""Freeze windows and change hours in the one go-live judgement (issue 34 item 2): inside a
freeze or outside the change hours a publish, an approval's decision, a rollout's start and a
person's advance are refused naming the window; a guard's (the system's) step pauses; a
rollback is never held; a freeze break-glass lets a publish through, audited and marked on
the release history. Every time is the test's clock (console.kernel.clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from console.kernel.audit import AuditAction
from console.kernel.clock import clock_advance
from console.kernel.clock import now as clock_now
from console.kernel.errors import Conflict, Forbidden, ValidationFailed
from console.kernel.models import AuditRecord
from strategies.releases.models import ApprovalRequest, Release, ReleaseEvent, Rollout
from strategies.releases.selectors.golive import RULES, Path
from strategies.releases.services import (
    approval_approve,
    release_publish,
    release_rollback,
    rollout_advance,
    rollout_start,
    rollout_step_done,
)
from strategies.releases.services.calendar import (
    change_hours_set,
    freeze_break_glass_end,
    freeze_break_glass_start,
    freeze_window_create,
)
from tests.factories.releases import rollout_setup
from tests.integration.test_rollouts import FAST, baked, live_number

NOON = datetime(2026, 12, 23, 12, 0, tzinfo=UTC)  # a Wednesday


@pytest.fixture
def world(db, clock):
    clock.set(NOON)
    return rollout_setup()


def freeze(world, env, *, hours_from_now=0, hours=48, reason="Christmas freeze"):
    start = clock_now() + timedelta(hours=hours_from_now)
    return freeze_window_create(
        environment=env,
        starts_at=start,
        ends_at=start + timedelta(hours=hours),
        reason=reason,
        actor=world.admin,
    )


def test_rules__rollbacks_never_held_by_the_calendar__every_other_path_is():
    assert {p for p, rules in RULES.items() if not rules.calendar} == {
        Path.ROLLBACK,
        Path.GUARD_ROLLBACK,
    }


def test_publish__inside_a_freeze__refused_frozen_naming_the_window_nothing_live(world):
    sg = world.envs["sg-test"]
    freeze(world, sg)

    with pytest.raises(Conflict) as refused:
        release_publish(version=world.strategy[3], environment=sg, actor=world.ops)

    assert refused.value.code == "frozen"
    assert "Christmas freeze" in refused.value.message
    assert "frozen until Fri 2026-12-25 12:00 UTC" in refused.value.message
    assert live_number(sg) == 2


def test_publish__freeze_in_the_future__allowed_now_refused_once_it_begins(world, clock):
    sg = world.envs["sg-test"]
    freeze(world, sg, hours_from_now=1)

    release_publish(version=world.strategy[3], environment=sg, actor=world.ops)
    assert live_number(sg) == 3

    clock.advance(timedelta(hours=1))
    with pytest.raises(Conflict) as refused:
        release_publish(version=world.strategy[1], environment=sg, actor=world.ops)
    assert refused.value.code == "frozen"


def test_publish__outside_change_hours__refused_naming_when_they_open(world):
    sg = world.envs["sg-test"]
    change_hours_set(
        environment=sg,
        days=[0, 1, 2, 3, 4],
        opens_at="14:00",
        closes_at="17:00",
        time_zone="Asia/Singapore",
        actor=world.admin,
    )  # 12:00 UTC is 20:00 in Singapore: closed

    with pytest.raises(Conflict) as refused:
        release_publish(version=world.strategy[3], environment=sg, actor=world.ops)

    assert refused.value.code == "outside_change_hours"
    assert "Mon–Fri 14:00–17:00 Asia/Singapore" in refused.value.message
    assert "next open Thu 2026-12-24 14:00 Asia/Singapore (06:00 UTC)" in refused.value.message
    assert live_number(sg) == 2


def test_rollback__inside_a_freeze__allowed(world):
    sg = world.envs["sg-test"]
    release_publish(version=world.strategy[3], environment=sg, actor=world.ops)
    freeze(world, sg)

    release_rollback(
        release=Release.objects.get(environment=sg, document=world.strategy[3].document),
        to_version=world.strategy[2],
        actor=world.admin,
        reason="Bad answers after v3",
    )

    assert live_number(sg) == 2


def test_approval__decided_inside_a_freeze__refused_frozen_request_still_waits(world):
    prod = world.envs["prod"]
    outcome = release_publish(version=world.strategy[3], environment=prod, actor=world.ops)
    freeze(world, prod)

    with pytest.raises(Conflict) as refused:
        approval_approve(approval=outcome.approval, actor=world.ops2, note="ok")

    assert refused.value.code == "frozen"
    outcome.approval.refresh_from_db()
    assert outcome.approval.status == ApprovalRequest.Status.PENDING
    assert live_number(prod) == 2


def test_rollout__start_refused_in_a_freeze__a_running_ones_guard_step_pauses_a_person_refused(
    world,
):
    sg = world.envs["sg-test"]
    freeze(world, sg, hours_from_now=1)
    rollout = rollout_start(version=world.strategy[3], environment=sg, actor=world.ops, plan=FAST)

    with pytest.raises(Conflict):
        rollout_start(version=world.strategy[1], environment=sg, actor=world.ops, plan=FAST)
    clock_advance(timedelta(hours=1))  # the freeze begins
    with pytest.raises(Conflict) as refused:
        rollout_advance(rollout=rollout, actor=world.ops)
    assert refused.value.code == "frozen"

    paused = rollout_step_done(rollout=baked(rollout))
    assert paused.state == Rollout.State.PAUSED
    assert "frozen" in paused.end_reason
    assert live_number(sg) == 2


def test_freeze_break_glass__lets_a_publish_through__audited_and_marked_on_the_history(world):
    sg = world.envs["sg-test"]
    freeze(world, sg)
    glass = freeze_break_glass_start(
        environment=sg, reason="INC-9: hotfix during the freeze", minutes=30, actor=world.admin
    )

    release_publish(version=world.strategy[3], environment=sg, actor=world.ops, reason="hotfix")

    assert live_number(sg) == 3
    event = ReleaseEvent.objects.filter(release__environment=sg).order_by("-revision").first()
    assert event.freeze_break_glass
    row = AuditRecord.objects.filter(action=AuditAction.RELEASE_PUBLISH).order_by("-id").first()
    assert row.after["freeze_break_glass_reason"] == "INC-9: hotfix during the freeze"
    assert AuditRecord.objects.filter(action=AuditAction.FREEZE_BREAK_GLASS_START).count() == 1
    assert glass.ends_at == glass.started_at + timedelta(minutes=30)


def test_freeze_break_glass__ended_or_expired__the_freeze_holds_again(world, clock):
    sg = world.envs["sg-test"]
    freeze(world, sg)
    freeze_break_glass_start(
        environment=sg, reason="INC-9: hotfix now", minutes=30, actor=world.admin
    )
    freeze_break_glass_end(environment=sg, actor=world.admin)
    with pytest.raises(Conflict):
        release_publish(version=world.strategy[3], environment=sg, actor=world.ops)

    freeze_break_glass_start(
        environment=sg, reason="INC-9: hotfix again", minutes=30, actor=world.admin
    )
    clock.advance(timedelta(minutes=31))
    with pytest.raises(Conflict):
        release_publish(version=world.strategy[3], environment=sg, actor=world.ops)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"days": [7], "opens_at": "09:00", "closes_at": "17:00"}, "days"),
        ({"days": [1], "opens_at": "9am", "closes_at": "17:00"}, "opens_at"),
        (
            {"days": [1], "opens_at": "09:00", "closes_at": "17:00", "time_zone": "Mars/Base"},
            "time_zone",
        ),
        ({"days": [1], "opens_at": "09:00", "closes_at": "09:00"}, "closes_at"),
    ],
)
def test_change_hours__bad_input__field_error_nothing_saved(world, changes, field):
    with pytest.raises(ValidationFailed) as refused:
        change_hours_set(environment=world.envs["sg-test"], actor=world.admin, **changes)
    assert refused.value.details[0]["path"] == field
    assert not world.envs["sg-test"].__class__.objects.filter(change_hours__isnull=False).exists()


def test_freeze_window__ends_before_it_starts_or_already_over__field_error(world, clock):
    sg = world.envs["sg-test"]
    with pytest.raises(ValidationFailed) as refused:
        freeze_window_create(
            environment=sg,
            starts_at=NOON,
            ends_at=NOON - timedelta(hours=1),
            reason="oops, wrong",
            actor=world.admin,
        )
    assert refused.value.details[0]["path"] == "ends_at"
    with pytest.raises(ValidationFailed):
        freeze_window_create(
            environment=sg,
            starts_at=NOON - timedelta(days=2),
            ends_at=NOON - timedelta(days=1),
            reason="long past freeze",
            actor=world.admin,
        )
    assert not sg.freeze_windows.exists()


def test_freeze_window__by_an_operator__refused_nothing_saved(world):
    with pytest.raises(Forbidden):
        freeze_window_create(
            environment=world.envs["sg-test"],
            starts_at=NOON,
            ends_at=NOON + timedelta(hours=1),
            reason="not mine to set",
            actor=world.ops,
        )
    assert not world.envs["sg-test"].freeze_windows.exists()
