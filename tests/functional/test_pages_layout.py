"""Browser (issue 32, items 8 and 9): the pages an operator reads during a release, on a phone
(390 px) and a laptop (1366 px), with what a real runtime sends.

- The trace page of a request from an SDK runtime: it reports the contextSections it rendered
  (the demo's traffic does too, as the SDK's ContextAssembly does), and long unbroken tokens —
  section keys, request, task and item ids, versions — wrap instead of pushing the page
  sideways (483 px on a phone, 194 px at 1366 before).
- The trace page of a request served during a staged rollout: its Shadow run card names the
  two arms instead of calling the served one "live" (item 11).
- The version-health page with a shadow: the shadow's column — the one a shadow review is
  about — is on the screen at 1366 without scrolling (the table was 1,405 px in a 1,230 px
  card), readable on a phone, and the page says how far the shadow agrees with live.
"""

from __future__ import annotations

import copy
from datetime import timedelta

import msgspec
import pytest
from context_runtime import wire
from context_runtime.client import ConfigSnapshot
from django.contrib.auth import get_user_model
from django.utils import timezone

from console.demo import traffic
from strategies.catalog.models import Environment
from strategies.delivery.config import cache_clear_all
from strategies.documents.models import Version
from strategies.documents.services import draft_create, version_freeze
from strategies.releases.services.rollout import rollout_start
from strategies.releases.services.shadow import shadow_start
from tests.factories import post_batch, runtime_token
from tests.factories.sdk_traffic import runtime_config, sdk_traffic
from tests.functional.layout import LAPTOP, PHONE, sideways_scroll
from traces.models import Trace

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

STRATEGY = "after_sales_consultation"
HEALTH = f"/agents/assistant_professional/health/sg-test/{STRATEGY}/"
LONG_ID = "e-" + "7f3c9a1b" * 24  # 194 characters, no break opportunity (an ADK-like id)

# Every element of the page's main column whose right edge is past the viewport, outside a
# card that scrolls on purpose (.table-wrap): what a sideways scroll would be made of.
PAST_THE_EDGE = """() => [...document.querySelectorAll('main *')]
  .filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5)
  .filter(e => !e.closest('.table-wrap'))
  .map(e => `${e.tagName.toLowerCase()}${e.id ? '#' + e.id : ''}: ${e.textContent.trim().slice(0, 40)}`)
  .slice(0, 5)"""


def _faults(page) -> dict:
    return {"scroll": sideways_scroll(page), "past the edge": page.evaluate(PAST_THE_EDGE)}


def _sdk_trace_with_long_tokens(client, secret: str) -> wire.Trace:
    """A consultation as sg-test's SDK runtime reports it, with every free-form token as long
    as the wire allows: the request, task and order ids (the order's item id and source
    version), the principal, and a section key; sent through the ingest endpoint."""
    config = ConfigSnapshot.from_payload(runtime_config(client, secret))
    request = traffic.Request(
        task="T-" + "4" * 98,
        order="A" + "1042" * 24,
        order_revision="r" + "12" * 40,
        principal="shop-a/" + "user417" * 27,
    )
    trace = traffic.run(
        traffic.CONSULTATION,
        config=config,
        request_id=LONG_ID,
        occurred_at=timezone.now() - timedelta(minutes=1),
        request=request,
    )
    assert trace.sections is not None and trace.sections.user_context  # SDK-shaped
    long_key = "state_of_mind_schedule_" + "x" * 77
    trace = msgspec.structs.replace(
        trace,
        sections=wire.Sections(
            user_context=(*trace.sections.user_context, long_key),
            query_context=trace.sections.query_context,
        ),
    )
    response = post_batch(client, secret, body=msgspec.json.encode({"traces": [trace]}))
    assert response.status_code in (200, 202) and response.json()["rejected"] == []
    return trace


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["390", "1366"])
def test_sdk_trace_page__sections_and_long_ids__wrap_no_sideways_scroll(
    demo_world, login, client, viewport
):
    cache_clear_all()  # Redis outlives the test database between runs
    secret = runtime_token(Environment.objects.get(key="sg-test"))
    long_trace = _sdk_trace_with_long_tokens(client, secret)
    # The demo's own traffic reports its sections as the SDK does.
    demo = Trace.objects.get(request_id="req-92")
    assert demo.sections["user_context"] and demo.sections["query_context"]

    page = login("support", "support-demo")
    page.set_viewport_size(viewport)
    for path, trace_sections in (
        ("/traces/req-92/", demo.sections),
        (f"/traces/{LONG_ID}/", msgspec.to_builtins(long_trace.sections)),
    ):
        page.goto(path)
        rendered = page.locator("#trace-sections").inner_text()
        for key in trace_sections["user_context"] + trace_sections["query_context"]:
            assert key in rendered.replace("\n", "")
        assert _faults(page) == {"scroll": 0, "past the edge": []}, path

    # Words first, codes one hover away (issue 32 item 10): the reason and the engine.
    page.goto("/traces/req-92/")
    reason = page.locator("#candidates tr:has(code:text-is('old-chat')) .candidate-reason")
    assert reason.inner_text().startswith("relevance 0.05 is below the threshold")
    assert "below_threshold" not in reason.inner_text()
    assert reason.locator("[title]").get_attribute("title") == "reason code: below_threshold"
    # The phone's "required" tag beside the item: a laptop has the Required column instead.
    tags = page.locator("#candidates .stack-only")
    assert tags.count() and tags.first.is_visible() == (viewport is PHONE)
    engine = page.locator("#trace-engine")
    assert engine.inner_text().startswith("Decided by the SDK's selection engine ")
    assert "rules" not in engine.inner_text() and "rules" in engine.inner_html()


