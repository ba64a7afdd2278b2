"""The one exception of the engine: input it cannot select from."""

from __future__ import annotations

from collections.abc import Iterable

from context_runtime import wire
from context_runtime.findings import Finding

_SHOWN_IN_MESSAGE = 5


class EngineInputError(ValueError):
    """The strategy, the candidates or an argument of :func:`~context_runtime.engine.select`
    is malformed: a negative size, a duplicate id, a dependency cycle, an unknown source...

    ``findings`` lists every problem found, each with a ``path`` into the input
    (``candidates[3].size``, ``strategy.budget.max_input_tokens``) and a sentence that names
    the item.  The engine raises rather than return a selection it cannot stand behind: a
    wrong package handed to the model looks exactly like a right one.
    """

    def __init__(self, findings: Iterable[Finding]):
        self.findings: list[Finding] = list(findings)
        shown = "; ".join(f"{f.path}: {f.message}" for f in self.findings[:_SHOWN_IN_MESSAGE])
        more = len(self.findings) - _SHOWN_IN_MESSAGE
        if more > 0:
            shown += f"; and {more} more"
        super().__init__(f"The selection input is invalid: {shown}")

    def trace_fields(self, candidates: Iterable = ()) -> dict:
        """The trace fields of a request refused for this input, ready for
        ``wire.Trace(**fields, ...)``: status ``input_refused`` and the findings (at most
        ``wire.MAX_INPUT_ERRORS``, each naming the candidate's source and id when
        ``candidates`` — what :func:`~context_runtime.engine.select` was given — holds it).
        The candidates themselves are not sent: the engine decided nothing about them."""
        errors, total = wire.input_errors(self.findings, candidates)
        return {
            "status": wire.INPUT_REFUSED,
            "degradation": None,
            "input_errors": errors,
            "input_errors_total": total,
        }
