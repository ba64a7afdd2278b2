"""Parsing and validating a trace batch (docs/runtime-contract.md §3), without Django.

The hot path decodes each trace with msgspec straight into the contract's typed structs
(`context_runtime.wire`, which runtimes build their traces with; no serializer per field), so
a batch of 1,000 traces × 50 candidates is checked in milliseconds. A trace that does not fit
comes back with its error at a path relative to the trace (`candidates[2].decision`); the
others go on to be stored.

Every value is bounded to what the store holds (docs/runtime-contract.md §3): the structs
bound lengths and numbers to their columns; here a string PostgreSQL cannot keep (a NUL
character, invalid UTF-8, a lone surrogate) is refused with its path, one trace at a time.

Only what the bytes themselves say is decided here (decoding, shape, limits). What needs
the token, the environment, the database or the clock — the agent in scope, `occurred_at`
within the retention and the clock skew, whether the strategy version allows a snapshot —
is decided when storing, in `traces.services.trace_batch_store`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import msgspec
import orjson
from context_runtime.findings import Finding
from context_runtime.text import NUL, unstorable
from context_runtime.wire import (
    DECISIONS,
    MAX_TRACES_PER_BATCH,
    OTEL_SPAN_ID_RULE,
    OTEL_TRACE_ID_RULE,
    OUTCOMES,
    REASON_CODES,
    REQUEST_ID_RULE,
    RESOLUTIONS,
    SHADOW_DECISIONS,
    SHADOW_REASON_CODES,
    STATUSES,
    Batch,
    Trace,
)

from console.kernel import strict_json

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


def request_id_taken(environment_key: str, *, other_agent: str | None = None) -> Finding:
    """The refusal of a report whose request id another agent already holds in the
    environment (request ids are unique per environment, across agents). A conflict the
    runtime sees: a `duplicate` is only the same agent's report again, so a token for one
    agent can never make another's runtime believe its report was stored. `other_agent` is
    named only when the token covers it."""
    whose = f"agent '{other_agent}'" if other_agent else "a runtime outside this token's scope"
    return Finding(
        "request_id",
        "request_id_taken",
        f"already used in environment '{environment_key}' by {whose}; request ids are unique "
        "per environment, across agents",
    )


@dataclass
class ParsedBatch:
    valid: list[tuple[int, Trace]]
    rejected: list[Rejection]
    size: int
    # The snapshot of each valid trace that carries one, by index: the bytes as sent.
    snapshots: dict[int, bytes] = field(default_factory=dict)


def error(path: str, code: str, message: str) -> Finding:
    return Finding(path, code, message)


# msgspec says e.g. "Expected `str` of length <= 200 - at `$.candidates[0].reason`" (and
# "- at `key` in `$.candidate_counts`" for a mapping's key).
_AT = re.compile(r" - at (?:`key` in )?`\$\.?(?P<path>[^`]*)`$")
_MISSING = re.compile(r"Object missing required field `(?P<field>[^`]+)`")


# A format refused says the rule in words, not the regular expression.
_FORMAT_RULES = {
    "request_id": REQUEST_ID_RULE,
    "otel.trace_id": OTEL_TRACE_ID_RULE,
    "otel.span_id": OTEL_SPAN_ID_RULE,
}


def _msgspec_error(exc: msgspec.ValidationError) -> Finding:
    text = str(exc)
    match = _AT.search(text)
    path = match.group("path") if match else ""
    message = text[: match.start()] if match else text
    missing = _MISSING.match(message)
    if missing:
        name = missing.group("field")
        return error(f"{path}.{name}" if path else name, "required", "this field is required")
    if "matching regex" in message:
        rule = _FORMAT_RULES.get(path) or message.replace("`", "")
        return error(path, "invalid_format", f"must be {rule}")
    if message == "Number out of range":
        return error(path, "out_of_range", "must be a number within a 64-bit float's range")
    if re.match(r"Expected `(int|float)` [<>]", message):
        return error(path, "out_of_range", message.replace("Expected", "must be").replace("`", ""))
    if message.startswith("Invalid enum value"):
        return error(path, "invalid_choice", "must be one of " + ", ".join(_choices(path)))
    if "length <=" in message:
        return error(path, "too_long", message.replace("Expected", "must be").replace("`", ""))
    if "length >=" in message:
        return error(path, "blank", "must not be empty")
    if message.startswith("Expected `array` of length"):
        return error(path, "too_long", message)
    if message.startswith("Expected"):
        return error(path, "invalid_type", message.replace("`", ""))
    return error(path, "invalid", message.replace("`", ""))


def _choices(path: str) -> tuple[str, ...]:
    """The closed list a field at ``path`` takes its value from."""
    if path.startswith("shadow.differences"):
        return SHADOW_DECISIONS if path.endswith("decision") else SHADOW_REASON_CODES
    if path.endswith(("decision", "candidate_counts")):
        return DECISIONS
    if path.endswith("reason_code"):
        return REASON_CODES
    if path.endswith("outcome"):
        return OUTCOMES
    if path.endswith("config_resolution"):
        return RESOLUTIONS
    return STATUSES


def _shadow_errors(trace: Trace) -> list[Finding]:
    """A shadow's differences point into the candidates the trace carries, and are at most
    as many as it counts."""
    shadow = trace.shadow
    if shadow is None or not shadow.differences:
        return []
    errors = []
    carried = len(trace.candidates)
    for i, difference in enumerate(shadow.differences):
        if difference.index >= carried:
            errors.append(
                error(
                    f"shadow.differences[{i}].index",
                    "out_of_range",
                    f"must be the position of one of the trace's {carried} candidates",
                )
            )
    total = shadow.differences_total
    if total is not None and total < len(shadow.differences):
        errors.append(
            error(
                "shadow.differences_total",
                "out_of_range",
                f"counts {total} differences, fewer than the {len(shadow.differences)} listed",
            )
        )
    return errors


def _semantic_errors(trace: Trace) -> list[Finding]:
    """Rules msgspec's types cannot say."""
    errors = []
    if trace.occurred_at.tzinfo is None:
        errors.append(error("occurred_at", "invalid", "needs a timezone, e.g. 2026-11-30T09:12Z"))
    if trace.status == "degraded" and not trace.degradation:
        errors.append(
            error("degradation", "required", "a degraded trace names the handler it used")
        )
    if trace.status == "input_refused" and not trace.input_errors:
        errors.append(
            error(
                "input_errors",
                "required",
                "an input_refused trace names what the engine refused (at least one finding)",
            )
        )
    if trace.candidates_truncated and not trace.candidate_counts:
        errors.append(
            error(
                "candidate_counts",
                "required",
                "a truncated trace gives the counts of all its candidates by decision",
            )
        )
    elif trace.candidate_counts is not None and sum(trace.candidate_counts.values()) < len(
        trace.candidates
    ):
        errors.append(
            error(
                "candidate_counts",
                "out_of_range",
                f"counts {sum(trace.candidate_counts.values())} candidates, fewer than the "
                f"{len(trace.candidates)} the trace carries",
            )
        )
    if trace.strategy and trace.strategy not in trace.documents:
        errors.append(
            error("documents", "required", f"the version of strategy '{trace.strategy}' is missing")
        )
    errors += _shadow_errors(trace)
    return errors


