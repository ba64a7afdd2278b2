"""Issue 30's table: every way a version goes live × every state of the environment × who
moves it, through the real services. At the moment of each move the test first asks a plain
publish of the same version there, by the same person (in a savepoint it rolls back), then
makes the move; what the move does must be what the plain publish said, read through the
differences the one judgement writes down (`strategies.releases.selectors.golive.RULES`):

- a promotion, a config-as-code apply, a shadow's promotion and a rollout's start are
  publishes: the same outcome (an apply refuses as one plan, so only the outcome is compared);
- an approval's decision is the second person: where a publish would ask one, it goes live,
  and an approved change is never unreviewed;
- a rollout's later moves (an advance, its finish, the guards' step) cannot ask a second
  person any more: where a publish would, they are refused `approval_required` (the system's
  move pauses, saying so); an archived environment has stopped the rollout already;
- rollbacks (by hand, from a watch warning, by a guard) follow their own rule in the
  judgement (the revert policy; guard rollbacks), compared with the judgement's own answer.

Protection and `require_preview` switched on between a rollout's start and its moves are
states of this table (the rollout starts in an open environment, then the state is set).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from django.db import transaction

from console.kernel.audit import SystemActor
from console.kernel.errors import ApplicationError
from console.kernel.models import AuditRecord
from strategies.catalog.models import Environment
from strategies.catalog.services import environment_archive, environment_update
from strategies.exchange.services import config_apply, config_export_text
from strategies.releases.models import ApprovalRequest, Release, Rollout
from strategies.releases.selectors.golive import (
    APPROVAL_REQUIRED,
    LIVE,
    LIVE_UNREVIEWED,
    NEEDS_APPROVAL,
    REFUSED,
    Candidate,
    Path,
    go_live_outcome,
    go_live_refusals,
)
from strategies.releases.selectors.refusals import PREVIEW_REQUIRED
from strategies.releases.services import (
    PromotionOutcome,
    PublishOutcome,
    approval_approve,
    release_promote,
    release_publish,
    release_rollback,
    rollout_advance,
    rollout_finish,
    rollout_guard_rollback,
    rollout_start,
    rollout_step_done,
    rollout_watch_rollback,
    shadow_promote,
    shadow_start,
)
from tests.factories import user_with_grants
from tests.factories.releases import publish, rollout_setup

STRATEGY = "after_sales_consultation"
PLAN = [{"share": 0.1, "bake_seconds": 120}, {"share": 1.0, "bake_seconds": 120}]
INCIDENT = "INC-4711: fraud rule hotfix, approver unreachable"
STATES = (
    "open",
    "protected",
    "revert_policy",
    "require_preview",
    "break_glass",
    "break_glass_ended",
    "revert_break_glass",
    "archived",
)


@dataclass
class World:
    setup: object
    prod: Environment
    sg: Environment
    v3: object
    viewer: object
    admin: object


@pytest.fixture
def world(db):
    setup = rollout_setup()
    prod = setup.envs["prod"]
    # v1 then v2 live in prod (each approved): v1 is a reviewed rollback target.
    publish(setup.strategy[1], prod, actor=setup.ops, approver=setup.ops2)
    publish(setup.strategy[2], prod, actor=setup.ops, approver=setup.ops2)
    Environment.objects.filter(pk=prod.pk).update(protected=False)  # "open" to start from
    prod.refresh_from_db()
    return World(
        setup=setup,
        prod=prod,
        sg=setup.envs["sg-test"],
        v3=setup.strategy[3],
        viewer=user_with_grants("viewer1", viewer=setup.agent),
        admin=setup.admin,
    )


def set_state(w: World, state: str) -> None:
    """Put prod in `state` the way people do it (the admin, through the catalog service)."""
    env = w.prod
    settings = {
        "open": {},
        "protected": {"protected": True},
        "revert_policy": {"rollback_needs_approval": True},
        "require_preview": {"require_preview": True},
    }
    if state in settings:
        if settings[state]:
            environment_update(environment=env, actor=w.admin, **settings[state])
    elif state in ("break_glass", "break_glass_ended"):
        environment_update(environment=env, actor=w.admin, protected=True)
        environment_update(
            environment=env, actor=w.admin, protected=False, break_glass_reason=INCIDENT
        )
        if state == "break_glass_ended":
            environment_update(environment=env, actor=w.admin, protected=True)
    elif state == "revert_break_glass":
        environment_update(environment=env, actor=w.admin, rollback_needs_approval=True)
        environment_update(
            environment=env,
            actor=w.admin,
            rollback_needs_approval=False,
            break_glass_reason=INCIDENT,
        )
    elif state == "archived":
        environment_archive(environment=env, actor=w.admin, reason="replaced")
    w.prod.refresh_from_db()


class _Undo(Exception):
    def __init__(self, seen):
        self.seen = seen


def observe(action, classify, *, undo: bool = False) -> tuple[str, str]:
    """What `action` does — (outcome, code); with `undo`, everything it wrote is rolled back
    (the plain publish asked first: a service that is not durable, so it nests)."""
    try:
        if not undo:
            return classify(action())
        with transaction.atomic():
            raise _Undo(classify(action()))
    except _Undo as undone:
        return undone.seen
    except ApplicationError as error:
        return REFUSED, error.code


def live_word(release: Release) -> tuple[str, str]:
    release.refresh_from_db()
    return (LIVE_UNREVIEWED if release.unreviewed else LIVE), ""


def outcome_of(result) -> tuple[str, str]:
    """A service's answer as (outcome, code)."""
    if isinstance(result, PublishOutcome):
        return (NEEDS_APPROVAL, "") if result.approval is not None else live_word(result.release)
    if isinstance(result, Release):
        return live_word(result)
    if isinstance(result, PromotionOutcome):
        if result.requested:
            return NEEDS_APPROVAL, ""
        return live_word(Release.objects.get(document__key=STRATEGY, environment__key="prod"))
    if isinstance(result, tuple):  # config_apply's (plan, outcome): a refused step is skipped
        applied = result[1]
        if any(step["environment"] == "prod" for step in applied.skipped):
            return REFUSED, "skipped"
        if applied.requested:
            return NEEDS_APPROVAL, ""
        return live_word(Release.objects.get(document__key=STRATEGY, environment__key="prod"))
    if isinstance(result, Rollout):
        return rollout_word(result)
    raise AssertionError(f"unexpected answer {result!r}")


