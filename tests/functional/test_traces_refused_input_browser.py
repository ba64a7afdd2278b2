"""Support opens a request whose input the runtime refused (issue 21.4): a red status in
words, the engine's findings, and the provider to look at first — in a real browser, from a
phone to a wide screen."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from context_runtime import wire
from context_runtime.engine import CandidateItem, EngineInputError, select
from context_runtime.reporter import encode_trace

from strategies.catalog.models import Environment
from tests.factories import post_batch, runtime_token
from tests.functional.layout import sideways_scroll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def refused_trace() -> bytes:
    """What the SDK reports when a provider returns a NaN relevance (the model is not called)."""
    strategy = {
        "required": ["task_state"],
        "optional": ["recent_dialogue"],
        "budget": {"max_input_tokens": 8000, "reserve_output_tokens": 1000},
    }
    items = [
        CandidateItem(id="task_state:T9", source="task_state", size=310),
        CandidateItem(id="chat:e-318", source="recent_dialogue", size=40, relevance=float("nan")),
    ]
    with pytest.raises(EngineInputError) as caught:
        select(strategy=strategy, candidates=items)
    trace = wire.Trace(
        request_id="req-nan",
        agent="assistant_professional",
        occurred_at=datetime.now(UTC),
        documents={"profile": 1, "after_sales_consultation": 3},
        strategy="after_sales_consultation",
        **caught.value.trace_fields(items),
    )
    return b'{"traces":[' + encode_trace(trace) + b"]}"


@pytest.mark.parametrize("width", [390, 1366])
def test_support_opens_a_refused_request__red_status_findings_and_the_provider_first(
    demo_world, login, client, width
):
    secret = runtime_token(Environment.objects.get(key="sg-test"))
    assert post_batch(client, secret, body=refused_trace()).json()["accepted"] == 1
    page = login("support", "support-demo")
    page.set_viewport_size({"width": width, "height": 900})

    page.goto(page.url + "traces/req-nan/")

    badge = page.locator("#trace-facts [data-status=input_refused]")
    assert badge.inner_text().strip().endswith("runtime refused its input")
    assert "badge-bad" in badge.get_attribute("class")
    card = page.locator("#input-refused")
    assert "Runtime refused its input" in card.inner_text()
    assert "recent_dialogue" in card.inner_text() and "chat:e-318" in card.inner_text()
    assert "must be a number from 0 to 1, not nan" in card.inner_text()
    assert "Look first at: recent_dialogue provider" in page.locator("#trace-summary").inner_text()
    assert "Nothing stands out" not in page.locator("#where-to-look").inner_text()
    assert "no selection to replay" in page.locator("#replay").inner_text()
    # No sideways scroll of the page on a phone.
    assert sideways_scroll(page) <= 1
