"""What the editor, the release pages and the go-live judgement ask of the regression sets
(traces.regressions, issue 35).

Sets live in traces, which imports strategies, so strategies cannot import them back (the
"strategies never imports traces" contract): traces.regressions registers its answers here at
app start (RegressionsConfig.ready), as the previews answer through
strategies.releases.preview_hook. Here, in documents, so that both the editor (documents) and
the releases above it can ask.
"""

from __future__ import annotations

from collections.abc import Callable

from context_runtime.findings import Finding

# (user=, agent=, document_key=, body=, label=) -> each of the agent's sets of that strategy
# checked with `body` (traces.regressions.selectors.SetCheck: regression_set, outcome, totals,
# results), or None when the user may not see kept requests.
SetsResults = Callable[..., list | None]
# (agent=, environment=, document_key=, body=, label=) -> one refusal per set the environment
# requires that `body` does not pass.
SetsRefusals = Callable[..., list[Finding]]

_results: dict[str, SetsResults] = {}
_refusals: dict[str, SetsRefusals] = {}


def register_regression_checks(*, results: SetsResults, refusals: SetsRefusals) -> None:
    """The regression sets' answers (registering again replaces them)."""
    _results["regressions"] = results
    _refusals["regressions"] = refusals


def regression_results(*, user, agent, document_key: str, body, label: str) -> list | None:
    """Each regression set of the strategy checked with `body`, as the editor and the release
    pages show them; None when sets are not installed or the user may not see them."""
    results = _results.get("regressions")
    if results is None or agent is None:
        return None
    return results(user=user, agent=agent, document_key=document_key, body=body, label=label)


def regression_refusals(*, agent, environment, document_key: str, body, label: str) -> list:
    """What the sets `environment` requires say to `body` going live there: a refusal per set
    it does not pass. Without sets installed none can be required."""
    refusals = _refusals.get("regressions")
    if refusals is None or agent is None:
        return []
    return refusals(
        agent=agent, environment=environment, document_key=document_key, body=body, label=label
    )
