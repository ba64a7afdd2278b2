"""Support opens a request whose provider also returned an item of a source the strategy does
not read (issue 32.3): the item is among the candidates considered, under "not requested",
with the reason in words — in a real browser, from a phone to a wide screen."""

from __future__ import annotations

import pytest

from strategies.catalog.models import Environment
from strategies.documents.models import Version
from tests.factories import foreign_source_trace, post_batch, runtime_token
from tests.functional.layout import sideways_scroll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [390, 1366])
def test_support_opens_a_request_with_an_item_of_an_unread_source__shown_not_requested(
    demo_world, login, client, width
):
    v3 = Version.objects.get(
        document__agent__key="assistant_professional",
        document__key="after_sales_consultation",
        number=3,
    )
    secret = runtime_token(Environment.objects.get(key="sg-test"))
    body = foreign_source_trace("req-weather", v3.body)
    assert post_batch(client, secret, body=body).json()["accepted"] == 1
    page = login("support", "support-demo")
    page.set_viewport_size({"width": width, "height": 900})

    page.goto(page.url + "traces/req-weather/")

    card = page.locator("#candidates")
    assert "4 considered" in card.locator(".card-header").inner_text()
    group = card.locator("tbody[data-decision-group=not_requested]")
    assert "not requested" in group.locator(".group-row").inner_text()
    row = group.locator("tr", has_text="weather:SG")
    assert row.is_visible()
    assert "this strategy does not read weather" in row.inner_text()
    # No sideways scroll of the page on a phone.
    assert sideways_scroll(page) <= 1
