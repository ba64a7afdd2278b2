"""Browser: "who changed the Bank profile, when, and what exactly changed?" answered from
the audit log in a few clicks."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from tests.factories import profile_edit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = "/tmp/issue4-shots"


def test_audit_log__admin_asks_who_changed_bank_profile__finds_ops_and_the_field_diff(
    demo_world, login, page, live_server
):
    ops = get_user_model().objects.get(username="ops")
    profile_edit(
        ops, toggle=("user_context", "communication_style", False), note="plain tone for complaints"
    )
    profile_edit(
        get_user_model().objects.get(username="ops2"), toggle=("query_context", "truth", False)
    )

    started = time.monotonic()
    login("admin", "admin-demo")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit").click()
    page.fill("#f-target", "assistant_professional/profile")
    page.fill("#f-actor", "ops")
    page.get_by_role("button", name="Filter").click()
    assert "target=assistant_professional%2Fprofile" in page.url  # a link to paste in a ticket

    rows = page.locator("[data-testid=audit-table] tbody tr")
    assert "version.freeze" in rows.first.inner_text()  # newest first: the edit just made
    assert "ops2" not in page.locator("[data-testid=audit-table]").inner_text()
    update_row = rows.filter(has_text="draft.update").first
    assert "ops" in update_row.inner_text()
    expect(update_row.locator("time")).to_have_count(1)
    update_row.locator("summary").click()
    changes = update_row.locator("[data-testid=audit-changes]")
    changes.wait_for()
    changed_field = changes.locator("tr", has_text="body.sections.user_context.communication_style")
    assert "true" in changed_field.locator("td").nth(1).inner_text()  # before
    assert "false" in changed_field.locator("td").nth(2).inner_text()  # after
    assert time.monotonic() - started < 60
    page.screenshot(path=f"{SHOTS}/audit-journey.png", full_page=True)


def test_audit_detail_page__without_javascript_link__shows_who_when_roles_and_hash(
    demo_world, login, page, live_server
):
    from console.kernel.models import AuditRecord

    profile_edit(
        get_user_model().objects.get(username="ops"),
        toggle=("user_context", "communication_style", False),
    )
    record = AuditRecord.objects.get(action="draft.update")
    login("admin", "admin-demo")
    page.goto(f"{live_server.url}/audit/{record.pk}/")
    text = page.locator("main").inner_text()
    assert "operator@assistant_professional" in text  # the roles the actor held at the time
    assert record.hash[:16] in text
    assert "body.sections.user_context.communication_style" in text
