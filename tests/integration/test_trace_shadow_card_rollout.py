"""The trace's Shadow run card during a staged rollout (issue 32 item 11): the served version is
the request's arm and the shadow the other arm, so the card names the arms — it said
"v4 beside live v3" for a request of the new arm, although v4 is not live and v3 is the
version the rollout replaces."""

from __future__ import annotations

import html

import pytest

from tests.factories import post_batch, trace_payload
from tests.integration import test_rollout_evidence as rollout_world

# A running rollout ro-7 of after_sales_consultation v3 → v4 in sg-test, and its traces.
env, secret, served = rollout_world.env, rollout_world.secret, rollout_world.served

pytestmark = pytest.mark.django_db


def _card(client, make_user, request_id: str) -> str:
    client.force_login(make_user("sup", support="assistant_professional"))
    page = html.unescape(client.get(f"/traces/{request_id}/").content.decode())
    start = page.index('id="shadow-run"')
    return page[start : page.index("</section>", start)]


def test_shadow_card__rollout_new_arm__names_the_arms__never_calls_the_new_version_live(
    client, secret, make_user
):
    post_batch(client, secret, [served("n1", "new")])  # served v4 (new), v3 as shadow

    card = _card(client, make_user, "n1")

    assert (
        "v3 (the version it replaces) beside v4 (this request's arm: the rollout's new version)"
    ) in card
    assert "live v4" not in card


def test_shadow_card__rollout_old_arm__the_new_version_beside_the_served_one(
    client, secret, make_user
):
    shadow = {"status": "budget_exceeded", "selected": []}  # v4 decides otherwise
    post_batch(client, secret, [served("o1", "old", shadow=shadow)])

    card = _card(client, make_user, "o1")

    assert (
        "v4 (the rollout's new version) beside v3 (this request's arm: the version it replaces)"
    ) in card
    assert (
        "v4 (the rollout's new version) decides this request differently from v3 "
        "(this request's arm: the version it replaces)"
    ) in card
    assert "live v3" not in card


def test_shadow_card__a_shadow_release_outside_a_rollout__still_beside_live(
    client, secret, make_user
):
    block = {"version": 4, "status": "ready", "selected": ["task_state:T9", "P7-v2"]}
    post_batch(client, secret, [trace_payload("s1", shadow=block)])

    card = _card(client, make_user, "s1")

    assert "v4 beside live v3" in card
