"""Parsing and validating a trace batch (docs/runtime-contract.md §3), without Django.

The hot path decodes each trace with msgspec straight into the contract's typed structs
(`context_runtime.wire`, which runtimes build their traces with; no serializer per field), so a batch of 1,000 traces × 50 candidates is checked in milliseconds. A trace that
does not fit comes back with its error at a path relative to the trace
(`candidates[2].decision`); the others go on to be stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import msgspec
import orjson
from context_runtime.findings import Finding
from context_runtime.wire import (
    DECISIONS,
    MAX_TRACES_PER_BATCH,
    STATUSES,
    Batch,
    Trace,
)

_trace_decoder = msgspec.json.Decoder(Trace)
_batch_decoder = msgspec.json.Decoder(Batch)


class BatchRefused(Exception):
    """The whole request is unusable (malformed JSON, no `traces` list, too many traces)."""

    def __init__(self, code: str, message: str, path: str = "traces"):
        super().__init__(message)
        self.code, self.message, self.path = code, message, path


@dataclass
class Rejection:
    index: int
    request_id: str | None
    errors: list[Finding] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "index": self.index,
            "request_id": self.request_id,
            "errors": [e.as_dict() for e in self.errors],
        }


@dataclass
class ParsedBatch:
    valid: list[tuple[int, Trace]]
    rejected: list[Rejection]
    size: int


def error(path: str, code: str, message: str) -> Finding:
    return Finding(path, code, message)


# msgspec says e.g. "Expected `str` of length <= 200 - at `$.candidates[0].reason`".
_AT = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_MISSING = re.compile(r"Object missing required field `(?P<field>[^`]+)`")


def _msgspec_error(exc: msgspec.ValidationError) -> Finding:
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


def _semantic_errors(trace: Trace) -> list[Finding]:
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
            "validation_failed", "Send an object with a 'traces' list.", detail.path or "traces"
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


def snapshot_bytes(trace: Trace) -> bytes | None:
    """The snapshot exactly as sent, or None when absent/null."""
    raw = bytes(trace.snapshot).strip()
    return None if raw == b"null" else raw


def batch_json_schema() -> dict:
    """JSON Schema of a batch, from the same structs that validate it (for the OpenAPI
    document): references inlined, so it stands alone."""

    class TraceSchema(Trace):  # the Raw snapshot has no schema of its own
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
