"""The wire vocabulary of the runtime contract (docs/runtime-contract.md §3): statuses,
decisions, and the msgspec structs of a trace batch.

The console validates every incoming trace with these structs, and the SDK's reporter builds
its traces with them, so both sides agree on every field and limit by construction.
Unknown fields are ignored when decoding (a newer runtime may send more).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_args

import msgspec

__all__ = [
    "ARM_NEW",
    "ARM_OLD",
    "ARMS",
    "DECISIONS",
    "INPUT_REFUSED",
    "MAX_BATCH_BYTES",
    "MAX_CANDIDATES_PER_TRACE",
    "MAX_CLOCK_SKEW_SECONDS",
    "MAX_INPUT_ERRORS",
    "MAX_SECTIONS_PER_BLOCK",
    "MAX_INT32",
    "MAX_INT64",
    "MAX_KEY_CHARS",
    "MAX_LINKS",
    "MAX_OUTCOMES_PER_BATCH",
    "MAX_OUTCOME_BATCH_BYTES",
    "MAX_OUTCOME_LABEL_CHARS",
    "MAX_REASON_CHARS",
    "MAX_REQUEST_ID_CHARS",
    "MAX_SHADOW_DIFFERENCES",
    "MAX_TRACES_PER_BATCH",
    "OTEL_SPAN_ID_PATTERN",
    "OTEL_SPAN_ID_RULE",
    "OTEL_TRACE_ID_PATTERN",
    "OTEL_TRACE_ID_RULE",
    "OUTCOMES",
    "REQUEST_ID_CHARS",
    "REQUEST_ID_PATTERN",
    "REQUEST_ID_RULE",
    "RESOLUTIONS",
    "PHASE_ROLLOUT",
    "PHASE_WATCH",
    "ROLLOUT_PHASES",
    "ROLLOUT_UNITS",
    "SHADOW_DECISIONS",
    "SHADOW_REASON_CODES",
    "STATUSES",
    "Batch",
    "Budget",
    "Candidate",
    "Count",
    "DecisionName",
    "Estimate",
    "InputError",
    "ItemId",
    "Key",
    "Label",
    "ModelInfo",
    "Outcome",
    "OutcomeBatch",
    "OutcomeName",
    "OutcomeValue",
    "REASON_CODES",
    "ReasonCodeName",
    "RequestId",
    "ResolutionName",
    "Rollout",
    "RolloutArmName",
    "RolloutId",
    "RolloutPhaseName",
    "RolloutUnitName",
    "Rollouts",
    "Sections",
    "SelectionInfo",
    "ShadowDecisionName",
    "ShadowDifference",
    "ShadowReasonCodeName",
    "ShadowResult",
    "SourceRef",
    "StatusName",
    "Task",
    "Trace",
    "TraceOtel",
    "TraceRollout",
    "candidate_counts",
    "input_errors",
    "kept_candidates",
    "truncate_candidates",
]

MAX_TRACES_PER_BATCH = 1_000
# 16 MiB: a full batch of 1,000 traces × 50 candidates is ~7.5 MiB.
MAX_BATCH_BYTES = 16 * 1024 * 1024
# What one trace carries of its candidates. The engine takes any number (5,000 were tried);
# a trace with more carries the MAX_CANDIDATES_PER_TRACE that matter most
# (`truncate_candidates`), `candidates_truncated: true` and the full `candidate_counts`
# (docs/runtime-contract.md §3; the measurements behind the limit: docs/PERFORMANCE.md).
MAX_CANDIDATES_PER_TRACE = 500
MAX_REASON_CHARS = 200
# An `input_refused` trace names at most this many of the engine's findings.
MAX_INPUT_ERRORS = 20
MAX_SECTIONS_PER_BLOCK = 100
# A shadow result names at most this many of the candidates it decided differently from live
# (`differences_total` counts them all).
MAX_SHADOW_DIFFERENCES = 50

# A request_id is what the console's URLs, search and logs carry: 1–200 characters from a
# set every id scheme in use fits (UUIDs, `req-92`, ADK invocation ids `e-<uuid>` and the
# ADK integration's `<id>#2` for later model calls, `sim-123-4`, `svc:GET@node_7`), and
# nothing a URL path or a log line would change: no slash, space, control character,
# `?`, `%` or non-ASCII; `.` and `..` alone are path segments, so refused too.
REQUEST_ID_CHARS = "A-Za-z0-9._:@#-"
MAX_REQUEST_ID_CHARS = 200
# `$(?!\n)`: the very end (Python's `$` also matches before a final newline); the pattern is
# the same in Python and in the JSON Schema (ECMA-262) of the OpenAPI document.
REQUEST_ID_PATTERN = rf"^(?!\.\.?$)[{REQUEST_ID_CHARS}]{{1,{MAX_REQUEST_ID_CHARS}}}$(?!\n)"
REQUEST_ID_RULE = (
    f"1–{MAX_REQUEST_ID_CHARS} ASCII letters, digits and . _ : @ # - "
    "(no slash, space or control character; not '.' or '..')"
)
# The OpenTelemetry span of the assembly (W3C Trace Context): a trace id is 32 and a span id
# 16 lowercase hex digits, and an id of all zeros is invalid (no span).
OTEL_TRACE_ID_PATTERN = r"^(?!0{32}$)[0-9a-f]{32}$(?!\n)"
OTEL_SPAN_ID_PATTERN = r"^(?!0{16}$)[0-9a-f]{16}$(?!\n)"
OTEL_TRACE_ID_RULE = "32 lowercase hexadecimal digits, not all zero (a W3C trace id)"
OTEL_SPAN_ID_RULE = "16 lowercase hexadecimal digits, not all zero (a W3C span id)"
# occurred_at: at most this far ahead of the console's clock (clock skew), and not older than
# the environment's trace retention (such a trace would be purged at once).
MAX_CLOCK_SKEW_SECONDS = 300

# What the store holds: PostgreSQL `integer` and `bigint` columns.
MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1

StatusName = Literal[
    "ready",
    "missing_required_data",
    "budget_exceeded",
    "source_conflict",
    "degraded",
    # The runtime refused its own input (a provider's item with a NaN relevance, a negative
    # size, a duplicate id, a dependency cycle): `input_errors` says what (new in 0.2.0;
    # older consoles reject it, and the reporter then resends the trace as
    # missing_required_data — docs/runtime-contract.md §3).
    "input_refused",
]
INPUT_REFUSED = "input_refused"
DecisionName = Literal[
    "selected",
    "not_fetched",
    "no_access",
    "not_applicable",
    "over_budget",
    "dependency_missing",
    "irrelevant",
    "conflict",
    # A provider's item of a source the strategy does not read: recorded, not weighed (new
    # after 0.4.0). Also what a shadow or a replay says of a source its version does not read.
    "not_requested",
]
STATUSES: tuple[str, ...] = get_args(StatusName)
# Why the engine decided as it did, from a closed list (docs/runtime-contract.md §3): what
# reports and previews group by, where the free-text reason carries numbers and names.
ReasonCodeName = Literal[
    "required",  # selected: required content
    "optional_fits",  # selected: optional, and it fitted
    "below_threshold",  # irrelevant: relevance (an item's, or a bundle's best) too low
    "over_budget_required",
    "over_budget_optional",
    "over_budget_bundle",
    "bundle_incomplete",  # dependency_missing: a member of its bundle cannot be used
    "dependency_unselected",  # dependency_missing: what it needs was not selected
    "dependency_absent",  # dependency_missing: what it needs is not among the candidates
    "versions_conflict",  # conflict: two fetched versions of one item
    "flagged_conflict",  # conflict: a provider says two items contradict each other
    "provider_not_fetched",  # the provider's outcome stands
    "provider_no_access",
    "provider_not_applicable",
    "source_not_read",  # not_requested: the strategy does not read the item's source
]
REASON_CODES: tuple[str, ...] = get_args(ReasonCodeName)
ResolutionName = Literal["fresh", "cached", "stale", "bootstrap", "error", "unauthorized"]
RESOLUTIONS: tuple[str, ...] = get_args(ResolutionName)
DECISIONS: tuple[str, ...] = get_args(DecisionName)

MAX_KEY_CHARS = 100
Key = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_KEY_CHARS)]
Label = Annotated[str, msgspec.Meta(max_length=200)]
Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT32)]
RequestId = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=MAX_REQUEST_ID_CHARS,
        pattern=REQUEST_ID_PATTERN,
        description=REQUEST_ID_RULE,
    ),
]


class _Wire(msgspec.Struct, gc=False):
    """Not tracked by Python's cycle collector: a decoded batch is tens of thousands of these
    (none can be part of a reference cycle), and collections triggered by them were two
    thirds of the time to decode one."""


class Task(_Wire):
    id: Label = ""
    revision: Annotated[int, msgspec.Meta(ge=0, le=MAX_INT64)] | None = None


class ModelInfo(_Wire):
    name: Label = ""
    adapter: Label = ""
    context_window: Count | None = None


class Budget(_Wire):
    max_input_tokens: Count | None = None
    reserve_output_tokens: Count | None = None


class Estimate(_Wire):
    value: Annotated[float, msgspec.Meta(ge=0)]
    unit: Annotated[str, msgspec.Meta(max_length=30)] = "token"
    estimator: Annotated[str, msgspec.Meta(max_length=100)] = ""


class SourceRef(_Wire):
    id: Annotated[str, msgspec.Meta(min_length=1, max_length=300)]
    version: Label = ""


OutcomeName = Literal["fetched", "not_fetched", "no_access", "not_applicable"]
OUTCOMES: tuple[str, ...] = get_args(OutcomeName)
ItemId = Annotated[str, msgspec.Meta(min_length=1, max_length=300)]
MAX_LINKS = 50  # depends_on / conflicts_with ids per candidate


class Candidate(_Wire):
    """One candidate and the engine's decision. The fields after `reason` are optional and
    carry what the engine needs to replay the decision without the providers (impact preview
    on retained traffic): the provider's outcome, the relevance score, the links, the
    provider's own bundle (``bundle`` is the group the engine decided, which merges bundles
    that share an item) and the reason as a code from a closed list."""

    id: ItemId
    source: Key
    decision: DecisionName
    version: Annotated[str, msgspec.Meta(max_length=100)] = ""
    size: Count | None = None
    required: bool = False
    bundle: Annotated[str, msgspec.Meta(max_length=100)] | None = None
    reason: Annotated[str, msgspec.Meta(max_length=MAX_REASON_CHARS)] = ""
    outcome: OutcomeName | None = None
    relevance: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    # Tuples: an absent or empty one is the shared `()`, not a new list per candidate.
    depends_on: Annotated[tuple[ItemId, ...], msgspec.Meta(max_length=MAX_LINKS)] = ()
    conflicts_with: Annotated[tuple[ItemId, ...], msgspec.Meta(max_length=MAX_LINKS)] = ()
    note: Annotated[str, msgspec.Meta(max_length=MAX_REASON_CHARS)] = ""
    provider_bundle: Annotated[str, msgspec.Meta(max_length=100)] | None = None
    reason_code: ReasonCodeName | None = None


class SelectionInfo(_Wire):
    """What the engine was asked besides the strategy and the candidates, and which engine
    answered: with it a trace's selection can be replayed exactly (the same arguments give
    the same decisions), and with another strategy version, previewed."""

    # "context_runtime <version> rules <hash of the engine's rules>": two engines with the
    # same rules decide alike.
    engine: Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
    fixed_input_tokens: Count
    relevance_threshold: Annotated[float, msgspec.Meta(ge=0, le=1)]
    # The arguments the runtime gave select(): the model's window and the call's own cap
    # (each only lowers the strategy's budget; null when not given).
    context_window: Count | None = None
    max_input_tokens: Count | None = None


class InputError(_Wire):
    """One finding of the engine on input it refused (`EngineInputError.findings`): the
    path into the input (``candidates[3].relevance``), a code, the engine's sentence, and,
    for a candidate, its source and id — the provider to look at."""

    path: Annotated[str, msgspec.Meta(max_length=200)] = ""
    code: Annotated[str, msgspec.Meta(max_length=50)] = ""
    message: Annotated[str, msgspec.Meta(max_length=MAX_REASON_CHARS)] = ""
    source: Annotated[str, msgspec.Meta(max_length=100)] | None = None
    item: Annotated[str, msgspec.Meta(max_length=300)] | None = None


SectionKeys = Annotated[tuple[Key, ...], msgspec.Meta(max_length=MAX_SECTIONS_PER_BLOCK)]


class Sections(_Wire):
    """The contextSections rendered into the model request, per block: keys, never values."""

    user_context: SectionKeys = ()
    query_context: SectionKeys = ()


# What a shadow decided for a candidate of a source its strategy does not read: nothing —
# the runtime would not have asked that provider under it (`context_runtime.replay.NOT_REQUESTED`).
# A shadow's decisions are live's (not_requested and source_not_read were a shadow's own
# up to 0.4.0).
ShadowDecisionName = DecisionName
ShadowReasonCodeName = ReasonCodeName
SHADOW_DECISIONS: tuple[str, ...] = get_args(ShadowDecisionName)
SHADOW_REASON_CODES: tuple[str, ...] = get_args(ShadowReasonCodeName)


class ShadowDifference(_Wire):
    """One candidate the shadow decided differently from live: its position in the trace's
    ``candidates`` as sent, and the shadow's decision, reason code and whether the shadow's
    strategy requires it."""

    index: Count
    decision: ShadowDecisionName
    reason_code: ShadowReasonCodeName | None = None
    required: bool = False


class ShadowResult(_Wire):
    """What the shadow strategy version decided on live's candidates, with live's arguments
    (docs/runtime-contract.md §3). The fields after ``selected`` are new in 0.3.0 (older
    runtimes send none): the handler the shadow would have switched to, its input estimate
    (tokens, as live's ``input_estimate``), the candidates it decided differently (at most
    MAX_SHADOW_DIFFERENCES; ``differences_total`` counts all, candidates a truncated trace
    does not carry included) and the sources it reads that live did not fetch."""

    version: Count
    status: StatusName | None = None
    selected: list[Annotated[str, msgspec.Meta(max_length=300)]] = []
    degradation: Annotated[str, msgspec.Meta(max_length=100)] | None = None
    used_tokens: Count | None = None
    differences: Annotated[
        tuple[ShadowDifference, ...], msgspec.Meta(max_length=MAX_SHADOW_DIFFERENCES)
    ] = ()
    differences_total: Count | None = None
    sources_not_fetched: Annotated[tuple[Key, ...], msgspec.Meta(max_length=100)] = ()


# --- staged rollouts (docs/runtime-contract.md §1 `rollouts`, §3 `rollout`) ------------------
# A rollout serves a new strategy version to a share of the traffic ("new" arm) and the control
# version to the rest ("old" arm); each request runs the other arm's version as its shadow.
RolloutArmName = Literal["new", "old"]
ARMS: tuple[str, ...] = get_args(RolloutArmName)
ARM_NEW, ARM_OLD = ARMS
# What a request's arm is assigned by: the trace's task.id or its principal (the request_id
# when that is missing; context_runtime.rollouts.assign_arm).
RolloutUnitName = Literal["task", "principal"]
ROLLOUT_UNITS: tuple[str, ...] = get_args(RolloutUnitName)
RolloutId = Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
# What a ``rollouts`` entry is (new in 0.4.0): a staged rollout in its steps, or the paired
# watch after one completed (the previous version as shadow on a share of the units).
RolloutPhaseName = Literal["rollout", "watch"]
ROLLOUT_PHASES: tuple[str, ...] = get_args(RolloutPhaseName)
PHASE_ROLLOUT, PHASE_WATCH = ROLLOUT_PHASES
RolloutArmLabel = Annotated[str, msgspec.Meta(min_length=1, max_length=10)]


class TraceRollout(_Wire):
    """The trace's ``rollout`` block (new in 0.4.0; absent or null outside a rollout): the
    rollout's public id, the arm the request was served and the plan step it ran under."""

    id: RolloutId
    # "new" or "old" from this SDK (RolloutArmName). Any other short name still decodes: the
    # console stores the trace and counts it as a runtime fault, never as evidence, so a
    # runtime that mislabels arms shows up instead of losing its traces.
    arm: RolloutArmLabel
    step: Count


