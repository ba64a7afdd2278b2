"""Outcome kinds and outcomes for tests: the standard kinds as rows (declaring through the
service is what the kinds tests test), and posting an outcome batch as a runtime does."""

from __future__ import annotations

import orjson

from traces.outcomes import rules
from traces.outcomes.models import OutcomeKind

OUTCOMES_URL = "/api/v1/runtime/outcomes"


def outcome_kinds(environment, specs=rules.STANDARD_KINDS) -> dict[str, OutcomeKind]:
    """The kinds task_completed, escalated, rating (1–5) and resolution, declared in
    `environment` (rows written directly)."""
    kinds = {}
    for spec in specs:
        kind = OutcomeKind(environment=environment, key=spec.key, type=spec.type)
        kind.label, kind.rate_label = spec.label, spec.rate_label
        kind.rating_min, kind.rating_max = spec.rating_min, spec.rating_max
        kind.choices, kind.bad_values = list(spec.choices), list(spec.bad_values)
        kind.save()
        kinds[spec.key] = kind
    return kinds


def post_outcomes(client, secret: str | None, outcomes=None, *, body: bytes | None = None):
    """POST an outcome batch as a runtime or the application does (`body`: raw bytes)."""
    if body is None:
        body = orjson.dumps({"outcomes": outcomes or []})
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"} if secret is not None else {}
    return client.post(OUTCOMES_URL, data=body, content_type="application/json", **headers)
