"""Sessions a bank accepts (issue 33, item 6): an idle timeout and an absolute lifetime enforced
at every request, and a recent password before the dangerous actions (approve, break-glass, a
sensitive section switched on, a snapshot viewed) — audited in the access log.

Time moves by rewriting the clocks the session stores (console.kernel.sessions), never by
sleeping."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.http import HttpRequest
from django.urls import reverse

from console.accounts.personal_tokens import personal_token_create
from console.kernel.models import AccessLogEntry, AuditRecord
from console.kernel.sessions import AUTHENTICATED_AT, SEEN_AT, SIGNED_IN_AT
from strategies.catalog.models import Environment
from strategies.documents import services as documents
from strategies.documents.models import Document, Version
from strategies.releases.models import ApprovalRequest, Release
from strategies.releases.services import release_publish
from tests.factories import (
    AgentFactory,
    post_batch,
    profile_body,
    release_setup,
    runtime_token,
    trace_payload,
    world,
)
from tests.factories.traces import snapshots_allowed
from tests.integration.test_security_hardening import run_manage

pytestmark = pytest.mark.django_db

MINUTE, HOUR = 60, 3600
AGENTS_API = "/api/v1/agents/"


def rewind(client, seconds: int, *clocks: str) -> None:
    """Move the named clocks of the client's session `seconds` into the past."""
    session = client.session
    for clock in clocks:
        session[clock] -= seconds
    session.save()


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def rows(action: str) -> list[AccessLogEntry]:
    return list(AccessLogEntry.objects.filter(action=action).order_by("id"))


@pytest.fixture
def person(client, make_user):
    user = make_user("dana", viewer=AgentFactory(key="assistant_professional"))
    client.force_login(user)
    return user


# --- idle timeout and absolute lifetime --------------------------------------------------------
def test_idle__past_30_minutes__signed_out_to_the_readable_page_and_logged(client, person):
    rewind(client, 31 * MINUTE, SEEN_AT)

    response = client.get("/?tab=1")

    assert response.status_code == 302
    assert response["Location"] == "/signed-out/?why=idle&next=%2F%3Ftab%3D1"
    assert not signed_in(client)
    page = client.get(response["Location"])
    assert page.status_code == 200
    assert "You were signed out after 30 minutes without activity." in page.content.decode()
    assert 'href="/login/?next=/%3Ftab%3D1"' in page.content.decode()
    (row,) = rows("auth.session_expire")
    assert (row.actor_label, row.outcome, row.detail["why"]) == ("dana", "allowed", "idle")


def test_idle__29_minutes__still_signed_in_and_the_clock_restarts(client, person):
    rewind(client, 29 * MINUTE, SEEN_AT)

    assert client.get("/").status_code == 200
    rewind(client, 29 * MINUTE, SEEN_AT)
    assert client.get("/").status_code == 200

    assert signed_in(client)
    assert rows("auth.session_expire") == []


def test_absolute__12_hours_after_sign_in_however_active__signed_out(client, person):
    rewind(client, 12 * HOUR, SIGNED_IN_AT)  # active a moment ago: SEEN_AT is now

    response = client.get("/", follow=True)

    assert not signed_in(client)
    assert "a session lasts at most 12 hours, however active you are" in response.content.decode()
    (row,) = rows("auth.session_expire")
    assert row.detail == {"why": "absolute", "limit_seconds": 12 * HOUR}


def test_idle__settings_shorten_it__words_follow(client, person, settings):
    settings.SESSION_IDLE_MINUTES = 5
    rewind(client, 6 * MINUTE, SEEN_AT)

    response = client.get("/", follow=True)

    assert "after 5 minutes without activity" in response.content.decode()


def test_idle__htmx_request__401_with_hx_redirect_back_to_the_page_it_came_from(client, person):
    rewind(client, 31 * MINUTE, SEEN_AT)

    response = client.get(
        "/releases/",
        headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/traces/?q=x"},
    )

    assert response.status_code == 401
    assert response["HX-Redirect"] == "/signed-out/?why=idle&next=%2Ftraces%2F%3Fq%3Dx"
    assert not signed_in(client)


