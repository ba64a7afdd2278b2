"""Staged rollouts (issue 23): the console's rollout — judged like a publish against the
runtime (which must declare `split`), one per document and environment, its state machine
with 409s for finished ones and one winner of two concurrent actors, the plan approved once
in a protected environment, stopped by a manual publish or rollback, completed by a publish,
and its payload block with a new ETag on every change."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from console.kernel.errors import Conflict, Forbidden, ValidationFailed
from console.kernel.models import AuditRecord
from strategies.catalog.services import manifest_record
from strategies.delivery.models import ConfigPayload, Webhook, WebhookDelivery
from strategies.releases.models import ApprovalRequest, Release, ReleaseEvent, Rollout
from strategies.releases.services import (
    approval_approve,
    release_publish,
    release_rollback,
    rollout_advance,
    rollout_finish,
    rollout_guard_pause,
    rollout_guard_rollback,
    rollout_pause,
    rollout_record_guards,
    rollout_resume,
    rollout_start,
    rollout_step_done,
    rollout_step_extend,
    rollout_stop,
    shadow_start,
)
from tests.factories import manifest_body, user_with_grants
from tests.factories.releases import publish, rollout_setup
from tests.factories.users import RoleFactory

STRATEGY = "after_sales_consultation"
FAST = [
    {"share": 0.1, "bake_seconds": 120},
    {"share": 0.5, "bake_seconds": 120},
    {"share": 1.0, "bake_seconds": 120},
]


@pytest.fixture
def world(db):
    return rollout_setup()


def payload(env):
    row = ConfigPayload.objects.get(agent__key="assistant_professional", environment=env)
    return row.etag, json.loads(bytes(row.body))


def live_number(env) -> int:
    return Release.objects.get(document__key=STRATEGY, environment=env).version.number


def baked(rollout: Rollout) -> Rollout:
    """The step's bake is over (its start moved back by the bake)."""
    Rollout.objects.filter(pk=rollout.pk).update(
        step_started_at=timezone.now() - timedelta(seconds=rollout.bake_seconds + 1)
    )
    rollout.refresh_from_db()
    return rollout


# --- start ----------------------------------------------------------------------------------------
def test_rollout_start__sg_test__running_in_payload_control_kept_new_etag_audit_webhook(world):
    w, sg = world, world.envs["sg-test"]
    hook = Webhook.objects.create(
        environment=sg, url="http://127.0.0.1:9/", secret="s", events=["release.changed"]
    )
    etag_before, before = payload(sg)
    assert before["rollouts"] == {}

    rollout = rollout_start(
        version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST, reason="v3 by steps"
    )

    assert (rollout.key, rollout.state, rollout.step) == (f"ro-{rollout.pk}", "running", 0)
    assert (rollout.version.number, rollout.control_version.number) == (3, 2)
    etag_after, after = payload(sg)
    assert etag_after != etag_before
    assert after["strategies"][STRATEGY]["version"] == 2  # control stays live
    assert after["rollouts"] == {
        STRATEGY: {
            "id": rollout.key,
            "version": 3,
            "body": w.strategy[3].body,
            "share": 0.1,
            "unit": "task",
            "step": 0,
        }
    }
    audit = AuditRecord.objects.get(action="rollout.start")
    assert (audit.actor_label, audit.after["id"], audit.after["plan"]) == ("ops", rollout.key, FAST)
    body = json.loads(bytes(WebhookDelivery.objects.get(webhook=hook).body))
    assert (body["action"], body["rollout"]["id"], body["etag"]) == (
        "rollout_start",
        rollout.key,
        etag_after,
    )


def test_rollout_start__runtime_without_split__refused_split_unsupported(world):
    w, sg = world, world.envs["sg-test"]
    manifest_record(environment=sg, body=manifest_body(features=["shadow"]))

    with pytest.raises(ValidationFailed) as refused:
        rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)

    assert refused.value.code == "split_unsupported"
    assert [(d["path"], d["code"]) for d in refused.value.details] == [
        ("features", "split_unsupported")
    ]
    assert not Rollout.objects.exists()


