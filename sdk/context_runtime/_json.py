"""Reading JSON that arrives from outside (the console's answers, webhooks, the disk copy):
one decoder, so a hostile shape comes out as ``msgspec.DecodeError`` and never as a
``RecursionError`` from whatever walks the value next (validation, freezing, encoding)."""

from __future__ import annotations

import msgspec

__all__ = ["MAX_DEPTH", "decode", "deeper_than"]

# Nesting levels of objects and arrays. The deepest document the contract knows (a config
# payload → strategies → key → body → budget) is 5 deep; 64 leaves room for any newer
# field and stays far from Python's recursion limit (1,000 frames).
MAX_DEPTH = 64


def decode(data: bytes):
    """``msgspec.json.decode`` that also refuses nesting deeper than :data:`MAX_DEPTH`."""
    try:
        value = msgspec.json.decode(data)
    except RecursionError as error:
        raise msgspec.DecodeError("JSON nested too deeply") from error
    if deeper_than(value, MAX_DEPTH):
        raise msgspec.DecodeError(f"JSON nested deeper than {MAX_DEPTH} levels")
    return value


def deeper_than(value, limit: int) -> bool:
    """True when dicts and lists nest more than ``limit`` levels (a walk without recursion,
    so it is safe on any value)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
