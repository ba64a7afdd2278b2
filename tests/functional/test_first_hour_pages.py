"""Browser: the rough edges a new user hit in the first hour (issue 12, "Pages" 5–7 and 9–14),
each shown in Chromium at the size where it was seen."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from console.kernel.models import Grant
from strategies.catalog.models import Agent, Environment
from strategies.catalog.services import manifest_record
from strategies.documents.models import Document
from strategies.releases.services import release_publish
from tests.factories import TraceFactory
from tests.functional.layout import LAPTOP, PHONE, clipped_selects, sideways_scroll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AP = "/agents/assistant_professional"
STRATEGY = f"{AP}/documents/after_sales_consultation"
RELEASES = "/releases/assistant_professional/after_sales_consultation"
NOT_A_HANDLER = "is not a handler of the bank-uat runtime"


def _rgb(text: str) -> tuple[float, ...]:
    return tuple(float(n) for n in re.findall(r"[\d.]+", text)[:3])


def _over(color: str, base: str) -> str:
    """`color` as seen on `base` (CSS rgba() composited over an opaque colour)."""
    numbers = [float(n) for n in re.findall(r"[\d.]+", color)]
    alpha = numbers[3] if len(numbers) > 3 else 1.0
    mixed = [alpha * c + (1 - alpha) * b for c, b in zip(numbers[:3], _rgb(base), strict=True)]
    return "rgb({:.0f}, {:.0f}, {:.0f})".format(*mixed)


def _contrast(fg: str, bg: str) -> float:
    def luminance(rgb):
        channels = [c / 255 for c in rgb]
        linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    high, low = sorted((luminance(_rgb(fg)), luminance(_rgb(bg))), reverse=True)
    return (high + 0.05) / (low + 0.05)


def _styles(page, selector: str) -> dict:
    return page.eval_on_selector(
        selector,
        """el => { const s = getComputedStyle(el);
                   return {color: s.color, background: s.backgroundColor, caret: s.caretColor}; }""",
    )


# 5 ----------------------------------------------------------------------------------------------
def test_header_search__typed_text_and_caret_readable_on_the_dark_bar(demo_world, login):
    page = login("support", "support-demo")
    page.keyboard.press("/")
    page.keyboard.type("req-9")

    bar = _styles(page, ".topbar")["background"]
    focused = _styles(page, "#request-search")
    box = _over(focused["background"], bar)  # what the eye sees behind the text
    assert page.evaluate("document.activeElement.id") == "request-search"
    assert _contrast(focused["color"], box) >= 7  # the text while typing
    assert _contrast(focused["caret"], box) >= 7  # the caret
    assert _contrast(box, bar) < 2  # still part of the dark bar, not a white hole in it
    page.locator("h1").click()  # and readable when it does not have the focus
    idle = _styles(page, "#request-search")
    assert _contrast(idle["color"], _over(idle["background"], bar)) >= 7


# 6 ----------------------------------------------------------------------------------------------
MAIN_PAGES = [
    "/",
    f"{AP}/",  # the profile grid
    "/traces/req-92/",
    "/traces/req-96/",
    "/traces/",
    "/agents/",
    f"{AP}/strategies/",
    f"{STRATEGY}/",
    f"{STRATEGY}/versions/3/",
    "/releases/",
    "/releases/assistant_professional/history/",
    f"{RELEASES}/bank-uat/publish/?version=3",
    "/audit/",
    "/audit/access/",
    "/access/",
    "/access/grants/new/",
    "/access/roles/new/",
    "/traces/search?q=REQ-92",
    f"{AP}/health/sg-test/after_sales_consultation/",
    f"{RELEASES}/sg-test/shadow/",
    f"{RELEASES}/sg-test/rollout/",
    f"{AP}/documents/after_sales_consultation/preview/",
]


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["390", "1366"])
def test_main_pages__no_sideways_scroll__wide_tables_scroll_in_their_card(
    demo_world, login, viewport
):
    page = login("admin", "admin-demo")
    page.set_viewport_size(viewport)
    too_wide, clipped_choices = {}, {}
    for path in MAIN_PAGES:
        page.goto(path)
        overflow = sideways_scroll(page)
        if overflow > 0:
            too_wide[path] = overflow
        clipped = clipped_selects(page)
        if clipped:
            clipped_choices[path] = clipped
        # The header wraps instead of running past the edge: every link is on the screen.
        for box in page.locator(".topbar a, .topbar button").evaluate_all(
            "els => els.map(e => e.getBoundingClientRect().right)"
        ):
            assert box <= viewport["width"] + 0.5, path
    assert too_wide == {}
    assert not clipped_choices, clipped_choices  # a select shows its whole choice

    if viewport is PHONE:
        # On a phone the candidates are blocks: the reason is on the screen, not off to the right.
        page.goto("/traces/req-92/")
        reason = page.locator("#candidates .candidate-reason").first
        expect(reason).to_be_visible()
        assert reason.bounding_box()["x"] + reason.bounding_box()["width"] <= viewport["width"]


def test_profile_grid_at_1366__fills_its_cards__prod_column_fully_visible(demo_world, login):
    page = login("ops", "ops-demo")
    page.set_viewport_size(LAPTOP)
    page.goto(f"{AP}/")
    tables = page.locator("#profile-grid table.matrix")
    expect(tables).to_have_count(3)  # user_context, query_context, pipeline switches
    for i in range(tables.count()):
        geometry = tables.nth(i).evaluate(
            """t => { const wrap = t.closest('.table-wrap');
                      const last = t.querySelector('thead th:last-child').getBoundingClientRect();
                      const cells = [...t.querySelectorAll('tbody tr > :last-child')]
                          .map(c => c.getBoundingClientRect().right);
                      return {table: t.getBoundingClientRect().width, wrap: wrap.clientWidth,
                              scroll: wrap.scrollWidth, right: wrap.getBoundingClientRect().right,
                              last_header: last.right, last_cells: Math.max(...cells),
                              header: last.width}; }"""
        )
        assert geometry["scroll"] <= geometry["wrap"]  # nothing hidden behind a scrollbar
        assert geometry["table"] >= geometry["wrap"] - 2  # the table spans its card
        assert geometry["last_header"] <= geometry["right"] + 0.5  # prod column not clipped
        assert geometry["last_cells"] <= geometry["right"] + 0.5
    prod = page.locator("table[data-block=query_context] thead th").last
    assert prod.inner_text().strip() == "prod"


# 7 ----------------------------------------------------------------------------------------------
def test_refused_publish__keeps_reason__button_disabled_with_why__refusal_said_once(
    demo_world, login
):
    from console.demo.documents import manifest_body

    bank_uat = Environment.objects.get(key="bank-uat")
    page = login("ops", "ops-demo")

    # What the page already knows: bank-uat's runtime cannot serve v3 → no enabled button.
    page.goto(f"{RELEASES}/bank-uat/publish/?version=3")
    button = page.locator("#publish-actions button[type=submit]")
    expect(button).to_be_disabled()
    why = page.locator("#publish-blocked")
    expect(why).to_contain_text("the bank-uat runtime lacks what v3 needs")
    assert button.get_attribute("aria-describedby") == "publish-blocked"
    # Another version: the check and the button follow (htmx swaps both).
    page.select_option("#version-select", "1")
    expect(button).to_be_enabled()
    expect(page.locator("#publish-blocked")).to_have_count(0)
    page.select_option("#version-select", "3")
    expect(button).to_be_disabled()

    # A page loaded while the runtime could serve v3; it stops before the click.
    manifest_record(environment=bank_uat, body=manifest_body("sg-test"), reported_by="test")
    page.goto(f"{RELEASES}/bank-uat/publish/?version=3")
    expect(button).to_be_enabled()
    page.fill("#publish-reason", "INC-204: customers need the policy answer")
    manifest_record(environment=bank_uat, body=manifest_body("bank-uat"), reported_by="test")
    button.click()

    refusal = page.locator("#refusal")
    expect(refusal).to_contain_text("Not published: the bank-uat runtime cannot serve v3")
    expect(page.locator("#publish-reason")).to_have_value(
        "INC-204: customers need the policy answer"
    )
    expect(button).to_be_disabled()
    assert page.locator("body").inner_text().count(NOT_A_HANDLER) == 1  # said once, at the check
    expect(page.locator("[role=alert]")).to_have_count(1)


# 9 ----------------------------------------------------------------------------------------------
def test_draft_editor__publish_only_findings_amber_in_own_words__save_errors_red(demo_world, login):
    page = login("ops", "ops-demo")
    page.goto(f"{STRATEGY}/")
    page.click("text=New draft from v3")
    # The editor checks against the first environment in promotion order from the start.
    expect(page.locator("#environment")).to_have_value("sg-test")
    # An unknown tool: the draft can be saved, but sg-test's runtime cannot serve it.
    page.fill("#id_allowed_tools", "lookup_order, search_policy, fax_tool")

    publish_box = page.locator("#validation [data-blocks=publish]")
    expect(publish_box).to_contain_text("Cannot be published to sg-test yet")
    expect(publish_box).to_contain_text("Saving and freezing still work")
    expect(publish_box).to_contain_text("fax_tool")
    expect(page.locator("#validation")).to_contain_text("The structure is valid")
    field_warning = page.locator("#fe-allowed_tools [data-blocks=publish]")
    expect(field_warning).to_contain_text("Blocks publishing to sg-test:")

    # A structure error at the same time: red, and in words that say it blocks saving.
    page.fill("#id_max_extra_reads", "50")
    save_box = page.locator("#structure-findings")
    expect(save_box).to_contain_text("1 problem to fix before it can be saved")
    expect(page.locator("#fe-max_extra_reads [data-blocks=save]")).to_contain_text("Fix to save:")

    amber = _rgb(_styles(page, "#validation [data-blocks=publish]")["background"])
    red = _rgb(_styles(page, "#structure-findings")["background"])
    assert amber != red
    assert amber[1] > amber[2] + 20 and red[1] < red[0] - 10  # amber (yellowish) vs red (pinkish)
    assert (
        _styles(page, "#fe-allowed_tools li")["background"]
        != _styles(page, "#fe-max_extra_reads li")["background"]
    )
    assert "✕" not in publish_box.inner_text() and "⚠" in publish_box.inner_text()


# 10 ---------------------------------------------------------------------------------------------
def test_anonymous_api_docs__sign_in_first__then_swagger(demo_world, page, live_server):
    page.goto(f"{live_server.url}/api/docs/")
    assert "/login/" in page.url and "next=/api/docs/" in page.url
    expect(page.locator("input[name=username]")).to_be_visible()
    page.fill("input[name=username]", "ops")
    page.fill("input[name=password]", "ops-demo")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/api/docs/")
    expect(page.locator("#swagger-ui")).to_be_attached()
    # The schema stays an API: an anonymous client gets a JSON refusal, not a login page.
    anonymous = page.context.browser.new_context()
    response = anonymous.request.get(f"{live_server.url}/api/schema/?format=json")
    assert response.status in (401, 403)
    assert response.json()["error"]["code"] == "not_authenticated"
    anonymous.close()


# 11 ---------------------------------------------------------------------------------------------
def test_grant_form__one_agent_by_default__user_picked_from_filtered_list__required_marked(
    demo_world, login
):
    page = login("admin", "admin-demo")
    page.goto("/access/grants/new/")
    form = page.locator("main form").first
    assert "---------" not in form.inner_text()
    agent = page.locator("select[name=agent]")
    assert agent.input_value() != "*"  # one agent, not the broadest scope
    assert agent.locator("option").last.inner_text().startswith("All agents")
    for label in ("User", "Role", "Agent", "Reason"):
        marked = page.locator("legend, label", has_text=label).filter(
            has=page.locator(".required-mark")
        )
        assert marked.count() >= 1, label

    # The user comes from the list; typing narrows it (server side, htmx).
    users = page.locator("select[name=username] option")
    expect(users).to_have_count(5)
    page.fill("#user-filter", "supp")
    expect(users).to_have_count(1)
    expect(page.locator("select[name=username]")).to_have_value("support")
    page.select_option("select[name=role]", label="viewer — Reads configuration.")
    page.fill("textarea[name=reason]", "reads the strategies for the weekly review")
    chosen = agent.input_value()
    page.get_by_role("button", name="Review the grant…").click()
    preview = page.locator("[data-testid=grant-preview]")
    expect(preview).to_contain_text(f"support gets the role “viewer” on {chosen}")
    page.get_by_role("button", name="Confirm grant").click()
    expect(page.locator(".messages")).to_contain_text("Granted")
    grant = Grant.objects.get(user__username="support", role__name="viewer")
    assert grant.agent is not None and grant.agent.key == chosen


# 12 ---------------------------------------------------------------------------------------------
def test_rollback__offered_only_where_something_to_go_back_to__no_promotion_advice(
    demo_world, login
):
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.get(username="admin")
    strategy = Document.objects.get(key="after_sales_consultation")
    bank_uat = Environment.objects.get(key="bank-uat")
    # bank-uat goes v2 → v1, so it has v2 to go back to (v2 is not live in sg-test: the
    # promotion order would complain about a publish, not about a rollback).
    release_publish(
        version=strategy.versions.get(number=1),
        environment=bank_uat,
        actor=admin,
        reason="try v1 in UAT",
    )
    page = login("admin", "admin-demo")
    page.goto("/releases/?agent=assistant_professional")
    grid = page.locator("#releases-assistant_professional")

    def rollback_offered(document, environment) -> bool:
        cell = grid.locator(f"tr[data-document={document}] td[data-environment={environment}]")
        return cell.get_by_role("link", name="Roll back…").count() == 1

    assert rollback_offered("after_sales_consultation", "sg-test")  # v1, v2 were live there
    assert rollback_offered("after_sales_consultation", "bank-uat")  # v2 was
    # v1 was live in prod before v2: the README tour's admin rolls prod back (issue 32.12)
    assert rollback_offered("after_sales_consultation", "prod")
    for env in ("sg-test", "bank-uat", "prod"):
        assert not rollback_offered("profile", env)  # only ever v1

    grid.locator(
        "tr[data-document=after_sales_consultation] td[data-environment=bank-uat]"
    ).get_by_role("link", name="Roll back…").click()
    expect(page.locator("h1")).to_have_text("Roll back after_sales_consultation in bank-uat")
    expect(page.locator("#change-preview")).to_contain_text("What changes in bank-uat")
    body = page.locator("main").inner_text()
    assert "usual order" not in body and "Not live in" not in body
    # The publish page of the same move still gives the advice.
    page.goto(f"{RELEASES}/bank-uat/publish/?version=2")
    assert "usual order" in page.locator("main").inner_text()


# 13 ---------------------------------------------------------------------------------------------
SEED_WORDS = re.compile(r"document 0\d\d|§|seed|closed hours|\br\d+\b", re.IGNORECASE)


def test_operator_words__no_seed_jargon__statuses_in_words__terms_explained(demo_world, login):
    page = login("admin", "admin-demo")
    for path in (
        f"{AP}/",
        f"{STRATEGY}/",
        f"{STRATEGY}/versions/3/",
        "/releases/",
        "/releases/assistant_professional/history/",
        f"{RELEASES}/prod/publish/?version=3",
        "/traces/",
        "/",
    ):
        page.goto(path)
        text = page.locator("main").inner_text()
        found = SEED_WORDS.findall(text)
        assert not found, (path, found)

    page.goto("/traces/")
    statuses = page.locator("#f-status option").all_inner_texts()
    decisions = page.locator("#f-decision option").all_inner_texts()
    assert not [words for words in statuses + decisions if "_" in words]
    assert "missing required data" in statuses and "budget exceeded" in statuses
    assert "over budget" in decisions
    tile = page.locator("#last-day [data-status=missing_required_data]")
    expect(tile).to_contain_text("missing required data")
    assert "required item could not be obtained" in tile.get_attribute("title")
    expect(page.locator("#last-day-title")).to_contain_text("Last 24 hours")
    assert page.locator("#last-day-title .help-term").get_attribute("title")
    page.goto("/traces/?status=missing_required_data")
    expect(page.locator(".chips")).to_contain_text("status: missing required data")

    page.goto("/releases/assistant_professional/history/")
    change = page.locator(".timeline .help-term").first
    expect(change).to_contain_text(re.compile(r"change \d+"))
    assert "publishes and rollbacks" in change.get_attribute("title")
    page.goto(f"{AP}/")
    expect(page.locator(".page-header-sub")).not_to_contain_text("document")


# 14 ---------------------------------------------------------------------------------------------
def test_pasted_request_id_in_other_case_or_environment__close_matches_suggested(demo_world, login):
    # The same id of an agent support may not investigate: never suggested.
    TraceFactory(
        request_id="req-92",
        agent=Agent.objects.get(key="assistant_lite"),
        environment=Environment.objects.get(key="prod"),
        occurred_at=timezone.now(),
    )
    page = login("support", "support-demo")
    page.keyboard.press("/")
    page.keyboard.type("REQ-92")
    page.keyboard.press("Enter")

    expect(page.locator("#trace-not-found")).to_contain_text("No trace with exactly REQ-92")
    suggestions = page.locator("#trace-suggestions tbody tr")
    expect(suggestions).to_have_count(1)
    expect(suggestions.first).to_contain_text("other letter case")
    expect(suggestions.first).to_contain_text("sg-test")
    suggestions.first.get_by_role("link", name="req-92").click()
    page.wait_for_url("**/traces/req-92/**")
    expect(page.locator("h1")).to_have_text("Trace req-92")

    # The exact id, asked for in an environment where it is not: the one that exists.
    page.goto("/traces/search?q=req-92&environment=prod")
    expect(page.locator("#trace-not-found")).to_contain_text("in prod")
    expect(suggestions).to_have_count(1)
    expect(suggestions.first).to_contain_text("other environment")

    # Nothing close: the plain answer.
    page.goto("/traces/search?q=req-4711")
    expect(page.locator("#trace-not-found")).to_contain_text("No trace with request_id req-4711")
    expect(page.locator("#trace-suggestions")).to_have_count(0)
