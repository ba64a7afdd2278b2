"""External change approvals (issue 34 item 1, docs/change-approvals.md) against a local change
system (tests/change_system.py, real HTTP on loopback): a publish to an environment that
requires a change record waits until the change system approves — by its signed callback or
by the console's poll — then goes live; rejected, expired, forged or mismatched answers never
put anything live; a change system that is down leaves the record waiting, visibly."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from console.kernel.models import AuditRecord
from strategies.releases.models import ApprovalRequest, ChangeRecord, Release, ReleaseEvent
from strategies.releases.selectors import history_events
from strategies.releases.services import approval_approve, release_publish, release_rollback
from strategies.releases.services.changes import (
    change_record_send_try,
    change_records_expire,
    change_records_poll,
    change_system_configure,
)
from tests.change_system import ChangeSystem, free_port_url
from tests.factories import release_setup

CALLBACK = "/api/v1/change-records/{}/callback"


@pytest.fixture
def world(db, settings):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True  # the change system is on 127.0.0.1
    return release_setup()


@pytest.fixture
def system():
    started = ChangeSystem()
    yield started
    started.close()


def require_records(world, system, env_key="sg-test", *, url=None, status=True, hours=72):
    env = world.envs[env_key]
    _, secret = change_system_configure(
        environment=env,
        actor=world.admin,
        url=url or system.url,
        requires_change_record=True,
        status_url_template=system.status_url_template if status else "",
        validity_hours=hours,
    )
    system.secret = secret
    return env


def live_number(world, env) -> int | None:
    release = Release.objects.filter(document=world.strategy[2].document, environment=env).first()
    return release.version.number if release else None


def ask(world, env, number=2, actor=None):
    """Publish, and send its change request as the worker would (one try, this process)."""
    outcome = release_publish(
        version=world.strategy[number], environment=env, actor=actor or world.ops, reason="r"
    )
    record = outcome.change_record
    assert record is not None
    assert change_record_send_try(record_id=record.pk) == "delivered"
    record.refresh_from_db()
    return outcome, record


def answer(client, system, record, **fields):
    fields.setdefault("content_hash", record.content_hash)
    fields.setdefault("change_number", "CHG0042")
    body, headers = system.callback(**fields)
    return client.post(
        CALLBACK.format(record.pk), data=body, content_type="application/json", headers=headers
    )


def audit_actions(prefix="change_record."):
    return list(
        AuditRecord.objects.filter(action__startswith=prefix)
        .order_by("id")
        .values_list("action", flat=True)
    )


def test_publish__change_record_required__waits_then_live_on_signed_callback(world, system, client):
    # Given sg-test requires a change record from the local change system
    env = require_records(world, system)
    # When ops publishes v2
    outcome, record = ask(world, env)
    # Then nothing is live, the record waits, and the system got a signed request with the diff
    assert outcome.release is None and live_number(world, env) is None
    assert record.state == ChangeRecord.State.WAITING and record.delivered_at is not None
    sent = system.requests[0]
    assert sent["verified"], "the console's request must verify with the shared secret"
    assert sent["data"]["content_hash"] == world.strategy[2].content_hash
    assert sent["data"]["requester"] == "ops" and sent["data"]["path"] == "publish"
    assert sent["data"]["diff"]["to_version"] == 2
    assert sent["data"]["callback_url"].endswith(CALLBACK.format(record.pk))
    # When the change system approves by its signed callback
    response = answer(client, system, record, status="approved", change_number="CHG0042")
    # Then the go-live happens, and the history names the change number
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "approved"
    assert live_number(world, env) == 2
    record.refresh_from_db()
    assert record.release_event is not None and record.change_number == "CHG0042"
    event = history_events(agent=world.agent, environment_key="sg-test").first()
    assert event.change_records.get().change_number == "CHG0042"
    assert audit_actions() == [
        "change_record.request",
        "change_record.approve",
        "change_record.use",
    ]


def test_callback__rejected__never_live(world, system, client):
    env = require_records(world, system)
    _, record = ask(world, env)
    response = answer(client, system, record, status="rejected", comment="Change freeze")
    assert response.status_code == 200
    record.refresh_from_db()
    assert record.state == ChangeRecord.State.REJECTED and record.comment == "Change freeze"
    assert live_number(world, env) is None
    # Publishing again asks again (a new request), still nothing live
    again = release_publish(version=world.strategy[2], environment=env, actor=world.ops)
    assert again.release is None and again.change_record.pk != record.pk


def test_approval__expired_window__never_live(world, system, client):
    env = require_records(world, system)
    _, record = ask(world, env)
    # The answer came after the record's window: refused, nothing changed
    ChangeRecord.objects.filter(pk=record.pk).update(valid_until=timezone.now() - timedelta(1))
    late = answer(client, system, record, status="approved")
    assert late.status_code == 409 and late.json()["error"]["code"] == "window_expired"
    record.refresh_from_db()
    assert record.state == ChangeRecord.State.WAITING and live_number(world, env) is None
    # The beat expires it; an approval that expired does not let a publish through either
    assert change_records_expire() == 1
    record.refresh_from_db()
    assert record.state == ChangeRecord.State.EXPIRED
    outcome = release_publish(version=world.strategy[2], environment=env, actor=world.ops)
    assert outcome.release is None and outcome.change_record.state == ChangeRecord.State.WAITING


@pytest.mark.parametrize(
    "forge",
    [
        {"secret": "whsec_someone_else"},
        {"timestamp": 1_000_000_000},  # replayed long after
    ],
    ids=["wrong_secret", "stale_timestamp"],
)
def test_callback__forged__401_nothing_changed(world, system, client, forge):
    env = require_records(world, system)
    _, record = ask(world, env)
    response = answer(client, system, record, status="approved", **forge)
    assert response.status_code == 401
    assert response.json()["error"]["code"] in ("bad_signature", "stale_timestamp")
    record.refresh_from_db()
    assert record.state == ChangeRecord.State.WAITING and live_number(world, env) is None
    assert "change_record.refuse" in audit_actions()


def test_callback__unsigned__401(world, system, client):
    env = require_records(world, system)
    _, record = ask(world, env)
    response = client.post(
        CALLBACK.format(record.pk),
        data=json.dumps({"status": "approved"}),
        content_type="application/json",
    )
    assert response.status_code == 401 and response.json()["error"]["code"] == "signature_missing"


def test_callback__other_content_hash__409_nothing_changed(world, system, client):
    env = require_records(world, system)
    _, record = ask(world, env)
    other = world.strategy[3].content_hash
    response = answer(client, system, record, status="approved", content_hash=other)
    assert (
        response.status_code == 409 and response.json()["error"]["code"] == "content_hash_mismatch"
    )
    record.refresh_from_db()
    assert record.state == ChangeRecord.State.WAITING and live_number(world, env) is None


def test_callback__decided_already_or_unknown__refused(world, system, client):
    env = require_records(world, system)
    _, record = ask(world, env)
    assert answer(client, system, record, status="rejected").status_code == 200
    again = answer(client, system, record, status="approved")
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_decided"
    assert live_number(world, env) is None
    body, headers = system.callback(status="approved", change_number="C", content_hash="x")
    unknown = client.post(
        CALLBACK.format(999999), data=body, content_type="application/json", headers=headers
    )
    assert unknown.status_code == 404


def test_poll__approved_by_status_url__live(world, system):
    env = require_records(world, system)
    _, record = ask(world, env)
    # The system has not decided: a poll leaves it waiting
    assert change_records_poll() == 0
    assert system.polls and system.polls[0]["verified"], "the poll must be signed"
    system.decide(
        record.public_id,
        status="approved",
        change_number="CHG7",
        content_hash=record.content_hash,
    )
    assert change_records_poll() == 1
    record.refresh_from_db()
    assert record.state == ChangeRecord.State.APPROVED and record.decided_by == "poll"
    assert live_number(world, env) == 2


def test_poll__other_content_hash__refused_nothing_changed(world, system):
    env = require_records(world, system)
    _, record = ask(world, env)
    system.decide(record.public_id, status="approved", change_number="C", content_hash="f" * 64)
    assert change_records_poll() == 0
    record.refresh_from_db()
    assert record.state == ChangeRecord.State.WAITING and live_number(world, env) is None


@pytest.mark.parametrize(
    "forge", [{"signed": False}, {"secret": "whsec_someone_else"}], ids=["unsigned", "wrong_secret"]
)
def test_poll__approval_not_signed_by_the_system__refused_audited_waiting(world, system, forge):
    """Whoever answers at the status URL (a hijacked name, a proxy, an on-premise URL over
    plain HTTP) cannot approve: a poll's decision is signed like a callback."""
    env = require_records(world, system)
    _, record = ask(world, env)
    system.decide(
        record.public_id,
        status="approved",
        change_number="CHG7",
        content_hash=record.content_hash,
        **forge,
    )
    assert change_records_poll() == 0
    record.refresh_from_db()
    assert record.state == ChangeRecord.State.WAITING and live_number(world, env) is None
    refusal = AuditRecord.objects.filter(action="change_record.refuse").latest("id")
    assert refusal.after["via"] == "poll"
    assert refusal.after["code"] == (
        "signature_missing" if forge == {"signed": False} else "bad_signature"
    )
    # The system signs its next answer: the same record goes live.
    system.decide(
        record.public_id, status="approved", change_number="CHG7", content_hash=record.content_hash
    )
    assert change_records_poll() == 1
    assert live_number(world, env) == 2


