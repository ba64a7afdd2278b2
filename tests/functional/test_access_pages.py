"""Browser: an admin creates a role (empty by default), grants it with a reason, sees it
in the matrix, and revokes it after confirming."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from console.kernel.models import AuditRecord, Grant, Role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = "/tmp/issue4-shots"


def test_access__admin_creates_role_grants_and_revokes__matrix_and_audit_follow(
    demo_world, login, page, live_server
):
    login("admin", "admin-demo")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Access").click()
    page.screenshot(path=f"{SHOTS}/access-overview.png", full_page=True)
    assert (
        page.locator("[data-testid=people-matrix] [data-person=ops]").inner_text().count("operator")
        == 1
    )

    page.get_by_role("link", name="New role").click()
    expect(page.locator("input[name=capabilities]:checked")).to_have_count(0)  # starts empty
    page.fill("input[name=name]", "auditor")
    page.get_by_label("View audit and access logs").check()
    page.screenshot(path=f"{SHOTS}/role-form.png", full_page=True)
    page.get_by_role("button", name="Create role").click()
    assert "Role “auditor” created." in page.locator(".messages").inner_text()
    assert Role.objects.get(name="auditor").capabilities == ["view_audit"]

    page.get_by_role("link", name="Grant a role").click()
    page.select_option("select[name=username]", "support")  # picked from the list (issue 12 #11)
    page.select_option("select[name=role]", label="auditor")
    page.select_option("select[name=agent]", "assistant_professional")
    page.fill("textarea[name=reason]", "quarterly access review")
    page.screenshot(path=f"{SHOTS}/grant-form.png", full_page=True)
    page.get_by_role("button", name="Review the grant…").click()
    preview = page.locator("[data-testid=grant-preview]").inner_text()
    assert "support gets the role “auditor” on assistant_professional" in preview
    assert "View audit and access logs" in preview
    page.screenshot(path=f"{SHOTS}/grant-preview.png", full_page=True)
    page.get_by_role("button", name="Confirm grant").click()
    row = page.locator("[data-testid=people-matrix] [data-person=support]")
    assert "auditor" in row.inner_text()
    page.screenshot(path=f"{SHOTS}/access-after-grant.png", full_page=True)

    grant = Grant.objects.get(role__name="auditor")
    grant_row = page.locator(f"[data-grant='{grant.pk}']")
    grant_row.locator("summary", has_text="Revoke").click()
    assert "support loses the role “auditor” on assistant_professional" in grant_row.inner_text()
    grant_row.locator("textarea[name=reason]").fill("review done")
    page.screenshot(path=f"{SHOTS}/revoke-confirm.png", full_page=True)
    grant_row.get_by_role("button", name="Revoke", exact=True).click()
    assert "Revoked" in page.locator(".messages").inner_text()
    assert not Grant.objects.filter(pk=grant.pk).exists()
    actions = AuditRecord.objects.filter(action__regex=r"^(role|grant)\.").order_by("id")
    assert list(actions.values_list("action", flat=True)) == [
        "role.create",
        "grant.create",
        "grant.revoke",
    ]

    # The audit log's action filter offers the actions by name; a family picks all of them.
    page.goto(f"{live_server.url}/audit/")
    page.get_by_label("Action").select_option(label="Every grant action (grant.*)")
    page.get_by_role("button", name="Filter").click()
    assert "action=grant." in page.url
    codes = page.locator(
        "[data-testid=audit-table] tbody tr td:nth-child(2) code"
    ).all_inner_texts()
    assert codes[:2] == ["grant.revoke", "grant.create"] and set(codes) <= {
        "grant.create",
        "grant.revoke",
    }
    assert page.get_by_label("Action").input_value() == "grant."
    page.get_by_label("Action").select_option(label="Role created (role.create)")
    page.get_by_role("button", name="Filter").click()
    codes = page.locator(
        "[data-testid=audit-table] tbody tr td:nth-child(2) code"
    ).all_inner_texts()
    assert codes[0] == "role.create" and set(codes) == {"role.create"}


def test_access_log__admin_sees_a_refused_attempt(demo_world, login, page, live_server):
    login("viewer", "viewer-demo")
    page.goto(f"{live_server.url}/access/")
    assert "403" in page.title() or page.locator("h1").inner_text()
    page.context.clear_cookies()
    login("admin", "admin-demo")
    page.goto(f"{live_server.url}/audit/access/?outcome=denied")
    table = page.locator("[data-testid=access-table]")
    assert "viewer" in table.inner_text()
    assert "denied" in table.inner_text()
    page.screenshot(path=f"{SHOTS}/access-log.png", full_page=True)
