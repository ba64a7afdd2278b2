"""Browser journey (issue 34 item 1): an admin turns on external change records for sg-test,
ops publishes, the page shows the publish waiting for its change record, the local change
system (tests/change_system.py) calls back approved over real HTTP, and the release history
shows the change number. The request is sent by a real Celery worker."""

from __future__ import annotations

import time

import pytest

from strategies.releases.models import ChangeRecord, Release
from tests.change_system import ChangeSystem
from tests.conftest import celery_worker
from tests.factories import release_setup

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]
STRATEGY = "after_sales_consultation"


@pytest.fixture
def change_system():
    started = ChangeSystem()
    yield started
    started.close()


def wait_until(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_change_approval_journey__require_publish_waits_callback_approves_history_shows_number(
    page, login, live_server, settings, monkeypatch, change_system
):
    release_setup()
    # The change system is on 127.0.0.1, in this process and in the worker's.
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE_TARGETS", "true")
    monkeypatch.setenv("CONSOLE_PUBLIC_URL", live_server.url)

    # The admin turns change records on for sg-test; the secret is shown once.
    login("admin", "admin-pass-1")
    page.goto(f"{live_server.url}/catalog/environments/sg-test/edit/")
    page.click("#change-system-link")
    page.check("#id_requires_change_record")
    page.fill("#id_url", "not a url")
    page.click("#change-system-form button[type=submit]")
    assert "full http(s) URL" in page.inner_text("[data-field='url']")
    page.fill("#id_url", change_system.url)
    page.click("#change-system-form button[type=submit]")
    change_system.secret = page.inner_text("#change-secret .copy-value").strip()
    assert change_system.secret.startswith("whsec_")
    page.click("form[action='/logout/'] button")

    with celery_worker() as queue:
        settings.CELERY_TASK_DEFAULT_QUEUE = queue
        # Ops publishes v2: nothing goes live, the page shows it waiting for its record.
        login("ops", "ops-pass-1")
        page.goto(
            f"{live_server.url}/releases/assistant_professional/{STRATEGY}/sg-test/publish/"
            "?version=2"
        )
        assert "requires an approved change record" in page.inner_text("#change-record")
        page.fill("#publish-reason", "Ticket 81: new escalation wording")
        page.click("#publish-form button[type=submit]")
        page.wait_for_selector("text=waits for change record")
        assert page.get_attribute("#change-record", "data-state") == "waiting"
        assert "Waiting for change record" in page.inner_text("#change-record")
        assert not Release.objects.filter(environment__key="sg-test").exists()
        # The worker sends the signed request to the change system.
        wait_until(lambda: change_system.requests)
    request = change_system.requests[0]
    assert request["verified"] and request["data"]["version"] == 2

    # The change system approves by its signed callback, over real HTTP.
    status, answer = change_system.call_back(
        request["data"]["callback_url"],
        status="approved",
        change_number="CHG0031337",
        content_hash=request["data"]["content_hash"],
        comment="CAB approved",
    )
    assert status == 200, answer
    assert ChangeRecord.objects.get().state == ChangeRecord.State.APPROVED

    # The publish went live; the publish page and the history show the change number.
    page.reload()
    assert page.get_attribute("#change-record", "data-state") == "approved"
    assert "CHG0031337" in page.inner_text("#change-record")
    page.goto(f"{live_server.url}/releases/assistant_professional/history/?environment=sg-test")
    event = page.locator("li[data-event]").first
    assert "v2" in event.inner_text()
    assert "change record chg0031337" in event.inner_text().lower()
    assert event.locator("[data-change-number='CHG0031337']").count() == 1