def test_idle__api_through_the_session__structured_401(client, person):
    rewind(client, 31 * MINUTE, SEEN_AT)

    response = client.get(AGENTS_API)

    assert response.status_code == 401
    error = response.json()["error"]
    assert (error["code"], error["why"]) == ("session_expired", "idle")
    assert error["message"].startswith("You were signed out after 30 minutes")
    assert client.get(AGENTS_API).status_code in (401, 403)  # no session any more


def test_idle__personal_token_beside_an_ended_session__token_rules_apply(client, person):
    _token, secret = personal_token_create(
        user=person, name="ci", capabilities=["view_config"], all_agents=True
    )
    rewind(client, 31 * MINUTE, SEEN_AT)

    response = client.get(AGENTS_API, headers={"Authorization": f"Bearer {secret}"})

    assert response.status_code == 200
    assert not signed_in(client)  # the session still ended (and is in the log)
    assert len(rows("auth.session_expire")) == 1


def test_activity__written_at_most_once_a_minute(client, person):
    rewind(client, 30, SEEN_AT)
    seen = client.session[SEEN_AT]
    client.get("/")
    assert client.session[SEEN_AT] == seen  # 30 s ago: not written again
    rewind(client, 31, SEEN_AT)
    client.get("/")
    assert client.session[SEEN_AT] > seen


def test_idle__a_page_polling_by_itself__is_no_activity(client, person):
    rewind(client, 20 * MINUTE, SEEN_AT)
    assert client.get("/", headers={"X-Console-Poll": "true"}).status_code == 200
    rewind(client, 11 * MINUTE, SEEN_AT)

    response = client.get("/", headers={"X-Console-Poll": "true"})

    assert response.status_code == 302
    assert "why=idle" in response["Location"]


def test_session_from_before_the_clocks__gets_them_not_a_sign_out(client, person):
    session = client.session
    for clock in (SIGNED_IN_AT, SEEN_AT, AUTHENTICATED_AT):
        del session[clock]
    session.save()

    assert client.get("/").status_code == 200
    assert SIGNED_IN_AT in client.session and SEEN_AT in client.session


def test_sign_in_page__starts_the_clocks(client, db):
    get_user_model().objects.create_user("erin", password="right-password-1")

    assert client.login(request=HttpRequest(), username="erin", password="right-password-1")
    session = client.session
    assert session[SIGNED_IN_AT] == session[SEEN_AT] == session[AUTHENTICATED_AT]


# --- re-authentication before approving ---------------------------------------------------------
@pytest.fixture
def pending(db):
    w = release_setup()
    w.approval = release_publish(
        version=w.strategy[2], environment=w.envs["prod"], actor=w.ops, reason="go"
    ).approval
    w.decide = f"/releases/assistant_professional/approvals/{w.approval.pk}/decide/"
    return w


def approver(client, w, *, stale: bool):
    client.force_login(w.ops2)
    if stale:
        rewind(client, 11 * MINUTE, AUTHENTICATED_AT)


def test_approve__signed_in_11_minutes_ago__password_asked_input_kept_nothing_live(client, pending):
    approver(client, pending, stale=True)

    response = client.post(pending.decide, {"decision": "approve", "reason": "looks right"})

    assert response.status_code == 401
    page = response.content.decode()
    assert "To approve this release, confirm your password" in page
    assert f'action="{pending.decide}"' in page
    assert '<input type="hidden" name="decision" value="approve">' in page
    assert '<input type="hidden" name="reason" value="looks right">' in page
    assert ApprovalRequest.objects.get().status == "pending"
    assert not Release.objects.filter(environment__key="prod").exists()
    assert signed_in(client)  # asked, not signed out


def test_approve__password_confirmed__goes_through_and_both_are_logged(client, pending):
    approver(client, pending, stale=True)

    response = client.post(
        pending.decide,
        {"decision": "approve", "reason": "looks right", "reauth_password": "ops2-pass-1"},
    )

    assert response.status_code == 302
    assert ApprovalRequest.objects.get().status == "approved"
    assert Release.objects.get(environment__key="prod").version.number == 2
    (row,) = rows("auth.reauthenticate")
    assert (row.actor_label, row.outcome, row.detail["path"]) == ("ops2", "allowed", pending.decide)
    assert AuditRecord.objects.filter(action="release.approve", actor_label="ops2").exists()
    assert client.session[AUTHENTICATED_AT] == client.session[SEEN_AT]  # the proof, now


