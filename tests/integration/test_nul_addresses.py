"""A NUL character (%00) in an address: PostgreSQL text cannot hold one, so it reached the
driver and failed the request (500) wherever a path segment or a filter went into a query —
the trace list and search, a trace by request_id, release history, the traces API. One
check now answers 400 before any view, for every page and operation."""

from __future__ import annotations

import pytest

from tests.factories import release_setup

ADDRESSES = [
    "/traces/?environment=%00x",
    "/traces/?agent=a%00",
    "/traces/search?q=a%00b",
    "/traces/a%00b/",
    "/releases/assistant_professional/history/?document=%00",
    "/audit/?actor=a%00",
    "/api/v1/traces?environment=%00",
    "/api/v1/traces/a%00b",
    "/api/v1/approvals/?agent=%00",
    "/api/v1/agents/?archived=%00",
    "/api/v1/audit/export?actor=%00",
]


@pytest.fixture
def admin(db):
    return release_setup().admin


@pytest.mark.parametrize("address", ADDRESSES)
def test_nul_in_address__400_in_the_error_shape_or_a_page__never_500(client, admin, address):
    client.force_login(admin)
    response = client.get(address)
    assert response.status_code == 400, (address, response.status_code)
    if address.startswith("/api/"):
        error = response.json()["error"]
        assert error["code"] == "invalid_character"
        assert error["details"][0]["code"] == "invalid_character"
    else:
        assert "NUL character" in response.content.decode()


def test_same_address_without_nul__answers_as_usual(client, admin):
    client.force_login(admin)
    assert client.get("/traces/?environment=sg-test").status_code == 200
    assert client.get("/api/v1/approvals/?agent=assistant_professional").status_code == 200
