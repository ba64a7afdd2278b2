"""Text the store cannot keep (issue 19, item 8): PostgreSQL text and jsonb hold no NUL
character and no lone surrogate, and a document's name is at most 200 characters. The
configuration import's dry run said "valid" for a file with such a note, name or body string,
and its apply then failed at the database (500); the documents API answered 500 for a NUL in a
body string. Now the dry run finds everything the apply would refuse, at its path in the file,
and the apply and the documents API answer 400 with nothing written."""

from __future__ import annotations

import copy
import html
import json

import pytest
from django.urls import reverse

from strategies.documents.models import Version
from tests.factories import SAMPLE_AGENT, STRATEGY_KEY, strategy_body
from tests.integration.test_config_as_code import (
    ADDED,
    _upload,
    build_world,
    client_for,
    counts,
    discard_drafts,
    document,
    export,
    post,
    with_new_budget,
)

pytestmark = pytest.mark.django_db

NUL = "a\x00b"
SURROGATE = "a\ud800b"
LONG_NAME = "n" * 201


@pytest.fixture
def world():
    world = build_world()
    discard_drafts(world)
    return world


def _new_version(data: dict) -> dict:
    """The file's new v4 of the strategy (with_new_budget), the version the apply creates."""
    return document(data, STRATEGY_KEY)["versions"][3]


def _new_document(data: dict, **fields) -> None:
    data["documents"].append(
        {
            "key": "new_task",
            "kind": "strategy",
            "name": "New task",
            "versions": [{"number": 1, "body": strategy_body(), "note": ""}],
            "draft": None,
            **fields,
        }
    )


def _draft(data: dict, note: str) -> None:
    strategy = document(data, STRATEGY_KEY)
    strategy["draft"] = {"number": 4, "body": strategy_body(max_extra_reads=2), "note": note}


@pytest.mark.parametrize(
    ("change", "path", "code"),
    [
        (
            lambda d: _new_version(d).update(note=NUL),
            "documents[1].versions[3].note",
            "invalid_text",
        ),
        (
            lambda d: _new_version(d).update(note=SURROGATE),
            "documents[1].versions[3].note",
            "invalid_text",
        ),
        (
            lambda d: _new_version(d).update(note="x" * 2001),
            "documents[1].versions[3].note",
            "max_length",
        ),
        (lambda d: _new_document(d, name=NUL), "documents[3].name", "invalid_text"),
        (lambda d: _new_document(d, name=LONG_NAME), "documents[3].name", "max_length"),
        (
            lambda d: _new_version(d)["body"].update(optional=[NUL]),
            "documents[1].versions[3].body.optional[0]",
            "invalid_text",
        ),
        (
            lambda d: _new_version(d)["body"].update(optional=[SURROGATE]),
            "documents[1].versions[3].body.optional[0]",
            "invalid_text",
        ),
        (
            lambda d: _new_version(d)["body"]["budget"].update({NUL: 1}),
            "documents[1].versions[3].body.budget.'a\\x00b'",
            "invalid_text",
        ),
    ],
    ids=[
        "nul-in-note",
        "surrogate-in-note",
        "note-of-2001",
        "nul-in-new-document-name",
        "name-of-201",
        "nul-in-body-string",
        "surrogate-in-body-string",
        "nul-in-body-key",
    ],
)
def test_config_import__unstorable_text__dry_run_reports_it_apply_400_nothing_written(
    world, change, path, code
):
    client = client_for(world.ops)
    data = with_new_budget(json.loads(export(client)), environments=("sg-test",))
    change(data)
    before = counts()
    for response in _dry_run_and_apply(client, data):
        assert response.status_code == 400, response.content
        if response["Content-Type"].startswith("application/json"):
            details = response.json()["error"]["details"]
            assert (path, code) in [(d["path"], d["code"]) for d in details], details
        else:  # the import page lists the findings
            assert html.escape(path) in response.content.decode()
    assert counts() == before


def _dry_run_and_apply(client, data):
    """The API's dry run and apply (its parser already refuses a lone surrogate as malformed
    JSON, so a file with one goes through the page only), then the import page's (it reads
    the file with the standard decoder, which keeps lone surrogates)."""
    text = json.dumps(data)
    if "\\ud800" not in text:
        yield post(client, data, dry_run=True)
        yield post(client, data, dry_run=False)
    yield _upload(client, text)
    url = reverse("config-import", kwargs={"agent": SAMPLE_AGENT})
    yield client.post(url, {"apply": "1", "plan": "0" * 64, "content": text})


