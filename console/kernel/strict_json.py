"""JSON read strictly: the one detection of a key that appears twice in one object.

Every JSON decoder here (orjson for the API, msgspec for the trace ingest, the standard
library for files) keeps the last of two equal keys, so `{"dry_run": true, "dry_run": false}`
would apply. Input that says two things is refused instead (400 `duplicate_key`, at the
key's path), whatever decoded it. Pure Python, no Django: the trace ingest uses it too.

Reading a text again to look for a key twice costs more than decoding it, so a text that is
exactly orjson's compact encoding of what it decodes to is taken as proof enough
(`own_encoding`: an encoding of decoded objects writes each key once); any other is read by
`marked_loads`.
"""

from __future__ import annotations

import json

import orjson

DUPLICATE_KEY = "duplicate_key"


class DuplicateKey(ValueError):
    """A key that appears twice in one object, at its path (e.g. `budget.max_input_tokens`,
    `traces[3].status`)."""

    def __init__(self, path: str):
        self.path = path
        super().__init__(f"{path or 'A key'} appears twice in one object; say it once.")

    @property
    def message(self) -> str:
        return str(self)

    def as_finding(self) -> dict:
        return {"path": self.path, "code": DUPLICATE_KEY, "message": self.message}


class _Repeated(dict):
    """An object that had a key twice, marked with that key for `_first` to find."""

    __slots__ = ("repeated",)


def _join(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


def _first(value, path: str) -> DuplicateKey | None:
    if isinstance(value, _Repeated):
        return DuplicateKey(_join(path, value.repeated))
    if isinstance(value, dict):
        children = ((_join(path, k), v) for k, v in value.items())
    elif isinstance(value, list):
        children = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for where, child in children:
        found = _first(child, where)
        if found is not None:
            return found
    return None


def own_encoding(raw: bytes) -> bool:
    """True when `raw` is exactly orjson's compact encoding of what it decodes to: an encoding
    of decoded objects writes each key once, so such a text had no key twice. A cheap proof
    for compact JSON (most clients' and the SDK's); anything else is read by `marked_loads`."""
    try:
        return orjson.dumps(orjson.loads(raw)) == raw
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):  # e.g. nested beyond 1,024
        return False


def marked_loads(text: str | bytes, **json_options):
    """(the decoded value, whether a key appeared twice): each object that had a key twice is
    marked, for `first_duplicate` to place. Raises ValueError (not JSON) or RecursionError."""
    repeated = False

    def pairs(items: list) -> dict:
        nonlocal repeated
        obj = dict(items)
        if len(obj) == len(items):
            return obj
        repeated = True
        seen: set = set()
        for key, _ in items:
            if key in seen:
                break
            seen.add(key)
        marked = _Repeated(obj)
        marked.repeated = key
        return marked

    value = json.loads(text, object_pairs_hook=pairs, **json_options)
    return value, repeated


def first_duplicate(value, path: str = "") -> DuplicateKey | None:
    """The first key twice in one object of a value from `marked_loads`, at its path under
    `path`."""
    try:
        return _first(value, path)
    except RecursionError:  # deeper than Python walks: still refused, just not placed
        return DuplicateKey(path)


def duplicate_key(text: str | bytes) -> DuplicateKey | None:
    """The first key that appears twice in one object of `text`, or None (also for text that
    is not JSON: the caller's decoder says what is wrong with it)."""
    if isinstance(text, bytes) and own_encoding(text):
        return None
    return _read_for_duplicate(text)


def _read_for_duplicate(text: str | bytes) -> DuplicateKey | None:
    try:
        value, repeated = marked_loads(text)
    except (ValueError, RecursionError):
        return None
    return first_duplicate(value) if repeated else None  # the walk only when there is one


def loads(raw: str | bytes):
    """orjson's decode (bounded nesting, no NaN, valid UTF-8 only), refusing duplicate keys:
    raises orjson.JSONDecodeError or DuplicateKey."""
    value = orjson.loads(raw)
    if isinstance(raw, bytes) and orjson.dumps(value) == raw:
        return value  # its own compact encoding (`own_encoding`): each key once
    found = _read_for_duplicate(raw)
    if found is not None:
        raise found
    return value
