"""One admin alone cannot get a version live in a protected environment (issue 19, item 3).

Relaxing a protected environment's protection or revert policy is refused unless it is an
explicit break-glass (a reason, its own audit action, a banner while it lasts); what goes
live while it lasts is marked unreviewed and is never offered as a rollback target."""

from __future__ import annotations

import json

import pytest

from console.kernel.models import AuditRecord
from strategies.catalog.models import Environment
from strategies.releases.models import Release, ReleaseEvent
from tests.factories import publish, release_setup

ENV = "/api/v1/environments/prod/"
API = "/api/v1/agents/assistant_professional"
DOC = f"{API}/documents/after_sales_consultation/releases"


@pytest.fixture
def world(db):
    return release_setup()


def send(client, method, url, data, user):
    client.force_login(user)
    return getattr(client, method)(url, data=json.dumps(data), content_type="application/json")


def test_three_calls__one_admin_relaxes_prod_publishes_restores__refused_nothing_live(
    client, world
):
    # Given prod is protected and one admin alone
    # When they switch protection off, publish and switch it on again
    relaxed = send(client, "patch", ENV, {"protected": False}, world.admin)
    published = send(client, "post", f"{DOC}/prod/", {"version": 2, "reason": "x"}, world.admin)

    # Then the first call is refused and the publish only asks a second person
    assert relaxed.status_code == 409, relaxed.json()
    error = relaxed.json()["error"]
    assert error["code"] == "break_glass_required"
    assert [d["path"] for d in error["details"]] == ["protected"]
    assert Environment.objects.get(key="prod").protected is True
    assert published.status_code == 202
    assert not Release.objects.filter(environment__key="prod").exists()


def test_revert_policy__one_admin_switches_it_off__refused(client, world):
    prod = world.envs["prod"]
    prod.rollback_needs_approval = True
    prod.save()

    response = send(client, "patch", ENV, {"rollback_needs_approval": False}, world.admin)

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "break_glass_required"
    assert Environment.objects.get(key="prod").rollback_needs_approval is True
    assert not AuditRecord.objects.filter(action__startswith="environment.").exists()
