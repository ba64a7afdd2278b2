"""Support opens a request that ran a shadow version (issue 22, items 2 and 6): the Shadow run
card says what the shadow would have decided, and a click on a differing candidate lands on
its row of the candidate table — in a real browser, from a phone to a wide screen. A shadow of
the live version that disagrees is called a runtime fault."""

from __future__ import annotations

import orjson
import pytest

from strategies.catalog.models import Environment
from tests.factories import post_batch, runtime_token
from tests.factories.traces import SHADOW_LIVE_BODY, shadowed_trace
from tests.functional.layout import sideways_scroll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SMALLER = {**SHADOW_LIVE_BODY, "budget": {"max_input_tokens": 4000, "reserve_output_tokens": 1000}}


@pytest.mark.parametrize("width", [390, 1366])
def test_support_opens_a_shadowed_request__sees_the_differences__jumps_to_the_candidate(
    demo_world, login, client, width
):
    secret = runtime_token(Environment.objects.get(key="sg-test"))
    body = shadowed_trace("req-shadow-4", shadow_version=4, shadow_body=SMALLER)
    assert post_batch(client, secret, body=body).json()["accepted"] == 1
    page = login("support", "support-demo")
    page.set_viewport_size({"width": width, "height": 900})

    page.goto(page.url + "traces/req-shadow-4/")

    card = page.locator("#shadow-run")
    assert "v4 beside live v3" in card.inner_text()
    assert "budget exceeded" in card.locator("#shadow-summary").inner_text()
    row = card.locator("#shadow-differences tr[data-position='2']")
    # The shadow's reason in words; its code one hover away.
    assert "P7-v2" in row.inner_text() and "too large for the budget" in row.inner_text()
    code = row.locator("[data-shadow=shadow] [data-reason-code]")
    assert code.get_attribute("title") == "reason code: over_budget_required"
    row.locator("a").click()
    page.wait_for_url("**#candidate-2")
    target = page.locator("#candidate-2")
    assert "P7-v2" in target.inner_text() and target.is_visible()
    assert sideways_scroll(page) <= 1


def test_support_opens_an_a_a_request_that_disagrees__told_it_is_a_runtime_fault(
    demo_world, login, client
):
    secret = runtime_token(Environment.objects.get(key="sg-test"))
    batch = orjson.loads(shadowed_trace("req-aa-1", shadow_version=3, shadow_body=SHADOW_LIVE_BODY))
    batch["traces"][0]["shadow"].update(status="budget_exceeded", differences_total=1)
    assert post_batch(client, secret, batch["traces"]).json()["accepted"] == 1
    page = login("support", "support-demo")

    page.goto(page.url + "traces/req-aa-1/")

    fault = page.locator("#shadow-fault")
    assert "Runtime fault (A/A calibration)" in fault.inner_text()
    assert "A/A: v3 against itself" in page.locator("#shadow-run header").inner_text()