# --- strings the store cannot keep ------------------------------------------------------------
_NUL_ESCAPE = b"\\u0000"  # how JSON writes a NUL character (a raw one is invalid JSON)
_TRACE_FIELDS = frozenset(Trace.__struct_fields__)


def _string_problem(text: str, *, nul_ok: bool) -> str | None:
    problem = unstorable(text, nul_ok=nul_ok)  # the one rule (context_runtime.text)
    if problem == NUL:
        return "holds a NUL character (\\u0000), which the store cannot keep"
    if problem:  # invalid UTF-8 bytes were decoded to lone surrogates (`_lenient_loads`)
        return "is not valid Unicode (invalid UTF-8, or a lone surrogate \\ud800–\\udfff)"
    return None


def _string_findings(value, path: str, *, nul_ok: bool = False):
    """Each string (and key) of a decoded JSON value that the store cannot keep, by path."""
    if isinstance(value, str):
        problem = _string_problem(value, nul_ok=nul_ok)
        if problem:
            yield error(path, "invalid_string", problem)
    elif isinstance(value, dict):
        for key, item in value.items():
            problem = _string_problem(key, nul_ok=nul_ok)
            if problem:
                yield error(path, "invalid_string", "a key " + problem)
            yield from _string_findings(item, f"{path}.{key}" if path else key, nul_ok=nul_ok)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _string_findings(item, f"{path}[{i}]", nul_ok=nul_ok)


def _trace_string_findings(decoded) -> list[Finding]:
    """The fields of a trace (unknown ones are ignored, as by the decoder); the snapshot is
    stored as bytes, so a NUL character is fine there."""
    if not isinstance(decoded, dict):
        return []
    return [
        finding
        for name, value in decoded.items()
        if name in _TRACE_FIELDS
        for finding in _string_findings(value, name, nul_ok=name == "snapshot")
    ]


