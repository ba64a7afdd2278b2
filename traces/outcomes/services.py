"""Writes for outcomes: the kinds an environment declares (audited, for its admins) and the
outcomes runtimes report (telemetry like traces: no audit row, one transaction per batch).

A (request, kind) is stored once per environment. A repeat with the same value is a
duplicate (accepted, nothing written); a repeat with another value is refused for that item
and the first value stays (docs/runtime-contract.md §3b). Outcomes are kept as long as the
environment keeps its traces, counted from when they happened (`outcomes_purge_expired`,
run by the traces' retention task).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import msgspec
from context_runtime.findings import Finding
from context_runtime.wire import MAX_CLOCK_SKEW_SECONDS
from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from console.kernel.audit import AuditAction, audit_record
from console.kernel.errors import Conflict, NotFound, ValidationFailed
from console.kernel.policy import check_user_can_manage_outcome_kinds
from console.kernel.transactions import service_transaction
from strategies.catalog.models import Agent, Environment
from traces.health.counters import counters_write_tables, outcome_writes
from traces.ingest import request_id_taken
from traces.models import RequestKey, Trace
from traces.outcomes import rules
from traces.outcomes.ingest import ItemRejection, ParsedOutcomes
from traces.outcomes.models import Outcome, OutcomeKind
from traces.partitions import retention_cutoff
from traces.redaction import engine as redaction
from traces.redaction import rules as protection
from traces.rollouts.counters import rollout_outcome_writes
from traces.selectors import traces_keyed

PURGE_BATCH = 5_000


# --- the kinds an environment declares ---------------------------------------------------------
def kind_spec(kind: OutcomeKind) -> rules.KindSpec:
    return rules.KindSpec(
        key=kind.key,
        label=kind.label,
        type=kind.type,
        rating_min=kind.rating_min,
        rating_max=kind.rating_max,
        choices=tuple(kind.choices),
        bad_values=tuple(kind.bad_values),
        rate_label=kind.rate_label,
    )


def kind_state(kind: OutcomeKind) -> dict:
    """What the audit log keeps of a kind, before and after a change."""
    return {**kind_spec(kind).as_dict(), "retired": kind.retired_at is not None}


def kind_target(kind: OutcomeKind) -> tuple:
    """The kind as the audit and access logs name it."""
    return ("outcome_kind", kind.pk, f"{kind.environment.key}: {kind.key}")


def _refuse_findings(found: list[Finding], message: str) -> None:
    if found:
        raise ValidationFailed(message, details=found)


def _apply(kind: OutcomeKind, spec: rules.KindSpec) -> None:
    kind.label = spec.label.strip()
    kind.rate_label = (spec.rate_label or "").strip()
    kind.rating_min = spec.rating_min if spec.type == "rating" else None
    kind.rating_max = spec.rating_max if spec.type == "rating" else None
    kind.choices = list(spec.choices) if spec.type == "label" else []
    kind.bad_values = list(spec.bad_values)


@service_transaction
def outcome_kind_declare(*, environment: Environment, spec: rules.KindSpec, actor) -> OutcomeKind:
    """Declare a kind of outcome `environment` accepts. Its admins only; at most
    MAX_KINDS_PER_ENVIRONMENT active kinds; a key once per environment (a retired one is
    restored, not declared again)."""
    check_user_can_manage_outcome_kinds(actor, target=environment)
    _refuse_findings(rules.spec_findings(spec), "That outcome kind cannot be declared.")
    environment = Environment.objects.select_for_update().get(pk=environment.pk)
    existing = OutcomeKind.objects.filter(environment=environment)
    if existing.filter(key=spec.key).exists():
        raise Conflict(
            f"{environment.key} already declares {spec.key} (restore it if it was retired).",
            code="kind_exists",
            details=[Finding("key", "taken", "Already declared here.")],
        )
    if existing.filter(retired_at__isnull=True).count() >= rules.MAX_KINDS_PER_ENVIRONMENT:
        raise ValidationFailed(
            f"An environment declares at most {rules.MAX_KINDS_PER_ENVIRONMENT} outcome kinds; "
            "retire one first.",
            details=[Finding("key", "too_many", "Retire a kind first.")],
        )
    kind = OutcomeKind(environment=environment, key=spec.key, type=spec.type)
    _apply(kind, spec)
    kind.save()
    audit_record(
        actor=actor,
        action=AuditAction.OUTCOME_KIND_DECLARE,
        target=kind_target(kind),
        after=kind_state(kind),
    )
    return kind


@service_transaction
def outcome_kind_update(*, kind: OutcomeKind, spec: rules.KindSpec, actor) -> OutcomeKind:
    """Change a kind's label, rate and bad values, widen its range or add labels (what is
    stored stays valid: `rules.change_findings`)."""
    check_user_can_manage_outcome_kinds(actor, target=kind_target(kind))
    kind = OutcomeKind.objects.select_for_update().get(pk=kind.pk)
    _refuse_findings(
        rules.spec_findings(spec) or rules.change_findings(kind_spec(kind), spec),
        "That change cannot be saved.",
    )
    before = kind_state(kind)
    _apply(kind, spec)
    after = kind_state(kind)
    if after != before:
        kind.save()
        audit_record(
            actor=actor,
            action=AuditAction.OUTCOME_KIND_UPDATE,
            target=kind_target(kind),
            before=before,
            after=after,
        )
    return kind


@service_transaction
def outcome_kind_retire(*, kind: OutcomeKind, actor, retired: bool = True) -> OutcomeKind:
    """Retire a kind (new reports of it are refused; stored ones stay and are shown) or
    restore it. Restoring counts against the environment's bound."""
    environment = kind.environment
    check_user_can_manage_outcome_kinds(actor, target=kind_target(kind))
    kind = OutcomeKind.objects.select_for_update().get(pk=kind.pk)
    if (kind.retired_at is not None) == retired:
        return kind
    if not retired:
        active = OutcomeKind.objects.filter(environment=environment, retired_at__isnull=True)
        if active.count() >= rules.MAX_KINDS_PER_ENVIRONMENT:
            raise ValidationFailed(
                f"An environment declares at most {rules.MAX_KINDS_PER_ENVIRONMENT} outcome "
                "kinds; retire another one first."
            )
    before = kind_state(kind)
    kind.retired_at = timezone.now() if retired else None
    kind.save(update_fields=["retired_at"])
    audit_record(
        actor=actor,
        action=AuditAction.OUTCOME_KIND_RETIRE if retired else AuditAction.OUTCOME_KIND_RESTORE,
        target=kind_target(kind),
        before=before,
        after=kind_state(kind),
    )
    return kind


