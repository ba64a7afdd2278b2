"""Release pages: who sees what, refusals explained, the dashboard's part, the demo."""

from __future__ import annotations

import pytest
from django.template.loader import render_to_string

from strategies.releases.models import ApprovalRequest, Release
from strategies.releases.services import release_publish
from tests.factories import AgentFactory, release_setup

PUBLISH = "/releases/assistant_professional/after_sales_consultation/{env}/publish/"
ROLLBACK = "/releases/assistant_professional/after_sales_consultation/sg-test/rollback/"


@pytest.fixture
def world(db):
    return release_setup()


@pytest.fixture
def lite_agent(db):
    """A second agent, for people whose grants are elsewhere."""
    return AgentFactory(key="assistant_lite")


def test_overview__viewer_of_other_agent__agent_not_shown(client, world, lite_agent, make_user):
    client.force_login(make_user("viewer", viewer="assistant_lite"))

    page = client.get("/releases/").content.decode()

    assert "assistant_lite" in page and "releases-assistant_professional" not in page


def test_publish_page__agent_out_of_scope__404(client, world, lite_agent, make_user):
    client.force_login(make_user("viewer", viewer="assistant_lite"))

    assert client.get(PUBLISH.format(env="sg-test")).status_code == 404


def test_rollback_page__operator_without_rollback__403(client, world):
    release_publish(version=world.strategy[1], environment=world.envs["sg-test"], actor=world.ops)
    client.force_login(world.ops)

    assert client.get(ROLLBACK).status_code == 403


def test_tokens_page__operator__403(client, world):
    client.force_login(world.ops)

    assert client.get("/releases/tokens/").status_code == 403
    assert client.get("/releases/webhooks/").status_code == 403


def test_publish_page__version_runtime_cannot_serve__reason_shown_nothing_live(client, world):
    client.force_login(world.ops)
    url = PUBLISH.format(env="bank-uat")

    preview = client.get(url, {"version": 3}).content.decode()
    refused = client.post(url, {"version": 3, "reason": "try", "revision": 0})

    assert "general_policy_only" in preview
    assert refused.status_code == 400
    # Said once (issue 12 #7): the refusal names the runtime, the check lists what it lacks.
    html = refused.content.decode()
    assert "Not published: the bank-uat runtime cannot serve v3" in html
    assert html.count("is not a handler of the bank-uat runtime") == 1
    assert ">try</textarea>" in html  # the typed reason is kept
    assert not Release.objects.exists()


def test_publish_page__stale_revision__409_names_what_is_live(client, world):
    client.force_login(world.ops)
    release_publish(version=world.strategy[1], environment=world.envs["sg-test"], actor=world.ops2)

    response = client.post(
        PUBLISH.format(env="sg-test"), {"version": 2, "reason": "mine", "revision": 0}
    )

    assert response.status_code == 409
    assert "Now live: v1" in response.content.decode()


def test_approval_page__requester__cannot_decide(client, world):
    approval = release_publish(
        version=world.strategy[2], environment=world.envs["prod"], actor=world.ops
    ).approval
    client.force_login(world.ops)

    page = client.get(f"/releases/assistant_professional/approvals/{approval.pk}/").content.decode()
    response = client.post(
        f"/releases/assistant_professional/approvals/{approval.pk}/decide/",
        {"decision": "approve"},
    )

    assert "You requested this publish" in page
    assert response.status_code == 403  # ops holds no approve permission at all
    assert ApprovalRequest.objects.get().status == "pending"


def test_dashboard_part__live_versions_and_pending_listed(world, rf):
    from strategies.releases.selectors import dashboard_context

    release_publish(version=world.strategy[2], environment=world.envs["sg-test"], actor=world.ops)
    release_publish(version=world.strategy[2], environment=world.envs["prod"], actor=world.ops)
    agents = [world.agent]

    html = render_to_string(
        "documents/_dashboard_agent.html",
        {"agent": world.agent, **dashboard_context(user=world.ops, agents=agents)},
    )

    assert "v2" in html and "waits" not in html
    assert "after_sales_consultation v2 → prod, requested by ops" in html


def test_demo_releases__loaded_twice__demo_state_and_one_active_token(demo_world):
    from django.core.management import call_command

    from strategies.runtime.models import RuntimeToken

    call_command("load_demo", "--quiet-logins", stdout=open("/dev/null", "w"))  # noqa: SIM115

    live = {
        (r.document.key, r.environment.key): r.version.number
        for r in Release.objects.select_related("document", "environment", "version")
    }
    assert live == {
        ("profile", "sg-test"): 1,
        ("profile", "bank-uat"): 1,
        ("profile", "prod"): 1,
        ("after_sales_consultation", "sg-test"): 3,
        ("after_sales_consultation", "bank-uat"): 2,
        ("after_sales_consultation", "prod"): 2,
    }
    pending = ApprovalRequest.objects.get(status="pending")
    assert (pending.version.number, pending.environment.key, pending.requested_by.username) == (
        3,
        "prod",
        "ops",
    )
    assert RuntimeToken.objects.filter(revoked_at__isnull=True).count() == 1


def test_overview__more_documents__same_number_of_queries(
    client, world, django_assert_max_num_queries
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from strategies.documents.models import Document

    client.force_login(world.admin)
    with CaptureQueriesContext(connection) as before:
        client.get("/releases/")
    for key in ("refund_request", "delivery_question", "invoice_copy"):
        Document.objects.create(agent=world.agent, kind="strategy", key=key)

    with django_assert_max_num_queries(len(before)):
        response = client.get("/releases/")

    assert "invoice_copy" in response.content.decode()


def test_publish_page__unprotected__says_streams_take_it_within_a_second(client, world):
    # Given ops on the publish page of an unprotected environment
    client.force_login(world.ops)
    url = PUBLISH.format(env="sg-test")
    page = client.get(url, {"version": 1}).content.decode()
    # Then it says how the change arrives as it does: the stream within a second, polling
    # runtimes at their next poll (not "at its next poll" alone)
    assert "config stream take it within a second" in page
    assert "polling runtimes at their next poll" in page
    assert "serves it at its next poll" not in page
    # And publishing says it again in its confirmation
    done = client.post(url, {"version": 1, "reason": "go", "revision": 0}, follow=True)
    assert "is live in sg-test. Runtimes connected to the config stream take it within a " in (
        done.content.decode()
    )