def test_approve__wrong_password__asked_again_nothing_done_and_logged(client, pending):
    approver(client, pending, stale=True)

    response = client.post(
        pending.decide, {"decision": "approve", "reauth_password": "not-my-password"}
    )

    assert response.status_code == 401
    assert "That is not your password. Nothing was done." in response.content.decode()
    assert ApprovalRequest.objects.get().status == "pending"
    (row,) = rows("auth.reauthenticate")
    assert (row.outcome, row.detail["why"]) == ("denied", "invalid_credentials")


def test_approve__five_wrong_passwords__locked_like_a_sign_in_still_signed_in(client, pending):
    approver(client, pending, stale=True)
    for _ in range(5):
        client.post(pending.decide, {"decision": "approve", "reauth_password": "guess"})

    response = client.post(
        pending.decide, {"decision": "approve", "reauth_password": "ops2-pass-1"}
    )

    assert response.status_code == 401
    assert "Too many failed sign-ins" in response.content.decode()
    assert 'data-testid="reauthenticate"' in response.content.decode()
    assert ApprovalRequest.objects.get().status == "pending"
    assert rows("auth.reauthenticate")[-1].detail["why"] == "locked"


def test_approve__signed_in_9_minutes_ago__not_asked(client, pending):
    approver(client, pending, stale=False)
    rewind(client, 9 * MINUTE, AUTHENTICATED_AT)

    response = client.post(pending.decide, {"decision": "approve"})

    assert response.status_code == 302
    assert ApprovalRequest.objects.get().status == "approved"


def test_approve__api_through_a_stale_session__401_reauthentication_required(client, pending):
    approver(client, pending, stale=True)

    response = client.post(
        f"/api/v1/approvals/{pending.approval.pk}/approve/",
        data=json.dumps({}),
        content_type="application/json",
    )

    assert response.status_code == 401, response.content
    error = response.json()["error"]
    assert error["code"] == "reauthentication_required"
    assert error["reauthenticate_url"] == "/reauthenticate/"
    assert ApprovalRequest.objects.get().status == "pending"