def outcome_kind_get(*, environment: Environment, key: str) -> OutcomeKind:
    kind = OutcomeKind.objects.filter(environment=environment, key=key).first()
    if kind is None:
        raise NotFound(f"{environment.key} declares no outcome kind {key}.")
    kind.environment = environment
    return kind


# --- ingest ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StoredOutcome:
    """An outcome as it was stored: what counters and listeners are handed (no model)."""

    environment_id: int
    agent_id: int
    request_id: str
    kind_id: int
    kind_key: str
    value: bool | int | str
    bad: bool
    occurred_at: datetime
    received_at: datetime


@dataclass
class OutcomeIngestResult:
    accepted: int = 0
    duplicates: list[dict] = field(default_factory=list)
    rejected: list[ItemRejection] = field(default_factory=list)
    stored: list[StoredOutcome] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "accepted": self.accepted,
            "duplicates": sorted(self.duplicates, key=lambda d: d["index"]),
            "rejected": [r.as_dict() for r in sorted(self.rejected, key=lambda r: r.index)],
        }


_INSERT = """
INSERT INTO outcomes_outcome
    (environment_id, agent_id, request_id, kind_id, value, occurred_at, received_at,
     reported_by_token_id, reported_by)
SELECT %s, t.agent_id, t.request_id, t.kind_id, t.value::jsonb, t.occurred_at, %s, %s, %s
FROM unnest(%s::bigint[], %s::text[], %s::bigint[], %s::text[], %s::timestamptz[])
    AS t(agent_id, request_id, kind_id, value, occurred_at)
ON CONFLICT (environment_id, request_id, kind_id) DO NOTHING
RETURNING request_id, kind_id
"""


