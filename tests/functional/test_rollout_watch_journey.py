"""Browser journey (issue 23 item 4): in the demo world v2 was rolled out over v3 in sg-test
and completed; during its paired watch the paired guard warned. The admin sees the warning on
the dashboard, clicks "Roll back to v3" once, and the releases page shows v3 live again — the
runtime's configuration following, the rollback's audit row carrying the warning's evidence."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from console.kernel.models import AuditRecord
from strategies.releases.models import Rollout
from strategies.releases.services import rollout_finish, rollout_start, rollout_watch_warn
from tests.factories import runtime_token
from tests.functional.layout import layout_faults
from tests.functional.test_rollout_journey import CELL, STRATEGY, runtime_config, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

EVIDENCE = {
    "guard": "paired",
    "state": "breach",
    "message": "The new version was worse on the same inputs in 9 of 240 requests.",
    "request_ids": ["req-w1", "req-w2", "req-w3", "req-w4", "req-w5"],
}


def declare(environment, *features) -> None:
    from strategies.catalog.selectors import manifest_latest
    from strategies.catalog.services import manifest_record

    body = dict(manifest_latest(environment=environment).body)
    body["features"] = sorted({*body.get("features", []), *features})
    manifest_record(environment=environment, body=body)


def test_watch_journey__warning_on_dashboard__one_click_rollback__previous_version_live(
    demo_world, page, login, live_server, client
):
    from django.contrib.auth import get_user_model

    from strategies.catalog.models import Environment
    from strategies.delivery.config import cache_clear_all
    from strategies.documents.models import Version

    cache_clear_all()  # Redis outlives the test database between runs
    sg = Environment.objects.get(key="sg-test")
    declare(sg, "split", "watch")
    admin = get_user_model().objects.get(username="admin")
    v2 = Version.objects.get(document__key=STRATEGY, number=2)
    rollout = rollout_start(version=v2, environment=sg, actor=admin, plan="all_at_once")
    rollout = rollout_finish(rollout=rollout, actor=admin, reason="baked")
    secret = runtime_token(sg)
    watch = runtime_config(client, secret)["rollouts"][STRATEGY]
    assert (watch["phase"], watch["version"]) == ("watch", 3)
    rollout_watch_warn(rollout=rollout, guard="paired", evidence=EVIDENCE)

    login("admin", "admin-demo")
    warning = page.locator(f"[data-watch-warning='{rollout.key}']")
    warning.wait_for()
    assert "v2 did worse than v3 in sg-test" in warning.inner_text()
    # how many requests it named, not which: their ids are a look at traces (the rollout page)
    assert "5 requests named" in warning.inner_text() and "req-w1" not in warning.inner_text()
    shot(page, "watch-warning-dashboard")
    assert layout_faults(page) == {}  # on a phone too

    warning.locator(f"[data-watch-rollback='{rollout.key}']").click()
    page.wait_for_selector("text=Rolled back: after_sales_consultation v3 is live in sg-test")
    expect(page.locator(f"[data-watch-warning='{rollout.key}']")).to_have_count(0)

    page.goto(f"{live_server.url}/releases/?agent=assistant_professional")
    assert page.locator(f"{CELL} [data-status='live']").inner_text().endswith("v3")
    expect(page.locator(f"{CELL} [data-watch-warning]")).to_have_count(0)
    shot(page, "watch-rolled-back")
    served = runtime_config(client, secret)
    assert served["strategies"][STRATEGY]["version"] == 3
    assert served["rollouts"] == {}
    audit = AuditRecord.objects.get(action="release.rollback")
    assert audit.actor_label == "admin" and audit.after["evidence"]["request_ids"][0] == "req-w1"
    assert not Rollout.objects.get(pk=rollout.pk).watching


def test_watch_journey__operator_without_rollback__button_disabled_with_why(
    demo_world, page, login, live_server
):
    from django.contrib.auth import get_user_model

    from strategies.catalog.models import Environment
    from strategies.documents.models import Version

    sg = Environment.objects.get(key="sg-test")
    declare(sg, "split")
    admin = get_user_model().objects.get(username="admin")
    v2 = Version.objects.get(document__key=STRATEGY, number=2)
    rollout = rollout_start(version=v2, environment=sg, actor=admin, plan="all_at_once")
    rollout = rollout_finish(rollout=rollout, actor=admin, reason="baked")
    rollout_watch_warn(rollout=rollout, guard="paired", evidence=EVIDENCE)

    login("ops", "ops-demo")
    page.goto(f"{live_server.url}/releases/?agent=assistant_professional")

    warning = page.locator(f"{CELL} [data-watch-warning='{rollout.key}']")
    warning.wait_for()
    expect(warning.locator("button[disabled]", has_text="Roll back to v3")).to_have_count(1)
    assert "You may not roll back releases here." in warning.inner_text()
    shot(page, "watch-warning-release-row")