def test_approve__api_with_a_personal_token__never_asked(client, pending):
    _token, secret = personal_token_create(
        user=pending.ops2, name="ci", capabilities=["view_config", "approve"], all_agents=True
    )

    response = client.post(
        f"/api/v1/approvals/{pending.approval.pk}/approve/",
        data=json.dumps({}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {secret}"},
    )

    assert response.status_code == 200, response.content
    assert ApprovalRequest.objects.get().status == "approved"


def test_reauthenticate_page__confirmed__back_to_next(client, pending):
    approver(client, pending, stale=True)

    page = client.get(reverse("reauthenticate"), {"next": "/releases/"})
    response = client.post(
        reverse("reauthenticate"), {"next": "/releases/", "reauth_password": "ops2-pass-1"}
    )

    assert page.status_code == 200 and 'name="next" value="/releases/"' in page.content.decode()
    assert response.status_code == 302 and response["Location"] == "/releases/"
    client.post(pending.decide, {"decision": "approve"})
    assert ApprovalRequest.objects.get().status == "approved"


def test_reauthenticate_page__next_elsewhere__dashboard_instead(client, pending):
    approver(client, pending, stale=True)

    response = client.post(
        reverse("reauthenticate"),
        {"next": "https://evil.example/", "reauth_password": "ops2-pass-1"},
    )

    assert response["Location"] == "/"


# --- the other dangerous actions ---------------------------------------------------------------
def test_break_glass__stale_session__form_kept_then_confirmed_saved(client, pending):
    client.force_login(pending.admin)
    rewind(client, 11 * MINUTE, AUTHENTICATED_AT)
    url = reverse("catalog-environment-edit", args=["prod"])
    form = client.get(url).context["form"]
    data = {n: v for n, v in form.initial.items() if n in form.fields and v not in (False, None)}
    data.update(break_glass_reason="INC-9: approver on leave")
    data.pop("protected", None)

    asked = client.post(url, data)

    assert asked.status_code == 401
    assert "switch approvals off (break-glass)" in asked.content.decode()
    assert 'value="INC-9: approver on leave"' in asked.content.decode()
    assert Environment.objects.get(key="prod").protected is True
    confirmed = client.post(url, {**data, "reauth_password": "admin-pass-1"})
    assert confirmed.status_code == 302
    assert Environment.objects.get(key="prod").protected is False
    assert AuditRecord.objects.filter(action="environment.break_glass").exists()


def test_sensitive_section__api_through_a_stale_session__401_no_draft(client, pending):
    client.force_login(pending.admin)
    rewind(client, 11 * MINUTE, AUTHENTICATED_AT)

    response = client.post(
        "/api/v1/agents/assistant_professional/documents/profile/draft/",
        data=json.dumps({"body": profile_body(personal_particulars=True)}),
        content_type="application/json",
    )

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "reauthentication_required"
    assert "switch on a sensitive context section" in response.json()["error"]["message"]
    assert not Version.objects.filter(document__key="profile", state=Version.State.DRAFT).exists()


@pytest.fixture
def snapshot_trace(client):
    env = world()
    snapshots_allowed()
    post_batch(
        client,
        runtime_token(env["environments"]["sg-test"]),
        [trace_payload("req-92", snapshot={"messages": ["SECRET-BODY-42"]})],
    )


def test_snapshot__htmx_stale_session__whole_page_asks_then_reveals(
    client, make_user, snapshot_trace
):
    client.force_login(make_user("adm", admin=None))
    rewind(client, 11 * MINUTE, AUTHENTICATED_AT)

    asked = client.post(
        "/traces/req-92/snapshot", {"reason": "ticket 4711"}, headers={"HX-Request": "true"}
    )

    assert asked.status_code == 401
    assert (asked["HX-Retarget"], asked["HX-Reswap"]) == ("body", "innerHTML")
    assert "To view a snapshot, confirm your password" in asked.content.decode()
    assert "SECRET-BODY-42" not in asked.content.decode()
    assert rows("snapshot.view") == []
    shown = client.post(
        "/traces/req-92/snapshot", {"reason": "ticket 4711", "reauth_password": "adm-pass-1"}
    )
    assert shown.status_code == 200
    assert "SECRET-BODY-42" in shown.content.decode()
    assert rows("snapshot.view")[0].reason == "ticket 4711"


def test_sensitive_section__json_editor_stale_session__json_kept_then_confirmed_saved(
    client, pending
):
    profile = Document.objects.get(agent__key="assistant_professional", key="profile")
    draft = documents.draft_create(document=profile, body=profile_body(), actor=None)
    client.force_login(pending.admin)
    rewind(client, 11 * MINUTE, AUTHENTICATED_AT)
    url = "/agents/assistant_professional/documents/profile/draft/"
    edited = {"json": json.dumps(profile_body(personal_particulars=True)), "revision": "1"}

    asked = client.post(url, edited)

    assert asked.status_code == 401
    assert "To switch on a sensitive context section, confirm your password" in (
        asked.content.decode()
    )
    assert "personal_particulars&quot;: true" in asked.content.decode()  # the JSON, kept
    draft.refresh_from_db()
    assert draft.body["sections"]["user_context"]["personal_particulars"] is False
    saved = client.post(url, {**edited, "reauth_password": "admin-pass-1"})
    assert saved.status_code == 302
    draft.refresh_from_db()
    assert draft.body["sections"]["user_context"]["personal_particulars"] is True


# --- settings ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"SESSION_COOKIE_AGE": "28800"}, "SESSION_ABSOLUTE_HOURS"),  # the old setting
        ({"SESSION_IDLE_MINUTES": "half an hour"}, "SESSION_IDLE_MINUTES"),
        ({"REAUTHENTICATION_MINUTES": "0"}, "REAUTHENTICATION_MINUTES"),
    ],
)
def test_settings__old_or_bad_session_values__start_refused_naming_them(env, named):
    result = run_manage("check", **env)

    assert result.returncode != 0
    assert named in result.stderr
    assert "Traceback" not in result.stderr