def rollout_word(rollout: Rollout) -> tuple[str, str]:
    rollout.refresh_from_db()
    if rollout.state == Rollout.State.AWAITING_APPROVAL:
        return NEEDS_APPROVAL, ""
    if rollout.state == Rollout.State.PAUSED:  # the system's move, refused: why is kept
        code = (rollout.evidence.get("refused") or ["?"])[0]
        return REFUSED, code if code in (APPROVAL_REQUIRED, PREVIEW_REQUIRED) else "not_publishable"
    if rollout.state == Rollout.State.COMPLETED:
        return live_word(Release.objects.get(pk=current(rollout).pk))
    if rollout.state == Rollout.State.ROLLED_BACK:
        return LIVE, ""
    start = AuditRecord.objects.filter(action="rollout.start", target_id=str(rollout.pk)).first()
    unreviewed = bool(start and start.after.get("unreviewed"))
    return (LIVE_UNREVIEWED if unreviewed else LIVE), ""


def current(rollout: Rollout) -> Release:
    return Release.objects.get(document=rollout.document, environment=rollout.environment)


def plain_publish(w: World, actor, *, waiting=None) -> tuple[str, str]:
    """What a plain publish of v3 in prod by `actor` would do now (`waiting`: the request
    being decided, set aside for the probe: the plain publish is asked as if it were not)."""

    def probe():
        if waiting is not None:
            ApprovalRequest.objects.filter(pk=waiting.pk).update(status="withdrawn")
        return release_publish(version=w.v3, environment=w.prod, actor=actor, reason="probe")

    return observe(probe, outcome_of, undo=True)


def actor_of(w: World, who: str):
    return {"rights": w.setup.ops, "none": w.viewer, "system": SystemActor("system")}[who]


