"""The schema documents every status an operation can answer (issue 19, item 16). Some are
answered before any view, so every operation can answer them: 400 for a NUL (%00) in the
address (console.middleware), 404 for a `?format=` the operation has no renderer for (DRF's
format negotiation). Under /scim/ they come in SCIM's error shape (its clients parse only
that). The schema left them out where the view itself never answers them (the
audit export's 404, `traces/{request_id}`'s 400), so a client generated from it, or the
Schemathesis run, met statuses it was told could not happen."""

from __future__ import annotations

import re

import pytest

from console.kernel.api_errors import SCIM_ERROR_SCHEMA
from tests.factories import release_setup

METHODS = ("get", "post", "put", "patch", "delete")
# (query, Accept header, status, error code)
HOSTILE = [
    ("?format=AAA", None, 404, None),
    ("?format=json&q=a%00b", None, 400, "invalid_character"),
    ("", "application/xml", 406, "not_acceptable"),
]


@pytest.fixture
def admin_client(client, db):
    client.force_login(release_setup().admin)
    return client


def _operations(schema: dict):
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method in METHODS:
                yield path, method, operation


@pytest.mark.parametrize(
    ("query", "accept", "status", "code"), HOSTILE, ids=["unknown-format", "nul", "accept-xml"]
)
def test_every_operation__refused_before_its_view__that_status_is_documented(
    admin_client, query, accept, status, code
):
    schema = admin_client.get("/api/schema/", {"format": "json"}).json()
    undocumented, answered = [], []
    for path, method, operation in _operations(schema):
        url = re.sub(r"\{[^}]+\}", "1", path) + query
        headers = {"accept": accept} if accept else {}
        response = getattr(admin_client, method)(
            url, content_type="application/json", headers=headers
        )
        documented = operation["responses"]
        if str(response.status_code) not in documented:
            undocumented.append(f"{method.upper()} {path} → {response.status_code}")
        if response.status_code == status and str(status) in documented:
            answered.append(f"{method.upper()} {path}")
            assert "$ref" in str(documented[str(status)]["content"]), (path, documented)
            if path.startswith("/scim/"):  # SCIM's own error shape, which its clients parse
                error = response.json()
                assert error["schemas"] == [SCIM_ERROR_SCHEMA], (path, error)
                assert error["status"] == str(status), (path, error)
            else:
                error = response.json()["error"]  # the one error shape, as documented
                assert code is None or error["code"] == code
    assert undocumented == []
    # every operation answers it (the audit export's 404 and traces/{request_id}'s 400 too)
    # The runtime's config read skips DRF's negotiation (its hot path, docs/PERFORMANCE.md): it
    # ignores `?format=`, and answers as it would without it.
    not_negotiated = {"GET /api/v1/runtime/config/{agent}"} if status in (404, 406) else set()
    every = {f"{m.upper()} {p}" for p, m, _ in _operations(schema)}
    assert every - set(answered) == not_negotiated


def test_schema__every_operation_documents_400_401_404_and_406_in_the_error_shape(admin_client):
    schema = admin_client.get("/api/schema/", {"format": "json"}).json()
    missing = [
        f"{method.upper()} {path} {status}"
        for path, method, operation in _operations(schema)
        for status in ("400", "401", "404", "406")
        if status not in operation["responses"]
    ]
    assert missing == []