def _time_problem(when: datetime, *, now: datetime, retention_days: int) -> Finding | None:
    if when > now + timedelta(seconds=MAX_CLOCK_SKEW_SECONDS):
        return Finding(
            "occurred_at",
            "out_of_range",
            f"is in the future: at most {MAX_CLOCK_SKEW_SECONDS // 60} minutes ahead of the "
            f"console's clock ({now:%Y-%m-%dT%H:%M:%SZ}); check the clock",
        )
    if when < now - timedelta(days=retention_days):
        return Finding(
            "occurred_at",
            "out_of_range",
            f"is older than this environment's trace retention ({retention_days} days): "
            "it would be deleted at once",
        )
    return None


class _Resolver:
    """Which agent an outcome belongs to, and whether the token may say so."""

    def __init__(self, identity, environment, request_ids, agent_ids: dict[str, int]):
        self.identity = identity
        self.agent_ids = agent_ids
        self.trace_agents = dict(
            traces_keyed(Trace.objects, request_ids, environment_ids=[environment.pk]).values_list(
                "request_id", "agent__key"
            )
        )
        self.environment = environment

    def agent(self, outcome) -> tuple[str | None, Finding | None]:
        stored = self.trace_agents.get(outcome.request_id)
        if stored is not None and not self.identity.covers_agent(stored):
            return None, request_id_taken(self.environment.key)
        named = outcome.agent
        if named is not None:
            if named not in self.agent_ids or not self.identity.covers_agent(named):
                return None, Finding(
                    "agent", "unknown_agent", f"unknown agent '{named}' for this token"
                )
            if stored is not None and stored != named:
                return None, Finding(
                    "agent",
                    "agent_mismatch",
                    f"the trace of this request in '{self.environment.key}' is agent '{stored}''s",
                )
            return named, None
        if stored is not None:
            return stored, None
        only = self.identity.agent_keys if not self.identity.all_agents else ()
        if len(only) == 1:
            (agent,) = only
            if agent in self.agent_ids:
                return agent, None
        return None, Finding(
            "agent",
            "required",
            "name the agent: no trace of this request is stored yet and this token covers "
            "more than one agent",
        )


