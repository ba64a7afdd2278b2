"""Parsing an outcome batch (docs/runtime-contract.md §3b), without Django: what the bytes
alone say. Each outcome is decoded on its own with the wire struct
(`context_runtime.wire.Outcome`); one that does not fit is rejected with its path, the rest
go on. What needs the environment, its declared kinds, the token or the clock is decided
when storing (`traces.outcomes.services.outcome_batch_store`).

The envelope's rules are the trace batch's (`traces.ingest`): the same refusal of a body
that is no batch, the same translation of the decoder's errors into paths and codes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
import orjson
from context_runtime.findings import Finding
from context_runtime.text import unstorable
from context_runtime.wire import MAX_OUTCOMES_PER_BATCH, Outcome, OutcomeBatch

from traces.ingest import BatchRefused, _msgspec_error

__all__ = ["BatchRefused", "ItemRejection", "ParsedOutcomes", "parse_outcomes"]

_outcome_decoder = msgspec.json.Decoder(Outcome)
_batch_decoder = msgspec.json.Decoder(OutcomeBatch)


@dataclass
class ItemRejection:
    index: int
    request_id: str | None
    kind: str | None
    errors: list[Finding] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "index": self.index,
            "request_id": self.request_id,
            "kind": self.kind,
            "errors": [e.as_dict() for e in self.errors],
        }


@dataclass
class ParsedOutcomes:
    valid: list[tuple[int, Outcome]]
    rejected: list[ItemRejection]
    size: int


def _named(raw: bytes) -> tuple[str | None, str | None]:
    """request_id and kind of an outcome that did not decode, best effort (for the report)."""
    try:
        decoded = orjson.loads(bytes(raw))
    except (orjson.JSONDecodeError, RecursionError):
        return None, None
    if not isinstance(decoded, dict):
        return None, None
    request_id, kind = decoded.get("request_id"), decoded.get("kind")
    return (
        request_id if isinstance(request_id, str) else None,
        kind if isinstance(kind, str) else None,
    )


def _string_problem(outcome: Outcome) -> Finding | None:
    """A label the store cannot keep (a NUL character, a lone surrogate)."""
    if isinstance(outcome.value, str) and unstorable(outcome.value):
        return Finding("value", "invalid_string", "holds a character the store cannot keep")
    return None


def parse_outcomes(body: bytes) -> ParsedOutcomes:
    """Decode a batch; each outcome is validated on its own. Raises BatchRefused when the
    request is no batch (not JSON, no `outcomes` list, more than MAX_OUTCOMES_PER_BATCH)."""
    if not body.strip():
        raise BatchRefused(
            "malformed_json", 'The request body is empty; send {"outcomes": [...]}.', "outcomes"
        )
    try:
        items = _batch_decoder.decode(body).outcomes
    except msgspec.ValidationError as exc:
        detail = _msgspec_error(exc)
        raise BatchRefused(
            "validation_failed",
            "Send an object with an 'outcomes' list.",
            detail.path or "outcomes",
        ) from exc
    except (msgspec.DecodeError, RecursionError) as exc:
        raise BatchRefused("malformed_json", f"The body is not valid JSON: {exc}", "") from None
    if len(items) > MAX_OUTCOMES_PER_BATCH:
        raise BatchRefused(
            "too_many_outcomes",
            f"A batch carries at most {MAX_OUTCOMES_PER_BATCH} outcomes; this one has "
            f"{len(items)}. Split it.",
            "outcomes",
        )
    valid, rejected = [], []
    for index, raw in enumerate(items):
        try:
            outcome = _outcome_decoder.decode(raw)
        except msgspec.ValidationError as exc:
            rejected.append(ItemRejection(index, *_named(raw), [_msgspec_error(exc)]))
            continue
        except (msgspec.DecodeError, RecursionError):
            problem = Finding("", "malformed_json", "the outcome is not valid JSON")
            rejected.append(ItemRejection(index, *_named(raw), [problem]))
            continue
        problems = []
        if outcome.occurred_at is not None and outcome.occurred_at.tzinfo is None:
            problems.append(
                Finding("occurred_at", "invalid", "needs a timezone, e.g. 2026-11-30T09:12Z")
            )
        problem = _string_problem(outcome)
        if problem is not None:
            problems.append(problem)
        if problems:
            rejected.append(ItemRejection(index, outcome.request_id, outcome.kind, problems))
        else:
            valid.append((index, outcome))
    return ParsedOutcomes(valid=valid, rejected=rejected, size=len(items))
