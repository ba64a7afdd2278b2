"""Applying an environment's rules to what a runtime sent, without Django
(docs/data-protection.md).

A `Ruleset` is the environment's rules, compiled once per batch. `trace_apply` walks a decoded
trace along `fields.TRACE_TREE` (every string the wire carries): a REFUSE rule's match
anywhere, or any rule's match in an identifier, refuses the trace with its path; a REDACT
rule's match in free text is replaced by its marker in place, and counted per rule. The
snapshot is decoded, each of its strings (keys too) redacted, and encoded again — before it is
encrypted. A custom pattern that runs out of time refuses the item (`redaction_failed`): what
could not be checked is never stored.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

import orjson
from context_runtime.findings import Finding

from traces.redaction import fields
from traces.redaction.detectors import (
    CUSTOM,
    Detector,
    RedactionTimeout,
    builtin_could_match,
    marker,
)

REDACT, REFUSE = "redact", "refuse"
ACTIONS = (REDACT, REFUSE)
PERSONAL_DATA = "personal_data"  # the reason code a refused item carries
REDACTION_FAILED = "redaction_failed"
MEMO_LIMIT = 200_000  # distinct strings remembered per ruleset (one batch)


@dataclass(frozen=True)
class Rule:
    key: str
    detector: Detector
    action: str  # REDACT or REFUSE


class Refused(Exception):
    def __init__(self, finding: Finding):
        super().__init__(finding.message)
        self.finding = finding

    def at(self, prefix: str) -> Refused:
        """The same refusal with its path under `prefix` (`reason` under `[3]` under
        `candidates`: `candidates[3].reason`)."""
        path = self.finding.path
        if path and not path.startswith(("[", "{")):
            path = "." + path
        return Refused(Finding(prefix + path, self.finding.code, self.finding.message))


@dataclass
class Ruleset:
    rules: tuple[Rule, ...] = ()
    _compiled: list = field(default_factory=list, repr=False)
    _memo: dict = field(default_factory=dict, repr=False)
    _builtin_only: bool = field(default=True, repr=False)

    def __post_init__(self):
        # Refusals first: a string a REFUSE rule matches is refused before anything is rewritten.
        self.rules = tuple(sorted(self.rules, key=lambda r: r.action != REFUSE))
        self._compiled = [(r, r.detector.compiled()) for r in self.rules]
        self._builtin_only = all(r.detector.kind != CUSTOM for r in self.rules)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def text(self, value: str, path: str, kind: str, counts: Counter) -> str:
        """`value` with every REDACT match replaced; raises Refused for a REFUSE match, or any
        match where `kind` is an identifier. A batch repeats most of its strings (reasons,
        sources, versions): each distinct one is scanned once per ruleset."""
        memo = self._memo.setdefault(kind, {})
        found = memo.get(value)
        if found is None:
            found = self._scan(value, kind)
            if len(memo) < MEMO_LIMIT:
                memo[value] = found
        new, matched, refusal = found
        if refusal is not None:
            raise Refused(Finding(path, *refusal))
        for key, n in matched:
            counts[key] += n
        return new

    def _scan(self, value: str, kind: str) -> tuple[str, tuple, tuple | None]:
        if self._builtin_only and not builtin_could_match(value):
            return value, (), None
        matched = []
        for rule, compiled in self._compiled:
            try:
                spans = rule.detector.spans(value, compiled)
            except RedactionTimeout:
                return (
                    value,
                    (),
                    (
                        REDACTION_FAILED,
                        f"rule '{rule.key}' could not check this value in time; the item is "
                        "refused rather than stored unchecked",
                    ),
                )
            if not spans:
                continue
            if rule.action == REFUSE or kind == fields.IDENTIFIER:
                why = (
                    "the environment refuses it"
                    if rule.action == REFUSE
                    else "an identifier cannot be redacted: send an internal reference"
                )
                return (
                    value,
                    (),
                    (
                        PERSONAL_DATA,
                        f"holds personal data matching rule '{rule.key}' "
                        f"({rule.detector.kind}); {why}",
                    ),
                )
            matched.append((rule.key, len(spans)))
            value = _replaced(value, spans, marker(rule.detector.name))
        return value, tuple(matched), None


def _replaced(value: str, spans: list[tuple[int, int]], mark: str) -> str:
    out, last = [], 0
    for start, end in spans:
        if start < last:
            continue
        out.append(value[last:start])
        out.append(mark)
        last = end
    out.append(value[last:])
    return "".join(out)


# --- a decoded trace (or outcome), along the walk plan -----------------------------------------
# Paths are built only for a refusal (`Refused.at`, on the way out): a batch visits half a
# million fields, almost all of them clean.
def _walk(obj, plan: dict, ruleset: Ruleset, counts: Counter) -> None:
    for name, node in plan.items():
        value = getattr(obj, name, None)
        if value is None:
            continue
        try:
            if isinstance(node, str):
                if node == fields.SNAPSHOT:
                    continue  # bytes, apart: `snapshot_apply`
                if isinstance(value, str) and value:
                    new = ruleset.text(value, "", node, counts)
                    if new is not value:
                        setattr(obj, name, new)
            elif "[]" in node:
                item = node["[]"]
                for i, element in enumerate(value):
                    try:
                        if isinstance(item, str):
                            if isinstance(element, str):
                                ruleset.text(element, "", fields.IDENTIFIER, counts)
                        else:
                            _walk(element, item, ruleset, counts)
                    except Refused as exc:
                        raise exc.at(f"[{i}]") from None
            elif "{}" in node:
                for key in value:
                    ruleset.text(key, "{}", fields.IDENTIFIER, counts)
            else:
                _walk(value, node, ruleset, counts)
        except Refused as exc:
            raise exc.at(name) from None


def trace_apply(trace, ruleset: Ruleset) -> Counter:
    """Redact a decoded wire trace in place; the matches per rule. Raises Refused."""
    counts: Counter = Counter()
    if ruleset:
        _walk(trace, fields.TRACE_TREE, ruleset, counts)
    return counts


def outcome_apply(outcome, ruleset: Ruleset) -> None:
    """An outcome holds identifiers and a declared label only: any match refuses it."""
    if ruleset:
        _walk(outcome, fields.OUTCOME_TREE, ruleset, Counter())


def snapshot_apply(raw: bytes, ruleset: Ruleset, counts: Counter) -> bytes:
    """The snapshot with each string (and key) of its JSON redacted; the same bytes when
    nothing matched. Raises Refused."""
    if not ruleset:
        return raw
    before = sum(counts.values())
    try:
        decoded = orjson.loads(raw)
    except orjson.JSONDecodeError:  # valid JSON orjson cannot hold (a number past a double)
        raise Refused(
            Finding(
                "snapshot",
                REDACTION_FAILED,
                "the snapshot holds a value the redaction cannot read (a number beyond a "
                "double, e.g. 1e999); the trace is refused rather than stored unchecked",
            )
        ) from None
    _snapshot_value(decoded, "snapshot", ruleset, counts)  # the counts, or the refusal
    if sum(counts.values()) == before:
        return raw
    # Something was redacted: written again from Python's own reading, which keeps integers
    # beyond 64 bits exact (orjson reads them as floats); the same strings, so the same result.
    exact = _snapshot_value(json.loads(raw), "snapshot", ruleset, Counter())
    return json.dumps(exact, ensure_ascii=False, separators=(",", ":")).encode()


def _snapshot_value(value, path: str, ruleset: Ruleset, counts: Counter):
    if isinstance(value, str):
        return ruleset.text(value, path, fields.TEXT, counts) if value else value
    if isinstance(value, list):
        return [
            _snapshot_value(item, f"{path}[{i}]", ruleset, counts) for i, item in enumerate(value)
        ]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            new_key = ruleset.text(key, path, fields.TEXT, counts) if key else key
            if new_key in out:  # two keys redacted alike would lose one of them
                raise Refused(
                    Finding(
                        path,
                        PERSONAL_DATA,
                        "two keys of this object redact to the same text; the item is refused "
                        "rather than stored with one of them lost",
                    )
                )
            out[new_key] = _snapshot_value(item, f"{path}.{new_key}", ruleset, counts)
        return out
    return value


def preview(text: str, ruleset: Ruleset) -> tuple[str, dict[str, int], str | None]:
    """What a free-text field would be stored as: the text, the counts, or why it is refused."""
    counts: Counter = Counter()
    try:
        return ruleset.text(text, "text", fields.TEXT, counts), dict(counts), None
    except Refused as exc:
        return "", dict(counts), exc.finding.message


__all__ = [
    "CUSTOM",
    "PERSONAL_DATA",
    "REDACT",
    "REDACTION_FAILED",
    "REFUSE",
    "Refused",
    "Rule",
    "Ruleset",
    "outcome_apply",
    "preview",
    "snapshot_apply",
    "trace_apply",
]