def _shadow_beside_live(client) -> tuple[int, list[wire.Trace]]:
    """v3 with a 4,000-token budget frozen and started as shadow beside live v3 in sg-test by
    ops; sg-test's SDK runtime sends 40 requests."""
    cache_clear_all()
    v4 = _frozen_4k_version()
    sg_test = Environment.objects.get(key="sg-test")
    ops = get_user_model().objects.get(username="ops")
    shadow_start(version=v4, environment=sg_test, actor=ops, reason="Does a 4k budget do?")
    secret = runtime_token(sg_test)
    return v4.number, sdk_traffic(secret, count=40, prefix="shadow-", client=client)


# The shadow's column of the rates table against its card: where its header and its cells end,
# and whether the card hides anything behind a scrollbar.
SHADOW_COLUMN = """(slot) => {
  const table = document.querySelector('#health-rates table');
  const wrap = table.closest('.table-wrap');
  const edge = wrap.getBoundingClientRect().right;
  // A phone hides the column heads (the rows stack, each cell named): those do not count.
  const shown = c => c.offsetParent !== null && c.closest('thead, tbody').getBoundingClientRect().height > 1;
  const cells = [...table.querySelectorAll(`[data-column="${slot}"]`)].filter(shown);
  return {hidden_by_scroll: wrap.scrollWidth - wrap.clientWidth,
          cells: cells.length,
          past_the_card: cells.filter(c => c.getBoundingClientRect().right > edge + 0.5).length,
          past_the_screen: cells.filter(c => c.getBoundingClientRect().right > innerWidth + 0.5).length};
}"""


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["390", "1366"])
def test_version_health_with_a_shadow__shadow_column_on_screen__agreement_named(
    demo_world, login, client, viewport
):
    version, sent = _shadow_beside_live(client)
    stored = {t.request_id: t for t in Trace.objects.filter(request_id__startswith="shadow-")}
    assert len(stored) == len(sent) == 40
    same_status = sum(1 for t in stored.values() if t.shadow["status"] == t.status)

    page = login("ops", "ops-demo")
    page.set_viewport_size(viewport)
    page.goto(HEALTH)
    slot = f"shadow:{version}"
    column = page.evaluate(SHADOW_COLUMN, slot)
    assert column["cells"] > 3  # its header and its rates
    if viewport is LAPTOP:  # the whole column in its card, nothing behind a scrollbar
        assert column == {**column, "hidden_by_scroll": 0, "past_the_card": 0}
    assert column["past_the_screen"] == 0  # on a phone each row stacks its columns
    assert _faults(page) == {"scroll": 0, "past the edge": []}

    # Agreement, the README's word, named plainly: how often the shadow decided as live did.
    agreement = page.locator("#health-agreement")
    assert "Agreement with live" in agreement.locator("h2").inner_text()
    words = agreement.inner_text()
    assert f"v{version} agrees with live v3 on the status of {same_status} of 40 requests" in words
    cell = agreement.locator(f'[data-metric="same_status"] [data-column="{slot}"]')
    assert f"{same_status}/40" in cell.inner_text()


def _frozen_4k_version():
    v3 = Version.objects.get(document__key=STRATEGY, number=3)
    body = copy.deepcopy(v3.body)
    body["budget"]["max_input_tokens"] = 4000
    ops = get_user_model().objects.get(username="ops")
    return version_freeze(draft=draft_create(document=v3.document, body=body, actor=ops), actor=ops)


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["390", "1366"])
def test_rollout_trace__shadow_card_names_both_arms__fits_the_screen(
    demo_world, login, client, viewport
):
    cache_clear_all()
    v4 = _frozen_4k_version()
    sg_test = Environment.objects.get(key="sg-test")
    plan = [{"share": 0.5, "bake_seconds": 3600}, {"share": 1.0, "bake_seconds": 3600}]
    rollout_start(
        version=v4,
        environment=sg_test,
        actor=get_user_model().objects.get(username="ops"),
        plan=plan,
        reason="Half of the tasks on a 4k budget",
    )
    sdk_traffic(runtime_token(sg_test), count=20, prefix="ro-", client=client)
    arms = dict(
        Trace.objects.filter(request_id__startswith="ro-", shadow__isnull=False)
        .order_by("request_id")
        .values_list("rollout_arm", "request_id")
    )
    assert set(arms) == {"new", "old"}  # both arms served, each with the other as shadow

    page = login("support", "support-demo")
    page.set_viewport_size(viewport)
    expected = {
        "new": "v3 (the version it replaces) beside v4 (this request's arm: the rollout's new "
        "version)",
        "old": "v4 (the rollout's new version) beside v3 (this request's arm: the version it "
        "replaces)",
    }
    for arm, request_id in arms.items():
        page.goto(f"/traces/{request_id}/")
        card = page.locator("#shadow-run")
        header = " ".join(card.locator("header").inner_text().split())
        assert expected[arm] in header
        assert "live v" not in card.inner_text()
        assert _faults(page) == {"scroll": 0, "past the edge": []}, request_id