def test_rollout_start__version_the_runtime_cannot_serve__refused_like_a_publish(world):
    w, uat = world, world.envs["bank-uat"]
    publish(w.strategy[2], uat, actor=w.ops)

    with pytest.raises(ValidationFailed) as refused:
        rollout_start(version=w.strategy[3], environment=uat, actor=w.ops, plan=FAST)

    assert refused.value.code == "not_publishable"
    assert "general_policy_only" in refused.value.message


@pytest.mark.parametrize(
    "plan, path",
    [
        ("canary", "plan"),
        ([], "plan"),
        ([{"share": 0.5, "bake_seconds": 60}, {"share": 0.1, "bake_seconds": 60}], "plan[1].share"),
        ([{"share": 0.5, "bake_seconds": 60}], "plan[0].share"),  # never reaches everyone
        ([{"share": 1.0, "bake_seconds": 0}], "plan[0].bake_seconds"),
    ],
)
def test_rollout_start__bad_plan__400_at_its_step_nothing_written(world, plan, path):
    w = world
    with pytest.raises(ValidationFailed) as refused:
        rollout_start(version=w.strategy[3], environment=w.envs["sg-test"], actor=w.ops, plan=plan)

    assert refused.value.code == "invalid_plan"
    assert refused.value.details[0]["path"] == path
    assert not Rollout.objects.exists()


def test_rollout_start__second_one_same_place__409_with_the_active_one(world):
    w, sg = world, world.envs["sg-test"]
    first = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)

    with pytest.raises(Conflict) as refused:
        rollout_start(version=w.strategy[3], environment=sg, actor=w.ops2, plan=FAST)

    assert refused.value.code == "rollout_active"
    assert refused.value.extra["current"]["id"] == first.key


def test_rollout_start__no_publish_right__403_and_viewer_out_of_scope_404(world):
    w, sg = world, world.envs["sg-test"]
    support = user_with_grants("support1", support=w.agent)

    with pytest.raises(Forbidden):
        rollout_start(version=w.strategy[3], environment=sg, actor=support, plan=FAST)


def test_rollout_start__templates__staged_default_for_protected_all_at_once(world):
    w = world
    rollout = rollout_start(
        version=w.strategy[3], environment=w.envs["sg-test"], actor=w.ops, plan="all_at_once"
    )
    assert rollout.plan == [{"share": 1.0, "bake_seconds": 600}]


# --- the state machine ------------------------------------------------------------------------------
def test_pause_resume_advance_finish__moves_and_payload_follows(world):
    w, sg = world, world.envs["sg-test"]
    rollout = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)
    etags = {payload(sg)[0]}

    rollout = rollout_pause(rollout=rollout, actor=w.ops, reason="lunch")
    assert rollout.state == "paused"
    assert payload(sg)[1]["rollouts"][STRATEGY]["share"] == 0.1  # a pause holds the share
    etags.add(payload(sg)[0])

    rollout = rollout_resume(rollout=rollout, actor=w.ops2)
    assert rollout.state == "running"
    etags.add(payload(sg)[0])

    rollout = rollout_advance(rollout=rollout, actor=w.ops)
    assert (rollout.step, rollout.share) == (1, 0.5)
    assert payload(sg)[1]["rollouts"][STRATEGY]["step"] == 1
    etags.add(payload(sg)[0])

    rollout = rollout_finish(rollout=rollout, actor=w.ops, reason="looks good")
    assert rollout.state == "completed" and rollout.ended_by == "ops"
    etag, body = payload(sg)
    etags.add(etag)
    assert body["rollouts"] == {} and body["strategies"][STRATEGY]["version"] == 3
    assert live_number(sg) == 3
    assert len(etags) == 5  # every change, a new ETag
    event = ReleaseEvent.objects.filter(action="publish").order_by("-id").first()
    assert event.to_version.number == 3 and rollout.key in event.reason
    actions = [e["action"] for e in rollout.log]
    assert actions == ["start", "pause", "resume", "step", "complete"]


