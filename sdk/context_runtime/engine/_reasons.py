"""The reasons an operator reads in a trace, worded in one place.

Plain English, short (a trace holds at most 200 characters: :func:`short` cuts longer ones),
numbers with thousands separators, no permission internals beyond what the provider's note
says.
"""

from __future__ import annotations

from context_runtime.wire import MAX_REASON_CHARS

REQUIRED = "required"

# A decision as it reads inside a sentence ("..., which was not selected (over budget)").
DECISION_WORDS = {
    "selected": "selected",
    "not_fetched": "not fetched",
    "no_access": "no access",
    "not_applicable": "does not apply",
    "over_budget": "over budget",
    "dependency_missing": "a dependency is missing",
    "irrelevant": "irrelevant",
    "conflict": "in conflict",
    "not_requested": "not requested",
}


def _n(number: int) -> str:
    """A token count with thousands separators (the plain form is cheaper below 1,000)."""
    return f"{number:,}" if number >= 1000 else str(number)


def short(text: str) -> str:
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


def _named(item_id: str, version: str) -> str:
    return f"{item_id} {version}" if version else item_id


def _relevance(relevance: float | None) -> str:
    return "" if relevance is None else f", relevance {relevance:.2f}"


def _with_note(text: str, note: str) -> str:
    return f"{text} ({note})" if note else text


# ---------------------------------------------------------------- selected


def required_with_bundle(bundle: str) -> str:
    return f"required: bundle {bundle} holds required items"


def required_by(item_id: str) -> str:
    return f"required: {item_id} needs it"


def selected_optional(priority: int, relevance: float | None) -> str:
    if relevance is None:
        return f"optional, priority {priority}, fits the budget"
    return f"optional, priority {priority}, relevance {relevance:.2f}, fits the budget"


def selected_optional_bundle(bundle: str, size: int, priority: int, relevance) -> str:
    return (
        f"optional bundle {bundle} ({_n(size)} tokens), priority {priority}"
        f"{_relevance(relevance)}, fits the budget"
    )


# ---------------------------------------------------------------- what the provider said


def not_fetched(source: str, note: str) -> str:
    if note:
        return f"not fetched: {note}"
    return f"the {source} provider did not answer (not fetched)"


def no_access(note: str, required: bool) -> str:
    text = f"no access: {note}" if note else "no access for this principal"
    return f"{text}; required, and never assumed allowed" if required else text


def not_applicable(source: str, note: str) -> str:
    if note:
        return f"does not apply: {note}"
    return f"the {source} provider says it does not apply here"


def source_not_read(source: str) -> str:
    return (
        f"not requested: this strategy does not read {source}, so the item was left out "
        "without being weighed"
    )


def handler_takes_over(reason: str, handler: str) -> str:
    return f"{reason}; {handler} takes over"


# ---------------------------------------------------------------- excluded by the engine


def irrelevant(relevance: float, threshold: float, note: str) -> str:
    text = f"relevance {relevance:.2f} is below the threshold {threshold:.2f}"
    return f"{text} ({note})" if note else text  # _with_note inlined: a frequent text


def bundle_irrelevant(bundle: str, relevance: float, threshold: float) -> str:
    return (
        f"bundle {bundle}: its best relevance {relevance:.2f} is below the threshold "
        f"{threshold:.2f}"
    )


def versions_conflict(item_id: str, versions: list[str]) -> str:
    named = [_named(item_id, v) if v else f"{item_id} (no version)" for v in versions]
    if len(named) == 2:
        return f"{named[0]} and {named[1]} both claim to apply"
    return f"{', '.join(named[:-1])} and {named[-1]} all claim to apply"


def flagged_conflict(source: str, a_id: str, a_version: str, b_id: str, b_version: str) -> str:
    return (
        f"the {source} provider reports that {_named(a_id, a_version)} conflicts with "
        f"{_named(b_id, b_version)}"
    )


_BLOCKED_BECAUSE = {
    "not_fetched": "was not fetched",
    "no_access": "is not accessible",
    "conflict": "is in conflict",
}


def bundle_incomplete(bundle: str, member_id: str, decision: str) -> str:
    return f"bundle {bundle} is incomplete: {member_id} {_BLOCKED_BECAUSE[decision]}"


def needs(name: str, decision: str) -> str:
    return f"needs {name}, which was not selected ({DECISION_WORDS[decision]})"


def needs_absent_item(item_id: str) -> str:
    return f"needs {item_id}, which is not among the candidates"


def needs_empty_source(source: str) -> str:
    return f"needs {source}, which returned nothing"


def over_budget_required(size: int, left: int) -> str:
    return f"required, but its {_n(size)} tokens do not fit the {_n(left)} left"


def over_budget_optional(priority: int, size: int, left: int) -> str:
    # The most frequent text (most optional items of a full budget): _n inlined.
    size_text = str(size) if size < 1000 else f"{size:,}"
    left_text = str(left) if left < 1000 else f"{left:,}"
    return f"optional, priority {priority}: {size_text} tokens do not fit the {left_text} left"


def over_budget_bundle(bundle: str, size: int, left: int) -> str:
    return f"indivisible bundle {bundle} ({_n(size)} tokens) does not fit the {_n(left)} left"


# ---------------------------------------------------------------- the status


def source_returned_nothing(source: str) -> str:
    return f"required source {source} returned nothing that applies"


def with_handler(text: str, handler: str) -> str:
    return f"{text} (on_missing: {handler})"


def several_handlers(pairs: list[tuple[str, str]]) -> str:
    listed = ", ".join(f"{source} → {handler}" for source, handler in pairs)
    return f"missing sources name different handlers ({listed}); one request can take one only"


def ready(used: int, available: int) -> str:
    return f"every required item is selected; {used:,} of {available:,} tokens used"
