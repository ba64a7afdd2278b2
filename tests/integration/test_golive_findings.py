"""Issue 30's five findings, each at its cause: a staged rollout walked around `require_preview`
and around protection switched on after its start, a break-glass was not flagged at a
rollout's start, archiving an environment left its rollout and shadow in the runtime's
configuration, and one admin could switch `require_preview` off in a protected environment
with no break-glass. Each test failed on bc039d9."""

from __future__ import annotations

import pytest

from console.kernel.errors import Conflict
from console.kernel.models import AuditRecord
from strategies.catalog.services import environment_archive, environment_update
from strategies.releases.models import Release, ReleaseEvent, Rollout, ShadowRelease
from strategies.releases.selectors import rollout_refusals
from strategies.releases.selectors.golive import UNREVIEWED
from strategies.releases.services import (
    rollout_advance,
    rollout_finish,
    rollout_start,
    rollout_step_done,
    shadow_start,
)
from tests.factories.releases import rollout_setup
from tests.integration.test_rollouts import FAST, STRATEGY, live_number, payload

INCIDENT = "INC-4711: fraud rule hotfix, approver unreachable"


@pytest.fixture
def world(db):
    return rollout_setup()


def update(world, env, **changes):
    """Change an environment's settings as the admin (the service re-reads it), then read it
    again here."""
    environment_update(environment=env, actor=world.admin, **changes)
    env.refresh_from_db()
    return env


def last_step(rollout: Rollout) -> Rollout:
    Rollout.objects.filter(pk=rollout.pk).update(step=len(rollout.plan) - 1)
    rollout.refresh_from_db()
    return rollout


# --- 1. require_preview ----------------------------------------------------------------------------
def test_rollout_start__require_preview_and_no_preview__refused_preview_required(world):
    sg = world.envs["sg-test"]
    update(world, sg, require_preview=True)

    with pytest.raises(Conflict) as refused:
        rollout_start(version=world.strategy[3], environment=sg, actor=world.ops, plan=FAST)

    assert refused.value.code == "preview_required"
    assert not Rollout.objects.exists()
    assert live_number(sg) == 2


def test_require_preview_switched_on_mid_rollout__finish_refused__guard_step_pauses(world):
    sg = world.envs["sg-test"]
    rollout = rollout_start(version=world.strategy[3], environment=sg, actor=world.ops, plan=FAST)
    update(world, sg, require_preview=True)

    with pytest.raises(Conflict) as refused:
        rollout_finish(rollout=rollout, actor=world.ops)
    assert refused.value.code == "preview_required"
    assert live_number(sg) == 2

    paused = rollout_step_done(rollout=last_step(rollout))
    assert paused.state == Rollout.State.PAUSED
    assert "requires an impact preview" in paused.end_reason
    assert paused.evidence["refused"] == ["preview_required"]
    assert live_number(sg) == 2  # never completed silently


# --- 2. protection switched on mid-rollout ---------------------------------------------------------
def test_protection_switched_on_mid_rollout__one_person_cannot_finish_or_advance(world):
    sg = world.envs["sg-test"]
    rollout = rollout_start(version=world.strategy[3], environment=sg, actor=world.ops, plan=FAST)
    update(world, sg, protected=True)

    for act in (rollout_finish, rollout_advance):
        with pytest.raises(Conflict) as refused:
            act(rollout=rollout, actor=world.ops)
        assert refused.value.code == "approval_required"
    assert live_number(sg) == 2
    assert not ReleaseEvent.objects.filter(release__environment=sg, to_version__number=3).exists()


def test_protection_switched_on_mid_rollout__guard_completion_pauses_saying_why(world):
    sg = world.envs["sg-test"]
    rollout = rollout_start(version=world.strategy[3], environment=sg, actor=world.ops, plan=FAST)
    update(world, sg, protected=True)

    paused = rollout_step_done(rollout=last_step(rollout))

    assert paused.state == Rollout.State.PAUSED
    assert "plan was never approved" in paused.end_reason
    assert live_number(sg) == 2