class TraceOtel(_Wire):
    """The trace's ``otel`` block (new in 0.4.0; absent or null without a recorded span): the
    OpenTelemetry trace and span id of the assembly's span, so the console can link the
    request to the tracing system that holds the span (``TRACE_LINK_URL_TEMPLATE``)."""

    trace_id: Annotated[
        str, msgspec.Meta(pattern=OTEL_TRACE_ID_PATTERN, description=OTEL_TRACE_ID_RULE)
    ]
    span_id: Annotated[
        str, msgspec.Meta(pattern=OTEL_SPAN_ID_PATTERN, description=OTEL_SPAN_ID_RULE)
    ]


class Rollout(_Wire):
    """One entry of the config payload's ``rollouts`` map (new in 0.4.0; older consoles send
    no map): the new version and its body, the share of units served it (0.0: everyone is
    served the control version in ``strategies`` and the new one runs as shadow; 1.0:
    everyone is served the new one), the unit of assignment and the plan step.

    ``phase`` ``watch`` (new in 0.4.0, only to runtimes declaring the ``watch`` feature): the
    rollout completed and ``strategies`` serves its new version to everyone; ``version`` and
    ``body`` are the *previous* version, run as shadow for the units whose bucket is below
    ``share``, which report ``rollout {id, arm: "new", step}``."""

    id: RolloutId
    version: Count
    body: dict[str, Any]
    share: Annotated[float, msgspec.Meta(ge=0, le=1)]
    unit: RolloutUnitName = "task"
    step: Count = 0
    phase: RolloutPhaseName = "rollout"


