"""Every error under /api/ leaves in the API's JSON shape whatever DEBUG says (issue 31,
item 21): Django's own answers — an unknown address — are reshaped too. The database-down
case, with real processes, is tests/integration/test_runtime_api_database_down.py."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("debug", [True, False])
@pytest.mark.parametrize("path", ["/api/v1/runtime/nowhere", "/api/v1/no-such-resource"])
def test_api__unknown_address__json_404_whatever_debug_says(client, settings, debug, path):
    settings.DEBUG = debug
    response = client.get(path, HTTP_AUTHORIZATION="Bearer cc_rt_unknown")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "not_found"
    assert response["X-Request-ID"]


def test_pages__unknown_address__stay_html(client, settings):
    settings.DEBUG = False
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert "application/json" not in response["Content-Type"]


@pytest.mark.parametrize("debug", [True, False])
def test_api__a_views_own_refusal_in_a_json_type__keeps_its_code(db, client, settings, debug):
    # The schema answers in application/vnd.oai.openapi+json: its own 401/403 is shaped already
    settings.DEBUG = debug
    response = client.get("/api/schema/?format=json")
    assert response.status_code in (401, 403)
    assert response.json()["error"]["code"] == "not_authenticated"
