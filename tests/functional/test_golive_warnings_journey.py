"""Browser: the go-live pages make danger visible (issue 30). Ops publish a version whose saved
preview turns most of sg-test's replayed traffic into budget_exceeded: the page warns, names
it, and publishing needs the confirmation that says so. The approver of a prod request whose
preview could judge nothing (prod's traces are all counted apart) reads "nothing could be
judged" as a warning — never "no status changes" — and confirms it to approve."""

from __future__ import annotations

import copy
import re

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from strategies.catalog.models import Environment
from strategies.documents.models import Document
from strategies.documents.services import draft_create, version_freeze
from strategies.releases.models import ApprovalRequest, Release
from strategies.releases.services import release_publish
from tests.functional.layout import layout_faults
from traces.previews import services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AGENT = "assistant_professional"
STRATEGY = "after_sales_consultation"


def _v4_budget_4000(ops) -> object:
    document = Document.objects.get(agent__key=AGENT, key=STRATEGY)
    body = copy.deepcopy(document.versions.get(number=3).body)
    body["budget"]["max_input_tokens"] = 4000
    return version_freeze(
        draft=draft_create(document=document, body=body, actor=ops, note="budget 4000"),
        actor=ops,
    )


def _previewed(ops, version, environment_key: str):
    """The saved preview of `version` there, run in this process (what the worker does)."""
    environment = Environment.objects.get(key=environment_key)
    preview, _ = services.preview_request(actor=ops, version=version, environment=environment)
    services.preview_execute(preview.pk)
    preview.refresh_from_db()
    return preview


def test_publish__most_traffic_becomes_budget_exceeded__warned_and_needs_the_confirmation(
    demo_world, login, browser, live_server
):
    ops = User.objects.get(username="ops")
    v4 = _v4_budget_4000(ops)
    _previewed(ops, v4, "sg-test")

    page = login("ops", "ops-demo")
    page.goto(f"/releases/{AGENT}/{STRATEGY}/sg-test/publish/?version=4")

    warning = page.locator('#impact-danger[data-danger="worse"]')
    title = warning.locator(".banner-title").inner_text()
    worse, replayed = map(int, re.search(r"([\d,]+) of ([\d,]+) replayed", title).groups())
    assert worse * 2 > replayed  # most of the replayed traffic
    assert "become budget exceeded" in warning.inner_text()
    assert "no status changes" not in page.content()
    confirm = page.locator("#danger-confirm")
    assert f"{worse:,} of {replayed:,} replayed traces get worse" in confirm.inner_text()
    assert layout_faults(page) == {}

    page.fill("#publish-reason", "budget 4000 on purpose: tighter cost limit")
    page.click("#publish-actions button[type=submit]")
    # Not ticked: the browser keeps the form (the server would refuse it too, 400).
    expect(page.locator("#danger-confirm input:invalid")).to_have_count(1)
    assert (
        Release.objects.get(document__key=STRATEGY, environment__key="sg-test").version.number == 3
    )

    page.check("#danger-confirm input")
    page.click("#publish-actions button[type=submit]")
    page.wait_for_url(re.compile(r".*/releases/\?agent="))
    assert "v4 is live in sg-test" in page.locator(".messages").inner_text()
    assert (
        Release.objects.get(document__key=STRATEGY, environment__key="sg-test").version.number == 4
    )


def test_approval__preview_judged_nothing__says_so_and_needs_the_confirmation(
    demo_world, login, browser, live_server
):
    ops = User.objects.get(username="ops")
    v4 = _v4_budget_4000(ops)
    prod_preview = _previewed(ops, v4, "prod")
    assert prod_preview.report["previewed"] == 0  # prod's v2 traces are all counted apart
    release_publish(
        version=v4, environment=Environment.objects.get(key="prod"), actor=ops, reason="budget 4000"
    )
    approval = ApprovalRequest.objects.get(version=v4, status="pending")

    page = login("ops2", "ops2-demo")
    page.goto(f"/releases/{AGENT}/approvals/{approval.pk}/")

    warning = page.locator('#impact-danger[data-danger="nothing_judged"]')
    assert "Nothing could be judged" in warning.inner_text()
    assert "nothing could be judged" in page.locator("#impact-sentence").inner_text()
    assert "no status changes" not in page.content()
    assert layout_faults(page) == {}

    page.check("#approve-form #danger-confirm input")
    page.click("#approve-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/releases/\?agent="))
    assert Release.objects.get(document__key=STRATEGY, environment__key="prod").version.number == 4
