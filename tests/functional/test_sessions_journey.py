"""Browser: sessions a bank accepts (issue 33, item 6). An admin who signed in more than ten
minutes ago is asked to confirm their password before approving a release, and the approval
then goes through with the note they typed; a session left idle is signed out with a page
that says why, and signing in again returns to where they were.

Time moves by rewriting the clocks the browser's session stores, never by sleeping."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.sessions.backends.db import SessionStore

from console.kernel.models import AccessLogEntry
from console.kernel.sessions import AUTHENTICATED_AT, SEEN_AT
from strategies.catalog.models import Environment
from strategies.documents.models import Document
from strategies.documents.services import draft_create, version_freeze
from strategies.releases.models import ApprovalRequest, Release
from strategies.releases.services import release_publish
from tests.factories import post_batch, release_setup, runtime_token, trace_payload
from tests.functional.layout import LAPTOP, PHONE, layout_faults, sideways_scroll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def rewind(page, seconds: int, clock: str) -> None:
    """Move one clock of the browser's session `seconds` into the past."""
    (cookie,) = [c for c in page.context.cookies() if c["name"] == settings.SESSION_COOKIE_NAME]
    session = SessionStore(session_key=cookie["value"])
    session[clock] -= seconds
    session.save()


def test_approve__signed_in_long_ago__confirms_password_then_approval_goes_through(
    page, login, live_server
):
    w = release_setup()
    approval = release_publish(
        version=w.strategy[2], environment=w.envs["prod"], actor=w.ops, reason="promote"
    ).approval
    login("admin", "admin-pass-1")
    rewind(page, 11 * 60, AUTHENTICATED_AT)

    page.goto(f"{live_server.url}/releases/assistant_professional/approvals/{approval.pk}/")
    page.fill("#approve-note", "Checked the preview with Ann")
    page.click("#approve-form button[type=submit]")

    # Asked, with what was typed kept; nothing live yet.
    page.wait_for_selector("[data-testid=reauthenticate]")
    assert "To approve this release, confirm your password" in page.inner_text("#reauth-message")
    assert ApprovalRequest.objects.get().status == "pending"
    page.set_viewport_size(PHONE)
    assert sideways_scroll(page) == 0
    page.set_viewport_size(LAPTOP)
    page.fill("input[name=reauth_password]", "admin-pass-1")
    page.click("#reauth-form button[type=submit]")

    page.wait_for_selector("text=Approved: after_sales_consultation v2 is live in prod")
    approval.refresh_from_db()
    assert (approval.status, approval.decision_note) == ("approved", "Checked the preview with Ann")
    assert Release.objects.get(environment__key="prod").version.number == 2
    assert AccessLogEntry.objects.filter(
        action="auth.reauthenticate", actor_label="admin", outcome="allowed"
    ).exists()


def test_idle__session_left_alone__signed_out_page_says_why_and_sign_in_returns(
    page, login, live_server
):
    release_setup()
    login("ops", "ops-pass-1")
    page.goto(f"{live_server.url}/releases/")
    page.wait_for_selector(".runtimes-card")  # polls every 3 s: no activity, but it asks
    rewind(page, 31 * 60, SEEN_AT)

    # Nobody touches the page: its own next poll is answered HX-Redirect to the signed-out page.
    page.wait_for_url("**/signed-out/?why=idle&next=%2Freleases%2F")
    page.wait_for_selector("[data-testid=signed-out]")
    assert "You were signed out after 30 minutes without activity." in page.inner_text(
        "#signed-out-why"
    )
    assert layout_faults(page) == {}
    page.click("text=Sign in again")
    page.fill("input[name=username]", "ops")
    page.fill("input[name=password]", "ops-pass-1")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/releases/")
    assert AccessLogEntry.objects.filter(
        action="auth.session_expire", actor_label="ops", detail__why="idle"
    ).exists()


def test_snapshot__htmx_button_with_a_stale_session__whole_page_asks_then_shows_it(
    demo_world, login, client
):
    document = Document.objects.get(key="after_sales_consultation")
    admin = get_user_model().objects.get(username="admin")
    body = {**document.versions.get(number=3).body, "snapshot": {"allowed": True}}
    allowing = version_freeze(
        draft=draft_create(document=document, body=body, actor=admin), actor=admin
    )
    documents = {"profile": 1, "after_sales_consultation": allowing.number}
    snapshot = {"messages": ["order A1042 r12: delivered 2026-11-02"]}
    post_batch(
        client,
        runtime_token(Environment.objects.get(key="sg-test")),
        [trace_payload("req-snap", snapshot=snapshot, documents=documents)],
    )
    page = login("admin", "admin-demo")
    rewind(page, 11 * 60, AUTHENTICATED_AT)
    page.goto(page.url + "traces/req-snap/")
    page.click("#snapshot-view summary")
    page.fill("#snapshot-view-reason", "ticket 4711: wrong policy quoted")
    page.click("#snapshot-view button[type=submit]")

    # htmx swapped the whole page for the question; the reason typed is kept.
    page.wait_for_selector("[data-testid=reauthenticate]")
    assert "To view a snapshot, confirm your password" in page.inner_text("#reauth-message")
    assert not AccessLogEntry.objects.filter(action="snapshot.view").exists()
    page.fill("input[name=reauth_password]", "admin-demo")
    page.click("#reauth-form button[type=submit]")

    page.locator("#snapshot-body").wait_for()
    assert "A1042" in page.inner_text("#snapshot-body")
    entry = AccessLogEntry.objects.get(action="snapshot.view")
    assert (entry.actor_label, entry.reason) == ("admin", "ticket 4711: wrong policy quoted")
