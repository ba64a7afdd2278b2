"""Browser: README.md's "A five-minute tour (demo world)", row by row, as the role each row
names (issue 32 item 12), on what `make run` gives a newcomer: a freshly loaded demo world (the
same `load_demo`), a live server, a real Celery worker (the impact preview) and the demo
traffic as a real process (`manage.py demo_traffic`, as `make run` starts it: three runtimes in
sg-test, one in each other environment).

The rows are walked in an order that keeps each one true as written: ops2 reviews ops' waiting
prod request (with its saved preview) before ops' own publish to prod would replace it;
support reads v3's health in sg-test before ops publishes v4 there; admin first sees that prod
can be rolled back on the fresh world, and rolls it back last. Assertions rest on ids, data
attributes and figures, not on sentences other pages may reword; nothing is parsed from the
README."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import threading
import time

import pytest
from playwright.sync_api import expect

from console.kernel.models import AccessLogEntry, AuditRecord
from strategies.releases.models import ApprovalRequest, Release
from tests.engines import child_env
from tests.functional.steps import run_impact_preview
from tests.runtime_sim import ROOT
from traces.previews.models import Preview

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

AGENT = "assistant_professional"
STRATEGY = "after_sales_consultation"
LAPTOP = {"width": 1366, "height": 900}


@contextlib.contextmanager
def demo_traffic(console_url: str):
    """`manage.py demo_traffic` against the live server, as `make run` starts it (quicker: a
    request per environment every second, config polled every second); yields its first line
    once its runtimes hold their configuration; stopped after."""
    proc = subprocess.Popen(
        [sys.executable, "-u", "manage.py", "demo_traffic", "--console", console_url]
        + ["--interval", "1", "--poll", "1"],
        cwd=ROOT,
        env=child_env(LOG_LEVEL="WARNING"),  # as `make run` without VERBOSE
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []

    def read() -> None:  # drained all along: a full pipe would stall the runtimes
        assert proc.stdout is not None
        lines.extend(proc.stdout)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield _wait_for(
            lambda: (
                next((line for line in lines if line.startswith("Demo traffic:")), None)
                or (proc.poll() is not None and pytest.fail("".join(lines)))
            ),
            timeout=60,
            what="the demo traffic's runtimes hold their configuration",
        )
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
        if proc.poll() is None:
            proc.kill()
        reader.join(timeout=5)


def _wait_for(condition, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"{what}: not met in {timeout:.0f} s"
        time.sleep(0.3)
    return value


def _live(environment: str) -> int:
    """The strategy's version live in `environment`."""
    release = Release.objects.get(document__key=STRATEGY, environment__key=environment)
    return release.version.number


def _cell(page, environment: str):
    return page.locator(
        f"#releases-{AGENT} tr[data-document='{STRATEGY}'] td[data-environment='{environment}']"
    )


def test_readme_tour__every_row_as_its_role__on_a_fresh_demo_world(
    demo_world, browser, live_server, celery_worker_process, settings
):
    settings.CELERY_TASK_DEFAULT_QUEUE = celery_worker_process
    contexts = []

    def as_role(username: str):
        context = browser.new_context(viewport=LAPTOP, base_url=live_server.url)
        contexts.append(context)
        page = context.new_page()
        page.goto("/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", f"{username}-demo")
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        return page

    try:
        with demo_traffic(live_server.url) as started:
            assert "5 simulated runtimes" in started  # sg-test's three, one in each other
            admin = as_role("admin")
            _admin_sees_prod_can_be_rolled_back(admin)
            _ops2_reviews_the_waiting_prod_request_and_approves(as_role("ops2"))
            _support_reads_req_92_and_v3s_health_against_v2(as_role("support"))
            _ops_drafts_previews_publishes(as_role("ops"))
            _admin_rolls_prod_back_then_access_and_audit(admin)
    finally:
        for context in contexts:
            context.close()


# --- admin, on the fresh world: prod has a previous release to go back to ------------------------
def _admin_sees_prod_can_be_rolled_back(page):
    page.goto(f"/releases/?agent={AGENT}")
    expect(_cell(page, "prod").get_by_role("link", name="Roll back…")).to_be_visible()