@service_transaction
def outcome_batch_store(*, identity, batch: ParsedOutcomes) -> OutcomeIngestResult:
    """Store the valid outcomes of a parsed batch in the token's environment, one
    transaction. Each item is stored, a duplicate, or rejected with its reasons — never
    partly. Returns once committed."""
    result = OutcomeIngestResult(rejected=list(batch.rejected))
    if not batch.valid:
        return result
    environment = Environment.objects.get(pk=identity.environment_id)
    kinds = {k.key: k for k in OutcomeKind.objects.filter(environment=environment)}
    declared = sorted(k.key for k in kinds.values() if k.is_active)
    names = {o.agent for _, o in batch.valid if o.agent} | set(identity.agent_keys)
    request_ids = {o.request_id for _, o in batch.valid}
    resolver_agents = dict(Agent.objects.filter(key__in=names).values_list("key", "id"))
    resolver = _Resolver(identity, environment, request_ids, resolver_agents)
    # Trace agents named only by their trace need their ids too.
    missing = set(resolver.trace_agents.values()) - set(resolver_agents)
    if missing:
        resolver_agents.update(Agent.objects.filter(key__in=missing).values_list("key", "id"))
    now = timezone.now()

    def reject(index, outcome, finding):
        result.rejected.append(ItemRejection(index, outcome.request_id, outcome.kind, [finding]))

    # The environment's redaction rules (docs/data-protection.md): an outcome holds
    # identifiers and a declared label only, so personal data in any of them refuses the item;
    # rules that cannot be loaded or applied refuse the batch (503, nothing stored).
    ruleset = protection.ruleset_load(environment.pk)
    pending: dict[tuple[str, int], tuple[int, object, int, datetime]] = {}
    for index, outcome in batch.valid:
        try:
            redaction.outcome_apply(outcome, ruleset)
        except redaction.Refused as exc:
            reject(index, outcome, exc.finding)
            continue
        except Exception as exc:
            raise protection.not_applied() from exc
        kind = kinds.get(outcome.kind)
        if kind is None or not kind.is_active:
            words = "is retired in" if kind is not None else "is not an outcome kind of"
            reject(
                index,
                outcome,
                Finding(
                    "kind",
                    "retired_kind" if kind is not None else "unknown_kind",
                    f"'{outcome.kind}' {words} '{environment.key}'; declared: "
                    + (", ".join(declared) or "none yet (an admin declares them)"),
                ),
            )
            continue
        problem = rules.value_problem(kind, outcome.value)
        if problem:
            reject(index, outcome, Finding("value", "invalid_value", f"{kind.key}: {problem}"))
            continue
        when = outcome.occurred_at.astimezone(UTC) if outcome.occurred_at else now
        late = _time_problem(when, now=now, retention_days=environment.trace_retention_days)
        if late:
            reject(index, outcome, late)
            continue
        agent, refusal = resolver.agent(outcome)
        if refusal:
            reject(index, outcome, refusal)
            continue
        key = (outcome.request_id, kind.pk)
        earlier = pending.get(key)
        if earlier is not None:  # the same (request, kind) twice in one batch
            if earlier[2] == resolver_agents[agent]:
                _repeat(result, index, outcome, earlier[1], kind)
            else:  # both agents are the token's: it may hear the other's name
                first = next(key for key, pk in resolver_agents.items() if pk == earlier[2])
                reject(index, outcome, request_id_taken(environment.key, other_agent=first))
            continue
        pending[key] = (index, outcome.value, resolver_agents[agent], when)
    if not pending:
        return result
    # In key order: two batches reporting the same (request, kind)s insert them in one order,
    # so neither waits on the other's while holding what it wants (no deadlock).
    rows = sorted(pending.items())
    with connection.cursor() as cursor:
        cursor.execute(
            _INSERT,
            [
                environment.pk,
                now,
                identity.token_id or None,
                identity.name[:200],
                [agent_id for _, (_, _, agent_id, _) in rows],
                [request_id for (request_id, _), _ in rows],
                [kind_id for (_, kind_id), _ in rows],
                [msgspec.json.encode(value).decode() for _, (_, value, _, _) in rows],
                [when for _, (_, _, _, when) in rows],
            ],
        )
        inserted = set(cursor.fetchall())
    by_id = {k.pk: k for k in kinds.values()}
    not_inserted = [key for key in pending if key not in inserted]
    if not_inserted:
        stored_values = {
            (r, k): (v, a, a_key)
            for r, k, v, a, a_key in Outcome.objects.filter(
                environment=environment,
                request_id__in={r for r, _ in not_inserted},
                kind_id__in={k for _, k in not_inserted},
            ).values_list("request_id", "kind_id", "value", "agent_id", "agent__key")
        }
        for key in not_inserted:
            index, value, agent_id, _ = pending[key]
            item = _Item(key[0], by_id[key[1]].key, value)
            first, first_agent_id, first_agent = stored_values.get(key, (None, agent_id, None))
            if first_agent_id == agent_id:
                _repeat(result, index, item, first, by_id[key[1]])
                continue
            named = first_agent if identity.covers_agent(first_agent) else None
            taken = request_id_taken(environment.key, other_agent=named)
            result.rejected.append(ItemRejection(index, item.request_id, item.kind, [taken]))
    result.accepted = len(inserted)
    result.stored = [
        StoredOutcome(
            environment_id=environment.pk,
            agent_id=pending[key][2],
            request_id=key[0],
            kind_id=key[1],
            kind_key=by_id[key[1]].key,
            value=pending[key][1],
            bad=rules.is_bad(by_id[key[1]], pending[key][1]),
            occurred_at=pending[key][3],
            received_at=now,
        )
        for key in pending
        if key in inserted
    ]
    outcomes_count(result.stored, now=now)
    return result


# --- health counters -----------------------------------------------------------------------------
_MARK_COUNTED = """
UPDATE outcomes_outcome o SET counted_at = %s
FROM unnest(%s::bigint[], %s::text[], %s::bigint[]) AS c(environment_id, request_id, kind_id)
WHERE o.environment_id = c.environment_id AND o.request_id = c.request_id
  AND o.kind_id = c.kind_id
"""


