"""The promotion page and the rollback page under the revert policy, as a person sees them."""

from __future__ import annotations

import pytest

from strategies.releases.models import ApprovalRequest, Release, ReleaseEvent
from tests.factories import bank_uat_ahead_of_prod, publish, release_setup

PROMOTE = "/releases/assistant_professional/promote/"
ROLLBACK = "/releases/assistant_professional/after_sales_consultation/sg-test/rollback/"


@pytest.fixture
def ahead(db):
    return bank_uat_ahead_of_prod(release_setup())


def test_overview__promote_actions_per_agent_and_per_changed_document(client, ahead):
    client.force_login(ahead.ops)

    page = client.get("/releases/").content.decode()

    assert "Promote bank-uat → prod…" in page and "Promote sg-test → bank-uat…" in page
    assert 'data-promote-document="after_sales_consultation"' in page
    assert 'data-promote-document="returns_consultation"' in page
    assert 'data-promote-document="profile"' not in page  # level in bank-uat and prod


def test_promote_page__preview_per_document_then_confirm_creates_requests(client, ahead):
    client.force_login(ahead.ops)

    preview = client.get(PROMOTE, {"source": "bank-uat", "target": "prod"})
    page = preview.content.decode()
    assert preview.status_code == 200
    assert 'data-preview="after_sales_consultation"' in page
    assert 'data-preview="returns_consultation"' in page
    assert 'data-preview="profile"' not in page
    assert "Request approval for 2 documents" in page
    assert not ApprovalRequest.objects.filter(status="pending").exists()  # a GET writes nothing

    done = client.post(
        PROMOTE, {"source": "bank-uat", "target": "prod", "reason": "uat signed off"}, follow=True
    )

    text = done.content.decode()
    assert "Promoted bank-uat → prod: 2 wait for approval" in text
    pending = ApprovalRequest.objects.filter(status="pending", environment__key="prod")
    assert sorted(a.document.key for a in pending) == [
        "after_sales_consultation",
        "returns_consultation",
    ]
    assert all(f'data-approval="{a.pk}"' in text for a in pending)


def test_promote_page__a_document_cannot_go__button_disabled_post_refused_nothing_written(
    client, ahead
):
    publish(ahead.strategy[3], ahead.envs["sg-test"], actor=ahead.ops)  # bank-uat cannot serve v3
    client.force_login(ahead.ops)
    before = ReleaseEvent.objects.count()

    page = client.get(PROMOTE, {"source": "sg-test", "target": "bank-uat"}).content.decode()
    refused = client.post(
        PROMOTE, {"source": "sg-test", "target": "bank-uat", "reason": "try anyway"}
    )

    assert 'id="promote-blocked"' in page and "disabled" in page
    assert refused.status_code == 400
    assert "Nothing was promoted" in refused.content.decode()
    assert ReleaseEvent.objects.count() == before


def rolled_forward(w):
    publish(w.strategy[1], w.envs["sg-test"], actor=w.ops)
    publish(w.strategy[2], w.envs["sg-test"], actor=w.ops)


def test_rollback_page__policy_off__says_immediate(client, db):
    w = release_setup()
    rolled_forward(w)
    client.force_login(w.admin)

    page = client.get(ROLLBACK).content.decode()

    assert 'data-needs-approval="false"' in page and "Roll back now" in page


def test_rollback_page__policy_on__says_so_then_shows_the_request(client, db):
    w = release_setup()
    rolled_forward(w)
    w.envs["sg-test"].rollback_needs_approval = True
    w.envs["sg-test"].save()
    client.force_login(w.admin)

    page = client.get(ROLLBACK).content.decode()
    done = client.post(
        ROLLBACK, {"version": 1, "reason": "v2 regressed", "revision": 2}, follow=True
    )

    assert 'data-needs-approval="true"' in page and "Request rollback approval" in page
    approval = ApprovalRequest.objects.get()
    assert (
        done.redirect_chain[-1][0] == f"/releases/assistant_professional/approvals/{approval.pk}/"
    )
    text = done.content.decode()
    assert "Roll back after_sales_consultation in sg-test to v1?" in text
    assert "waits for approval" in text
    assert Release.objects.get(environment=w.envs["sg-test"]).version == w.strategy[2]