# --- publishes ----------------------------------------------------------------------------------------
def promote_v3(w, actor):
    publish(w.v3, w.sg, actor=w.setup.ops)
    return lambda: release_promote(
        agent=w.setup.agent,
        source=w.sg,
        target=w.prod,
        documents=[w.v3.document],
        actor=actor,
        reason="promote v3",
    )


def apply_v3(w, actor):
    data = json.loads(config_export_text(agent=w.setup.agent, actor=w.admin))
    strategy = next(d for d in data["documents"] if d["key"] == STRATEGY)
    strategy["draft"] = None
    data["live"].setdefault("prod", {})[STRATEGY] = 3
    return lambda: config_apply(agent_key=w.setup.agent.key, data=data, actor=actor)


def shadow_promote_v3(w, actor):
    shadow_start(version=w.v3, environment=w.prod, actor=w.setup.ops)
    return lambda: shadow_promote(
        document=w.v3.document, environment=w.prod, actor=actor, reason="promote the shadow"
    )


def rollout_start_v3(w, actor):
    return lambda: rollout_start(version=w.v3, environment=w.prod, actor=actor, plan=PLAN)


def publish_v3(w, actor):
    return lambda: release_publish(version=w.v3, environment=w.prod, actor=actor, reason="v3")


PUBLISHES = {
    "publish": publish_v3,
    "promotion": promote_v3,
    "config_apply": apply_v3,
    "shadow_promotion": shadow_promote_v3,
    "rollout_start": rollout_start_v3,
}


@pytest.mark.parametrize("who", ["rights", "none"])
@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("path", list(PUBLISHES))
def test_publishes__same_outcome_as_a_plain_publish(world, path, state, who):
    actor = world.admin if (path == "config_apply" and who == "rights") else actor_of(world, who)
    action = PUBLISHES[path](world, actor)  # prepared in the open environment
    set_state(world, state)

    expected = plain_publish(world, actor)
    seen = observe(action, outcome_of)

    if path == "shadow_promotion" and state == "archived" and who == "rights":
        assert seen == (REFUSED, "no_shadow"), seen  # the archive stopped the shadow
    elif path in ("config_apply", "promotion"):  # refused as one plan: the outcome compared
        assert seen[0] == expected[0], (path, state, who, seen, expected)
    else:
        assert seen == expected, (path, state, who, seen, expected)


# --- the approval's decision ----------------------------------------------------------------------------
@pytest.mark.parametrize("who", ["rights", "none"])
@pytest.mark.parametrize("state", STATES)
def test_approval_decision__a_plain_publish_with_the_second_person_given(world, state, who):
    environment_update(environment=world.prod, actor=world.admin, protected=True)
    world.prod.refresh_from_db()
    request = release_publish(
        version=world.v3, environment=world.prod, actor=world.setup.ops, reason="v3"
    ).approval
    Environment.objects.filter(pk=world.prod.pk).update(protected=False)  # back to open
    world.prod.refresh_from_db()
    set_state(world, state)
    approver = world.setup.ops2 if who == "rights" else world.viewer

    expected = plain_publish(world, world.setup.ops, waiting=request)
    seen = observe(lambda: approval_approve(approval=request, actor=approver), outcome_of)

    if who == "none":
        assert seen[0] == REFUSED and seen[1] in ("forbidden", "not_found"), seen
    elif expected[0] in (NEEDS_APPROVAL, LIVE_UNREVIEWED):
        assert seen == (LIVE, ""), (state, seen, expected)  # approved: never unreviewed
    else:
        assert seen == expected, (state, seen, expected)


# --- a rollout's later moves --------------------------------------------------------------------------------
def at_last_step(rollout: Rollout) -> Rollout:
    Rollout.objects.filter(pk=rollout.pk).update(step=len(rollout.plan) - 1)
    rollout.refresh_from_db()
    return rollout


MOVES = {
    "advance": lambda r, actor: rollout_advance(rollout=r, actor=actor),
    "finish": lambda r, actor: rollout_finish(rollout=r, actor=actor),
    "step_done": lambda r, actor: rollout_step_done(rollout=r),
}


