"""Every reason code a runtime may send has an operator's words (issue 32 item 10): the trace
page, the shadow card and version health put these words in front and the code one hover
away, so a code without words would be a raw code in front again."""

from __future__ import annotations

from context_runtime import wire

from traces.diagnosis import REASON_WORDS, reason_words


def test_reason_words__every_wire_and_shadow_code__has_words_not_the_code():
    codes = set(wire.REASON_CODES) | set(wire.SHADOW_REASON_CODES)
    missing = codes - set(REASON_WORDS)
    assert missing == set()
    for code in codes:
        words = reason_words(code)
        assert words and "_" not in words, code


def test_reason_words__a_newer_runtimes_code__reads_as_words_with_spaces():
    assert reason_words("provider_rate_limited") == "provider rate limited"
    assert reason_words("") == "" and reason_words(None) == ""
