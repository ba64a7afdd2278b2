"""Publish, approvals and rollback: the rules a release manager relies on."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from console.kernel.errors import Conflict, Forbidden, ValidationFailed
from console.kernel.models import AuditRecord
from strategies.documents.models import Version
from strategies.releases.models import Release, ReleaseEvent
from strategies.releases.services import (
    approval_approve,
    approval_reject,
    release_publish,
    release_rollback,
)
from tests.factories import profile_body, release_setup


@pytest.fixture
def world(db):
    return release_setup()


def live(w, env_key, document="after_sales_consultation"):
    release = Release.objects.filter(document__key=document, environment__key=env_key).first()
    return release.version.number if release else None


def test_publish__unprotected_env__live_with_event_and_audit(world):
    outcome = release_publish(
        version=world.strategy[2], environment=world.envs["sg-test"], actor=world.ops, reason="try"
    )

    assert outcome.release.revision == 1 and live(world, "sg-test") == 2
    event = ReleaseEvent.objects.get(release=outcome.release)
    assert (event.action, event.actor, event.reason, event.from_version) == (
        "publish",
        "ops",
        "try",
        None,
    )
    assert AuditRecord.objects.filter(action="release.publish", actor_label="ops").exists()


def test_publish__recorded_history_at_past_times__events_in_time_order_out_of_order_refused(world):
    """Given a recorded history (the demo's), when it is published with its times, then the
    events carry them; a time before the release's last event, or in the future, is refused
    (the events are append-only: a wrong time could never be corrected)."""
    sg, prod = world.envs["sg-test"], world.envs["prod"]
    now = timezone.now()
    v2_at, v3_at = now - timedelta(days=3), now - timedelta(hours=5)
    release_publish(version=world.strategy[2], environment=sg, actor=world.ops, at=v2_at)
    release_publish(version=world.strategy[3], environment=sg, actor=world.ops, at=v3_at)
    assert list(
        ReleaseEvent.objects.filter(release__environment=sg)
        .order_by("id")
        .values_list("to_version__number", "occurred_at")
    ) == [(2, v2_at), (3, v3_at)]

    for at in (v3_at - timedelta(minutes=1), now + timedelta(hours=1)):
        with pytest.raises(ValidationFailed) as refused:
            release_publish(version=world.strategy[2], environment=sg, actor=world.ops, at=at)
        assert refused.value.code == "history_out_of_order"
    assert live(world, "sg-test") == 3

    # A protected environment: asked, then approved two hours later, both at their times.
    asked = release_publish(
        version=world.strategy[2], environment=prod, actor=world.ops, at=v2_at
    ).approval
    assert asked.requested_at == v2_at
    with pytest.raises(ValidationFailed):
        approval_approve(approval=asked, actor=world.ops2, at=v2_at - timedelta(hours=1))
    approval_approve(approval=asked, actor=world.ops2, at=v2_at + timedelta(hours=2))
    event = ReleaseEvent.objects.get(release__environment=prod)
    assert (event.action, event.occurred_at) == ("approve", v2_at + timedelta(hours=2))
    # "Live since" on the release rows: the time it went live, first publish or not.
    assert event.release.updated_at == event.occurred_at
    assert Release.objects.get(environment=sg).updated_at == v3_at


def test_publish__v3_to_bank_uat_without_handler__refused_with_reason(world):
    with pytest.raises(ValidationFailed) as refused:
        release_publish(
            version=world.strategy[3], environment=world.envs["bank-uat"], actor=world.ops
        )

    assert "general_policy_only" in refused.value.message
    assert any(d["path"].startswith("on_missing") for d in refused.value.details)
    assert live(world, "bank-uat") is None
    assert not ReleaseEvent.objects.exists()


def test_publish__draft__frozen_first_then_live(world):
    from strategies.documents.services import draft_create

    body = dict(world.strategy[3].body, max_extra_reads=3)
    draft = draft_create(document=world.strategy[3].document, body=body, actor=world.ops)

    release_publish(version=draft, environment=world.envs["sg-test"], actor=world.ops)

    assert Version.objects.get(pk=draft.pk).state == Version.State.FROZEN
    assert live(world, "sg-test") == 4


def test_publish__sensitive_section_without_capability__forbidden(world):
    from strategies.documents.services import draft_create

    # Drafted by someone allowed to switch it on; publishing still checks the publisher.
    draft = draft_create(
        document=world.profile[1].document,
        body=profile_body(personal_particulars=True),
        actor=world.admin,
    )

    with pytest.raises(Forbidden) as refused:
        release_publish(version=draft, environment=world.envs["sg-test"], actor=world.ops)
    assert "personal_particulars" in refused.value.message

    release_publish(version=draft, environment=world.envs["sg-test"], actor=world.admin)
    assert live(world, "sg-test", "profile") == 2


def test_publish__protected_env__waits_for_approval_by_someone_else(world):
    prod = world.envs["prod"]
    outcome = release_publish(
        version=world.strategy[2], environment=prod, actor=world.ops, reason="go"
    )

    assert outcome.release is None and live(world, "prod") is None
    approval = outcome.approval
    assert approval.status == "pending" and approval.content_hash == world.strategy[2].content_hash

    with pytest.raises(Forbidden):  # no self-approval, even with the capability
        approval_approve(approval=approval, actor=world.ops)
    release = approval_approve(approval=approval, actor=world.ops2, note="ok")

    assert live(world, "prod") == 2
    event = ReleaseEvent.objects.get(release=release)
    assert (event.action, event.actor, event.approved_by, event.reason) == (
        "approve",
        "ops",
        "ops2",
        "go",
    )
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.decided_by == world.ops2


def test_approval__without_approve_capability__forbidden(world, make_user):
    outcome = release_publish(
        version=world.strategy[2], environment=world.envs["prod"], actor=world.ops
    )
    other_operator = make_user("ops3", operator="assistant_professional")

    with pytest.raises(Forbidden):
        approval_approve(approval=outcome.approval, actor=other_operator)


def test_approval__second_request_while_pending__409(world):
    release_publish(version=world.strategy[2], environment=world.envs["prod"], actor=world.ops)

    with pytest.raises(Conflict) as conflict:
        release_publish(version=world.strategy[1], environment=world.envs["prod"], actor=world.ops2)
    assert conflict.value.code == "approval_pending"


def test_approval__reject__needs_reason_and_nothing_goes_live(world):
    approval = release_publish(
        version=world.strategy[2], environment=world.envs["prod"], actor=world.ops
    ).approval

    with pytest.raises(ValidationFailed):
        approval_reject(approval=approval, actor=world.ops2, note=" ")
    approval_reject(approval=approval, actor=world.ops2, note="not before the audit")

    approval.refresh_from_db()
    assert approval.status == "rejected" and live(world, "prod") is None
    with pytest.raises(Conflict):
        approval_approve(approval=approval, actor=world.admin)


def test_rollback__to_earlier_live_version__immediate_even_in_prod(world):
    prod = world.envs["prod"]
    for n in (1, 2):
        approval = release_publish(
            version=world.strategy[n], environment=prod, actor=world.ops
        ).approval
        approval_approve(approval=approval, actor=world.ops2)
    pending = release_publish(version=world.strategy[3], environment=prod, actor=world.ops).approval
    release = Release.objects.get(environment=prod, document=world.strategy[1].document)

    release_rollback(
        release=release, to_version=world.strategy[1], actor=world.admin, reason="v2 regressed"
    )

    assert live(world, "prod") == 1
    event = ReleaseEvent.objects.get(release=release, revision=3)
    assert (event.action, event.from_version.number, event.to_version.number, event.reason) == (
        "rollback",
        2,
        1,
        "v2 regressed",
    )
    pending.refresh_from_db()
    assert pending.status == "void"  # reviewed against v2, which is no longer live
    with pytest.raises(Conflict):  # a stale request can no longer be applied
        approval_approve(approval=pending, actor=world.ops2)
    assert live(world, "prod") == 1
    assert AuditRecord.objects.filter(action="release.rollback", actor_label="admin").exists()


def test_rollback__version_never_live_there__refused(world):
    sg = world.envs["sg-test"]
    release = release_publish(version=world.strategy[1], environment=sg, actor=world.ops).release
    release_publish(version=world.strategy[2], environment=sg, actor=world.ops)

    with pytest.raises(ValidationFailed):
        release_rollback(
            release=release, to_version=world.strategy[3], actor=world.admin, reason="x"
        )
    with pytest.raises(ValidationFailed):
        release_rollback(
            release=release, to_version=world.strategy[1], actor=world.admin, reason=""
        )
    with pytest.raises(Forbidden):
        release_rollback(release=release, to_version=world.strategy[1], actor=world.ops, reason="x")
    assert live(world, "sg-test") == 2


def test_publish__stale_expected_revision__409_with_current(world):
    sg = world.envs["sg-test"]
    release_publish(version=world.strategy[1], environment=sg, actor=world.ops)

    with pytest.raises(Conflict) as conflict:
        release_publish(
            version=world.strategy[2], environment=sg, actor=world.ops, expected_revision=0
        )

    assert conflict.value.extra["current"]["version"] == 1