# The config payload's top-level ``rollouts``: strategy key → its running rollout ({} if none).
Rollouts = dict[Key, Rollout]


class Trace(_Wire):
    """One trace as the runtime sends it. Unknown fields are ignored (newer runtimes)."""

    request_id: RequestId
    agent: Key
    # With a timezone; within MAX_CLOCK_SKEW_SECONDS ahead and the environment's retention.
    occurred_at: datetime
    status: StatusName
    environment: Key | None = None  # optional; when sent it must be the token's environment
    documents: dict[Key, Count] = {}
    strategy: Annotated[str, msgspec.Meta(max_length=100)] = ""
    config_fallback: bool = False
    # Where the runtime's configuration came from (the SDK's resolution reasons) and how old
    # it was; `config_fallback` stays the contract's boolean (true for all but "fresh").
    config_resolution: ResolutionName | None = None
    config_age_seconds: Annotated[float, msgspec.Meta(ge=0)] | None = None
    task: Task | None = None
    principal: Label = ""
    model: ModelInfo | None = None
    degradation: Annotated[str, msgspec.Meta(max_length=100)] | None = None
    budget: Budget | None = None
    input_estimate: Estimate | None = None
    sources: list[SourceRef] = []
    candidates: Annotated[list[Candidate], msgspec.Meta(max_length=MAX_CANDIDATES_PER_TRACE)] = []
    shadow: ShadowResult | None = None
    # The staged rollout this request was part of (new in 0.4.0): with it, ``documents`` names
    # the served arm's version and ``shadow`` the other arm's.
    rollout: TraceRollout | None = None
    # The OpenTelemetry span the assembly ran in (new in 0.4.0), when one was recorded.
    otel: TraceOtel | None = None
    selection: SelectionInfo | None = None
    # A trace with more candidates than MAX_CANDIDATES_PER_TRACE carries the ones that matter
    # most (`truncate_candidates`), this flag, and the counts of all of them by decision.
    candidates_truncated: bool = False
    candidate_counts: dict[DecisionName, Count] | None = None
    # status input_refused: what the engine refused (at most MAX_INPUT_ERRORS findings) and
    # how many it found in all.
    input_errors: Annotated[list[InputError], msgspec.Meta(max_length=MAX_INPUT_ERRORS)] = []
    input_errors_total: Count | None = None
    # The contextSections rendered into the request (keys per block, never their values).
    sections: Sections | None = None
    # Kept as the runtime's bytes (JSON null when absent) and encrypted as they are.
    snapshot: msgspec.Raw = msgspec.Raw(b"null")


