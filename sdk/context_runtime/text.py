"""Text a store can keep: the one rule for strings that JSON can carry but no text store
keeps — a NUL character (PostgreSQL text and jsonb refuse it) or a lone surrogate (not valid
Unicode, so not encodable as UTF-8). The manifest and document validators, the console's names
and notes and the trace ingest all judge strings here."""

from __future__ import annotations

import re
from collections.abc import Iterator

from context_runtime.findings import ERROR, Finding

__all__ = [
    "INVALID_TEXT",
    "LONE_SURROGATE",
    "NUL",
    "unstorable",
    "unstorable_strings",
]

INVALID_TEXT = "invalid_text"  # the finding's code
NUL = "a NUL character (\\u0000)"
LONE_SURROGATE = "a lone surrogate (\\ud800–\\udfff), which is not valid Unicode"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def unstorable(text: str, *, nul_ok: bool = False) -> str | None:
    """What in `text` no text store keeps (`NUL` or `LONE_SURROGATE`), or None. `nul_ok` for
    text kept as bytes, where a NUL is fine."""
    if not nul_ok and "\x00" in text:
        return NUL
    if _LONE_SURROGATE.search(text):
        return LONE_SURROGATE
    return None


def unstorable_strings(value, path: str = "", *, what: str = "The value") -> Iterator[Finding]:
    """An `invalid_text` finding for every string of a decoded JSON value, key or value, that
    no store keeps, at its path (`a.b[2]`; a bad key as `a.'b\\x00'`). `what` names the whole
    value when the bad string is the value itself."""
    if isinstance(value, str):
        problem = unstorable(value)
        if problem:
            yield Finding(path, INVALID_TEXT, f"{path or what} contains {problem}.", ERROR)
    elif isinstance(value, dict):
        for key, item in value.items():
            problem = unstorable(key) if isinstance(key, str) else None
            if problem:
                here = f"{path}.{key!r}" if path else repr(key)
                yield Finding(here, INVALID_TEXT, f"A field name contains {problem}.", ERROR)
                continue
            yield from unstorable_strings(item, f"{path}.{key}" if path else str(key), what=what)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from unstorable_strings(item, f"{path}[{i}]", what=what)
