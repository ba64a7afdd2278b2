"""Demo outcomes (DEMO.md): every environment declares task_completed, escalated, rating (1–5)
and resolution; req-92 … req-97 end as their story says, and a share of the background
traffic has outcomes (`traffic.outcomes_of`), all stored through the runtime's outcome path
as the demo's helpdesk application would report them. Idempotent: a second run stores
nothing new (every outcome comes back as a duplicate)."""

from __future__ import annotations

from datetime import timedelta

import msgspec
from context_runtime import wire
from django.contrib.auth import get_user_model
from django.utils import timezone

from console.demo import traffic
from console.demo.traces import SUPPORT_TRACES, demo_identity
from strategies.catalog.models import Environment
from traces.models import Trace
from traces.outcomes import ingest, rules, services
from traces.outcomes.models import OutcomeKind

# How support's requests ended (minutes after the trace; the values).
STORY = {
    "req-92": (
        20,
        {"task_completed": True, "escalated": False, "rating": 5, "resolution": "explained"},
    ),
    "req-93": (15, {"task_completed": False, "escalated": True, "rating": 2}),
    "req-94": (12, {"task_completed": False, "escalated": True, "resolution": "other"}),
    "req-95": (10, {"task_completed": False, "escalated": True, "rating": 2}),
    "req-96": (8, {"task_completed": False, "escalated": True}),
    # Everything required was selected, the model still answered wrong: a person refunded.
    "req-97": (
        4,
        {"task_completed": False, "escalated": True, "rating": 1, "resolution": "refund"},
    ),
}
HELPDESK = "demo helpdesk"


def declare_kinds(admin) -> int:
    """The standard kinds in every environment, through the service (audited); those
    declared already stay as they are."""
    declared = 0
    for environment in Environment.objects.all():
        have = set(
            OutcomeKind.objects.filter(environment=environment).values_list("key", flat=True)
        )
        for spec in rules.STANDARD_KINDS:
            if spec.key not in have:
                services.outcome_kind_declare(environment=environment, spec=spec, actor=admin)
                declared += 1
    return declared


def _report(environment, outcomes: list[wire.Outcome]) -> services.OutcomeIngestResult:
    identity = demo_identity(environment, HELPDESK, "outcomes:write")
    total = services.OutcomeIngestResult()
    for start in range(0, len(outcomes), wire.MAX_OUTCOMES_PER_BATCH):
        chunk = outcomes[start : start + wire.MAX_OUTCOMES_PER_BATCH]
        batch = ingest.parse_outcomes(msgspec.json.encode({"outcomes": chunk}))
        result = services.outcome_batch_store(identity=identity, batch=batch)
        total.accepted += result.accepted
        total.rejected += result.rejected
    return total


def demo_outcomes(now) -> dict[int, list[wire.Outcome]]:
    """By environment id: the story's outcomes and the background traffic's."""
    story_ids = [request_id for request_id, *_ in SUPPORT_TRACES]
    traces = Trace.objects.filter(request_id__in=story_ids).values_list(
        "request_id", "environment_id", "agent__key", "status", "occurred_at"
    )
    background = Trace.objects.filter(request_id__startswith="bg-").values_list(
        "request_id", "environment_id", "agent__key", "status", "occurred_at"
    )
    by_env: dict[int, list[wire.Outcome]] = {}
    for request_id, environment_id, agent, status, occurred_at in [*traces, *background]:
        if request_id in STORY:
            minutes, values = STORY[request_id]
            pairs = list(values.items())
        else:
            minutes, pairs = 30, traffic.outcomes_of(request_id, status)
        when = min(occurred_at + timedelta(minutes=minutes), now)
        by_env.setdefault(environment_id, []).extend(
            wire.Outcome(
                request_id=request_id, kind=kind, value=value, occurred_at=when, agent=agent
            )
            for kind, value in pairs
        )
    return by_env


def load(*, stdout=None) -> None:
    admin = get_user_model().objects.get(username="admin")
    declared = declare_kinds(admin)
    now = timezone.now().replace(microsecond=0)
    environments = {e.pk: e for e in Environment.objects.all()}
    accepted = 0
    for environment_id, outcomes in demo_outcomes(now).items():
        result = _report(environments[environment_id], outcomes)
        if result.rejected:
            raise RuntimeError(f"demo outcomes rejected: {result.as_dict()['rejected'][:3]}")
        accepted += result.accepted
    if stdout is not None:
        stdout.write(f"Demo outcomes: {declared} kinds declared, {accepted} outcomes new.")