def test_rollout_started_in_break_glass__finished_after_it_ended__refused(world):
    prod = world.envs["prod"]
    update(world, prod, protected=False, break_glass_reason=INCIDENT)
    rollout = rollout_start(version=world.strategy[3], environment=prod, actor=world.ops, plan=FAST)
    assert rollout.state == Rollout.State.RUNNING  # no approval asked during the break-glass
    update(world, prod, protected=True)  # ends it

    with pytest.raises(Conflict) as refused:
        rollout_finish(rollout=rollout, actor=world.ops)

    assert refused.value.code == "approval_required"
    assert live_number(prod) == 2


# --- 3. break-glass flagged at a rollout's start ------------------------------------------------------
def test_rollout_start_in_break_glass__judgement_flags_unreviewed__completion_marked(world):
    prod = world.envs["prod"]
    update(world, prod, protected=False, break_glass_reason=INCIDENT)

    judged = rollout_refusals(
        version=world.strategy[3], environment=prod, actor=world.ops, plan=FAST, unit="task"
    )
    assert UNREVIEWED in {finding.code for finding in judged}

    rollout = rollout_start(version=world.strategy[3], environment=prod, actor=world.ops, plan=FAST)
    start = AuditRecord.objects.get(action="rollout.start")
    assert start.after["unreviewed"] is True
    rollout_finish(rollout=rollout, actor=world.ops)
    assert Release.objects.get(document__key=STRATEGY, environment=prod).unreviewed


# --- 4. archiving stops rollouts and shadows ---------------------------------------------------------
def test_archive__running_rollout_stopped_audited_and_gone_from_payload(world):
    sg = world.envs["sg-test"]
    rollout = rollout_start(version=world.strategy[3], environment=sg, actor=world.ops, plan=FAST)
    assert payload(sg)[1]["rollouts"]

    environment_archive(environment=sg, actor=world.admin, reason="sg-test is replaced by sg-2")

    rollout.refresh_from_db()
    assert rollout.state == Rollout.State.STOPPED
    assert "sg-test was archived (sg-test is replaced by sg-2)" in rollout.end_reason
    _, body = payload(sg)
    assert body["rollouts"] == {}
    assert body["strategies"][STRATEGY]["version"] == 2  # what is live stays live
    stop = AuditRecord.objects.get(action="rollout.stop")
    assert (stop.actor_label, "archived" in stop.after["reason"]) == ("admin", True)


def test_archive__running_shadow_stopped_there_only_and_gone_from_payload(world):
    sg, prod = world.envs["sg-test"], world.envs["prod"]
    shadow_start(version=world.strategy[3], environment=sg, actor=world.ops)
    shadow_start(version=world.strategy[3], environment=prod, actor=world.ops)
    assert STRATEGY in payload(sg)[1]["shadow"]

    environment_archive(environment=sg, actor=world.admin, reason="sg-test is replaced by sg-2")

    assert not ShadowRelease.objects.get(environment=sg).running
    assert ShadowRelease.objects.get(environment=prod).running  # only the archived one
    assert payload(sg)[1]["shadow"] == {}
    stop = ReleaseEvent.objects.get(release__environment=sg, action="shadow_stop")
    assert "sg-test was archived" in stop.reason


# --- 5. require_preview off in a protected environment is a break-glass ----------------------------
def test_require_preview_off_in_protected_env__needs_break_glass_reason(world):
    prod = world.envs["prod"]
    update(world, prod, require_preview=True)

    with pytest.raises(Conflict) as refused:
        update(world, prod, require_preview=False)
    assert refused.value.code == "break_glass_required"
    assert [d["path"] for d in refused.value.details] == ["require_preview"]
    prod.refresh_from_db()
    assert prod.require_preview

    update(world, prod, require_preview=False, break_glass_reason=INCIDENT)
    prod.refresh_from_db()
    assert (prod.require_preview, prod.break_glass_relaxed) == (False, ["require_preview"])
    assert AuditRecord.objects.filter(action="environment.break_glass").count() == 1


def test_require_preview_off_in_unprotected_env__plain_update(world):
    sg = world.envs["sg-test"]
    update(world, sg, require_preview=True)
    update(world, sg, require_preview=False)
    sg.refresh_from_db()
    assert (sg.require_preview, sg.break_glass_at) == (False, None)
