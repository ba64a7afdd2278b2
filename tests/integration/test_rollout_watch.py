"""The paired watch after a rollout completes (issue 23 item 4, docs/rollouts.md "The paired
watch"): the previous version as shadow on a share of the units for ROLLOUTS_WATCH_DAYS, sent
only to runtimes declaring `watch`; the paired guard's breach warns and never rolls back; a
one-click rollback from the warning is the ordinary rollback with the warning's evidence."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from console.kernel.errors import Conflict, Forbidden
from console.kernel.models import AuditRecord
from strategies.catalog.services import manifest_record
from strategies.delivery.models import ConfigPayload, Webhook, WebhookDelivery
from strategies.releases.models import ApprovalRequest, Release, Rollout
from strategies.releases.services import (
    release_publish,
    release_rollback,
    rollout_finish,
    rollout_start,
    rollout_watch_rollback,
    rollout_watch_warn,
    shadow_start,
)
from tests.factories import manifest_body, post_batch, runtime_token, task_in_arm, trace_payload
from tests.factories.releases import rollout_setup
from traces.rollouts import evaluator

STRATEGY = "after_sales_consultation"
PLAN = [{"share": 0.5, "bake_seconds": 60}, {"share": 1.0, "bake_seconds": 60}]


def payload(env):
    row = ConfigPayload.objects.get(environment=env)
    return json.loads(bytes(row.body))


def declare(env, features):
    manifest_record(
        environment=env,
        body=manifest_body(handlers=["general_policy_only"], features=features),
    )


def completed(w, env_key="sg-test"):
    """v3 rolled out over v2 in `env_key` and finished: in its watch."""
    env = w.envs[env_key]
    rollout = rollout_start(version=w.strategy[3], environment=env, actor=w.ops, plan=PLAN)
    return rollout_finish(rollout=rollout, actor=w.ops, reason="looks good")


def live_version(w, env):
    return Release.objects.get(document=w.strategy[3].document, environment=env).version.number


def watched_trace(rollout, request_id, *, status="ready"):
    """What the SDK reports for a sampled unit: served v3 (live), v2 as shadow, arm new."""
    return trace_payload(
        request_id,
        documents={STRATEGY: rollout.version.number},
        status=status,
        occurred_at=timezone.now().isoformat(),
        rollout={"id": rollout.key, "arm": "new", "step": rollout.watch_step},
        task=task_in_arm("watch", rollout_id=rollout.key, share=rollout.watch_share),
        shadow={
            "version": rollout.control_version.number,
            "status": "ready",
            "selected": ["task_state:T9", "P7-v2"],
        },
    )


@pytest.fixture
def w(db):
    setup = rollout_setup()
    declare(setup.envs["sg-test"], ["shadow", "split", "watch"])
    return setup


def test_complete__watch_declared__watch_runs_and_payload_sends_previous_version(w):
    rollout = completed(w)

    assert rollout.state == "completed" and rollout.watching
    assert rollout.watch_share == pytest.approx(0.1)
    assert timedelta(days=6, hours=23) < rollout.watch_until - timezone.now() <= timedelta(days=7)
    body = payload(w.envs["sg-test"])
    assert body["strategies"][STRATEGY]["version"] == 3
    assert body["rollouts"][STRATEGY] == {
        "id": rollout.key,
        "phase": "watch",
        "version": 2,
        "body": w.strategy[2].body,
        "share": 0.1,
        "unit": "task",
        "step": 2,
    }


def test_complete__runtime_without_watch__no_watch_entry_sent(w):
    declare(w.envs["sg-test"], ["shadow", "split"])
    rollout = completed(w)

    assert rollout.watching  # the console still watches; the runtime just gets no entry
    assert payload(w.envs["sg-test"])["rollouts"] == {}


def test_complete__environment_watch_share_zero__no_watch(w):
    w.envs["sg-test"].watch_share = 0
    w.envs["sg-test"].save()

    rollout = completed(w)

    assert rollout.state == "completed" and not rollout.watching
    assert rollout.watch_until is None
    assert payload(w.envs["sg-test"])["rollouts"] == {}


def test_manual_publish__during_watch__watch_ends_audited(w):
    rollout = completed(w)
    release = Release.objects.get(document=rollout.document, environment=rollout.environment)

    release_rollback(release=release, to_version=w.strategy[2], actor=w.admin, reason="by hand")

    rollout.refresh_from_db()
    assert not rollout.watching and rollout.watch_ended_at is not None
    audit = AuditRecord.objects.get(action="rollout.watch_end")
    assert audit.actor_label == "admin" and "rolled back to" in audit.after["reason"]
    assert payload(w.envs["sg-test"])["rollouts"] == {}


def test_publish_elsewhere__other_environment__watch_unaffected(w):
    rollout = completed(w)

    release_publish(version=w.strategy[1], environment=w.envs["bank-uat"], actor=w.ops)

    rollout.refresh_from_db()
    assert rollout.watching


def test_new_rollout__same_target_during_watch__watch_ends_new_rollout_sent(w):
    rollout = completed(w)

    second = rollout_start(
        version=w.strategy[1], environment=w.envs["sg-test"], actor=w.ops, plan=PLAN
    )

    rollout.refresh_from_db()
    assert not rollout.watching
    assert (
        AuditRecord.objects.get(action="rollout.watch_end")
        .after["reason"]
        .startswith(f"Watch ended: {second.key} rolls out v1")
    )
    entry = payload(w.envs["sg-test"])["rollouts"][STRATEGY]
    assert (entry["id"], entry.get("phase", "rollout")) == (second.key, "rollout")


def test_shadow_release__started_during_watch__keeps_its_place_no_watch_entry(w):
    rollout = completed(w)

    shadow_start(version=w.strategy[1], environment=w.envs["sg-test"], actor=w.ops)

    body = payload(w.envs["sg-test"])
    assert body["shadow"][STRATEGY]["version"] == 1
    assert body["rollouts"] == {}
    rollout.refresh_from_db()
    assert rollout.watching


def test_evaluator__paired_breach_in_watch__warns_never_rolls_back(w, client):
    rollout = completed(w)
    traces = [watched_trace(rollout, f"ok-{i}") for i in range(100)]
    traces += [watched_trace(rollout, f"worse-{i}", status="budget_exceeded") for i in range(12)]
    response = post_batch(client, runtime_token(w.envs["sg-test"]), traces)
    assert response.status_code == 200, response.content

    done = evaluator.rollouts_evaluate()

    assert done[rollout.key] == evaluator.WARNED
    rollout.refresh_from_db()
    assert rollout.state == "completed" and rollout.watching
    warning = rollout.watch_warning
    assert warning["guard"] == "paired" and warning["step"] == rollout.watch_step
    assert len(warning["request_ids"]) == 5
    assert set(warning["request_ids"]) <= {f"worse-{i}" for i in range(12)}
    assert live_version(w, w.envs["sg-test"]) == 3  # no rollback
    assert rollout.evidence == {}  # what ended the rollout (nothing: it completed) stays
    audit = AuditRecord.objects.get(action="rollout.watch_warn")
    assert audit.actor_label == "guard:paired"
    assert audit.after["watch"]["warning"]["request_ids"] == warning["request_ids"]
    # Judged again: only requests from the minute after the warning count, no second one.
    assert evaluator.rollouts_evaluate()[rollout.key] == evaluator.WATCHING
    assert AuditRecord.objects.filter(action="rollout.watch_warn").count() == 1


def test_evaluator__watch_time_up__watch_ends(w):
    rollout = completed(w)
    Rollout.objects.filter(pk=rollout.pk).update(watch_until=timezone.now() - timedelta(seconds=1))

    assert evaluator.rollouts_evaluate()[rollout.key] == evaluator.WATCH_ENDED

    rollout.refresh_from_db()
    assert not rollout.watching
    assert AuditRecord.objects.get(action="rollout.watch_end").actor_label == "system"
    assert payload(w.envs["sg-test"])["rollouts"] == {}


def test_watch_warn__webhook__release_changed_with_the_evidence(w):
    hook = Webhook.objects.create(
        environment=w.envs["sg-test"],
        url="http://127.0.0.1:9/",
        secret="s",
        events=["release.changed"],
    )
    rollout = completed(w)
    evidence = {"guard": "paired", "message": "worse", "request_ids": ["r1"]}

    rollout_watch_warn(rollout=rollout, guard="paired", evidence=evidence)

    bodies = [json.loads(bytes(d.body)) for d in WebhookDelivery.objects.filter(webhook=hook)]
    warn = next(b for b in bodies if b["action"] == "rollout_watch_warn")
    assert warn["evidence"]["request_ids"] == ["r1"]
    assert warn["actor"]["name"] == "guard:paired"
    assert (warn["from_version"], warn["to_version"]) == (2, 3)


def test_database__watch_on_a_running_rollout__refused(w):
    rollout = rollout_start(
        version=w.strategy[3], environment=w.envs["sg-test"], actor=w.ops, plan=PLAN
    )

    with pytest.raises(IntegrityError), transaction.atomic():
        Rollout.objects.filter(pk=rollout.pk).update(watch_until=timezone.now(), watch_share=0.1)


def warned(w):
    rollout = completed(w)
    warning = {"guard": "paired", "message": "worse in 12 of 112", "request_ids": ["worse-1"]}
    Rollout.objects.filter(pk=rollout.pk).update(watch_warning=warning)
    rollout.refresh_from_db()
    return rollout


def test_watch_rollback__operator_without_rollback__refused(w):
    rollout = warned(w)

    with pytest.raises(Forbidden):
        rollout_watch_rollback(rollout=rollout, actor=w.ops)  # publishes, may not roll back

    assert live_version(w, w.envs["sg-test"]) == 3


def test_watch_rollback__release_changed_since__conflict(w):
    rollout = warned(w)
    release_publish(version=w.strategy[1], environment=w.envs["sg-test"], actor=w.ops)
    Rollout.objects.filter(pk=rollout.pk).update(watch_ended_at=None)  # as if not yet ended

    with pytest.raises(Conflict) as refused:
        rollout_watch_rollback(rollout=rollout, actor=w.admin)

    assert refused.value.code == "release_changed"
    assert live_version(w, w.envs["sg-test"]) == 1


def test_watch_rollback__watch_ended__conflict(w):
    rollout = warned(w)
    Rollout.objects.filter(pk=rollout.pk).update(watch_ended_at=timezone.now())

    with pytest.raises(Conflict) as refused:
        rollout_watch_rollback(rollout=rollout, actor=w.admin)

    assert refused.value.code == "watch_ended"


def test_watch_rollback__no_warning__conflict(w):
    rollout = completed(w)

    with pytest.raises(Conflict) as refused:
        rollout_watch_rollback(rollout=rollout, actor=w.admin)

    assert refused.value.code == "watch_no_warning"


def test_watch_rollback__warned__previous_version_live_evidence_audited_watch_ended(w):
    rollout = warned(w)

    outcome = rollout_watch_rollback(rollout=rollout, actor=w.admin)

    assert outcome.release.version.number == 2
    audit = AuditRecord.objects.get(action="release.rollback")
    assert audit.after["evidence"] == rollout.watch_warning
    assert rollout.key in audit.after["reason"]
    rollout.refresh_from_db()
    assert not rollout.watching
    assert payload(w.envs["sg-test"])["strategies"][STRATEGY]["version"] == 2


def test_watch_rollback__revert_policy_asks_approval__request_not_rollback(w):
    env = w.envs["sg-test"]
    env.rollback_needs_approval = True
    env.save()
    rollout = warned(w)

    outcome = rollout_watch_rollback(rollout=rollout, actor=w.admin)

    assert outcome.release is None
    assert outcome.approval.kind == ApprovalRequest.Kind.ROLLBACK
    assert live_version(w, env) == 3
    rollout.refresh_from_db()
    assert rollout.watching  # the watch runs on until the rollback is approved


# --- the operator API ---------------------------------------------------------------------------
API = "/api/v1/agents/assistant_professional/rollouts"


def api_post(client, user, url, data=None):
    client.force_login(user)
    return client.post(url, data=json.dumps(data or {}), content_type="application/json")


def test_api_detail__in_watch__shows_watch_fields(w, client):
    rollout = warned(w)
    client.force_login(w.ops)

    body = client.get(f"{API}/{rollout.key}/").json()

    assert body["watch"]["active"] is True
    assert body["watch"]["share"] == pytest.approx(0.1)
    assert body["watch"]["step"] == 2
    assert body["watch"]["warning"]["guard"] == "paired"


def test_api_watch_rollback__operator_403__admin_200__again_409(w, client):
    rollout = warned(w)
    url = f"{API}/{rollout.key}/watch-rollback/"

    refused = api_post(client, w.ops, url)
    assert refused.status_code == 403, refused.content
    assert live_version(w, w.envs["sg-test"]) == 3

    done = api_post(client, w.admin, url)
    assert done.status_code == 200, done.content
    assert done.json()["release"]["version"] == 2

    again = api_post(client, w.admin, url)
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "watch_ended"
    assert again.json()["error"]["current"]["watch"]["active"] is False


def test_api_schema__watch_rollback_documented_with_errors(w, client):
    client.force_login(w.ops)
    paths = client.get("/api/schema/?format=json").json()["paths"]

    operation = paths["/api/v1/agents/{agent}/rollouts/ro-{id}/watch-rollback/"]["post"]

    assert {"200", "202", "403", "404", "409"} <= set(operation["responses"])


# --- the pages ----------------------------------------------------------------------------------
def test_pages__warning_on_release_row_dashboard_and_rollout_page(w, client):
    rollout = warned(w)
    client.force_login(w.admin)

    for url in ("/", "/releases/?agent=assistant_professional", f"/rollouts/{rollout.key}/"):
        page = client.get(url, follow=True).content.decode()
        assert f'data-watch-rollback="{rollout.key}"' in page, url
        assert "Roll back to v2" in page and "worse in 12 of 112" in page, url


def test_page_watch_rollback__watch_over__409_page_says_why__nothing_moved(w, client):
    rollout = warned(w)
    Rollout.objects.filter(pk=rollout.pk).update(watch_ended_at=timezone.now())
    client.force_login(w.admin)

    response = client.post(
        f"/releases/assistant_professional/rollouts/ro-{rollout.pk}/watch-rollback/",
        {"next": "/"},
    )

    assert response.status_code == 409
    assert "paired watch of" in response.content.decode()
    assert live_version(w, w.envs["sg-test"]) == 3


def test_page_watch_rollback__admin_one_click__back_where_it_came_from_v2_live(w, client):
    rollout = warned(w)
    client.force_login(w.admin)

    response = client.post(
        f"/releases/assistant_professional/rollouts/ro-{rollout.pk}/watch-rollback/",
        {"next": "https://elsewhere.example/"},
    )

    assert response.status_code == 302
    assert response["Location"] == f"/releases/assistant_professional/rollouts/ro-{rollout.pk}/"
    assert live_version(w, w.envs["sg-test"]) == 2
