"""What a trace means, in plain words: the status explained and "where to look".

The boundary rules of docs/background.md § Boundaries: a candidate not fetched → its provider
(no access → the authorization service); fetched but excluded for budget, rule or dependency
→ the strategy; everything required selected and status ready → the model and the prompt; a
conflict → the owners of the conflicting sources; degraded → the handler used and the
provider that failed.
Pure Python: it reads attributes, so it works on model rows and plain objects alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

STATUS_EXPLAINED = {
    "ready": "The runtime assembled the context it needed and sent the request to the model.",
    "missing_required_data": (
        "A required item could not be obtained, so the runtime stopped instead of letting the "
        "model answer without it."
    ),
    "budget_exceeded": (
        "What the strategy requires does not fit in the input budget; the runtime stopped "
        "explicitly rather than cut an indivisible item."
    ),
    "source_conflict": (
        "Two valid sources disagree; the runtime returned the conflict for verification "
        "instead of silently picking one."
    ),
    "degraded": (
        "A source failed and the runtime switched to a declared fallback handler, so the answer "
        "was deliberately more general than usual."
    ),
    "input_refused": (
        "The runtime refused its own input: an item a provider returned (or the configuration "
        "it read) was malformed, so the engine decided nothing and the model was not called."
    ),
}


# A reason code (the wire's closed list, `context_runtime.wire.REASON_CODES`, and the shadow's
# `source_not_read`) in an operator's words: where a page has only the code (a shadow's
# decision, a count by reason), these words go in front and the code one hover away.
REASON_WORDS = {
    "required": "required",
    "optional_fits": "optional, and it fitted",
    "below_threshold": "not relevant enough",
    "over_budget_required": "required, but too large for the budget",
    "over_budget_optional": "optional, and the budget was full",
    "over_budget_bundle": "its indivisible bundle did not fit the budget",
    "bundle_incomplete": "a part of its bundle could not be used",
    "dependency_unselected": "an item it needs was left out",
    "dependency_absent": "an item it needs was not found",
    "versions_conflict": "two versions of it both claim to apply",
    "flagged_conflict": "its provider reports a contradiction",
    "provider_not_fetched": "its provider did not deliver it",
    "provider_no_access": "this user may not see it",
    "provider_not_applicable": "its provider says it does not apply",
    "source_not_read": "this version does not read its source",
    # An item of a source the strategy does not declare (issue 32 item 3, from SDK 0.5).
    "source_not_in_strategy": "its source is not one this strategy reads",
}


def reason_words(code: str | None) -> str:
    """A reason code in words; a code this console does not know (a newer runtime's) reads
    as its words with spaces."""
    if not code:
        return ""
    return REASON_WORDS.get(code) or code.replace("_", " ")


def _resolutions(age: str) -> dict[str, tuple[str, bool]]:
    """The SDK's resolution reasons in words (`age`: ", 5 min old" or blank), and whether
    each is a fallback."""
    return {
        "fresh": ("live configuration, confirmed by the console", False),
        "cached": (
            f"the runtime's saved copy{age}: it had not reached the console since it started",
            True,
        ),
        "stale": (f"the runtime's last good copy{age}: the console did not answer", True),
        "bootstrap": ("the runtime's bootstrap file: it had never reached the console", True),
        "error": ("no configuration: the runtime had no good copy at all", True),
        "unauthorized": (
            f"the runtime's last good copy{age}: the console refused its token (revoked or "
            "expired); it keeps this copy until a valid token is set",
            True,
        ),
    }


def resolution_words(resolution: str) -> str:
    """Where a runtime's configuration came from, in words (`stale` → "the runtime's last good
    copy: the console did not answer"); an unknown reason as its words with spaces."""
    found = _resolutions("").get(resolution)
    return found[0] if found else resolution.replace("_", " ")


def config_source(trace) -> tuple[str, bool]:
    """Where the runtime's configuration came from, in words, and whether it was a fallback
    (the SDK's resolution reason and age when the runtime sent them)."""
    words = _resolutions(_age(trace.config_age_seconds))
    if trace.config_resolution in words:
        return words[trace.config_resolution]
    if trace.config_fallback:
        return ("the runtime's last-known-good copy: it could not reach the console", True)
    return ("live configuration", False)


def _age(seconds) -> str:
    if seconds is None:
        return ""
    if seconds < 90:
        return f", {seconds:.0f} s old"
    if seconds < 90 * 60:
        return f", {seconds / 60:.0f} min old"
    return f", {seconds / 3600:.1f} h old"


STRATEGY_DECISIONS = ("over_budget", "dependency_missing", "not_applicable", "irrelevant")


@dataclass
class Hint:
    component: str  # short name of what to check: "order_delivery provider", "strategy …"
    text: str
    items: list[str] = field(default_factory=list)
    first: bool = False


def _by_source(candidates, decisions) -> dict[str, list]:
    grouped: dict[str, list] = {}
    for c in candidates:
        if c.decision in decisions:
            grouped.setdefault(c.source, []).append(c)
    return grouped


def _names(items) -> list[str]:
    return [f"{c.item_id} ({c.reason})" if c.reason else c.item_id for c in items]


def _refused_input_hints(trace, strategy: str) -> list[Hint]:
    """The runtime refused its input: per provider that returned a malformed item, what was
    wrong; findings on the strategy or the call's arguments point at those."""
    by_source: dict[str, list[str]] = {}
    other: list[str] = []
    config: list[str] = []
    for error in trace.input_errors or []:
        path, message = error.get("path") or "", error.get("message") or error.get("code") or ""
        source = error.get("source")
        if source:
            item = error.get("item") or path
            by_source.setdefault(source, []).append(f"{item}: {message}")
        elif path.startswith("strategy"):
            config.append(f"{path}: {message}" if path else message)
        else:
            other.append(f"{path}: {message}" if path else message)
    hints = [
        Hint(
            f"{source} provider",
            f"The {source} provider returned items the runtime's engine refused (a value out of "
            "range, a duplicate id, a dependency cycle…). Fix what that provider returns for "
            "this request; the runtime stopped rather than guess.",
            items,
        )
        for source, items in by_source.items()
    ]
    if config:
        hints.append(
            Hint(
                strategy,
                f"The runtime could not use {strategy} as it received it. Compare the version "
                "it served with the console's, and the runtime's SDK version.",
                config,
            )
        )
    if other or not hints:
        hints.append(
            Hint(
                "the runtime's context assembly",
                "The runtime's own call to the engine was malformed (its arguments, or items "
                "with no named provider). Check the runtime's logs for this request_id.",
                other,
            )
        )
    return hints


def where_to_look(trace, candidates) -> list[Hint]:
    """The components to check for this trace, the most likely first."""
    candidates = list(candidates)
    strategy = (
        f"strategy {trace.strategy} v{trace.strategy_version}" if trace.strategy else "the strategy"
    )
    hints: list[Hint] = []

    if trace.status == "input_refused":
        hints.extend(_refused_input_hints(trace, strategy))
    if trace.status == "degraded":
        failed = _by_source(candidates, ("not_fetched", "no_access"))
        sources = ", ".join(failed) or "a source"
        hints.append(
            Hint(
                f"handler {trace.degradation or '(not named)'}",
                f"The runtime fell back to '{trace.degradation or 'an unnamed handler'}' because "
                f"{sources} failed. The answer should have been general on purpose; if it judged "
                "this specific case anyway, the handler is wrong.",
            )
        )
    for source, items in _by_source(candidates, ("not_fetched",)).items():
        hints.append(
            Hint(
                f"{source} provider",
                f"The {source} provider did not deliver these items (timeout or error). Check "
                "that provider's logs for this request; the strategy never saw them.",
                _names(items),
            )
        )
    for source, items in _by_source(candidates, ("no_access",)).items():
        hints.append(
            Hint(
                "authorization service",
                f"Access to {source} items was refused or could not be checked (never defaulted "
                "to allow). Check the authorization service and the principal's permissions.",
                _names(items),
            )
        )
    conflicts = _by_source(candidates, ("conflict",))
    if conflicts or trace.status == "source_conflict":
        for source, items in conflicts.items() or [("the sources", [])]:
            hints.append(
                Hint(
                    f"owners of {source}",
                    f"Valid {source} items contradict each other. The owners of {source} must "
                    "settle which one applies (by business effective date, not by 'latest').",
                    _names(items),
                )
            )
    excluded = [c for c in candidates if c.decision in STRATEGY_DECISIONS]
    required_excluded = [c for c in excluded if c.required]
    if required_excluded or trace.status == "budget_exceeded":
        hints.append(
            Hint(
                strategy,
                f"Items were fetched but {strategy} could not keep them (budget, bundle or "
                "dependency rule). Check its budget, bundles and required list — or use a model "
                "with a larger window.",
                _names(required_excluded or [c for c in excluded if c.decision == "over_budget"]),
            )
        )
    elif excluded:
        hints.append(
            Hint(
                strategy,
                f"{strategy} left these fetched items out on purpose. If the answer needed one "
                "of them, the strategy's rules (optional sources, priority, relevance) are where "
                "to change it.",
                _names(excluded),
            )
        )
    required = [c for c in candidates if c.required]
    if trace.status == "ready" and all(c.decision == "selected" for c in required):
        model = " via ".join(x for x in (trace.model_name, trace.model_adapter) if x)
        hints.insert(
            0,
            Hint(
                "model and prompt",
                "Every required item was selected and the context was complete. If the answer "
                f"was still wrong, look at the model{f' ({model})' if model else ''} and the "
                "prompt template, not at the context.",
            ),
        )
    if trace.config_fallback:
        hints.append(
            Hint(
                "runtime ↔ console connection",
                "The runtime served from its last-known-good copy of the configuration, so it "
                "may not have used what is live now. Check the runtime's connection to the "
                "console.",
            )
        )
    if not hints:
        hints.append(
            Hint(
                strategy,
                "Nothing stands out in the candidates; compare the versions used with what is "
                "live now.",
            )
        )
    hints[0].first = True
    return hints
