"""Browser journey (issue 23): in the demo world ops starts a staged rollout of v2 over live v3
in sg-test from the releases page, lands on the rollout page (its step, share, bake and the
guards' states as the evaluator recorded them, with request ids linking to traces, and the
regression sets' results for v2 — issue 35), pauses and resumes it, sees the status part
refresh by itself, and stops it — the runtime's configuration following each step."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from strategies.releases.models import Rollout
from strategies.releases.services import rollout_guard_pause, rollout_record_guards
from tests.factories import bearer, runtime_token
from tests.functional.layout import layout_faults

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SCREENS = Path(__file__).resolve().parents[2] / ".data" / "screens"
STRATEGY = "after_sales_consultation"
CELL = (
    f"#releases-assistant_professional tr[data-document='{STRATEGY}'] "
    "td[data-environment='sg-test']"
)


def shot(page, name):
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENS / f"rollout-{name}.png"), full_page=True)


def runtime_config(client, secret) -> dict:
    response = client.get("/api/v1/runtime/config/assistant_professional", **bearer(secret))
    assert response.status_code == 200
    return response.json()


def declare_split(environment) -> None:
    """The sg-test runtime reports a manifest that declares split support."""
    from strategies.catalog.selectors import manifest_latest
    from strategies.catalog.services import manifest_record

    body = dict(manifest_latest(environment=environment).body)
    body["features"] = sorted({*body.get("features", []), "split"})
    manifest_record(environment=environment, body=body)


def keep_req94() -> None:
    """Support keeps req-94 (its policy bundle cut over the budget): the bundle must be
    selected — v2, with its smaller budget, cuts it too."""
    from django.contrib.auth import get_user_model

    from traces.models import Trace
    from traces.regressions import services as regressions

    support = get_user_model().objects.get(username="support")
    trace = Trace.objects.get(request_id="req-94")
    kept = regressions.regression_set_create(
        actor=support,
        agent=trace.agent,
        strategy=STRATEGY,
        name="policy bundle kept",
        keep_reason="Incident reviews keep their requests",
    )
    regressions.member_add(
        actor=support,
        regression_set=kept,
        trace=trace,
        expectations=[{"kind": "item_selected", "item": "policy-P7"}],
        note="INC-5120",
    )


def confirm(page, dialog_id, reason):
    page.locator(f"#{dialog_id} summary").click()
    panel = page.locator(f"#{dialog_id} .confirm-panel")
    panel.locator("textarea").fill(reason)
    panel.locator("button[type=submit]").click()


def test_rollout_journey__start_see_guards_pause_resume_stop(
    demo_world, page, login, live_server, client
):
    from strategies.catalog.models import Environment
    from strategies.delivery.config import cache_clear_all

    cache_clear_all()  # Redis outlives the test database between runs
    sg = Environment.objects.get(key="sg-test")
    declare_split(sg)
    secret = runtime_token(sg)
    assert runtime_config(client, secret)["rollouts"] == {}
    keep_req94()

    login("ops", "ops-demo")
    page.goto(f"{live_server.url}/releases/?agent=assistant_professional")
    page.click(f"{CELL} a[data-rollout-start]")

    # The start form: v2, custom steps, by task; the check says the runtime applies splits.
    page.select_option("#rollout-version", "2")
    page.wait_for_selector("#rollout-check >> text=How v2 differs from live v3")
    assert "applies split rollouts" in page.inner_text("#rollout-check")
    page.check("input[name=plan][value=custom]")
    page.fill(
        "#rollout-steps",
        '[{"share": 0.1, "bake_seconds": 120}, {"share": 0.5, "bake_seconds": 120},'
        ' {"share": 1.0, "bake_seconds": 120}]',
    )
    page.fill("#rollout-reason", "v2 by steps")
    shot(page, "start")
    page.click("#rollout-form button[type=submit]")

    # The rollout page: step 1 of 3 at 10%, the bake running, the plan as a chart.
    page.wait_for_selector("text=runs: 10% of units get v2 now")
    rollout = Rollout.objects.get()
    assert page.inner_text("#rollout-step").startswith("1 of 3")
    assert "10%" in page.inner_text("#rollout-share")
    expect(page.locator("#rollout-bake progress")).to_have_count(1)
    expect(page.locator(".rollout-bar")).to_have_count(3)
    assert page.locator("#rollout-status").get_attribute("data-state") == "running"
    served = runtime_config(client, secret)
    assert served["rollouts"][STRATEGY]["id"] == rollout.key
    assert served["rollouts"][STRATEGY]["share"] == 0.1
    assert served["strategies"][STRATEGY]["version"] == 3
    # The regression sets against v2, as the start page showed them: req-94's bundle is cut,
    # the recorded and v2's decisions side by side
    kept = page.locator("#rollout-regressions [data-set='policy bundle kept']")
    expect(kept).to_have_attribute("data-outcome", "failed")
    member = kept.locator("[data-request-id='req-94']")
    expect(member).to_contain_text("policy-P7 must be selected")
    expect(member.locator("table.side-by-side")).to_contain_text("over_budget")

    # The evaluator records the guards; the status part polls and shows them by itself.
    rollout_record_guards(
        rollout=rollout,
        guards=[
            {
                "name": "minimum_data",
                "label": "Enough traffic",
                "state": "insufficient",
                "message": "Not enough traffic yet: 40 of the 100 requests needed on the new "
                "version (v2).",
            },
            {
                "name": "paired",
                "label": "Same requests, both versions",
                "state": "ok",
                "message": "The new version (v2) did no worse than the current version (v3) on "
                "the same 412 requests.",
                "statistics": "0 of 412 worse; the 95% lower bound 0% is under 0.50%.",
                "evidence": {"kinds": {"status": {"request_ids": ["req-92"]}}},
            },
        ],
    )
    page.wait_for_selector("[data-guard='paired'][data-guard-state='ok']", timeout=10_000)
    guards_text = page.inner_text("#rollout-guards")
    assert "40 of the 100 requests needed on the new version (v2)" in guards_text
    expect(kept).to_have_attribute("data-outcome", "failed")  # still there after the poll
    assert "too little data yet" in guards_text and "insufficient" not in guards_text
    # the statistics wait one disclosure away
    figures = page.locator("[data-guard='paired'] details")
    assert not figures.locator("span").is_visible()
    figures.locator("summary").click()
    assert "95% lower bound" in figures.inner_text()
    link = page.locator("[data-guard='paired'] a", has_text="req-92")
    assert "/traces/req-92/" in link.get_attribute("href")
    shot(page, "running")
    assert layout_faults(page) == {}  # on a phone too

    # Pause, then resume.
    confirm(page, "rollout-pause", "Looking at req-92")
    page.wait_for_selector("text=is paused")
    assert page.locator("#rollout-status").get_attribute("data-state") == "paused"
    assert runtime_config(client, secret)["rollouts"][STRATEGY]["share"] == 0.1  # held
    confirm(page, "rollout-resume", "Looks fine")
    page.wait_for_selector("text=runs again")
    assert page.locator("#rollout-status").get_attribute("data-state") == "running"

    # A guard pauses it while the page is open: the status part says so by itself.
    rollout_guard_pause(
        rollout=Rollout.objects.get(),
        guard="attribution",
        evidence={
            "guard": "attribution",
            "label": "Providers failing both versions",
            "message": "The order_delivery provider returned nothing for both versions in 31% "
            "of requests: that is the provider, not the version, so a person decides.",
            "statistics": "In every version served, the 95% lower bound 27% exceeds 5%.",
        },
        reason="The order_delivery provider returned nothing for both versions in 31% of "
        "requests: that is the provider, not the version, so a person decides.",
    )
    page.wait_for_selector("#rollout-changed", timeout=10_000)
    assert page.locator("#rollout-status").get_attribute("data-state") == "paused"
    assert "order_delivery provider returned nothing" in page.inner_text("#rollout-why")
    evidence_text = page.inner_text("#rollout-evidence")
    assert evidence_text.startswith("Evidence: providers failing both versions")
    assert "order_delivery provider returned nothing" in evidence_text
    shot(page, "guard-paused")
    page.click("#rollout-changed a")
    expect(page.locator("#rollout-resume")).to_have_count(1)

    # Stop: runtimes serve v3 alone again; the page says who and why.
    confirm(page, "rollout-stop", "Not this week")
    page.wait_for_selector("text=is stopped")
    assert page.locator("#rollout-status").get_attribute("data-state") == "stopped"
    assert "Not this week" in page.inner_text("#rollout-why")
    expect(page.locator("#rollout-actions")).to_have_count(0)
    # Ended, and the page says so: how, when, at which step and share — and that nothing is
    # split now (no "Share on v2: 10%" as if it still held)
    assert page.inner_text("#rollout-now-title") == "Ended"
    ended = page.inner_text("#rollout-ended")
    assert ended.startswith("Stopped") and "by ops, at step 1 of 3 (10% of tasks on v2)" in ended
    now = page.inner_text("#rollout-now")
    assert now.startswith("Nothing is split now.")
    assert "Everyone went back to v3 when it ended; live in sg-test now: v3." in now
    expect(page.locator("#rollout-share")).to_have_count(0)
    assert "last judged before it ended" in page.inner_text("#rollout-guards")
    assert page.locator("[data-step-state='ended']").inner_text().endswith("ended here")
    assert "stopped by ops · step 1 of 3 (10%)" in page.inner_text("#rollout-log")
    shot(page, "stopped")
    assert layout_faults(page) == {}  # at 390 and 1366 px
    served = runtime_config(client, secret)
    assert served["rollouts"] == {} and served["strategies"][STRATEGY]["version"] == 3

    # The releases grid offers a new rollout again.
    page.goto(f"{live_server.url}/releases/?agent=assistant_professional")
    expect(page.locator(f"{CELL} [data-rollout]")).to_have_count(0)
    assert page.locator(f"{CELL} a[data-rollout-start]").is_visible()