@pytest.mark.parametrize("action", [rollout_pause, rollout_resume, rollout_advance, rollout_finish])
def test_action_on_a_stopped_rollout__409_rollout_finished_with_current(world, action):
    w, sg = world, world.envs["sg-test"]
    rollout = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)
    rollout_stop(rollout=rollout, actor=w.ops, reason="changed my mind")

    with pytest.raises(Conflict) as refused:
        action(rollout=rollout, actor=w.ops)

    assert refused.value.status == 409
    assert refused.value.code == "rollout_finished"
    assert refused.value.extra["current"]["state"] == "stopped"


def test_stop__control_served_alone_again_and_a_new_rollout_may_start(world):
    w, sg = world, world.envs["sg-test"]
    rollout = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)

    rollout_stop(rollout=rollout, actor=w.ops, reason="not today")

    assert payload(sg)[1]["rollouts"] == {}
    assert live_number(sg) == 2
    again = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)
    assert again.key != rollout.key


def test_stop__by_someone_with_rollback_only__allowed(world):
    w, sg = world, world.envs["sg-test"]
    RoleFactory(name="rollback-only", capabilities=["view_config", "rollback"])
    rollback_only = user_with_grants("rb", **{"rollback-only": w.agent})
    rollout = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)

    with pytest.raises(Forbidden):
        rollout_pause(rollout=rollout, actor=rollback_only)
    stopped = rollout_stop(rollout=rollout, actor=rollback_only, reason="it hurts")

    assert stopped.state == "stopped"


# --- guards -----------------------------------------------------------------------------------------
EVIDENCE = {
    "message": "12 of 640 requests worse on the same inputs (lower bound 1.1% > 0.5%)",
    "count": 12,
    "total": 640,
    "bound": 0.011,
    "request_ids": ["req-1", "req-2", "req-3", "req-4", "req-5"],
}


def test_guard_rollback__rolled_back_by_the_guard_evidence_everywhere(world):
    w, sg = world, world.envs["sg-test"]
    hook = Webhook.objects.create(
        environment=sg, url="http://127.0.0.1:9/", secret="s", events=["release.changed"]
    )
    rollout = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)
    etag = payload(sg)[0]

    ended = rollout_guard_rollback(rollout=rollout, guard="paired", evidence=EVIDENCE)

    assert (ended.state, ended.ended_by, ended.evidence) == (
        "rolled_back",
        "guard:paired",
        EVIDENCE,
    )
    assert payload(sg)[0] != etag and payload(sg)[1]["rollouts"] == {}
    audit = AuditRecord.objects.get(action="rollout.rollback")
    assert (audit.actor_type, audit.actor_label) == ("system", "guard:paired")
    assert audit.after["evidence"]["request_ids"] == EVIDENCE["request_ids"]
    bodies = [json.loads(bytes(d.body)) for d in WebhookDelivery.objects.filter(webhook=hook)]
    rolled = [b for b in bodies if b["action"] == "rollout_rollback"]
    assert rolled[0]["evidence"] == EVIDENCE
    assert rolled[0]["actor"] == {"type": "system", "name": "guard:paired", "token": None}


def test_guard_rollback__twice__the_second_is_a_conflict_not_a_double(world):
    w, sg = world, world.envs["sg-test"]
    rollout = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)
    seen = Rollout.objects.get(pk=rollout.pk)
    rollout_guard_rollback(rollout=rollout, guard="paired", evidence=EVIDENCE)

    with pytest.raises(Conflict):
        rollout_guard_rollback(rollout=seen, guard="paired", evidence=EVIDENCE)

    assert AuditRecord.objects.filter(action="rollout.rollback").count() == 1


def test_guard_rollback__environment_asks_approval__pauses_instead(world):
    w, sg = world, world.envs["sg-test"]
    sg.guard_rollbacks_need_approval = True
    sg.save()
    rollout = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)

    paused = rollout_guard_rollback(rollout=rollout, guard="paired", evidence=EVIDENCE)

    assert paused.state == "paused" and "approve guard rollbacks" in paused.log[-1]["reason"]
    assert paused.evidence == EVIDENCE