def test_change_system_down__waits_visibly_never_approved(world, system, settings):
    settings.CHANGE_RECORD_MAX_TRIES = 3
    env = require_records(world, system, url=free_port_url())
    outcome = release_publish(version=world.strategy[2], environment=env, actor=world.ops)
    record = outcome.change_record
    assert change_record_send_try(record_id=record.pk) == "retry"
    record.refresh_from_db()
    assert record.state == ChangeRecord.State.WAITING and record.delivered_at is None
    assert record.tries == 1 and "ConnectionRefused" in record.last_error
    from strategies.releases.services.change_records import change_record_words

    assert "not delivered yet (1 tries" in change_record_words(record)
    assert change_record_send_try(record_id=record.pk) == "retry"
    assert change_record_send_try(record_id=record.pk) == "failed"
    record.refresh_from_db()
    assert record.state == ChangeRecord.State.FAILED
    assert live_number(world, env) is None
    assert "change_record.delivery_fail" in audit_actions()


def test_rollback__needs_no_change_record(world, system, client):
    env = require_records(world, system)
    for number in (1, 2):
        _, record = ask(world, env, number=number)
        assert answer(client, system, record, status="approved").status_code == 200
    assert live_number(world, env) == 2
    requests = len(system.requests)
    release = Release.objects.get(document=world.strategy[2].document, environment=env)
    # v1's record expired: a rollback to it is an emergency move, no change board asked
    ChangeRecord.objects.all().update(state=ChangeRecord.State.EXPIRED)
    release_rollback(
        release=release,
        to_version=world.strategy[1],
        actor=world.admin,
        reason="v2 breaks the checkout flow",
    )
    assert live_number(world, env) == 1
    assert len(system.requests) == requests


