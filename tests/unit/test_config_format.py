"""The agent configuration file, read strictly (strategies.exchange.format): every problem at
its path, and the same configuration written as the same bytes."""

from __future__ import annotations

import pytest

from console.kernel.errors import ValidationFailed
from strategies.exchange.format import file_hash, file_parse_text, file_read, file_text


def sample() -> dict:
    return {
        "format": "context-console/agent-config",
        "format_version": 1,
        "agent": {"key": "assistant_lite", "name": "Lite", "description": ""},
        "documents": [
            {
                "key": "order_status",
                "kind": "strategy",
                "name": "Order status",
                "versions": [{"number": 1, "body": {"required": []}, "note": ""}],
                "draft": None,
            }
        ],
        "live": {"sg-test": {"order_status": 1}},
    }


def paths(data) -> list[str]:
    config, findings = file_read(data)
    assert config is None
    return [f["path"] for f in findings]


def test_file_text__any_key_order__same_bytes_and_hash():
    data = sample()
    shuffled = dict(reversed(list(data.items())))
    assert file_text(data) == file_text(shuffled)
    assert file_text(data).endswith("}\n") and '\n  "agent": {' in file_text(data)
    assert file_hash(data) == file_hash(shuffled)


def test_file_read__sample__read_with_its_live_map():
    config, findings = file_read(sample())
    assert findings == []
    assert config.agent_key == "assistant_lite"
    assert config.documents[0].version(1).path == "documents[0].versions[0]"
    assert config.live == {"sg-test": {"order_status": 1}}


def test_file_read__many_mistakes__each_at_its_path():
    data = sample()
    data["extra"] = True
    data["agent"].pop("name")
    doc = data["documents"][0]
    doc["kind"] = "recipe"
    doc["versions"].append({"number": 1, "body": [], "note": "", "author": "ops"})
    doc["draft"] = {"number": 1, "body": {}, "note": ""}
    data["live"]["prod"] = {"nope": 1, "order_status": True}
    assert sorted(paths(data)) == sorted(
        [
            "extra",
            "agent.name",
            "documents[0].kind",
            "documents[0].versions[1].author",
            "documents[0].versions[1].body",
            "documents[0].draft.number",
            "live.prod.nope",
            "live.prod.order_status",
        ]
    )


def test_file_read__not_an_object__one_finding():
    assert paths([]) == [""]


@pytest.mark.parametrize(
    "text",
    ['{"a": NaN}', "{not json", b"\xff\xfe", "[" * 100_000],
)
def test_file_parse_text__nan_malformed_or_not_utf8__400(text):
    with pytest.raises(ValidationFailed) as caught:
        file_parse_text(text)
    assert caught.value.status == 400 and caught.value.details[0]["path"] == ""


def test_file_parse_text__duplicate_key__400_at_the_key_s_path():
    with pytest.raises(ValidationFailed) as caught:
        file_parse_text('{"a": 1, "b": {"c": 1, "c": 2}}')
    assert caught.value.status == 400 and caught.value.code == "duplicate_key"
    assert caught.value.details[0]["path"] == "b.c"


@pytest.mark.parametrize(
    ("change", "path", "code"),
    [
        (lambda d: d["agent"].update(description="a\ud800b"), "agent.description", "invalid_text"),
        (lambda d: d["agent"].update(name="n" * 201), "agent.name", "max_length"),
        (lambda d: d["documents"][0].update(name="a\x00b"), "documents[0].name", "invalid_text"),
        (
            lambda d: d["documents"][0]["versions"][0].update(note="x" * 2001),
            "documents[0].versions[0].note",
            "max_length",
        ),
        (
            lambda d: d["documents"][0]["versions"][0]["body"].update(required=["a\x00"]),
            "documents[0].versions[0].body.required[0]",
            "invalid_text",
        ),
        (lambda d: d["live"].update({"a\udc80": {}}), "live.'a\\udc80'", "invalid_text"),
    ],
)
def test_file_read__text_no_store_keeps_or_too_long__finding_at_its_path(change, path, code):
    # What the documents API refuses (NUL, lone surrogate, 200 / 2,000 characters), the file
    # reader refuses too, before any plan: the apply never meets it at the database.
    data = sample()
    change(data)
    config, findings = file_read(data)
    assert config is None
    assert (path, code) in [(f["path"], f["code"]) for f in findings]
