"""Redaction without Django (docs/data-protection.md): each built-in detector catches values
with a valid checksum and leaves look-alikes alone, custom patterns that cannot be rules are
refused, REDACT rewrites free text while REFUSE (or any match in an identifier) refuses the
item, and the registry of wire strings is the wire's own."""

from __future__ import annotations

from collections import Counter

import msgspec
import pytest
from context_runtime import wire

from traces.redaction import detectors, engine, fields
from traces.redaction.detectors import Detector


def found(kind: str, text: str) -> list[str]:
    return [text[a:b] for a, b in Detector(kind, kind).spans(text)]


@pytest.mark.parametrize(
    ("kind", "caught", "left_alone"),
    [
        (
            "card",
            ["4111 1111 1111 1111", "5555-5555-5555-4444", "378282246310005", "4012888888881881"],
            ["4111 1111 1111 1112", "1234567812345678", "order:A1042", "4111111111111111999"],
        ),
        (
            "iban",
            ["DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432", "NL91ABNA0417164300"],
            ["DE89 3704 0044 0532 0130 01", "GB82WEST12345698765433", "DE8937040044053201300"],
        ),
        (
            "nric",
            ["S1234567D", "T1234567J", "s1234567d", "F1234567N", "G1234567X"],
            ["S1234567A", "T1234567D", "X1234567D", "S123456D", "AS1234567D"],
        ),
        (
            "email",
            ["alice.tan@example.com", "a+b@mail.example.co.uk"],
            ["alice at example dot com", "user@localhost", "@handle", "req@92"],
        ),
        (
            "phone",
            [
                "+65 9123 4567",
                "+14155550123",
                "(415) 555-0123",
                "415-555-0123",
                "020 7946 0958",
                "9123 4567",
                "6123-4567",
            ],
            ["91234567", "v2 0.05", "2026-11-30", "order:A1042", "1234 5678"],
        ),
    ],
)
def test_detector__valid_caught__lookalikes_left(kind, caught, left_alone):
    for value in caught:
        assert found(kind, f"x {value} y") == [value], value
    for value in left_alone:
        assert found(kind, f"x {value} y") == [], value


def test_checksums():
    assert detectors.luhn_valid("79927398713") and not detectors.luhn_valid("79927398710")
    assert detectors.iban_valid("GB82WEST12345698765432")
    assert not detectors.iban_valid("GB82WEST1234569876543")  # GB is 22 long
    # M-series FINs (from 2022) have their own offset and letters.
    assert detectors.nric_valid("M1234567K") or detectors.nric_valid("M1234567L")
    assert sum(detectors.nric_valid(f"M1234567{c}") for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == 1


def test_iban_followed_by_words__cut_at_its_length():
    assert found("iban", "pay DE89 3704 0044 0532 0130 00 AND MORE") == [
        "DE89 3704 0044 0532 0130 00"
    ]


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("CUST-(\\d{6}", "does not compile"),
        ("", "Give a pattern"),
        ("x*", "empty string"),
        ("\\w+", "ordinary text"),
        ("e", "ordinary text"),
        ("redacted", "ordinary text"),
        ("(a+)+$", "too slow"),
        ("(a|aa)+$", "too slow"),
        ("a" * 400, "at most"),
    ],
)
def test_custom_pattern__refused_with_the_reason(pattern, says):
    assert says in (detectors.custom_pattern_problem(pattern) or "")


def test_custom_pattern__usable():
    assert detectors.custom_pattern_problem(r"CUST-\d{6}") is None
    rs = engine.Ruleset((engine.Rule("cust", Detector("cust", "custom", r"CUST-\d{6}"), "redact"),))
    assert engine.preview("for CUST-123456 today", rs) == (
        "for [redacted:cust] today",
        {"cust": 1},
        None,
    )


def ruleset(**actions) -> engine.Ruleset:
    return engine.Ruleset(
        tuple(engine.Rule(k, Detector(k, k), action) for k, action in actions.items())
    )


def a_trace(**overrides) -> wire.Trace:
    data = {
        "request_id": "req-1",
        "agent": "a",
        "occurred_at": "2026-11-30T09:12:44Z",
        "status": "ready",
        "principal": "shop-a/user-417",
        "candidates": [
            {"id": "x", "source": "s", "decision": "selected", "reason": "mail bob@example.com"}
        ],
    }
    data.update(overrides)
    return msgspec.json.decode(msgspec.json.encode(data), type=wire.Trace)


def test_redact__text_rewritten_counted__refuse__identifier_refuses():
    trace = a_trace()
    assert engine.trace_apply(trace, ruleset(email="redact")) == Counter({"email": 1})
    assert trace.candidates[0].reason == "mail [redacted:email]"

    with pytest.raises(engine.Refused) as refused:
        engine.trace_apply(a_trace(), ruleset(email="refuse"))
    assert refused.value.finding.path == "candidates[0].reason"
    assert refused.value.finding.code == "personal_data"

    with pytest.raises(engine.Refused) as refused:  # redact, but in an identifier
        engine.trace_apply(a_trace(principal="bob@example.com"), ruleset(email="redact"))
    assert refused.value.finding.path == "principal"
    assert "bob@" not in refused.value.finding.message


def test_snapshot__strings_and_keys_redacted__unchanged_bytes_when_clean():
    rs = ruleset(card="redact", nric="redact")
    counts = Counter()
    raw = b'{"S1234567D": ["card 4111 1111 1111 1111", 3], "q": "hello"}'
    out = msgspec.json.decode(engine.snapshot_apply(raw, rs, counts))
    assert out == {"[redacted:nric]": ["card [redacted:card]", 3], "q": "hello"}
    assert counts == Counter({"card": 1, "nric": 1})
    big = engine.snapshot_apply(
        b'{"n": 123456789012345678901234567890, "c": "S1234567D"}', rs, Counter()
    )
    assert big == b'{"n":123456789012345678901234567890,"c":"[redacted:nric]"}'
    clean = b'{"q":  "hello"}'
    assert engine.snapshot_apply(clean, rs, Counter()) is clean


def test_snapshot_redaction_cannot_read__item_refused_not_the_batch():
    with pytest.raises(engine.Refused) as refused:
        engine.snapshot_apply(b'{"n": 1e999}', ruleset(card="redact"), Counter())
    assert refused.value.finding.code == "redaction_failed"


def test_slow_custom_pattern_at_ingest__item_refused_not_stored_unchecked():
    slow = engine.Rule("slow", Detector("slow", "custom", r"(a|aa)+$"), "redact")
    with pytest.raises(engine.Refused) as refused:
        engine.Ruleset((slow,)).text("a" * 5000 + "!", "note", fields.TEXT, Counter())
    assert refused.value.finding.code == "redaction_failed"


@pytest.mark.parametrize(
    ("struct", "registry"),
    [(wire.Trace, fields.TRACE_FIELDS), (wire.Outcome, fields.OUTCOME_FIELDS)],
)
def test_every_wire_string_is_listed(struct, registry):
    """A string field added to the wire without a line in the registry fails here."""
    assert fields.wire_string_paths(struct) == set(registry)


def test_registry_walk_catches_an_unlisted_field():
    class Extended(wire.Trace):
        free_text: str = ""

    assert fields.wire_string_paths(Extended) - set(fields.TRACE_FIELDS) == {"free_text"}