def outcomes_count(stored: list[StoredOutcome], *, now: datetime) -> int:
    """Count newly stored outcomes on their traces' versions (health counters) and mark them
    counted, in the caller's transaction; those whose trace has not arrived stay uncounted
    for `outcomes_count_pending`. Returns how many were counted."""
    counted, writes = outcome_writes(
        [
            (o.environment_id, o.agent_id, o.request_id, o.kind_key, rules.value_key(o.value))
            for o in stored
        ]
    )
    if counted:
        by_row = {(o.environment_id, o.request_id, o.kind_key): o for o in stored}
        marked = [by_row[(env, request_id, kind)] for env, _, request_id, kind, _ in counted]
        # The same outcomes on their trace's rollout arm, when the trace was its evidence.
        rollout = rollout_outcome_writes(
            (o.environment_id, o.request_id, o.kind_key, o.bad) for o in marked
        )
        with connection.cursor() as cursor:
            # Health and rollout rows in one write: the one lock order of counter rows.
            counters_write_tables(cursor, [*writes, *rollout])
            cursor.execute(
                _MARK_COUNTED,
                [
                    now,
                    [o.environment_id for o in marked],
                    [o.request_id for o in marked],
                    [o.kind_id for o in marked],
                ],
            )
    return len(counted)


COUNT_PENDING_BATCH = 5000


def outcomes_count_pending(
    *, now: datetime | None = None, batch_size: int = COUNT_PENDING_BATCH
) -> int:
    """Count the outcomes that arrived before their trace, once it is stored (the beat runs
    it every 30 s). Rows are taken with SKIP LOCKED: two workers never count one twice.
    Only those whose trace is stored, of their agent, are taken: an outcome whose trace
    never comes, or whose request id another agent's trace holds, stays uncounted without
    holding up the ones behind it in the queue."""
    now = now or timezone.now()
    its_trace = Trace.objects.filter(
        pk=OuterRef("trace_id"),
        occurred_at=OuterRef("occurred_at"),  # the key says which day's partition
        agent_id=OuterRef(OuterRef("agent_id")),
    )
    its_key = RequestKey.objects.filter(
        environment_id=OuterRef("environment_id"), request_id=OuterRef("request_id")
    ).filter(Exists(its_trace))
    with transaction.atomic():
        pending = list(
            Outcome.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(Exists(its_key), counted_at__isnull=True)
            .select_related("kind")
            .order_by("received_at")[:batch_size]
        )
        stored = [
            StoredOutcome(
                environment_id=o.environment_id,
                agent_id=o.agent_id,
                request_id=o.request_id,
                kind_id=o.kind_id,
                kind_key=o.kind.key,
                value=o.value,
                bad=rules.is_bad(o.kind, o.value),
                occurred_at=o.occurred_at,
                received_at=o.received_at,
            )
            for o in pending
        ]
        return outcomes_count(stored, now=now)


@dataclass(frozen=True)
class _Item:
    request_id: str
    kind: str
    value: object


def _same(a, b) -> bool:
    return a == b and type(a) is type(b)  # true is not 1


def _repeat(result: OutcomeIngestResult, index: int, outcome, first, kind: OutcomeKind) -> None:
    """A (request, kind) already stored (or earlier in the batch): the same value is a
    duplicate, another one is refused and the first stays."""
    if _same(outcome.value, first):
        result.duplicates.append(
            {"index": index, "request_id": outcome.request_id, "kind": outcome.kind}
        )
        return
    result.rejected.append(
        ItemRejection(
            index,
            outcome.request_id,
            outcome.kind,
            [
                Finding(
                    "value",
                    "conflicting_value",
                    f"{kind.key} of this request was already reported as "
                    f"{msgspec.json.encode(first).decode()}; the first report is kept",
                )
            ],
        )
    )


# --- retention ---------------------------------------------------------------------------------
def outcomes_purge_expired(*, now: datetime | None = None, batch_size: int = PURGE_BATCH) -> int:
    """Delete outcomes past their environment's trace retention as it is now, with the day
    of their request's trace (the traces' rule: `traces.partitions.retention_cutoff`), in
    short batches. Returns how many."""
    now = now or timezone.now()
    total = 0
    for environment_id, days in Environment.objects.values_list("pk", "trace_retention_days"):
        cutoff = retention_cutoff(now, days)
        while True:
            with transaction.atomic():
                ids = list(
                    Outcome.objects.filter(
                        environment_id=environment_id, occurred_at__lt=cutoff
                    ).values_list("pk", flat=True)[:batch_size]
                )
                if not ids:
                    break
                Outcome.objects.filter(pk__in=ids).delete()
            total += len(ids)
    return total