class Batch(_Wire):
    traces: list[msgspec.Raw]


# --- outcomes (docs/runtime-contract.md §3b): what happened after the answer ------------------
# A runtime or the application reports, after the fact, how a request turned out: a kind the
# environment declares (task_completed, escalated, rating, resolution) and its value. Which
# kinds exist and which values they take is the environment's declaration, checked by the
# console; the wire bounds only what any value may be.
MAX_OUTCOMES_PER_BATCH = 1_000
MAX_OUTCOME_BATCH_BYTES = 1024 * 1024  # a full batch is ~150 KB
MAX_OUTCOME_LABEL_CHARS = 100
# A flag (true/false), a rating (an integer) or a label (one of the kind's declared choices).
OutcomeValue = (
    bool
    | Annotated[int, msgspec.Meta(ge=-MAX_INT32, le=MAX_INT32)]
    | Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_OUTCOME_LABEL_CHARS)]
)


class Outcome(_Wire):
    """One outcome of one request, as the runtime or the application reports it. Unknown
    fields are ignored (newer runtimes)."""

    request_id: RequestId
    kind: Key
    value: OutcomeValue
    # When it happened (with a timezone); the console's receipt time when absent. Within
    # MAX_CLOCK_SKEW_SECONDS ahead and the environment's trace retention.
    occurred_at: datetime | None = None
    # The agent that answered; when absent, the stored trace's agent (or the token's one).
    agent: Key | None = None