@pytest.mark.parametrize(
    ("agent", "path", "code"),
    [
        ({"name": NUL}, "agent.name", "invalid_text"),
        ({"name": LONG_NAME}, "agent.name", "max_length"),
        ({"description": NUL}, "agent.description", "invalid_text"),
        ({"description": "d" * 2001}, "agent.description", "max_length"),
    ],
)
def test_config_import__new_agent_with_unstorable_name__dry_run_reports_it_apply_400(
    world, agent, path, code
):
    data = json.loads(export(client_for(world.admin)))
    data["agent"].update(key="assistant_copy", **agent)
    data["live"] = {}
    before = counts()
    for dry_run in (True, False):
        response = post(client_for(world.admin), data, dry_run=dry_run, agent="assistant_copy")
        assert response.status_code == 400, response.content
        details = response.json()["error"]["details"]
        assert (path, code) in [(d["path"], d["code"]) for d in details], details
    assert counts() == before


def test_config_import__longest_name_and_note_the_api_takes__applied(world):
    # the limits are the documents API's: 200 characters of name, 2,000 of note, no fewer
    client = client_for(world.ops)
    data = with_new_budget(json.loads(export(client)), environments=())
    _new_version(data)["note"] = "x" * 2000
    _new_document(data, name="n" * 200)
    assert post(client, data, dry_run=False).status_code == 200
    assert Version.objects.get(document__key=STRATEGY_KEY, number=ADDED).note == "x" * 2000


# --- the documents API ------------------------------------------------------------------------------
DOCUMENTS = f"/api/v1/agents/{SAMPLE_AGENT}/documents/"


def _post_json(client, url, data):
    return client.post(url, data=json.dumps(data), content_type="application/json")


@pytest.mark.parametrize(
    ("body", "path"),
    [
        (strategy_body(optional=[NUL]), "optional[0]"),
        (strategy_body(on_missing={NUL: "general_policy_only"}), "on_missing.'a\\x00b'"),
        (
            strategy_body(budget={"max_input_tokens": 6000, "reserve_output_tokens": 800, NUL: 1}),
            "budget.'a\\x00b'",
        ),
    ],
    ids=["nul-in-string", "nul-in-key", "nul-in-nested-key"],
)
def test_documents_api__unstorable_text_in_body__400_at_its_path_nothing_written(world, body, path):
    client = client_for(world.ops)
    before = counts()
    created = _post_json(client, DOCUMENTS, {"key": "new_task", "body": body})
    assert created.status_code == 400, created.content
    error = created.json()["error"]
    assert (path, "invalid_text") in [(d["path"], d["code"]) for d in error["details"]], error
    draft = _post_json(client, f"{DOCUMENTS}{STRATEGY_KEY}/draft/", {"body": body})
    assert draft.status_code == 400, draft.content
    assert path in [d["path"] for d in draft.json()["error"]["details"]]
    assert counts() == before


def test_documents_api__validate_unstorable_body__not_valid_names_the_path(world):
    body = strategy_body(optional=[NUL])
    response = _post_json(
        client_for(world.ops),
        f"/api/v1/agents/{SAMPLE_AGENT}/validate",
        {"kind": "strategy", "body": copy.deepcopy(body)},
    )
    assert response.status_code == 200, response.content
    report = response.json()
    assert report["valid"] is False
    assert "optional[0]" in [e["path"] for e in report["errors"]]


# --- the editor's note: the same judgement as the API's (noticed after item 8) ---------------
def _pages(client, world, name: str) -> str:
    return reverse(name, kwargs={"agent": SAMPLE_AGENT, "document": STRATEGY_KEY})


@pytest.mark.parametrize("note", [NUL, "n" * 2001], ids=["nul", "long"])
def test_editor__unstorable_note__400_readable_typed_text_kept_nothing_written(client, world, note):
    client.force_login(world.ops)
    refused = client.post(_pages(client, world, "draft-create"), {"note": note})
    assert refused.status_code == 400
    assert not Version.objects.filter(state=Version.State.DRAFT).exists()

    client.post(_pages(client, world, "draft-create"), {"note": "first"})
    draft = Version.objects.get(state=Version.State.DRAFT)
    original = dict(draft.body)
    typed = json.dumps({**draft.body, "max_extra_reads": 2})
    saved = client.post(
        _pages(client, world, "draft-edit"),
        {"json": typed, "note": note, "revision": draft.revision},
    )
    page = html.unescape(saved.content.decode())
    assert saved.status_code == 400
    assert "note" in page and '"max_extra_reads": 2' in page  # the why, and nothing lost
    frozen = client.post(
        _pages(client, world, "draft-freeze"), {"note": note, "revision": draft.revision}
    )
    assert frozen.status_code == 400
    draft.refresh_from_db()
    assert (draft.state, draft.note, draft.body) == (Version.State.DRAFT, "first", original)
