"""Parsing and validating a trace batch (RUNTIME_API.md §3), without Django.

The hot path decodes each trace with msgspec straight into typed structs (no serializer per
field), so a batch of 1,000 traces × 50 candidates is checked in milliseconds. A trace that
does not fit comes back with its error at a path relative to the trace
(`candidates[2].decision`); the others go on to be stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Literal, get_args

import msgspec
import orjson

MAX_TRACES_PER_BATCH = 1_000
MAX_BATCH_BYTES = (
    16 * 1024 * 1024
)  # 16 MiB: a full batch of 1,000 traces × 50 candidates is ~7.5 MiB
MAX_CANDIDATES_PER_TRACE = 500
MAX_REASON_CHARS = 200

StatusName = Literal[
    "ready", "missing_required_data", "budget_exceeded", "source_conflict", "degraded"
]
DecisionName = Literal[
    "selected",
    "not_fetched",
    "no_access",
    "not_applicable",
    "over_budget",
    "dependency_missing",
    "irrelevant",
    "conflict",
]
STATUSES: tuple[str, ...] = get_args(StatusName)
DECISIONS: tuple[str, ...] = get_args(DecisionName)

Key = Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
Label = Annotated[str, msgspec.Meta(max_length=200)]
Count = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]


class TaskIn(msgspec.Struct):
    id: Label = ""
    revision: Annotated[int, msgspec.Meta(ge=0)] | None = None


class ModelIn(msgspec.Struct):
    name: Label = ""
    adapter: Label = ""
    context_window: Count | None = None


class BudgetIn(msgspec.Struct):
    max_input_tokens: Count | None = None
    reserve_output_tokens: Count | None = None


class EstimateIn(msgspec.Struct):
    value: Annotated[float, msgspec.Meta(ge=0)]
    unit: Annotated[str, msgspec.Meta(max_length=30)] = "token"
    estimator: Annotated[str, msgspec.Meta(max_length=100)] = ""


class SourceIn(msgspec.Struct):
    id: Annotated[str, msgspec.Meta(min_length=1, max_length=300)]
    version: Label = ""


class CandidateIn(msgspec.Struct):
    id: Annotated[str, msgspec.Meta(min_length=1, max_length=300)]
    source: Key
    decision: DecisionName
    version: Annotated[str, msgspec.Meta(max_length=100)] = ""
    size: Count | None = None
    required: bool = False
    bundle: Annotated[str, msgspec.Meta(max_length=100)] | None = None
    reason: Annotated[str, msgspec.Meta(max_length=MAX_REASON_CHARS)] = ""


class ShadowIn(msgspec.Struct):
    version: Count
    status: StatusName | None = None
    selected: list[Annotated[str, msgspec.Meta(max_length=300)]] = []


class TraceIn(msgspec.Struct):
    """One trace as the runtime sends it. Unknown fields are ignored (newer runtimes)."""

    request_id: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    agent: Key
    occurred_at: datetime
    status: StatusName
    environment: Key | None = None  # optional; when sent it must be the token's environment
    documents: dict[Key, Count] = {}
    strategy: Annotated[str, msgspec.Meta(max_length=100)] = ""
    config_fallback: bool = False
    task: TaskIn | None = None
    principal: Label = ""
    model: ModelIn | None = None
    degradation: Annotated[str, msgspec.Meta(max_length=100)] | None = None
    budget: BudgetIn | None = None
    input_estimate: EstimateIn | None = None
    sources: list[SourceIn] = []
    candidates: Annotated[list[CandidateIn], msgspec.Meta(max_length=MAX_CANDIDATES_PER_TRACE)] = []
    shadow: ShadowIn | None = None
    # Kept as the runtime's bytes (JSON null when absent) and encrypted as they are.
    snapshot: msgspec.Raw = msgspec.Raw(b"null")


class BatchIn(msgspec.Struct):
    traces: list[msgspec.Raw]


_trace_decoder = msgspec.json.Decoder(TraceIn)
_batch_decoder = msgspec.json.Decoder(BatchIn)


class BatchRefused(Exception):
    """The whole request is unusable (malformed JSON, no `traces` list, too many traces)."""

    def __init__(self, code: str, message: str, path: str = "traces"):
        super().__init__(message)
        self.code, self.message, self.path = code, message, path


@dataclass
class Rejection:
    index: int
    request_id: str | None
    errors: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"index": self.index, "request_id": self.request_id, "errors": self.errors}


@dataclass
class ParsedBatch:
    valid: list[tuple[int, TraceIn]]
    rejected: list[Rejection]
    size: int


def error(path: str, code: str, message: str) -> dict:
    return {"path": path, "code": code, "message": message}


# msgspec says e.g. "Expected `str` of length <= 200 - at `$.candidates[0].reason`".
_AT = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_MISSING = re.compile(r"Object missing required field `(?P<field>[^`]+)`")


def _msgspec_error(exc: msgspec.ValidationError) -> dict:
    text = str(exc)
    match = _AT.search(text)
    path = match.group("path") if match else ""
    message = text[: match.start()] if match else text
    missing = _MISSING.match(message)
    if missing:
        name = missing.group("field")
        return error(f"{path}.{name}" if path else name, "required", "this field is required")
    if message.startswith("Invalid enum value"):
        choices = DECISIONS if path.endswith("decision") else STATUSES
        return error(path, "invalid_choice", "must be one of " + ", ".join(choices))
    if "length <=" in message:
        return error(path, "too_long", message.replace("Expected", "must be").replace("`", ""))
    if "length >=" in message:
        return error(path, "blank", "must not be empty")
    if message.startswith("Expected `array` of length"):
        return error(path, "too_long", message)
    if message.startswith("Expected"):
        return error(path, "invalid_type", message.replace("`", ""))
    return error(path, "invalid", message.replace("`", ""))


def _semantic_errors(trace: TraceIn) -> list[dict]:
    """Rules msgspec's types cannot say."""
    errors = []
    if trace.occurred_at.tzinfo is None:
        errors.append(error("occurred_at", "invalid", "needs a timezone, e.g. 2026-11-30T09:12Z"))
    if trace.status == "degraded" and not trace.degradation:
        errors.append(
            error("degradation", "required", "a degraded trace names the handler it used")
        )
    if trace.strategy and trace.strategy not in trace.documents:
        errors.append(
            error("documents", "required", f"the version of strategy '{trace.strategy}' is missing")
        )
    return errors