class OutcomeBatch(_Wire):
    outcomes: list[msgspec.Raw]


def candidate_counts(candidates) -> dict[str, int]:
    """How many candidates of each decision (decisions with none left out)."""
    counts: dict[str, int] = {}
    for c in candidates:
        counts[c.decision] = counts.get(c.decision, 0) + 1
    return counts


def _importance(c) -> int:
    """0: a required item that was not selected (why the request failed); 1: a selected
    item (what the model saw); 2: the rest."""
    if c.required and c.decision != "selected":
        return 0
    return 1 if c.decision == "selected" else 2


def kept_candidates(candidates, limit: int = MAX_CANDIDATES_PER_TRACE) -> list[int] | None:
    """The positions of the candidates a trace carries, in order, or ``None`` when all fit:
    the ``limit`` that matter most — every required item not selected, every selected item,
    then the rest. Anything with ``required`` and ``decision`` (a wire candidate, an engine
    decision) can be ranked."""
    if len(candidates) <= limit:
        return None
    ranked = sorted(range(len(candidates)), key=lambda i: (_importance(candidates[i]), i))
    return sorted(ranked[:limit])


def truncate_candidates(candidates, limit: int = MAX_CANDIDATES_PER_TRACE) -> tuple[list, bool]:
    """The candidates a trace carries (:func:`kept_candidates`), in their original order; and
    whether any were left out."""
    candidates = list(candidates)
    kept = kept_candidates(candidates, limit)
    if kept is None:
        return candidates, False
    return [candidates[i] for i in kept], True


