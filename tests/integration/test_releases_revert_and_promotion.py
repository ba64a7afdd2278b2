"""The revert policy (a rollback that needs a second person) and promotion between
environments, through the services the pages and the API call."""

from __future__ import annotations

import pytest

from console.kernel.errors import Conflict, Forbidden, ValidationFailed
from console.kernel.models import AuditRecord
from strategies.releases.models import ApprovalRequest, Release, ReleaseEvent
from strategies.releases.services import (
    approval_approve,
    approval_withdraw,
    release_promote,
    release_publish,
    release_rollback,
)
from tests.factories import bank_uat_ahead_of_prod, publish, release_setup


@pytest.fixture
def world(db):
    return release_setup()


def live(env, document):
    release = Release.objects.filter(document=document, environment=env).first()
    return release.version.number if release else None


def two_releases_in_sg(w):
    """after_sales_consultation: v1 then v2 live in sg-test (v1 is a rollback target)."""
    sg = w.envs["sg-test"]
    release_publish(version=w.strategy[1], environment=sg, actor=w.ops)
    release_publish(version=w.strategy[2], environment=sg, actor=w.ops)
    return Release.objects.get(environment=sg, document=w.strategy[1].document)


def revert_policy_on(environment):
    environment.rollback_needs_approval = True
    environment.save()


# --- the revert policy ---------------------------------------------------------------------------
def test_rollback__policy_off__immediate_as_before(world):
    release = two_releases_in_sg(world)

    outcome = release_rollback(
        release=release, to_version=world.strategy[1], actor=world.admin, reason="v2 regressed"
    )

    assert outcome.approval is None and outcome.release.version == world.strategy[1]
    assert not ApprovalRequest.objects.exists()


def test_rollback__policy_on__request_bound_to_target_and_revision_nothing_moves(world):
    release = two_releases_in_sg(world)
    revert_policy_on(world.envs["sg-test"])

    outcome = release_rollback(
        release=release, to_version=world.strategy[1], actor=world.admin, reason="v2 regressed"
    )

    approval = outcome.approval
    assert outcome.release is None
    assert (approval.kind, approval.status, approval.version) == (
        "rollback",
        "pending",
        world.strategy[1],
    )
    assert approval.content_hash == world.strategy[1].content_hash
    assert approval.base_revision == release.revision == 2
    assert live(world.envs["sg-test"], release.document) == 2  # nothing moved yet
    assert AuditRecord.objects.get(action="approval.request").after["kind"] == "rollback"


def test_rollback_request__second_person_approves__rolled_back_with_approver(world):
    release = two_releases_in_sg(world)
    revert_policy_on(world.envs["sg-test"])
    approval = release_rollback(
        release=release, to_version=world.strategy[1], actor=world.admin, reason="v2 regressed"
    ).approval

    with pytest.raises(Forbidden) as own:
        approval_approve(approval=approval, actor=world.admin)
    assert own.value.code == "self_approval"
    approval_approve(approval=approval, actor=world.ops2, note="agreed")

    assert live(world.envs["sg-test"], release.document) == 1
    event = ReleaseEvent.objects.get(release=release, revision=3)
    assert (event.action, event.actor, event.approved_by, event.reason) == (
        "rollback",
        "admin",
        "ops2",
        "v2 regressed",
    )
    assert ApprovalRequest.objects.get().status == "approved"


def test_rollback_request__one_pending_per_target_and_withdrawn_by_requester(world):
    release = two_releases_in_sg(world)
    revert_policy_on(world.envs["sg-test"])
    first = release_rollback(
        release=release, to_version=world.strategy[1], actor=world.admin, reason="first"
    ).approval

    with pytest.raises(Conflict) as blocked:
        release_rollback(
            release=release, to_version=world.strategy[1], actor=world.admin, reason="again"
        )
    assert blocked.value.code == "approval_pending"
    with pytest.raises(Forbidden):
        approval_withdraw(approval=first, actor=world.ops2, reason="not mine")
    approval_withdraw(approval=first, actor=world.admin, reason="fixed forward instead")

    assert ApprovalRequest.objects.get().status == "withdrawn"
    assert live(world.envs["sg-test"], release.document) == 2


def test_rollback_request__needs_rollback_permission_to_ask(world):
    release = two_releases_in_sg(world)
    revert_policy_on(world.envs["sg-test"])

    with pytest.raises(Forbidden):
        release_rollback(
            release=release, to_version=world.strategy[1], actor=world.ops, reason="please"
        )

    assert not ApprovalRequest.objects.exists()