# --- ops2: Releases → Waiting for approval: the diff, the saved preview, approve ------------------
def _ops2_reviews_the_waiting_prod_request_and_approves(page):
    [waiting] = ApprovalRequest.objects.filter(status="pending", environment__key="prod")
    assert (waiting.requested_by.username, waiting.version.number) == ("ops", 3)
    page.goto(f"/releases/?agent={AGENT}")
    page.locator(f"[data-approval='{waiting.pk}']").get_by_role("link").click()
    page.wait_for_url(f"**/approvals/{waiting.pk}/")
    # the diff against what is live in prod (v2)
    expect(page.locator("#change-preview .diff-list li").first).to_be_visible()
    # the saved impact preview, computed by the previews' replay when the world was loaded
    summary = page.locator("#impact-summary")
    expect(summary).to_have_attribute("data-state", "complete")
    preview = Preview.objects.get(version=waiting.version, environment__key="prod")
    assert preview.state == Preview.State.COMPLETE and preview.report["traces_read"] > 0
    expect(page.locator("#impact-report")).to_be_visible()
    # it warns that nothing could be judged (prod's traces never held recent_dialogue, which v3
    # reads), so the approval is confirmed by name
    danger = page.locator("#approve-form input[name=confirm_danger]")
    expect(danger).to_have_attribute("data-danger", "nothing_judged")
    danger.check()
    page.click("#approve-form button[type=submit]")
    _wait_for(
        lambda: _live("prod") == 3,
        what="prod serves v3 after ops2's approval",
    )


# --- support: a request id, its trace, v3's health in sg-test, the Replay card --------------------
def _support_reads_req_92_and_v3s_health_against_v2(page):
    page.keyboard.press("/")  # focuses the search box
    page.keyboard.type("req-92")
    page.keyboard.press("Enter")
    page.wait_for_url("**/traces/req-92/")
    expect(page.locator("#candidates [data-decision-group=irrelevant]")).to_have_count(1)
    expect(page.locator("#where-to-look")).to_be_visible()
    for request_id in ("req-93", "req-94", "req-95", "req-96", "req-97"):
        assert page.goto(f"/traces/{request_id}/").status == 200
        expect(page.locator("#candidates")).to_be_visible()
    assert AccessLogEntry.objects.filter(
        actor_label="support", action="trace.view", target_id="req-92"
    ).exists()

    # Releases → the small chart of the strategy in sg-test: v3 live against v2 before it
    page.goto(f"/releases/?agent={AGENT}")
    page.locator(f'[data-health-glance="{STRATEGY}-sg-test"]').click()
    rates = page.locator("#health-rates")
    expect(rates.locator("th[data-column=live]")).to_contain_text("v3")
    expect(rates.locator("th[data-column=previous]")).to_contain_text("v2")
    assert rates.locator("[data-metric^='outcome:']").count() > 0  # outcome rates
    # what changed: v3 degrades to the general policy on order timeouts, with its request ids
    degraded = rates.locator("[data-metric='degraded:general_policy_only']")
    degraded.locator("[data-column=live] [data-requests]").click()
    ids = page.locator("#health-request-ids tbody tr a.mono")
    expect(ids.first).to_be_visible()
    ids.first.click()
    page.wait_for_url(re.compile(r".*/traces/[^/]+/.*"))
    # its Replay card: the version it used reproduces the record
    page.click("#replay-run")
    expect(page.locator("#replay-finding")).to_contain_text("reproduces")