def input_errors(findings, candidates=()) -> tuple[list[InputError], int]:
    """The engine's findings (`EngineInputError.findings`) as a trace's ``input_errors``
    (at most MAX_INPUT_ERRORS, texts cut to their limits) and their total. A finding at
    ``candidates[i]…`` names that candidate's source and id, when ``candidates`` (what the
    engine was given) holds it."""
    findings = list(findings)
    candidates = candidates if isinstance(candidates, list | tuple) else list(candidates)
    out = []
    for f in findings[:MAX_INPUT_ERRORS]:
        path = str(getattr(f, "path", ""))
        source = item = None
        if path.startswith("candidates["):
            index = path[len("candidates[") :].split("]", 1)[0]
            if index.isdigit() and int(index) < len(candidates):
                c = candidates[int(index)]
                source = _cut(getattr(c, "source", None), 100)
                item = _cut(getattr(c, "id", None), 300)
        out.append(
            InputError(
                path=_cut(path, 200) or "",
                code=_cut(str(getattr(f, "code", "")), 50) or "",
                message=_cut(str(getattr(f, "message", "")), MAX_REASON_CHARS) or "",
                source=source or None,
                item=item or None,
            )
        )
    return out, len(findings)


def _cut(text, limit: int) -> str | None:
    if not isinstance(text, str):
        return None
    return text if len(text) <= limit else text[: limit - 1] + "…"