def test_guard_pause_and_extend__once_per_step(world):
    w, sg = world, world.envs["sg-test"]
    rollout = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)

    extended = rollout_step_extend(rollout=rollout)
    assert extended.step_extended and extended.bake_seconds == 240
    with pytest.raises(Conflict):
        rollout_step_extend(rollout=extended)

    paused = rollout_guard_pause(
        rollout=extended, guard="sample_ratio", evidence={"p": 1e-5}, reason="split not applied"
    )
    assert (paused.state, paused.end_reason) == ("paused", "split not applied")


def test_step_done__every_step_then_published_live_completed(world):
    w, sg = world, world.envs["sg-test"]
    rollout = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)

    for expected_step in (1, 2):
        rollout = rollout_step_done(rollout=baked(rollout))
        assert (rollout.state, rollout.step) == ("running", expected_step)
    rollout = rollout_step_done(rollout=baked(rollout))

    assert rollout.state == "completed"
    assert live_number(sg) == 3


@pytest.mark.parametrize(
    "redeployed, named",
    [
        (manifest_body(handlers=[], features=["shadow", "split"]), "general_policy_only"),
        (manifest_body(features=["shadow"]), "split"),
    ],
    ids=["lost_a_handler_v3_needs", "lost_split"],
)
def test_step_done__runtime_redeployed_unable_to_serve_it__paused_never_moved_on(
    world, redeployed, named
):
    w, sg = world, world.envs["sg-test"]
    rollout = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)
    manifest_record(environment=sg, body=redeployed)  # mid-rollout

    rollout = rollout_step_done(rollout=baked(rollout))

    assert (rollout.state, rollout.step) == ("paused", 0)
    assert named in rollout.end_reason and "Paused instead of moving on" in rollout.end_reason
    assert rollout.log[-1]["action"] == "pause" and rollout.log[-1]["actor"] == "system"
    assert AuditRecord.objects.filter(action="rollout.pause").count() == 1
    # … and a person cannot push it on either: refused, nothing goes live
    for move in (rollout_advance, rollout_finish):
        with pytest.raises(ValidationFailed) as refused:
            move(rollout=rollout, actor=w.ops)
        assert refused.value.code == "not_publishable" and named in refused.value.message
    assert (Rollout.objects.get(pk=rollout.pk).step, live_number(sg)) == (0, 2)


def test_step_done__judged_step_moved_on__conflict_never_a_double_step(world):
    w, sg = world, world.envs["sg-test"]
    rollout = baked(rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST))
    seen = Rollout.objects.get(pk=rollout.pk)
    rollout_step_done(rollout=rollout)

    with pytest.raises(Conflict) as refused:
        rollout_step_done(rollout=seen)

    assert refused.value.code == "rollout_moved"
    assert Rollout.objects.get(pk=rollout.pk).step == 1


def test_record_guards__page_state_without_audit_or_revision(world):
    w, sg = world, world.envs["sg-test"]
    rollout = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)
    etag = payload(sg)[0]
    guards = [{"name": "paired", "state": "ok", "message": "0 of 120 worse", "evidence": {}}]

    assert rollout_record_guards(rollout=rollout, guards=guards)

    rollout.refresh_from_db()
    assert rollout.guards == guards and rollout.revision == 1
    assert payload(sg)[0] == etag