def _lenient_loads(raw: bytes):
    """Decode JSON that msgspec refuses for its strings only: invalid UTF-8 bytes and lone
    surrogate escapes come back as lone surrogates, for `_string_findings` to point at."""
    return json.loads(bytes(raw).decode("utf-8", "surrogateescape"), parse_constant=_no_constant)


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _undecodable(raw: bytes, exc: msgspec.DecodeError) -> tuple[str | None, list[Finding]]:
    """A trace msgspec cannot decode although the batch is JSON: name the bad strings."""
    try:
        decoded = _lenient_loads(raw)
    except (ValueError, RecursionError):
        return None, [error("", "malformed_json", f"the trace is not valid JSON: {exc}")]
    request_id = decoded.get("request_id") if isinstance(decoded, dict) else None
    findings = _trace_string_findings(decoded) or [
        error("", "malformed_json", f"the trace is not valid JSON: {exc}")
    ]
    return request_id if isinstance(request_id, str) else None, findings


def _snapshot_findings(trace: Trace) -> list[Finding]:
    """The snapshot is kept as the runtime's bytes, which msgspec does not check: they must
    be UTF-8 for the page to show them."""
    raw = bytes(trace.snapshot)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        found = list(_string_findings(_lenient_loads(raw), "snapshot", nul_ok=True))
        return found or [error("snapshot", "invalid_string", "is not valid UTF-8")]
    return []


def _lenient_envelope(body: bytes, exc: msgspec.DecodeError) -> tuple[list[bytes], dict]:
    """The batch's traces when msgspec refused the body for a string only (a lone surrogate
    escape is valid JSON syntax that msgspec will not decode): each trace re-encoded on its
    own, so the bad ones are refused one by one and the rest stand. Re-encoding keeps one of
    two equal keys, so they are found here: the envelope's refuse the body, each trace's come
    back by index (`_repeated_in_body`'s answer)."""
    try:
        decoded, repeated = strict_json.marked_loads(
            bytes(body).decode("utf-8", "surrogateescape"), parse_constant=_no_constant
        )
    except RecursionError:
        raise BatchRefused("malformed_json", "The JSON is nested too deeply.", "") from None
    except ValueError:
        raise BatchRefused("malformed_json", f"The body is not valid JSON: {exc}", "") from exc
    traces = decoded.get("traces") if isinstance(decoded, dict) else None
    found = strict_json.first_duplicate(decoded) if repeated else None
    if found is not None and not found.path.startswith("traces["):
        raise BatchRefused(strict_json.DUPLICATE_KEY, found.message, found.path)
    if not isinstance(traces, list):
        raise BatchRefused("validation_failed", "Send an object with a 'traces' list.")
    in_traces = {}
    if repeated:
        for index, trace in enumerate(traces):
            found = strict_json.first_duplicate(trace)
            if found is not None:
                in_traces[index] = found
    return [_reencoded(trace) for trace in traces], in_traces


def _reencoded(trace) -> bytes:
    try:
        return json.dumps(trace, separators=(",", ":"), allow_nan=False).encode()
    except ValueError:  # a number beyond a float (1e999): refused by the trace decoder
        return json.dumps(trace, separators=(",", ":")).encode()


def _request_id_of(raw: bytes) -> str | None:
    """Best effort, for the rejection report of a trace that did not decode."""
    try:
        decoded = orjson.loads(bytes(raw))
    except orjson.JSONDecodeError:  # e.g. 1e999, which orjson refuses: read it leniently
        try:
            decoded = _lenient_loads(raw)
        except (ValueError, RecursionError):
            return None
    except RecursionError:
        return None
    value = decoded.get("request_id") if isinstance(decoded, dict) else None
    return value if isinstance(value, str) else None


# --- a key twice in one object (msgspec keeps the last) --------------------------------------------
def _repeated_in_body(body: bytes, traces: list) -> dict[int, strict_json.DuplicateKey] | None:
    """`{"traces": [...], "traces": [...]}`: refused. A body written compactly is exactly
    its traces joined, with no other key: None, each trace is still to be checked
    (`_repeated_in_trace`). Any other body is read whole here; with no key twice anywhere,
    {}: no trace needs a look of its own."""
    if body == b'{"traces":[' + b",".join(traces) + b"]}":
        return None
    try:  # not compact: no cheap proof to try; bytes msgspec skipped may not be UTF-8
        value, repeated = strict_json.marked_loads(body.decode("utf-8", "surrogateescape"))
    except (ValueError, RecursionError):
        return None  # not read: each trace is checked on its own
    found = strict_json.first_duplicate(value) if repeated else None
    if found is None:
        return {}
    if not found.path.startswith("traces["):
        raise BatchRefused(strict_json.DUPLICATE_KEY, found.message, found.path)
    return None  # the first one only: each trace is checked on its own


