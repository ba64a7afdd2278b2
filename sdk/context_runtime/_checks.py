"""Building blocks shared by the validators: findings with readable messages."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping

from context_runtime.canonical import canonical_json
from context_runtime.findings import ERROR, Finding
from context_runtime.text import INVALID_TEXT, unstorable_strings
from context_runtime.vocabulary import MAX_BODY_BYTES


def _err(path: str, code: str, message: str, severity: str = ERROR) -> Finding:
    return Finding(path=path, code=code, message=message, severity=severity)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value) -> str:
    """A value's JSON type in words, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def _show(value, limit: int = 60) -> str:
    """A value as JSON for a message, shortened; never raises."""
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        text = _kind(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _name(key, limit: int = 80) -> str:
    """A key or name as it should read in a sentence (no quotes)."""
    text = key if isinstance(key, str) else _show(key)
    if text == "":
        return '""'
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _join(path: str, key) -> str:
    key = key if isinstance(key, str) else _show(key)
    return f"{path}.{key}" if path else key


def _suggest(key, choices: Iterable[str]) -> str:
    if not isinstance(key, str):
        return ""
    match = difflib.get_close_matches(key, list(choices), n=1, cutoff=0.6)
    return f" Did you mean {match[0]}?" if match else ""


def _check_document(body, what: str) -> list[Finding]:
    """Size and shape of the whole body. A body with a string no store keeps gets only those
    findings: the validators read nothing else of it (see `_unreadable`)."""
    try:
        text_findings = list(unstorable_strings(body, what=f"The {what}"))
    except RecursionError:  # absurd nesting: canonical_json says so below
        text_findings = []
    if text_findings:
        return text_findings
    findings: list[Finding] = []
    try:
        size = len(canonical_json(body))
    except (TypeError, ValueError, RecursionError):
        return [
            _err("", "invalid_type", f"The {what} contains values that cannot be written as JSON.")
        ]
    if size > MAX_BODY_BYTES:
        findings.append(
            _err(
                "",
                "too_large",
                f"The {what} is {size:,} bytes; the limit is {MAX_BODY_BYTES:,} bytes.",
            )
        )
    if not isinstance(body, dict):
        findings.append(
            _err("", "invalid_type", f"A {what} must be a JSON object, not {_kind(body)}.")
        )
    return findings


def _unreadable(body, findings: list[Finding]) -> bool:
    """Whether a validator reads no further than `_check_document`: the body is not an object,
    or holds text no store keeps (other messages would repeat that text, and a content hash
    cannot be taken of a lone surrogate)."""
    return not isinstance(body, dict) or any(f.code == INVALID_TEXT for f in findings)


def _unknown_fields(
    obj: Mapping, known: tuple[str, ...], path: str, what: str, hints: Mapping[str, str]
) -> list[Finding]:
    findings = []
    for key in obj:
        if key in known:
            continue
        message = hints.get(key) if isinstance(key, str) else None
        if message is None:
            message = f"{_name(key)} is not {what}.{_suggest(key, known)}"
        findings.append(_err(_join(path, key), "unknown_field", message))
    return findings


def _check_int(value, path: str, low: int, high: int | None = None) -> list[Finding]:
    if not _is_int(value):
        return [_err(path, "invalid_type", f"{path} must be a whole number, not {_show(value)}.")]
    if value < low or (high is not None and value > high):
        bounds = f"between {low:,} and {high:,}" if high is not None else f"at least {low:,}"
        return [_err(path, "out_of_range", f"{path} must be {bounds}, not {value:,}.")]
    return []


def _check_string_item(value, path: str, what: str) -> list[Finding]:
    if not isinstance(value, str):
        return [_err(path, "invalid_type", f"{path} must be {what} (text), not {_show(value)}.")]
    if not value.strip():
        return [_err(path, "empty", f"{path} is empty; write {what} there or remove it.")]
    return []


def _name_list(
    obj: Mapping, field: str, label: str, *, required: bool, path: str = "", what: str = "a name"
) -> tuple[list[Finding], list[tuple[int, str]]]:
    """Check ``obj[field]`` is a list of distinct non-empty strings.

    Returns the findings and the usable items as (index, value), duplicates excluded.
    """
    here = _join(path, field)
    if field not in obj:
        if required:
            return [_err(here, "required", f"{here} is missing; list the {label}.")], []
        return [], []
    items = obj[field]
    if not isinstance(items, list):
        return [
            _err(
                here,
                "invalid_type",
                f"{here} must be a list, each entry {what}; not {_kind(items)}.",
            )
        ], []
    findings: list[Finding] = []
    good: list[tuple[int, str]] = []
    first_at: dict[str, int] = {}
    for i, item in enumerate(items):
        item_path = f"{here}[{i}]"
        problems = _check_string_item(item, item_path, what)
        if problems:
            findings += problems
            continue
        if item in first_at:
            findings.append(
                _err(
                    item_path,
                    "duplicate",
                    f"{_name(item)} is listed twice in {label} "
                    f"(first at {here}[{first_at[item]}]); remove one.",
                )
            )
            continue
        first_at[item] = i
        good.append((i, item))
    return findings, good


def _index_of(finding: Finding) -> tuple[int, ...]:
    """Sort key: the list indexes in a path, so ``x[2]`` comes before ``x[10]``."""
    indexes = []
    for part in finding.path.split("[")[1:]:
        number = part.split("]", 1)[0]
        indexes.append(int(number) if number.isdigit() else -1)
    return tuple(indexes)
