"""The selection engine: the budget allocator (docs/background.md § The budget allocator) as pure,
deterministic Python.

No I/O, no Django, nothing downloaded.  A runtime reads its strategy once, asks its
providers for candidates, and calls :func:`select`::

    from context_runtime import wire
    from context_runtime.engine import CandidateItem, Strategy, select

    strategy = Strategy.from_body(config["strategies"]["after_sales_consultation"]["body"])
    selection = select(
        strategy=strategy,
        candidates=[
            CandidateItem(id="task_state:T9", source="task_state", version="4", size=310),
            CandidateItem(id="order:A1042", source="order_delivery", version="r12", size=640),
            CandidateItem(id="P7-v2", source="applicable_policy", version="v2", size=2100),
        ],
        context_window=128_000,
    )
    if not selection.usable:
        ...  # stop, or switch flow: never hand the model a package that cannot do the task
    trace = wire.Trace(request_id=..., agent=..., occurred_at=..., **selection.trace_fields())

- :func:`select` → :class:`Selection`: the selected items in order, one
  :class:`ItemDecision` (decision and reason) per candidate, the status and the estimate.
  The rules and the order of statuses are written down in the internal ``_selection`` module.
- :class:`Strategy`: a strategy body read once (``Strategy.from_body``).
- :class:`CandidateItem`: what a provider returned, with its outcome. An item of a source the
  strategy does not read is not weighed: its decision is :data:`NOT_REQUESTED` (reason code
  :data:`SOURCE_NOT_READ`), so the trace still shows it.
- :class:`Estimator`, :class:`CharacterEstimator`: token estimation (``chars/4`` by default).
- :func:`context_sections`: which contextSections the profile puts into each block.
- :data:`ENGINE`: which engine this is (its version and a hash of its rules), recorded in
  every trace's ``selection`` block.
- :class:`EngineInputError`: malformed input, with a :class:`~context_runtime.findings.Finding`
  per bad item; ``error.trace_fields(candidates)`` gives the trace of the refused request
  (status ``input_refused``, the findings naming each bad item's source and id).
"""

from context_runtime.engine._candidates import (
    FETCHED,
    NO_ACCESS,
    NOT_APPLICABLE,
    NOT_FETCHED,
    OUTCOMES,
    CandidateItem,
    ItemDecision,
)
from context_runtime.engine._errors import EngineInputError
from context_runtime.engine._estimators import DEFAULT_ESTIMATOR, CharacterEstimator, Estimator
from context_runtime.engine._identity import ENGINE
from context_runtime.engine._profile import context_sections
from context_runtime.engine._selection import (
    BUDGET_EXCEEDED,
    CONFLICT,
    DEFAULT_RELEVANCE_THRESHOLD,
    DEGRADED,
    DEPENDENCY_MISSING,
    INPUT_REFUSED,
    IRRELEVANT,
    MISSING_REQUIRED_DATA,
    NOT_REQUESTED,
    OVER_BUDGET,
    READY,
    SELECTED,
    SOURCE_CONFLICT,
    SOURCE_NOT_READ,
    STATUS_PRECEDENCE,
    Selection,
    select,
)
from context_runtime.engine._strategy import DEFAULT_PRIORITY, Strategy

__all__ = [
    "BUDGET_EXCEEDED",
    "CONFLICT",
    "DEFAULT_ESTIMATOR",
    "DEFAULT_PRIORITY",
    "DEFAULT_RELEVANCE_THRESHOLD",
    "DEGRADED",
    "DEPENDENCY_MISSING",
    "ENGINE",
    "FETCHED",
    "INPUT_REFUSED",
    "IRRELEVANT",
    "MISSING_REQUIRED_DATA",
    "NOT_APPLICABLE",
    "NOT_FETCHED",
    "NOT_REQUESTED",
    "NO_ACCESS",
    "OUTCOMES",
    "OVER_BUDGET",
    "READY",
    "SELECTED",
    "SOURCE_CONFLICT",
    "SOURCE_NOT_READ",
    "STATUS_PRECEDENCE",
    "CandidateItem",
    "CharacterEstimator",
    "EngineInputError",
    "Estimator",
    "ItemDecision",
    "Selection",
    "Strategy",
    "context_sections",
    "select",
]