# The console's encoding of a decoded trace: the SDK's reporter writes a trace exactly so
# (msgspec, the wire structs' field order, defaults written; see `encode_trace`).
_canonical = msgspec.json.Encoder()
_LAST_FIELD = f',"{Trace.__struct_fields__[-1]}":'.encode()


def _repeated_in_trace(raw: msgspec.Raw, trace: Trace) -> Finding | None:
    """A key twice in one object of the trace, at its path relative to the trace; None when
    there is none. Exact, and cheap for what the SDK sends: bytes equal to the struct's own
    encoding had each key once (the struct writes each field once) — except in the snapshot,
    which the struct carries verbatim and is read on its own. Anything else (other clients,
    whitespace, another field order) is proven by `own_encoding` or read by `marked_loads`."""
    raw = bytes(raw)  # (a memoryview would compare byte by byte)
    # Every field written, the snapshot last: encoded only when the end can match.
    if raw.endswith(_LAST_FIELD + trace.snapshot + b"}") and raw == _canonical.encode(trace):
        text, where = snapshot_bytes(trace), "snapshot"
        if text is None:
            return None
    else:
        text, where = raw, ""
    if strict_json.own_encoding(text):
        return None
    try:  # invalid UTF-8 (msgspec passes it in skipped fields and the snapshot) is read too
        value, repeated = strict_json.marked_loads(text.decode("utf-8", "surrogateescape"))
    except RecursionError:  # msgspec read it a few frames up; not proven, so refused
        return error(where, "too_deep", "the trace is nested too deeply")
    except ValueError as exc:  # msgspec read it; nothing known gets here, but never unchecked
        return error(where, "malformed_json", f"the trace is not valid JSON: {exc}")
    found = strict_json.first_duplicate(value, where) if repeated else None
    return None if found is None else error(found.path, strict_json.DUPLICATE_KEY, found.message)


def parse_batch(body: bytes) -> ParsedBatch:
    """Decode a batch; each trace is validated on its own."""
    if not body.strip():
        raise BatchRefused("malformed_json", 'The request body is empty; send {"traces": [...]}.')
    try:
        traces = _batch_decoder.decode(body).traces
    except msgspec.ValidationError as exc:
        detail = _msgspec_error(exc)
        raise BatchRefused(
            "validation_failed", "Send an object with a 'traces' list.", detail.path or "traces"
        ) from exc
    except msgspec.DecodeError as exc:
        traces, repeated = _lenient_envelope(body, exc)
    except RecursionError:  # absurd nesting is bad input, not a crash
        raise BatchRefused("malformed_json", "The JSON is nested too deeply.", "") from None
    else:
        repeated = _repeated_in_body(body, traces)
    if len(traces) > MAX_TRACES_PER_BATCH:
        raise BatchRefused(
            "too_many_traces",
            f"A batch carries at most {MAX_TRACES_PER_BATCH} traces; this one has "
            f"{len(traces)}. Split it.",
        )
    # A NUL character can only come as the escape \u0000: look closer only when one is there.
    look_for_nul = _NUL_ESCAPE in body
    valid, rejected, snapshots = [], [], {}
    for index, raw in enumerate(traces):
        try:
            trace = _trace_decoder.decode(raw)
        except msgspec.ValidationError as exc:
            rejected.append(Rejection(index, _request_id_of(raw), [_msgspec_error(exc)]))
            continue
        except RecursionError:
            too_deep = error("", "too_deep", "the trace is nested too deeply")
            rejected.append(Rejection(index, None, [too_deep]))
            continue
        except msgspec.DecodeError as exc:  # invalid UTF-8 or a lone surrogate in a string
            rejected.append(Rejection(index, *_undecodable(raw, exc)))
            continue
        if repeated is None:
            twice = _repeated_in_trace(raw, trace)
        elif index in repeated:  # found when the whole body was read
            found = repeated[index]
            twice = error(found.path, strict_json.DUPLICATE_KEY, found.message)
        else:
            twice = None
        if twice is not None:
            rejected.append(Rejection(index, trace.request_id, [twice]))
            continue
        problems = _semantic_errors(trace)
        if look_for_nul and not problems:
            problems = _trace_string_findings(orjson.loads(bytes(raw)))
        snapshot = None if problems else snapshot_bytes(trace)
        if snapshot is not None:
            problems = _snapshot_findings(trace)
        if problems:
            rejected.append(Rejection(index, trace.request_id, problems))
        else:
            valid.append((index, trace))
            if snapshot is not None:
                snapshots[index] = snapshot
    return ParsedBatch(valid=valid, rejected=rejected, size=len(traces), snapshots=snapshots)


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