# --- ops: the grid, a draft, Compare, Preview impact, publish (runtimes), prod's request ----------
def _ops_drafts_previews_publishes(page):
    page.goto(f"/agents/{AGENT}/")
    expect(page.locator("#profile-grid")).to_be_visible()  # the contextSections grid

    page.goto(f"/agents/{AGENT}/documents/{STRATEGY}/")
    page.click("text=New draft from v3")
    expect(page.locator("h1")).to_contain_text("draft v4")
    page.fill("#id_max_extra_reads", "50")  # an error at its field as you type
    expect(page.locator("#fe-max_extra_reads")).to_contain_text("max_extra_reads")
    page.fill("#id_max_extra_reads", "2")
    expect(page.locator("#validation [data-path=max_extra_reads]")).to_have_count(0)
    page.fill("#id_budget_max_input_tokens", "4000")
    expect(page.locator("#json-editor")).to_have_value(re.compile(r'"max_input_tokens": 4000'))
    page.select_option("#environment", "bank-uat")
    expect(page.locator("[data-environment=bank-uat]")).to_contain_text("general_policy_only")
    page.fill("#draft-note", "Budget 4000")
    page.click("text=Save and freeze as v4")
    expect(page.locator("h1")).to_have_text(f"{STRATEGY} v4")
    page.click("text=Compare")
    page.select_option("#compare-a", "1")
    page.select_option("#compare-b", "4")
    page.click("button:has-text('Compare')")
    expect(page.locator(".changes")).to_contain_text("applicable_policy")

    # Preview impact on sg-test: the worker replays the last 7 days; ready → budget_exceeded
    run_impact_preview(page, agent=AGENT, document=STRATEGY, version=4, environment="sg-test")
    worse = page.locator('#status-matrix td[data-old="ready"][data-new="budget_exceeded"]')
    assert int(worse.get_attribute("data-count")) > 0

    # Releases: publish v4 to sg-test; the publish page shows the saved preview and its warning
    page.goto(f"/releases/?agent={AGENT}")
    _cell(page, "sg-test").get_by_role("link", name="Publish…").click()
    # choosing the version reloads the preview and the form's actions (htmx): wait for it
    with page.expect_response(lambda response: "/publish/" in response.url):
        page.select_option("#version-select", "4")
    page.wait_for_load_state("networkidle")
    expect(page.locator("#impact-summary")).to_have_attribute("data-state", "complete")
    expect(page.locator("#impact-danger")).to_be_visible()  # traces get worse: confirm by name
    confirm = page.locator("#publish-form input[name=confirm_danger]")
    confirm.check()
    expect(confirm).to_be_checked()
    page.fill("#publish-reason", "Budget 4000, previewed")
    page.click("#publish-form button[type=submit]")
    _wait_for(
        lambda: _live("sg-test") == 4,
        what="sg-test serves v4",
    )
    # the Runtimes card: the demo's three sg-test runtimes take v4 and say so
    summary = page.locator(f"#runtimes-{AGENT} [data-environment=sg-test] [data-summary]")

    def three_serve_v4() -> bool:
        page.goto(f"/releases/?agent={AGENT}")
        summary.wait_for()
        text = summary.inner_text()
        return "3 of 3 runtimes serve" in text and f"{STRATEGY} v4" in text

    _wait_for(three_serve_v4, timeout=30, what="3 of 3 runtimes serve v4 in sg-test")
    # Shadow and staged rollout start from the sg-test cell (their journeys have their tests)
    expect(_cell(page, "sg-test").locator("[data-shadow-start]")).to_be_visible()
    expect(_cell(page, "sg-test").locator("[data-rollout-start]")).to_be_visible()

    # a publish to prod becomes an approval request, which ops cannot approve
    page.goto(f"/releases/{AGENT}/{STRATEGY}/prod/publish/?version=4")
    danger = page.locator("#publish-form input[name=confirm_danger]")
    if danger.count():
        danger.check()
    page.fill("#publish-reason", "Budget 4000 after sg-test")
    page.click("#publish-form button[type=submit]")
    request = _wait_for(
        lambda: ApprovalRequest.objects.filter(
            status="pending", environment__key="prod", version__number=4
        ).first(),
        what="the prod approval request",
    )
    page.goto(f"/releases/{AGENT}/approvals/{request.pk}/")
    expect(page.locator("#approve-form")).to_have_count(0)


# --- admin: roll prod back in one step, with a reason; Access; Audit and the access log -----------
def _admin_rolls_prod_back_then_access_and_audit(page):
    page.goto(f"/releases/?agent={AGENT}")
    _cell(page, "prod").get_by_role("link", name="Roll back…").click()
    expect(page.locator("#change-preview")).to_be_visible()
    page.fill("#rollback-reason", "The tour: v3 answers worse in prod")
    page.click("#rollback-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/releases/.*"))
    _wait_for(
        lambda: _live("prod") == 2,
        what="prod back on v2",
    )

    page.goto("/access/")
    matrix = page.locator("[data-testid=people-matrix]")
    for username in ("ops", "ops2", "support", "admin", "viewer"):
        expect(matrix.locator(f"[data-person={username}]")).to_be_visible()

    page.goto("/audit/")
    expect(page.locator("[data-testid=audit-table]")).to_contain_text("admin")
    # field by field: ops' edit of the draft (budget 4000) on its audit row
    edit = AuditRecord.objects.filter(actor_label="ops", action="draft.update").last()
    page.goto(f"/audit/{edit.pk}/")
    expect(page.locator("[data-testid=audit-changes]")).to_contain_text("max_input_tokens")
    page.goto("/audit/access/?actor=support")
    expect(page.locator("[data-testid=access-table]")).to_contain_text("req-92")