# --- protected: the plan approved once ------------------------------------------------------------
def test_protected__plan_waits_for_approval_then_runs_and_completes_as_approved(world):
    w, prod = world, world.envs["prod"]

    rollout = rollout_start(version=w.strategy[3], environment=prod, actor=w.ops, plan=FAST)

    assert rollout.state == "awaiting_approval"
    assert payload(prod)[1]["rollouts"] == {}
    approval = ApprovalRequest.objects.get(rollout=rollout)
    assert (approval.kind, approval.content_hash) == ("rollout", w.strategy[3].content_hash)
    with pytest.raises(Forbidden):
        approval_approve(approval=approval, actor=w.ops)  # not one's own

    approval_approve(approval=approval, actor=w.ops2, note="plan ok")

    rollout.refresh_from_db()
    assert rollout.state == "running" and rollout.step_started_at is not None
    assert payload(prod)[1]["rollouts"][STRATEGY]["id"] == rollout.key
    assert live_number(prod) == 2
    rollout = rollout_finish(rollout=rollout, actor=w.ops)  # no second approval
    assert live_number(prod) == 3
    event = ReleaseEvent.objects.filter(release__environment=prod).order_by("-id").first()
    assert (event.action, event.approved_by) == ("approve", "ops2")


def test_protected__stop_while_waiting__request_void(world):
    w, prod = world, world.envs["prod"]
    rollout = rollout_start(version=w.strategy[3], environment=prod, actor=w.ops, plan=FAST)

    rollout_stop(rollout=rollout, actor=w.ops, reason="wrong plan")

    assert ApprovalRequest.objects.get(rollout=rollout).status == "void"


# --- a manual publish or rollback stops it -----------------------------------------------------------
def test_manual_publish__stops_the_active_rollout_audited(world):
    w, sg = world, world.envs["sg-test"]
    rollout = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)

    release_publish(version=w.strategy[1], environment=sg, actor=w.ops2, reason="hotfix")

    rollout.refresh_from_db()
    assert (rollout.state, rollout.ended_by) == ("stopped", "ops2")
    assert "v1 was published by hand" in rollout.end_reason
    assert AuditRecord.objects.filter(action="rollout.stop").count() == 1
    assert payload(sg)[1]["rollouts"] == {}


def test_manual_rollback__stops_the_active_rollout(world):
    w, sg = world, world.envs["sg-test"]
    publish(w.strategy[1], sg, actor=w.ops)
    publish(w.strategy[2], sg, actor=w.ops)
    rollout = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)

    release_rollback(
        release=Release.objects.get(document__key=STRATEGY, environment=sg),
        to_version=w.strategy[1],
        actor=w.admin,
        reason="bad day",
    )

    rollout.refresh_from_db()
    assert rollout.state == "stopped" and "rolled back to by hand" in rollout.end_reason


def test_shadow_of_the_same_strategy__not_sent_while_a_rollout_runs(world):
    w, sg = world, world.envs["sg-test"]
    shadow_start(version=w.strategy[1], environment=sg, actor=w.ops)
    assert STRATEGY in payload(sg)[1]["shadow"]

    rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)

    assert payload(sg)[1]["shadow"] == {}


def test_payload__runtime_dropped_split__rollout_not_sent(world):
    w, sg = world, world.envs["sg-test"]
    rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)
    manifest_record(environment=sg, body=manifest_body(features=["shadow"]))
    from strategies.delivery.config import payload_render

    body = json.loads(payload_render(agent=w.agent, environment=sg).body)

    assert body["rollouts"] == {} and body["strategies"][STRATEGY]["version"] == 2


