"""A key twice in one JSON object (issue 19, item 7): every decoder here keeps the last one, so
`"dry_run": true, "dry_run": false` would apply and `"max_input_tokens": 1111,
"max_input_tokens": 7777` would save 7777. Refused instead, wherever JSON comes in — the
operator API's parser, the configuration file (API member and upload page), the editor's JSON
half, the trace batch's envelope — as 400 `duplicate_key` at the key's path, nothing written."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from console.kernel.strict_json import duplicate_key
from strategies.documents.forms import parse_json
from tests.factories import SAMPLE_AGENT, bearer, runtime_token
from tests.integration.test_config_as_code import (
    _upload,
    build_world,
    client_for,
    counts,
    discard_drafts,
    export,
    with_new_budget,
)
from traces.models import Trace

pytestmark = pytest.mark.django_db


def _error(response, status=400) -> dict:
    assert response.status_code == status, response.content
    return response.json()["error"]


def _config_post(client, text: str):
    return client.post(
        f"/api/v1/agents/{SAMPLE_AGENT}/config", data=text, content_type="application/json"
    )


@pytest.fixture
def world():
    world = build_world()
    discard_drafts(world)
    return world


def test_config_api__dry_run_true_then_false__400_duplicate_key_nothing_applied(world):
    client = client_for(world.ops)
    data = with_new_budget(json.loads(export(client)), environments=("sg-test",))
    before = counts()
    text = '{"file": ' + json.dumps(data) + ', "dry_run": true, "dry_run": false}'
    error = _error(_config_post(client, text))
    assert error["code"] == "duplicate_key"
    assert error["details"][0]["path"] == "dry_run"
    assert counts() == before


def test_config_api__budget_twice_in_a_version_body__400_at_its_path_in_the_file(world):
    client = client_for(world.ops)
    data = with_new_budget(json.loads(export(client)), environments=("sg-test",))
    text = json.dumps({"file": data, "dry_run": False}).replace(
        '"max_input_tokens": 8500', '"max_input_tokens": 1111, "max_input_tokens": 7777'
    )
    before = counts()
    error = _error(_config_post(client, text))
    assert error["code"] == "duplicate_key"
    assert error["details"][0]["path"].endswith(".body.budget.max_input_tokens")
    assert error["details"][0]["path"].startswith("file.documents[")
    assert counts() == before


def test_import_page__file_with_a_key_twice__400_names_the_path_nothing_written(world):
    client = client_for(world.ops)
    data = with_new_budget(json.loads(export(client)), environments=("sg-test",))
    text = json.dumps(data).replace(
        '"max_input_tokens": 8500', '"max_input_tokens": 1111, "max_input_tokens": 7777'
    )
    before = counts()
    response = _upload(client, text)
    assert response.status_code == 400
    assert "max_input_tokens appears twice" in response.content.decode()
    assert counts() == before


def test_documents_api__draft_body_with_a_key_twice__400_nothing_written(world):
    client = client_for(world.ops)
    before = counts()
    text = (
        '{"key": "fresh", "body": {"budget": {"max_input_tokens": 1111, "max_input_tokens": 7777}}}'
    )
    response = client.post(
        f"/api/v1/agents/{SAMPLE_AGENT}/documents/", data=text, content_type="application/json"
    )
    error = _error(response)
    assert (error["code"], error["details"][0]["path"]) == (
        "duplicate_key",
        "body.budget.max_input_tokens",
    )
    assert counts() == before


def test_runtime_manifest__key_twice__400_duplicate_key(world):
    secret = runtime_token(world.envs["sg-test"])
    response = Client().put(
        "/api/v1/runtime/manifest",
        data='{"runtime": "a", "runtime": "b"}',
        content_type="application/json",
        **bearer(secret),
    )
    error = _error(response)
    assert (error["code"], error["details"][0]["path"]) == ("duplicate_key", "runtime")


def test_trace_batch__traces_twice__400_duplicate_key_nothing_stored(world):
    secret = runtime_token(world.envs["sg-test"])
    response = Client().post(
        "/api/v1/runtime/traces",
        data='{"traces": [], "traces": []}',
        content_type="application/json",
        **bearer(secret),
    )
    error = _error(response)
    assert (error["code"], error["details"][0]["path"]) == ("duplicate_key", "traces")
    assert Trace.objects.count() == 0


def test_editor_json_half__key_twice__finding_at_its_path():
    body, finding = parse_json('{"budget": {"max_input_tokens": 1, "max_input_tokens": 2}}')
    assert body is None
    assert (finding["path"], finding["code"]) == ("budget.max_input_tokens", "duplicate_key")


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ('{"a": 1, "a": 1}', "a"),
        ('{"a": [{"b": 1}, {"c": {"d": 1, "d": 2}}]}', "a[1].c.d"),
        ('[0, {"x": 1, "y": 2, "x": 3}]', "[1].x"),
        ('{"a\\u0062": 1, "ab": 2}', "ab"),  # equal once decoded
    ],
)
def test_duplicate_key__finds_the_key_at_its_path(text, path):
    assert duplicate_key(text).path == path


@pytest.mark.parametrize("text", ['{"a": 1, "b": {"a": 1}}', "[]", "not json", '{"a": "a"}'])
def test_duplicate_key__none(text):
    assert duplicate_key(text) is None