# People advance and finish; the guards' evaluator (the system) moves a step that baked.
MOVERS = [("advance", "rights"), ("advance", "none"), ("finish", "rights"), ("finish", "none")]
MOVERS += [("step_done", "system")]


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize(("move", "who"), MOVERS)
def test_rollout_moves__judged_again_at_the_moment(world, move, who, state):
    rollout = rollout_start(
        version=world.v3, environment=world.prod, actor=world.setup.ops, plan=PLAN
    )
    assert rollout.state == Rollout.State.RUNNING  # started while prod was open
    set_state(world, state)
    rollout = at_last_step(rollout)
    actor = actor_of(world, who)

    publisher = world.setup.ops if who == "system" else actor
    expected = plain_publish(world, publisher)
    seen = observe(lambda: MOVES[move](rollout, actor), outcome_of)

    if who == "none":
        assert seen[0] == REFUSED and seen[1] in ("forbidden", "not_found"), seen
    elif state == "archived":
        assert seen == (REFUSED, "rollout_finished"), seen  # the archive stopped it
    elif expected[0] == NEEDS_APPROVAL:
        assert seen == (REFUSED, APPROVAL_REQUIRED), (state, seen, expected)
    else:
        assert seen == expected, (move, state, who, seen, expected)


# --- rollbacks ------------------------------------------------------------------------------------------------
def judged(w: World, path: Path, version) -> tuple[str, str]:
    refusals = go_live_refusals(
        path,
        Candidate.of(version),
        environment=w.prod,
        actor=w.admin,
        live=Release.objects.get(document__key=STRATEGY, environment=w.prod),
    )
    return go_live_outcome(refusals), ""


@pytest.mark.parametrize("who", ["rights", "none"])
@pytest.mark.parametrize("state", STATES)
def test_rollback_by_hand__as_the_judgement_says_for_rollbacks(world, state, who):
    set_state(world, state)
    release = Release.objects.get(document__key=STRATEGY, environment=world.prod)
    actor = world.admin if who == "rights" else world.viewer

    expected = judged(world, Path.ROLLBACK, world.setup.strategy[1])
    seen = observe(
        lambda: release_rollback(
            release=release, to_version=world.setup.strategy[1], actor=actor, reason="v2 breaks"
        ),
        outcome_of,
    )

    if who == "none":
        assert seen[0] == REFUSED and seen[1] in ("forbidden", "not_found"), seen
    else:
        assert seen == expected, (state, seen, expected)
        assert expected[0] != REFUSED  # an emergency action: never refused by the state


@pytest.mark.parametrize("state", STATES)
def test_rollback_from_a_watch_warning__as_a_rollback_by_hand(world, state):
    rollout = rollout_start(
        version=world.v3, environment=world.prod, actor=world.setup.ops, plan=PLAN
    )
    rollout = rollout_finish(rollout=rollout, actor=world.setup.ops)
    Rollout.objects.filter(pk=rollout.pk).update(
        watch_warning={"message": "v3 worse on the pair", "guard": "paired"}
    )
    set_state(world, state)

    expected = judged(world, Path.ROLLBACK, world.setup.strategy[2])
    seen = observe(lambda: rollout_watch_rollback(rollout=rollout, actor=world.admin), outcome_of)

    if state == "archived":
        assert seen == (REFUSED, "watch_ended"), seen  # the archive ended the watch
    else:
        assert seen == expected, (state, seen, expected)


@pytest.mark.parametrize("state", STATES)
def test_guard_rollback__as_the_judgement_says_for_guards(world, state):
    rollout = rollout_start(
        version=world.v3, environment=world.prod, actor=world.setup.ops, plan=PLAN
    )
    set_state(world, state)

    expected = judged(world, Path.GUARD_ROLLBACK, world.setup.strategy[2])
    seen = observe(
        lambda: rollout_guard_rollback(
            rollout=rollout, guard="paired", evidence={"message": "worse"}
        ),
        outcome_of,
    )

    if state == "archived":
        assert seen == (REFUSED, "rollout_finished"), seen
    else:
        assert seen == expected, (state, seen, expected)
        assert Release.objects.get(pk=current(rollout).pk).version.number == 2