def test_rollback_request__release_moved_meanwhile__void_and_approve_refused(world):
    release = two_releases_in_sg(world)
    revert_policy_on(world.envs["sg-test"])
    approval = release_rollback(
        release=release, to_version=world.strategy[1], actor=world.admin, reason="v2 bad"
    ).approval
    release_publish(version=world.strategy[3], environment=world.envs["sg-test"], actor=world.ops)

    approval.refresh_from_db()
    assert approval.status == "void"
    with pytest.raises(Conflict):
        approval_approve(approval=approval, actor=world.ops2)
    assert live(world.envs["sg-test"], release.document) == 3


# --- promotion ---------------------------------------------------------------------------------------
@pytest.fixture
def promotion(world):
    return bank_uat_ahead_of_prod(world)


def test_promote__bank_uat_to_prod__one_request_per_changed_document(promotion):
    w = promotion
    prod = w.envs["prod"]

    outcome = release_promote(
        agent=w.agent,
        source=w.envs["bank-uat"],
        target=prod,
        actor=w.ops,
        reason="bank-uat signed off",
    )

    by_doc = {i.document.key: i for i in outcome.items}
    assert {k: i.outcome for k, i in by_doc.items()} == {
        "profile": "unchanged",
        "after_sales_consultation": "requested",
        "returns_consultation": "requested",
    }
    assert (
        by_doc["after_sales_consultation"].from_version,
        by_doc["after_sales_consultation"].to_version,
    ) == (1, 2)
    requests = ApprovalRequest.objects.filter(environment=prod, status="pending")
    assert sorted((a.document.key, a.version.number) for a in requests) == [
        ("after_sales_consultation", 2),
        ("returns_consultation", 1),
    ]
    assert {a.reason for a in requests} == {"bank-uat signed off"}
    assert live(prod, w.returns.document) is None  # nothing goes live before approval
    record = AuditRecord.objects.get(action="release.promote")
    assert record.after["documents"]["profile"] == "unchanged"


def test_promote__unprotected_target__published_at_once(promotion):
    w = promotion
    sg = w.envs["sg-test"]

    outcome = release_promote(
        agent=w.agent,
        source=w.envs["bank-uat"],
        target=sg,
        documents=[w.returns.document],
        actor=w.ops,
        reason="catch sg-test up",
    )

    assert [(i.document.key, i.outcome) for i in outcome.items] == [
        ("returns_consultation", "published")
    ]
    assert live(sg, w.returns.document) == 1


def test_promote__one_document_fails_a_check__nothing_written_every_failure_named(promotion):
    w = promotion
    uat = w.envs["bank-uat"]
    # sg-test runs v3 (needs the general_policy_only handler bank-uat's runtime lacks) and a
    # second document whose prod request already waits.
    sg = w.envs["sg-test"]
    publish(w.strategy[3], sg, actor=w.ops)
    publish(w.returns, sg, actor=w.ops)
    before = (ApprovalRequest.objects.count(), ReleaseEvent.objects.count())

    with pytest.raises(ValidationFailed) as refused:
        release_promote(agent=w.agent, source=sg, target=uat, actor=w.ops, reason="go ahead")

    assert refused.value.code == "promotion_refused"
    assert "after_sales_consultation" in refused.value.message
    assert any(
        d["path"].startswith("documents.after_sales_consultation") for d in refused.value.details
    )
    assert (ApprovalRequest.objects.count(), ReleaseEvent.objects.count()) == before
    assert live(uat, w.strategy[1].document) == 2


def test_promote__request_already_waits__refused_for_that_document_nothing_written(promotion):
    w = promotion
    prod = w.envs["prod"]
    release_publish(version=w.returns, environment=prod, actor=w.ops, reason="early")

    with pytest.raises(ValidationFailed) as refused:
        release_promote(
            agent=w.agent, source=w.envs["bank-uat"], target=prod, actor=w.ops, reason="go ahead"
        )

    assert "returns_consultation" in refused.value.message
    assert ApprovalRequest.objects.filter(environment=prod, status="pending").count() == 1


def test_promote__without_publish_right_on_target__forbidden(promotion):
    from tests.factories import user_with_grants

    viewer = user_with_grants("viewer1", viewer=promotion.agent)

    with pytest.raises(Forbidden):
        release_promote(
            agent=promotion.agent,
            source=promotion.envs["bank-uat"],
            target=promotion.envs["prod"],
            actor=viewer,
            reason="go ahead",
        )

    assert not ApprovalRequest.objects.filter(status="pending").exists()