def test_protected__four_eyes_and_change_record__both_required_approver_first(
    world, system, client
):
    prod = require_records(world, system, "prod")
    outcome, record = ask(world, prod)
    assert outcome.approval is not None and record.approval_id == outcome.approval.pk
    # The second person approves first: the decision stands, nothing live yet
    approval_approve(approval=outcome.approval, actor=world.ops2)
    outcome.approval.refresh_from_db()
    assert outcome.approval.status == ApprovalRequest.Status.APPROVED
    assert live_number(world, prod) is None
    # Then the change system approves: now it goes live, as the approved publish
    assert answer(client, system, record, status="approved").status_code == 200
    assert live_number(world, prod) == 2
    event = ReleaseEvent.objects.filter(release__environment=prod).get()
    assert event.action == "approve" and event.approved_by == "ops2"
    assert event.change_records.get().change_number == "CHG0042"


def test_protected__change_record_first__waits_for_second_person(world, system, client):
    prod = require_records(world, system, "prod")
    outcome, record = ask(world, prod)
    assert answer(client, system, record, status="approved").status_code == 200
    # The change system alone does not put it live: four-eyes still applies
    assert live_number(world, prod) is None
    approval_approve(approval=outcome.approval, actor=world.ops2)
    assert live_number(world, prod) == 2