# --- two operators at once ------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_two_operators_at_once__one_wins_the_other_sees_the_current_state():
    w = rollout_setup()
    sg = w.envs["sg-test"]
    rollout = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)
    barrier = threading.Barrier(2)
    results: dict[str, object] = {}

    def act(name, action, actor):
        try:
            barrier.wait()
            results[name] = action(rollout=Rollout.objects.get(pk=rollout.pk), actor=actor)
        except Exception as exc:  # noqa: BLE001 - the loser's error is the result
            results[name] = exc
        finally:
            connection.close()

    threads = [
        threading.Thread(target=act, args=("ops", rollout_pause, w.ops)),
        threading.Thread(target=act, args=("ops2", rollout_pause, w.ops2)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    errors = [r for r in results.values() if isinstance(r, Exception)]
    wins = [r for r in results.values() if isinstance(r, Rollout)]
    assert len(wins) == len(errors) == 1
    assert isinstance(errors[0], Conflict) and errors[0].code == "rollout_state"
    assert errors[0].extra["current"]["state"] == "paused"
    assert errors[0].extra["current"]["revision"] == wins[0].revision
    assert AuditRecord.objects.filter(action="rollout.pause").count() == 1


# --- the page of an ended rollout (issue 32 item 11) ----------------------------------------------
def _page(client, rollout) -> str:
    response = client.get(f"/rollouts/{rollout.key}/", follow=True)
    assert response.status_code == 200
    return response.content.decode()


def _ended_page(world, client, end) -> str:
    """The page, as ops sees it, of a rollout of v3 over live v2 ended at its first step by
    `end` (rollout_finish or rollout_stop)."""
    rollout = rollout_start(
        version=world.strategy[3], environment=world.envs["sg-test"], actor=world.ops, plan=FAST
    )
    end(rollout=rollout, actor=world.ops, reason="decided")
    client.force_login(world.ops)
    return _page(client, rollout)


def test_rollout_page__rolled_back_at_step_2__says_how_when_where_and_nothing_split(world, client):
    # Given a rollout of v3 over live v2, rolled back by a guard at its second step (50%)
    w, sg = world, world.envs["sg-test"]
    rollout = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)
    rollout = rollout_step_done(rollout=baked(rollout))
    rollout_guard_rollback(rollout=rollout, guard="paired", evidence=EVIDENCE)
    client.force_login(w.ops)
    # When ops opens its page
    page = _page(client, rollout)
    # Then it says it ended, how, at which step and share, and that nothing is split now —
    # no "Share on v3: 50%" as if it were current
    assert '<h2 id="rollout-now-title">Ended</h2>' in page
    assert "<strong>Rolled back</strong>" in page and "by <strong>guard:paired</strong>" in page
    assert "at step 2 of 3 (50% of tasks on v3)" in page
    assert "<strong>Nothing is split now.</strong> Everyone went back to v2 when it ended" in page
    assert "live in sg-test now: v2" in page
    assert 'id="rollout-share"' not in page and 'id="rollout-step"' not in page
    # the plan marks where it ended and what it never reached
    assert 'data-step-state="ended"' in page and 'data-step-state="skipped"' in page
    # the timeline numbers steps as the page does, in words
    assert "rolled back by a guard</strong> by guard:paired · step 2 of 3 (50%)" in page


def test_rollout_page__finished_by_hand_at_step_1__live_for_everyone_rest_skipped(world, client):
    page = _ended_page(world, client, rollout_finish)
    assert "<strong>Finished</strong>" in page
    assert "at step 1 of 3 (10% of tasks on v3; the remaining steps skipped)" in page
    assert "v3 went live for everyone when it finished; live in sg-test now: v3" in page


def test_rollout_page__stopped__says_stopped_and_the_version_everyone_got_again(world, client):
    page = _ended_page(world, client, rollout_stop)
    assert "<strong>Stopped</strong>" in page and "at step 1 of 3 (10% of tasks on v3)" in page
    assert "Everyone went back to v2 when it ended; live in sg-test now: v2" in page


def test_rollout_page__running__guards_in_words_statistics_one_disclosure_away(world, client):
    w, sg = world, world.envs["sg-test"]
    rollout = rollout_start(version=w.strategy[3], environment=sg, actor=w.ops, plan=FAST)
    rollout_record_guards(
        rollout=rollout,
        guards=[
            {
                "name": "paired",
                "label": "Same requests, both versions",
                "state": "insufficient",
                "message": "No request has run both versions yet.",
                "statistics": "95% lower bound 0%",
                "evidence": {},
            }
        ],
    )
    client.force_login(w.ops)
    page = _page(client, rollout)
    assert '<strong title="the paired guard">Same requests, both versions</strong>' in page
    assert "too little data yet" in page
    assert '<summary class="small muted">the figures</summary>' in page
    assert "new v3 · control v2" not in page
    assert "the new version v3, replacing v2" in page