def _request_id_of(raw: bytes) -> str | None:
    """Best effort, for the rejection report of a trace that did not decode."""
    try:
        value = orjson.loads(bytes(raw)).get("request_id")
    except (orjson.JSONDecodeError, AttributeError, RecursionError):
        return None
    return value if isinstance(value, str) else None


def parse_batch(body: bytes) -> ParsedBatch:
    """Decode a batch; each trace is validated on its own."""
    if not body.strip():
        raise BatchRefused("malformed_json", 'The request body is empty; send {"traces": [...]}.')
    try:
        batch = _batch_decoder.decode(body)
    except msgspec.ValidationError as exc:
        detail = _msgspec_error(exc)
        raise BatchRefused(
            "validation_failed", "Send an object with a 'traces' list.", detail["path"] or "traces"
        ) from exc
    except msgspec.DecodeError as exc:
        raise BatchRefused("malformed_json", f"The body is not valid JSON: {exc}", "") from exc
    except RecursionError:  # absurd nesting is bad input, not a crash
        raise BatchRefused("malformed_json", "The JSON is nested too deeply.", "") from None
    if len(batch.traces) > MAX_TRACES_PER_BATCH:
        raise BatchRefused(
            "too_many_traces",
            f"A batch carries at most {MAX_TRACES_PER_BATCH} traces; this one has "
            f"{len(batch.traces)}. Split it.",
        )
    valid, rejected = [], []
    for index, raw in enumerate(batch.traces):
        try:
            trace = _trace_decoder.decode(raw)
        except msgspec.ValidationError as exc:
            rejected.append(Rejection(index, _request_id_of(raw), [_msgspec_error(exc)]))
            continue
        except RecursionError:
            too_deep = error("", "too_deep", "the trace is nested too deeply")
            rejected.append(Rejection(index, None, [too_deep]))
            continue
        problems = _semantic_errors(trace)
        if problems:
            rejected.append(Rejection(index, trace.request_id, problems))
        else:
            valid.append((index, trace))
    return ParsedBatch(valid=valid, rejected=rejected, size=len(batch.traces))


def snapshot_bytes(trace: TraceIn) -> bytes | None:
    """The snapshot exactly as sent, or None when absent/null."""
    raw = bytes(trace.snapshot).strip()
    return None if raw == b"null" else raw


def batch_json_schema() -> dict:
    """JSON Schema of a batch, from the same structs that validate it (for the OpenAPI
    document): references inlined, so it stands alone."""

    class TraceSchema(TraceIn):  # the Raw snapshot has no schema of its own
        snapshot: dict | None = None

    (trace_ref,), definitions = msgspec.json.schema_components([TraceSchema])

    def inline(node):
        """Resolve references; JSON Schema's null type → OpenAPI 3.0's `nullable`."""
        if isinstance(node, dict):
            if "$ref" in node:
                return inline(definitions[node["$ref"].rsplit("/", 1)[-1]])
            variants = node.get("anyOf", [])
            if {"type": "null"} in variants:
                rest = [v for v in variants if v != {"type": "null"}]
                merged = inline(rest[0]) if len(rest) == 1 else {"anyOf": inline(rest)}
                return {
                    **merged,
                    **inline({k: v for k, v in node.items() if k != "anyOf"}),
                    "nullable": True,
                }
            return {
                key: inline(value)
                for key, value in node.items()
                # Not in OpenAPI 3.0: titles are noise, `required: []` and propertyNames invalid.
                if key not in ("title", "propertyNames") and value != []
            }
        if isinstance(node, list):
            return [inline(value) for value in node]
        return node

    trace = inline(trace_ref)
    trace["properties"]["snapshot"] = {
        "description": "optional final request (any JSON); stored encrypted, apart, with expiry"
    }
    return {
        "type": "object",
        "required": ["traces"],
        "properties": {
            "traces": {"type": "array", "maxItems": MAX_TRACES_PER_BATCH, "items": trace}
        },
    }
