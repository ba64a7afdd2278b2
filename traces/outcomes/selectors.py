"""Reads of outcomes: an environment's kinds, and the outcomes of given requests (the trace
page, the operator API, and the health counters that another part builds on them)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import connections
from django.db.models import Count

from console.kernel.errors import NotFound
from console.kernel.policy import Capability, agents_where
from console.kernel.standby import read_alias
from strategies.catalog.models import Environment
from traces.outcomes import rules
from traces.outcomes.models import Outcome, OutcomeKind


def outcome_kinds(*, environment: Environment, include_retired: bool = True) -> list[OutcomeKind]:
    kinds = OutcomeKind.objects.filter(environment=environment).order_by("retired_at", "key")
    if not include_retired:
        kinds = kinds.filter(retired_at__isnull=True)
    return list(kinds)


def kind_counts(*, environment: Environment) -> dict[int, int]:
    """Outcomes stored per kind (the admin page says what retiring one leaves behind)."""
    return dict(
        Outcome.objects.filter(environment=environment)
        .values_list("kind_id")
        .annotate(n=Count("id"))
        .values_list("kind_id", "n")
    )


@dataclass(frozen=True)
class OutcomeRow:
    """One stored outcome as pages, the API and counters read it (no model crosses)."""

    request_id: str
    environment: str
    agent: str
    kind: str
    kind_label: str
    kind_type: str
    kind_retired: bool
    value: bool | int | str
    bad: bool
    rate_name: str
    occurred_at: datetime
    received_at: datetime
    reported_by: str

    def as_dict(self) -> dict:
        return {
            "request_id": self.request_id,
            "environment": self.environment,
            "agent": self.agent,
            "kind": self.kind,
            "kind_label": self.kind_label,
            "type": self.kind_type,
            "value": self.value,
            "bad": self.bad,
            "occurred_at": self.occurred_at,
            "received_at": self.received_at,
            "reported_by": self.reported_by,
        }


def _row(*, request_id, environment, agent, kind, value, occurred_at, received_at, reported_by):
    return OutcomeRow(
        request_id=request_id,
        environment=environment,
        agent=agent,
        kind=kind.key,
        kind_label=kind.label,
        kind_type=kind.type,
        kind_retired=not kind.is_active,
        value=value,
        bad=rules.is_bad(kind, value),
        rate_name=rules.rate_name(kind),
        occurred_at=occurred_at,
        received_at=received_at,
        reported_by=reported_by,
    )


def _rows(queryset) -> list[OutcomeRow]:
    return [
        _row(
            request_id=o.request_id,
            environment=o.environment.key,
            agent=o.agent.key,
            kind=o.kind,
            value=o.value,
            occurred_at=o.occurred_at,
            received_at=o.received_at,
            reported_by=o.reported_by,
        )
        for o in queryset.select_related("environment", "agent", "kind").order_by(
            "request_id", "kind__key"
        )
    ]


# Written out: every trace page reads it, and the ORM took about 1.1 ms of Python to build
# this three-join query against 0.15 ms for the statement itself (docs/PERFORMANCE.md). The
# value is jsonb, which Django's connection hands over as text.
_OUTCOMES_OF_REQUESTS = """
SELECT o.request_id, e.key, a.key, o.kind_id, o.value, o.occurred_at, o.received_at,
       o.reported_by
FROM outcomes_outcome o
JOIN strategies_environment e ON e.id = o.environment_id
JOIN strategies_agent a ON a.id = o.agent_id
WHERE o.environment_id = %s AND o.request_id = ANY(%s)
"""


def outcomes_for_requests(
    *, environment_id: int, request_ids: Iterable[str]
) -> dict[str, list[OutcomeRow]]:
    """The outcomes of these requests in one environment, by request id (one query). For
    health counters and rates per version: join them to the traces' versions by request id."""
    with connections[read_alias()].cursor() as cursor:
        cursor.execute(_OUTCOMES_OF_REQUESTS, [environment_id, list(request_ids)])
        stored = cursor.fetchall()
    kinds = OutcomeKind.objects.in_bulk({row[3] for row in stored}) if stored else {}
    found: dict[str, list[OutcomeRow]] = defaultdict(list)
    for request_id, environment, agent, kind_id, value, occurred, received, reporter in sorted(
        stored, key=lambda row: (row[0], kinds[row[3]].key)
    ):
        found[request_id].append(
            _row(
                request_id=request_id,
                environment=environment,
                agent=agent,
                kind=kinds[kind_id],
                value=json.loads(value),
                occurred_at=occurred,
                received_at=received,
                reported_by=reporter,
            )
        )
    return dict(found)


def outcomes_visible(*, user, request_id: str, environment: str = "") -> list[OutcomeRow]:
    """The outcomes of a request id the user may investigate (view_traces on its agent), in
    every environment they may see or the one named. An unknown environment is 404."""
    queryset = Outcome.objects.filter(
        request_id=request_id, agent__in=agents_where(user, Capability.VIEW_TRACES)
    )
    if environment:
        if not Environment.objects.filter(key=environment).exists():
            raise NotFound(f"There is no environment {environment}.")
        queryset = queryset.filter(environment__key=environment)
    return _rows(queryset)
