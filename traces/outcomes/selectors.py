"""Reads of outcomes: an environment's kinds, and the outcomes of given requests (the trace
page, the operator API, and the health counters that another part builds on them)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count

from console.kernel.errors import NotFound
from console.kernel.policy import Capability, agents_where
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


def _rows(queryset) -> list[OutcomeRow]:
    return [
        OutcomeRow(
            request_id=o.request_id,
            environment=o.environment.key,
            agent=o.agent.key,
            kind=o.kind.key,
            kind_label=o.kind.label,
            kind_type=o.kind.type,
            kind_retired=not o.kind.is_active,
            value=o.value,
            bad=rules.is_bad(o.kind, o.value),
            rate_name=rules.rate_name(o.kind),
            occurred_at=o.occurred_at,
            received_at=o.received_at,
            reported_by=o.reported_by,
        )
        for o in queryset.select_related("environment", "agent", "kind").order_by(
            "request_id", "kind__key"
        )
    ]


def outcomes_for_requests(
    *, environment_id: int, request_ids: Iterable[str]
) -> dict[str, list[OutcomeRow]]:
    """The outcomes of these requests in one environment, by request id (one query). For
    health counters and rates per version: join them to the traces' versions by request id."""
    found: dict[str, list[OutcomeRow]] = defaultdict(list)
    queryset = Outcome.objects.filter(
        environment_id=environment_id, request_id__in=list(request_ids)
    )
    for row in _rows(queryset):
        found[row.request_id].append(row)
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