def test_change_system__internal_url_refused_without_setting(world, settings):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False
    from console.kernel.errors import ValidationFailed

    with pytest.raises(ValidationFailed) as refused:
        change_system_configure(
            environment=world.envs["sg-test"],
            actor=world.admin,
            url="http://127.0.0.1:9/changes",
            requires_change_record=True,
        )
    assert refused.value.details[0]["code"] == "internal_address"


def test_rollout_start__waits_for_its_record__starts_once_approved(db, settings, system, client):
    from strategies.releases.models import Rollout
    from strategies.releases.services.changes import rollout_start_or_ask
    from tests.factories.releases import rollout_setup

    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    w = rollout_setup()
    env = require_records(w, system)
    # v3 rolls out in sg-test: the start waits for the change system, nothing runs yet
    waiting = rollout_start_or_ask(
        version=w.strategy[3], environment=env, actor=w.ops, reason="staged v3"
    )
    assert isinstance(waiting, ChangeRecord) and waiting.path == "rollout_start"
    assert not Rollout.objects.filter(environment=env).exists()
    change_record_send_try(record_id=waiting.pk)
    # Approved: the rollout starts by itself, asked again (as ops, with the saved plan)
    assert answer(client, system, waiting, status="approved").status_code == 200
    rollout = Rollout.objects.get(environment=env)
    assert rollout.state == Rollout.State.RUNNING and rollout.version == w.strategy[3]


def test_promotion__to_an_environment_requiring_records__requested_not_live(world, system):
    from strategies.releases.services import release_promote

    release_publish(version=world.strategy[2], environment=world.envs["sg-test"], actor=world.ops)
    uat = require_records(world, system, "bank-uat")
    outcome = release_promote(
        agent=world.agent,
        source=world.envs["sg-test"],
        target=uat,
        documents=[world.strategy[1].document],
        actor=world.admin,
        reason="promote the escalation wording",
    )
    item = outcome.items[0]
    assert item.outcome == "requested" and item.change_record.path == "promotion"
    assert live_number(world, uat) is None


def test_change_system_api__secret_once__bad_input_400_nothing_saved(world, system, client):
    from strategies.releases.models import ChangeSystem

    client.force_login(world.admin)
    url = "/api/v1/environments/sg-test/change-system/"
    bad = client.put(
        url,
        data=json.dumps({"requires_change_record": True, "url": "ftp://x", "validity_hours": 0}),
        content_type="application/json",
    )
    assert bad.status_code == 400 and bad.json()["error"]["details"][0]["path"] == "url"
    assert not ChangeSystem.objects.exists() and "change_system.update" not in audit_actions("")
    saved = client.put(
        url,
        data=json.dumps({"requires_change_record": True, "url": system.url}),
        content_type="application/json",
    )
    assert saved.status_code == 200 and saved.json()["secret"].startswith("whsec_")
    shown = client.get(url)
    assert shown.status_code == 200 and "secret" not in shown.json()
    assert shown.json()["requires_change_record"] is True
    # Another person without manage_catalog on all agents may not read or set it
    client.force_login(world.ops)
    assert client.get(url).status_code == 403
