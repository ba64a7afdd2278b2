"""Field-by-field differences between two document bodies, in words an ops person reads.

Used by *Compare* on a strategy, by the publish and rollback confirmations ("what will
change") and by the audit log's before/after.  Pure Python, no Django.

How values are compared:

- lists of names (required and optional sources, allowed tools, bundle items, dependencies,
  the agent whitelist) are sets: one change per name added or removed, order ignored;
- objects are compared key by key, recursively;
- anything else is a value that changed; ``1`` and ``true`` are different values.

The order of changes does not depend on the order of keys in the stored JSON (Postgres
``jsonb`` does not keep it): known fields come in the order of the contract, other keys
alphabetically, and list items in list order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from context_runtime.vocabulary import (
    BLOCK_LABELS,
    BLOCKS,
    BUDGET_FIELDS,
    HISTORY_FIELDS,
    KNOWN_SECTIONS,
    KNOWN_SWITCHES,
    PROFILE,
    PROFILE_FIELDS,
    SNAPSHOT_FIELDS,
    STRATEGY,
    STRATEGY_FIELDS,
)

__all__ = [
    "ADDED",
    "CHANGED",
    "FIELD_LABELS",
    "REMOVED",
    "Change",
    "diff_bodies",
]

ADDED = "added"
REMOVED = "removed"
CHANGED = "changed"

# Labels of the document's own fields (never of source, tool or section keys).
FIELD_LABELS: dict[str, str] = {
    # strategy
    "required": "required sources",
    "optional": "optional sources",
    "priority": "priority",
    "bundles": "bundles",
    "depends_on": "dependencies",
    "allowed_tools": "allowed tools",
    "on_missing": "when a source is missing",
    "max_extra_reads": "max extra reads",
    "budget": "Budget",
    "max_input_tokens": "max input tokens",
    "reserve_output_tokens": "reserved output tokens",
    "history": "History",
    "max_turns": "max turns kept",
    "compress_after_tokens": "compress after (tokens)",
    "snapshot": "Snapshot",
    "allowed": "full request may be sent",
    # profile
    "sections": "Sections",
    "user_context": BLOCK_LABELS["user_context"],
    "query_context": BLOCK_LABELS["query_context"],
    "switches": "Switches",
}

# Objects whose own keys are fields of the contract (and so get labels).
_LABELLED_OBJECTS = ("budget", "history", "snapshot", "sections")

_KEY_ORDER: dict[tuple, tuple[str, ...]] = {
    ("budget",): BUDGET_FIELDS,
    ("history",): HISTORY_FIELDS,
    ("snapshot",): SNAPSHOT_FIELDS,
    ("sections",): BLOCKS,
    ("sections", "user_context"): KNOWN_SECTIONS["user_context"],
    ("sections", "query_context"): KNOWN_SECTIONS["query_context"],
    ("switches",): tuple(KNOWN_SWITCHES),
}

_MISSING = object()


@dataclass(frozen=True)
class Change:
    """One difference: where, what kind, the values on each side and a sentence."""

    path: str
    kind: str  # "added" | "removed" | "changed"
    before: object  # None when added
    after: object  # None when removed
    summary: str

    def as_dict(self) -> dict:
        return {
            "path": self.path,
            "kind": self.kind,
            "before": self.before,
            "after": self.after,
            "summary": self.summary,
        }


def diff_bodies(kind: str, before: dict | None, after: dict | None) -> list[Change]:
    """Changes that turn ``before`` into ``after``; ``None`` on one side means no document.

    Never raises on JSON-like input; a body that is not an object is compared as a whole.
    """
    changes: list[Change] = []
    b = {} if before is None else before
    a = {} if after is None else after
    if isinstance(b, dict) and isinstance(a, dict):
        _walk(kind, (), b, a, changes)
    elif not _same(b, a):
        old = _MISSING if before is None else before
        new = _MISSING if after is None else after
        changes.append(_leaf(kind, (), old, new))
    return changes


# --------------------------------------------------------------------------- walking


def _walk(kind: str, segs: tuple, b, a, out: list[Change]) -> None:
    if b is _MISSING and a is _MISSING:
        return
    if _is_object(b) and _is_object(a):
        b_map = {} if b is _MISSING else b
        a_map = {} if a is _MISSING else a
        if not b_map and not a_map:
            if b is _MISSING or a is _MISSING:  # an empty object appeared or went away
                out.append(_leaf(kind, segs, b, a))
            return
        for key in _ordered_keys(kind, segs, b_map, a_map):
            _walk(kind, segs + (key,), b_map.get(key, _MISSING), a_map.get(key, _MISSING), out)
        return
    if _is_name_list(b) and _is_name_list(a):
        _walk_names(kind, segs, b, a, out)
        return
    if b is _MISSING or a is _MISSING or not _same(b, a):
        out.append(_leaf(kind, segs, b, a))


def _walk_names(kind: str, segs: tuple, b, a, out: list[Change]) -> None:
    b_list = [] if b is _MISSING else b
    a_list = [] if a is _MISSING else a
    if not b_list and not a_list:
        if b is _MISSING or a is _MISSING:  # an empty list appeared or went away
            out.append(_leaf(kind, segs, b, a))
        return
    path = _path(segs)
    after_set = set(a_list)
    before_set = set(b_list)
    for name in _unique(b_list):
        if name not in after_set:
            out.append(Change(path, REMOVED, name, None, _member_summary(segs, REMOVED, name)))
    for name in _unique(a_list):
        if name not in before_set:
            out.append(Change(path, ADDED, None, name, _member_summary(segs, ADDED, name)))


def _ordered_keys(kind: str, segs: tuple, b: dict, a: dict) -> list:
    if segs == ():
        known = {STRATEGY: STRATEGY_FIELDS, PROFILE: PROFILE_FIELDS}.get(
            kind, STRATEGY_FIELDS + PROFILE_FIELDS
        )
    else:
        known = _KEY_ORDER.get(segs, ())
    keys = list(b) + [k for k in a if k not in b]
    rank = {k: i for i, k in enumerate(known)}
    return sorted(keys, key=lambda k: (0, rank[k], "") if k in rank else (1, 0, _text(k)))


def _is_object(value) -> bool:
    return value is _MISSING or isinstance(value, dict)


def _is_name_list(value) -> bool:
    return value is _MISSING or (
        isinstance(value, list) and all(isinstance(item, str) for item in value)
    )


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _same(b, a) -> bool:
    """Equal as JSON: ``1`` and ``true`` differ, key order does not matter."""
    try:
        return _canonical(b) == _canonical(a)
    except (TypeError, ValueError, RecursionError):
        return type(b) is type(a) and b == a


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------- wording


def _text(key) -> str:
    return key if isinstance(key, str) else _canonical_or_repr(key)


def _canonical_or_repr(value) -> str:
    try:
        return _canonical(value)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def _path(segs: tuple) -> str:
    return ".".join(_text(s) for s in segs)


def _label(segs: tuple) -> str:
    """ "Budget › max input tokens"; keys chosen by the author stay as they are."""
    if not segs:
        return "The whole document"
    parts = []
    for i, seg in enumerate(segs):
        labelled = i == 0 or (i == 1 and segs[0] in _LABELLED_OBJECTS)
        parts.append(FIELD_LABELS.get(seg, _text(seg)) if labelled else _text(seg))
    label = " › ".join(parts)
    return _capitalised(label) if segs[0] in FIELD_LABELS else label


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def _fmt(value, limit: int = 80) -> str:
    """A value as it reads in a sentence."""
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value if value else '""'
    elif isinstance(value, int | float):
        text = str(value)
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        text = ", ".join(value)
    elif value == [] or value == {}:
        text = "empty"
    else:
        text = _canonical_or_repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _member_summary(segs: tuple, kind: str, name: str) -> str:
    field = segs[0] if segs else None
    if field == "depends_on" and len(segs) == 2:
        source = _text(segs[1])
        if kind == ADDED:
            return f"{source} now depends on {name}"
        return f"{source} no longer depends on {name}"
    if field == "bundles" and len(segs) == 2:
        where = f"bundle {_text(segs[1])}"
    elif field == "switches" and len(segs) == 2:
        where = _text(segs[1])
    else:
        where = _label(segs)
        if segs and segs[0] in FIELD_LABELS and len(segs) == 1:
            where = FIELD_LABELS[segs[0]]  # mid-sentence: keep the label's own case
    return f"{name} added to {where}" if kind == ADDED else f"{name} removed from {where}"


def _leaf(kind: str, segs: tuple, b, a) -> Change:
    before = None if b is _MISSING else b
    after = None if a is _MISSING else a
    if b is _MISSING:
        change_kind = ADDED
    elif a is _MISSING:
        change_kind = REMOVED
    else:
        change_kind = CHANGED
    return Change(_path(segs), change_kind, before, after, _leaf_summary(segs, change_kind, b, a))


def _leaf_summary(segs: tuple, kind: str, b, a) -> str:
    field = segs[0] if segs else None
    if field == "sections" and len(segs) == 3 and segs[1] in BLOCK_LABELS:
        return _toggle_summary(f"{_text(segs[2])} ({BLOCK_LABELS[segs[1]]})", kind, b, a)
    if field == "switches" and len(segs) == 2:
        return _toggle_summary(_text(segs[1]), kind, b, a)
    if field == "on_missing" and len(segs) == 2:
        source = _text(segs[1])
        if kind == ADDED:
            return f"When {source} is missing, use {_fmt(a)}"
        if kind == REMOVED:
            return f"When {source} is missing, no longer use {_fmt(b)}"
        return f"When {source} is missing, use {_fmt(a)} instead of {_fmt(b)}"
    if field == "priority" and len(segs) == 2:
        return _value_summary(f"Priority of {_text(segs[1])}", kind, b, a)
    return _toggle_summary(_label(segs), kind, b, a)


def _toggle_summary(label: str, kind: str, b, a) -> str:
    """Booleans read as switched on/off; anything else as a value."""
    if kind == CHANGED and isinstance(b, bool) and isinstance(a, bool):
        return f"{label} switched {'on' if a else 'off'}"
    if kind == ADDED and isinstance(a, bool):
        return f"{label} switched on" if a else f"{label} added, switched off"
    if kind == REMOVED and isinstance(b, bool):
        return f"{label} removed (was {'on' if b else 'off'})"
    return _value_summary(label, kind, b, a)


def _value_summary(label: str, kind: str, b, a) -> str:
    if kind == ADDED:
        if a == [] or a == {}:
            return f"{label} added, empty"
        return f"{label} set to {_fmt(a)}"
    if kind == REMOVED:
        return f"{label} removed (was {_fmt(b)})"
    return f"{label} changed from {_fmt(b)} to {_fmt(a)}"
