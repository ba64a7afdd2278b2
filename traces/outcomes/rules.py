"""The one judgement of an outcome kind's declaration and of a value against a kind, pure
(no database): the form, the operator API, the demo and the ingest all ask here."""

from __future__ import annotations

import re
from dataclasses import dataclass

from context_runtime.findings import Finding
from context_runtime.wire import MAX_OUTCOME_LABEL_CHARS

from console.kernel.limits import text_findings

MAX_KINDS_PER_ENVIRONMENT = 20  # the bounded list an environment declares
MAX_CHOICES = 20
MAX_RATING_SPAN = 100  # a rating's range, max − min
MAX_RATE_LABEL_CHARS = 100
TYPES = ("flag", "rating", "label")
KIND_KEY = re.compile(r"[a-z][a-z0-9_]{0,99}")
CHOICE_KEY = re.compile(rf"[a-z0-9][a-z0-9_-]{{0,{MAX_OUTCOME_LABEL_CHARS - 1}}}")


@dataclass(frozen=True)
class KindSpec:
    """A declaration as asked for (form or API), before it is judged."""

    key: str
    label: str
    type: str
    rating_min: int | None = None
    rating_max: int | None = None
    choices: tuple[str, ...] = ()
    bad_values: tuple = ()
    rate_label: str = ""

    def as_dict(self) -> dict:
        return {
            "key": self.key,
            "label": self.label,
            "type": self.type,
            "rating_min": self.rating_min,
            "rating_max": self.rating_max,
            "choices": list(self.choices),
            "bad_values": list(self.bad_values),
            "rate_label": self.rate_label,
        }


# What the demo declares in every environment (docs/DEMO.md) and a good start for any.
STANDARD_KINDS = (
    KindSpec(
        "task_completed",
        "Task completed",
        "flag",
        bad_values=(False,),
        rate_label="incomplete rate",
    ),
    KindSpec(
        "escalated",
        "Escalated to a person",
        "flag",
        bad_values=(True,),
        rate_label="escalation rate",
    ),
    KindSpec(
        "rating",
        "User's rating",
        "rating",
        rating_min=1,
        rating_max=5,
        bad_values=(1, 2),
        rate_label="low-rating rate",
    ),
    KindSpec(
        "resolution",
        "Resolution",
        "label",
        choices=("refund", "replacement", "explained", "other"),
        bad_values=("other",),
        rate_label="unresolved rate",
    ),
)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def spec_findings(spec: KindSpec) -> list[Finding]:
    """Why this declaration cannot be kept, field by field (empty: it can)."""
    found: list[Finding] = []
    if not KIND_KEY.fullmatch(spec.key or ""):
        found.append(
            Finding(
                "key",
                "invalid",
                "Use lowercase letters, digits and '_' (at most 100), starting with a letter, "
                "e.g. task_completed.",
            )
        )
    if not (spec.label or "").strip():
        found.append(Finding("label", "required", "Give it a name people read, e.g. Escalated."))
    else:
        found += text_findings(spec.label, "label", max_chars=200)
    found += text_findings(spec.rate_label or "", "rate_label", max_chars=MAX_RATE_LABEL_CHARS)
    if spec.type not in TYPES:
        found.append(Finding("type", "invalid_choice", "Choose flag, rating or label."))
        return found
    if spec.type == "rating":
        low, high = spec.rating_min, spec.rating_max
        if not (_is_int(low) and _is_int(high)):
            found.append(Finding("rating_min", "required", "A rating needs its range, e.g. 1–5."))
        elif not low < high <= low + MAX_RATING_SPAN:
            found.append(
                Finding(
                    "rating_max",
                    "out_of_range",
                    f"The highest rating must be above the lowest, by at most {MAX_RATING_SPAN}.",
                )
            )
    if spec.type == "label":
        if not spec.choices:
            found.append(Finding("choices", "required", "List the labels it may take."))
        elif len(spec.choices) > MAX_CHOICES:
            found.append(Finding("choices", "too_long", f"At most {MAX_CHOICES} labels."))
        elif len(set(spec.choices)) != len(spec.choices):
            found.append(Finding("choices", "duplicate", "Each label once."))
        else:
            for i, choice in enumerate(spec.choices):
                if not isinstance(choice, str) or not CHOICE_KEY.fullmatch(choice):
                    found.append(
                        Finding(
                            f"choices[{i}]",
                            "invalid",
                            "Use lowercase letters, digits, '-' and '_', e.g. refund.",
                        )
                    )
    if not found:
        for i, bad in enumerate(spec.bad_values):
            problem = value_problem(spec, bad)
            if problem:
                found.append(
                    Finding(f"bad_values[{i}]", "invalid", f"Not a value it takes: {problem}")
                )
        if len(set(map(repr, spec.bad_values))) != len(spec.bad_values):
            found.append(Finding("bad_values", "duplicate", "Each value once."))
    return found


def change_findings(before: KindSpec, after: KindSpec) -> list[Finding]:
    """What an edit may not change: outcomes already stored must stay valid, so the key and
    type stay, a rating's range may only widen and a label's choices only grow."""
    found = []
    if after.key != before.key:
        found.append(Finding("key", "immutable", "The key stays: runtimes send it."))
    if after.type != before.type:
        found.append(Finding("type", "immutable", "The type stays; retire it and declare anew."))
        return found
    if before.type == "rating" and (
        _is_int(after.rating_min)
        and _is_int(after.rating_max)
        and (after.rating_min > before.rating_min or after.rating_max < before.rating_max)
    ):
        found.append(
            Finding(
                "rating_min",
                "narrowed",
                f"The range may only widen (it is {before.rating_min}–{before.rating_max}): "
                "stored ratings must stay within it.",
            )
        )
    gone = [c for c in before.choices if c not in after.choices]
    if before.type == "label" and gone:
        found.append(
            Finding(
                "choices",
                "narrowed",
                "Labels may be added, not removed (stored outcomes use them): " + ", ".join(gone),
            )
        )
    return found


def value_problem(kind, value) -> str | None:
    """Why `value` is not one this kind takes (None: it is). `kind` is a KindSpec or an
    OutcomeKind (the same field names)."""
    if kind.type == "flag":
        return None if isinstance(value, bool) else "a flag is true or false"
    if kind.type == "rating":
        if not _is_int(value) or not kind.rating_min <= value <= kind.rating_max:
            return f"a rating is a whole number from {kind.rating_min} to {kind.rating_max}"
        return None
    if not isinstance(value, str) or value not in kind.choices:
        return "one of " + ", ".join(kind.choices)
    return None


def is_bad(kind, value) -> bool:
    """Does this value count towards the kind's rate ("escalation rate")?"""
    return any(value == bad and type(value) is type(bad) for bad in kind.bad_values)


def rate_name(kind) -> str:
    return kind.rate_label or f"{kind.label} rate"


def value_key(value) -> str:
    """A value as the health counters key it (`escalated:true`, `rating:4`): JSON's words for
    a flag."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)
