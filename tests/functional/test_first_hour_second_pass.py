"""Browser: first-hour roughness of issue 19 (item 17), each at the size where it was seen."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from console.kernel.audit import AuditAction
from console.kernel.models import AuditRecord
from strategies.documents.models import Document
from strategies.documents.services import draft_create
from strategies.releases.models import ApprovalRequest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LAPTOP = {"width": 1366, "height": 900}
STRATEGY = "after_sales_consultation"


# 17a --------------------------------------------------------------------------------------------
def test_readme_tour__ops_publishes_a_new_version_to_prod__it_becomes_the_approval_request(
    demo_world, login, live_server
):
    """The README's ops step: a new version, published to prod, becomes an approval request —
    although the demo world already has ops' request for v3 waiting there (it gives way)."""
    document = Document.objects.get(agent__key="assistant_professional", key=STRATEGY)
    ops = get_user_model().objects.get(username="ops")
    newest = document.versions.order_by("-number").first()
    draft = draft_create(
        document=document,
        body={**newest.body, "budget": {**newest.body["budget"], "max_input_tokens": 7000}},
        actor=ops,
        parent=newest,
    )
    [waiting] = ApprovalRequest.objects.filter(status="pending", environment__key="prod")
    assert (waiting.requested_by.username, waiting.version.number) == ("ops", 3)

    page = login("ops", "ops-demo")
    page.set_viewport_size(LAPTOP)
    page.goto(
        f"{live_server.url}/releases/assistant_professional/{STRATEGY}/prod/publish/"
        f"?version={draft.number}"
    )
    expect(page.locator("[data-replaces]")).to_contain_text("Your request for v3")
    expect(page.locator("[data-replaces]")).to_contain_text("replaced by this one")
    page.fill("#publish-reason", "The tour's change")
    page.click("#publish-form button[type=submit]")

    message = page.locator(".messages")
    expect(message).to_contain_text(f"v{draft.number} waits for approval in prod")
    expect(message).to_contain_text("It replaces your request for v3.")
    pending = ApprovalRequest.objects.get(status="pending", environment__key="prod")
    assert pending.version.number == draft.number
    waiting.refresh_from_db()
    assert waiting.status == "withdrawn"
    assert waiting.decision_note == f"Replaced by a request for v{draft.number}."
    assert AuditRecord.objects.filter(
        action=AuditAction.APPROVAL_WITHDRAW.value, target_id=str(waiting.pk)
    ).exists()


# 17d --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("username", ["admin", "ops", "support"])
def test_header__every_role_at_1366_px__one_row(demo_world, login, username):
    page = login(username, f"{username}-demo")
    page.set_viewport_size(LAPTOP)
    page.reload()
    bar = page.locator(".topbar")
    items = bar.locator(".brand, .nav-links a, #request-search, .nav-user-name, .nav-user button")
    tops = {
        round(box["y"])
        for box in (items.nth(i).bounding_box() for i in range(items.count()))
        if box
    }
    height = bar.bounding_box()["height"]
    assert height <= 64, f"the header is {height:.0f} px high at 1366 px: it wrapped"
    assert max(tops) - min(tops) < 24, f"header items on several rows: {sorted(tops)}"
