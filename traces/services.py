"""Writes for traces: batch ingest (COPY), snapshot views, retention purge, hourly rollups.

Ingest is telemetry, not a change made by a person, so it writes no audit row (the audit log
would grow with every request); looks at traces and snapshots go to the access log instead.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import msgspec
from context_runtime.findings import Finding
from context_runtime.reporter import snapshot_allowed
from context_runtime.wire import MAX_CLOCK_SKEW_SECONDS
from context_runtime.wire import Trace as WireTrace
from django.db import connection, transaction
from django.utils import timezone

from console.kernel.audit import AccessAction, access_record
from console.kernel.errors import NotFound, ValidationFailed
from console.kernel.policy import Capability, check_user_can
from console.kernel.reasons import reason_clean
from console.kernel.sessions import require_recent_authentication
from console.kernel.transactions import service_transaction
from strategies.catalog.models import TRACE_RETENTION_DAYS_DEFAULT, Agent, Environment
from strategies.documents.models import Document, Version
from traces import compact, crypto, partitions, stored
from traces.health.counters import counters_record_batch
from traces.ingest import ParsedBatch, Rejection, request_id_taken
from traces.models import Snapshot, Trace
from traces.redaction import engine as redaction
from traces.redaction import rules as protection
from traces.rollouts.counters import rollout_claims_judge, rollout_writes
from traces.selectors import traces_keyed

PURGE_BATCH = 5_000

# Traces are COPYed into a session temp table (emptied at every commit: each batch starts
# clean, no catalog churn; its name changes with its columns, as a pooled connection may
# still hold the previous shape), then moved with ON CONFLICT so a stored request_id is skipped.
# A trace's candidates travel in its row, one compact value (traces.stored), with its kinds.
_TEMP_TABLES = """
CREATE TEMP TABLE IF NOT EXISTS ingest_trace_in_v8 (
    request_id varchar(200), agent_id bigint, environment_id bigint, occurred_at timestamptz,
    received_at timestamptz, strategy varchar(100), strategy_version integer,
    profile_version integer, documents jsonb, config_fallback boolean,
    config_resolution varchar(20), config_age_seconds double precision, task_id varchar(200),
    task_revision bigint, principal varchar(200), model_name varchar(200),
    model_adapter varchar(200), model_context_window integer, status varchar(30),
    degradation varchar(100), budget_max_input_tokens integer,
    budget_reserve_output_tokens integer, input_estimate double precision,
    input_estimate_unit varchar(30), input_estimate_estimator varchar(100), sources jsonb,
    shadow jsonb, snapshot_expires_at timestamptz, engine varchar(100),
    fixed_input_tokens integer, relevance_threshold double precision,
    selection_context_window integer, selection_max_input_tokens integer,
    candidates_truncated boolean, candidate_counts jsonb, input_errors jsonb,
    input_errors_total integer, sections jsonb, rollout_key varchar(100),
    rollout_arm varchar(10), rollout_step integer, otel_trace_id varchar(32),
    otel_span_id varchar(16), redactions jsonb, packed_candidates bytea, kinds int4[]
) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS ingest_snapshot_in (
    request_id varchar(200), ciphertext bytea, key_id varchar(16), created_at timestamptz,
    expires_at timestamptz
) ON COMMIT DELETE ROWS;
"""
TRACE_COLUMNS = (
    "request_id, agent_id, environment_id, occurred_at, received_at, strategy, "
    "strategy_version, profile_version, documents, config_fallback, config_resolution, "
    "config_age_seconds, task_id, task_revision, "
    "principal, model_name, model_adapter, model_context_window, status, degradation, "
    "budget_max_input_tokens, budget_reserve_output_tokens, input_estimate, "
    "input_estimate_unit, input_estimate_estimator, sources, shadow, snapshot_expires_at, "
    "engine, fixed_input_tokens, relevance_threshold, selection_context_window, "
    "selection_max_input_tokens, candidates_truncated, candidate_counts, input_errors, "
    "input_errors_total, sections, rollout_key, rollout_arm, rollout_step, otel_trace_id, "
    "otel_span_id, redactions, packed_candidates, kinds"
)
SNAPSHOT_COLUMNS = "ciphertext, key_id, created_at, expires_at"

# One statement: the traces not yet stored, and their snapshots. The request key goes in
# first (traces_request_key's primary key is the per-environment uniqueness: the trace table
# is partitioned by day); a request_id already stored in this environment (or being stored
# by a concurrent batch) is skipped by ON CONFLICT, and only the traces whose key went in
# are inserted, with the id drawn for the key. A batch is one environment's, so the joins
# are on request_id alone. Keys go in by request_id: two batches sharing ids take them in
# one order, so neither waits for the other while holding an id it wants (no deadlock).
_MOVE_FROM_TEMP = f"""
WITH keys AS (
    INSERT INTO traces_request_key (environment_id, request_id, trace_id, occurred_at)
    SELECT environment_id, request_id, nextval('traces_trace_id_seq'), occurred_at
    FROM ingest_trace_in_v8
    ORDER BY request_id
    ON CONFLICT (environment_id, request_id) DO NOTHING
    RETURNING trace_id, request_id, environment_id
), inserted AS (
    INSERT INTO traces_trace (id, {TRACE_COLUMNS})
    SELECT keys.trace_id, {", ".join("t." + c.strip() for c in TRACE_COLUMNS.split(","))}
    FROM ingest_trace_in_v8 t
    JOIN keys ON keys.request_id = t.request_id AND keys.environment_id = t.environment_id
    RETURNING id, request_id
), snapshots AS (
    INSERT INTO traces_snapshot (trace_id, {SNAPSHOT_COLUMNS})
    SELECT inserted.id, {", ".join("s." + c.strip() for c in SNAPSHOT_COLUMNS.split(","))}
    FROM ingest_snapshot_in s JOIN inserted ON inserted.request_id = s.request_id
)
SELECT id, request_id FROM inserted
"""


@dataclass
class IngestResult:
    accepted: int = 0
    duplicates: list[str] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    # Stored traces whose snapshot was not: their strategy version does not allow snapshots.
    snapshots_dropped: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        result = {
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "rejected": [r.as_dict() for r in sorted(self.rejected, key=lambda r: r.index)],
        }
        if self.snapshots_dropped:  # absent when empty: the response of earlier consoles
            result["snapshots_dropped"] = self.snapshots_dropped
        return result


def _json(value) -> str:
    return msgspec.json.encode(value).decode()


def trace_row(
    trace: WireTrace,
    *,
    agent_id: int,
    environment_id: int,
    received_at,
    snapshot_expires_at,
    redactions: dict | None = None,
    kind_numbers: dict | None = None,
) -> tuple:
    """The ingest_trace row of one trace, in TRACE_COLUMNS order. A trace without a
    `selection` block (a runtime older than the replay fields) stores blank/null there."""
    task, model, budget, estimate = trace.task, trace.model, trace.budget, trace.input_estimate
    selection, rollout, otel = trace.selection, trace.rollout, trace.otel
    return (
        trace.request_id,
        agent_id,
        environment_id,
        # In UTC: PostgreSQL refuses offsets beyond ±15:59, which datetime allows. Bounded
        # by _occurred_at_errors first, so the conversion cannot overflow.
        trace.occurred_at.astimezone(UTC),
        received_at,
        trace.strategy,
        trace.documents.get(trace.strategy) if trace.strategy else None,
        trace.documents.get("profile"),
        _json(trace.documents),
        trace.config_fallback,
        trace.config_resolution or "",
        trace.config_age_seconds,
        task.id if task else "",
        task.revision if task else None,
        trace.principal,
        model.name if model else "",
        model.adapter if model else "",
        model.context_window if model else None,
        trace.status,
        trace.degradation or "",
        budget.max_input_tokens if budget else None,
        budget.reserve_output_tokens if budget else None,
        estimate.value if estimate else None,
        estimate.unit if estimate else "",
        estimate.estimator if estimate else "",
        _json(trace.sources),
        _json(trace.shadow) if trace.shadow is not None else None,
        snapshot_expires_at,
        selection.engine if selection else "",
        selection.fixed_input_tokens if selection else None,
        selection.relevance_threshold if selection else None,
        selection.context_window if selection else None,
        selection.max_input_tokens if selection else None,
        trace.candidates_truncated,
        _json(trace.candidate_counts) if trace.candidate_counts is not None else None,
        _json(trace.input_errors) if trace.input_errors else None,
        trace.input_errors_total,
        _json(trace.sections) if trace.sections is not None else None,
        rollout.id if rollout else None,
        rollout.arm if rollout else None,
        rollout.step if rollout else None,
        otel.trace_id if otel else None,
        otel.span_id if otel else None,
        _json(redactions) if redactions else None,
        *stored.packed(trace.candidates, kind_numbers or {}),
    )


def _copy(cursor, table: str, columns: str, rows) -> None:
    with cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


# --- store-time checks: what needs the token, the environment, the database or the clock -----
# (what the bytes alone say was decided by traces.ingest.parse_batch)
def _scope_errors(trace: WireTrace, identity, agent_ids: dict[str, int]) -> list[Finding]:
    errors = []
    if trace.agent not in agent_ids or not identity.covers_agent(trace.agent):
        # Unknown and out of the token's scope get the same answer (docs/runtime-contract.md).
        errors.append(
            Finding("agent", "unknown_agent", f"unknown agent '{trace.agent}' for this token")
        )
    if trace.environment and trace.environment != identity.environment_key:
        errors.append(
            Finding(
                "environment",
                "environment_mismatch",
                f"this token writes to '{identity.environment_key}' only",
            )
        )
    return errors


def _occurred_at_errors(trace: WireTrace, *, now: datetime, retention_days: int) -> list[Finding]:
    """occurred_at within [now − the environment's retention, now + the allowed clock skew]:
    a later time is a broken clock (and year 10000 would break every read), an earlier one
    would be purged at once."""
    if trace.occurred_at > now + timedelta(seconds=MAX_CLOCK_SKEW_SECONDS):
        return [
            Finding(
                "occurred_at",
                "out_of_range",
                f"is in the future: at most {MAX_CLOCK_SKEW_SECONDS // 60} minutes ahead of "
                f"the console's clock ({now:%Y-%m-%dT%H:%M:%SZ}); check the runtime's clock",
            )
        ]
    if trace.occurred_at < now - timedelta(days=retention_days):
        return [
            Finding(
                "occurred_at",
                "out_of_range",
                f"is older than this environment's trace retention ({retention_days} days)",
            )
        ]
    return []


def _strategy_version(trace: WireTrace) -> int | None:
    return trace.documents.get(trace.strategy) if trace.strategy else None


def _snapshots_allowed(traces: list[WireTrace], agent_ids: dict[str, int]) -> set[tuple]:
    """(agent key, strategy, version) of the traces' strategy versions whose body says
    `"snapshot": {"allowed": true}` (the SDK's rule, `snapshot_allowed`). One query."""
    named = {
        (trace.agent, trace.strategy, _strategy_version(trace))
        for trace in traces
        if _strategy_version(trace) is not None
    }
    if not named:
        return set()
    rows = Version.objects.filter(
        document__kind=Document.Kind.STRATEGY,
        document__agent_id__in={agent_ids[agent] for agent, _, _ in named},
        document__key__in={strategy for _, strategy, _ in named},
        number__in={number for _, _, number in named},
        state=Version.State.FROZEN,
    ).values_list("document__agent__key", "document__key", "number", "body")
    return {
        (agent, key, number)
        for agent, key, number, body in rows
        if (agent, key, number) in named and snapshot_allowed(body)
    }


def _not_stored(identity, environment, traces: list[WireTrace], indexes: dict[str, int]):
    """Split the traces ON CONFLICT skipped: a duplicate only when the stored trace is the same
    agent's (a retry); an id another agent holds is a rejection (`request_id_taken`), naming
    that agent only when the token covers it — so `duplicates` never hides a trace that was
    not stored, nor reveals one outside the token's scope."""
    if not traces:
        return [], []
    owners = dict(
        traces_keyed(
            Trace.objects, [t.request_id for t in traces], environment_ids=[environment.pk]
        ).values_list("request_id", "agent__key")
    )
    duplicates, rejected = [], []
    for trace in traces:
        owner = owners.get(trace.request_id)
        if owner is None or owner == trace.agent:
            duplicates.append(trace.request_id)
            continue
        named = owner if identity.covers_agent(owner) else None
        taken = request_id_taken(environment.key, other_agent=named)
        rejected.append(Rejection(indexes[trace.request_id], trace.request_id, [taken]))
    return duplicates, rejected


@service_transaction
def trace_batch_store(*, identity, batch: ParsedBatch) -> IngestResult:
    """Store the valid traces of a parsed batch with COPY, in one transaction.

    The environment is the token's; a request_id is unique per environment. One already
    stored there, or repeated in the batch, is reported as a duplicate (when within the
    token's scope) and not stored again. A snapshot is stored only when the trace's strategy
    version allows it. Returns once committed.
    """

    result = IngestResult(rejected=list(batch.rejected))
    keys = {trace.agent for _, trace in batch.valid}
    agent_ids = dict(Agent.objects.filter(key__in=keys).values_list("key", "id"))
    environment = Environment.objects.get(pk=identity.environment_id)
    now = timezone.now()
    snapshot_expiry = now + timedelta(days=environment.snapshot_retention_days)
    key_id = crypto.current_key_id()

    seen: dict[str, str] = {}  # request_id → the agent whose trace has it in this batch
    accepted: dict[str, WireTrace] = {}
    indexes: dict[str, int] = {}
    in_scope = []
    # The environment's redaction rules, before anything is judged further or stored: a
    # trace refused for personal data is never counted, claimed or kept (fail-closed: rules
    # that cannot be loaded or applied refuse the batch, 503, nothing stored).
    ruleset = protection.ruleset_load(environment.pk)
    redactions: dict[int, dict] = {}
    snapshots_in = dict(batch.snapshots)
    for index, trace in batch.valid:
        problems = _scope_errors(trace, identity, agent_ids) or _occurred_at_errors(
            trace, now=now, retention_days=environment.trace_retention_days
        )
        if not problems and ruleset:
            problems = _redacted(trace, index, ruleset, snapshots_in, redactions)
        if problems:
            result.rejected.append(Rejection(index, trace.request_id, problems))
        else:
            in_scope.append((index, trace))
    # A rollout arm or step the console does not assign the trace's unit: refused, counted.
    claims = rollout_claims_judge(
        environment_id=environment.pk, agent_ids=agent_ids, traces=in_scope
    )
    for index, trace in in_scope:
        if index in claims.refused:
            result.rejected.append(Rejection(index, trace.request_id, [claims.refused[index][0]]))
    in_scope = [(index, trace) for index, trace in in_scope if index not in claims.refused]
    allowed = _snapshots_allowed(
        [trace for index, trace in in_scope if index in snapshots_in], agent_ids
    )
    dropped: list[str] = []
    traces, snapshots = [], []
    with connection.cursor() as cursor:
        numbers = stored.kind_numbers(
            cursor, (k for _, t in in_scope for k in compact.kinds(t.candidates))
        )
    for index, trace in in_scope:
        if trace.request_id in seen:
            first = seen[trace.request_id]
            if first == trace.agent:
                result.duplicates.append(trace.request_id)
            else:  # both agents are the token's: it may hear the other's name
                taken = request_id_taken(environment.key, other_agent=first)
                result.rejected.append(Rejection(index, trace.request_id, [taken]))
            continue
        seen[trace.request_id] = trace.agent
        accepted[trace.request_id] = trace
        indexes[trace.request_id] = index
        snapshot = snapshots_in.get(index)
        if snapshot and (trace.agent, trace.strategy, _strategy_version(trace)) not in allowed:
            dropped.append(trace.request_id)
            snapshot = None
        traces.append(
            trace_row(
                trace,
                agent_id=agent_ids[trace.agent],
                environment_id=environment.pk,
                received_at=now,
                snapshot_expires_at=snapshot_expiry if snapshot else None,
                redactions=redactions.get(index),
                kind_numbers=numbers,
            )
        )
        if snapshot:
            snapshots.append(
                (trace.request_id, crypto.encrypt(snapshot), key_id, now, snapshot_expiry)
            )
    if not traces:
        if claims.refused:
            _counters_record(environment, agent_ids, [], claims)
        return result

    with connection.cursor() as cursor:
        cursor.execute(_TEMP_TABLES)
        # Every accepted day has its partition (created ahead daily; an older day of a
        # longer retention, rarely, here).
        partitions.ensure_days(cursor, {row[3].date() for row in traces})
        raw = cursor.cursor  # the psycopg 3 cursor: COPY goes through it
        _copy(raw, "ingest_trace_in_v8", TRACE_COLUMNS, traces)
        if snapshots:
            _copy(raw, "ingest_snapshot_in", "request_id, " + SNAPSHOT_COLUMNS, snapshots)
        cursor.execute(_MOVE_FROM_TEMP)
        inserted = cursor.fetchall()
    stored_ids = {request_id for _, request_id in inserted}
    result.accepted = len(stored_ids)
    duplicates, taken = _not_stored(
        identity,
        environment,
        [trace for request_id, trace in accepted.items() if request_id not in stored_ids],
        indexes,
    )
    result.duplicates.extend(duplicates)
    result.rejected.extend(taken)
    result.snapshots_dropped = [request_id for request_id in dropped if request_id in stored_ids]
    # Last, so the counter rows' locks are held only until the commit that follows.
    _counters_record(
        environment, agent_ids, [accepted[request_id] for _, request_id in inserted], claims
    )
    return result


def _redacted(trace: WireTrace, index: int, ruleset, snapshots: dict, redactions: dict):
    """Apply the rules to one trace (in place) and its snapshot; the refusal's findings, or
    [] once redacted (the counts per rule kept in `redactions`). An unexpected fault refuses
    the whole batch (fail-closed)."""
    try:
        counts = redaction.trace_apply(trace, ruleset)
        if index in snapshots:
            snapshots[index] = redaction.snapshot_apply(snapshots[index], ruleset, counts)
    except redaction.Refused as exc:
        return [exc.finding]
    except Exception as exc:
        raise protection.not_applied() from exc
    if counts:
        redactions[index] = dict(counts)
    return []


def _counters_record(environment, agent_ids, stored_traces, claims) -> None:
    """The health and rollout counters of the traces just stored, and the faults of the
    rollout claims refused, in one statement."""
    with connection.cursor() as cursor:
        counters_record_batch(
            cursor,
            environment=environment,
            agent_ids=agent_ids,
            traces=stored_traces,
            also=rollout_writes(
                environment_id=environment.pk,
                agent_ids=agent_ids,
                traces=stored_traces,
                claims=claims,
            ),
        )


# --- looks at traces (access log) ---------------------------------------------------------------
def trace_look_record(
    *, actor, action: AccessAction, trace: Trace | None = None, detail=None
) -> None:
    """One line in the access log for a page view, search, list or export."""
    access_record(
        actor=actor,
        action=action,
        target=("trace", trace.request_id, trace.request_id) if trace else None,
        agent=trace.agent if trace else None,  # the loaded agent: its id without a query
        detail=detail or {},
    )


@dataclass(frozen=True)
class RevealedSnapshot:
    text: str
    expires_at: datetime


def snapshot_reveal(*, user, trace: Trace, reason: str) -> RevealedSnapshot:
    """Decrypt a trace's snapshot for someone with the capability and a typed reason.

    Every attempt is in the access log, refusals included.
    """
    target = ("trace", trace.request_id, trace.request_id)
    check_user_can(
        user,
        Capability.VIEW_SNAPSHOTS,
        trace.agent,
        target=target,
        message="Viewing snapshots needs the 'view snapshots' permission.",
    )
    require_recent_authentication(user, action="view a snapshot")

    def refuse(exc, why: str):
        access_record(
            actor=user,
            action=AccessAction.SNAPSHOT_VIEW,
            target=target,
            agent=trace.agent.key,
            outcome="denied",
            reason=reason if isinstance(reason, str) else "",
            detail={"why": why},
        )
        raise exc

    try:
        reason = reason_clean(reason, ask="Say why you need to see the full request.")
    except ValidationFailed as exc:
        refuse(exc, "no_reason")
    snapshot = Snapshot.objects.filter(trace=trace, expires_at__gt=timezone.now()).first()
    if snapshot is None:
        refuse(NotFound("This snapshot has expired and is gone."), "gone")
    try:
        text = crypto.decrypt(snapshot.ciphertext).decode()
    except crypto.InvalidToken:
        refuse(
            NotFound("This snapshot cannot be decrypted: its key is no longer configured."),
            "key_missing",
        )
    access_record(
        actor=user,
        action=AccessAction.SNAPSHOT_VIEW,
        target=target,
        agent=trace.agent.key,
        reason=reason,
        detail={"key_id": snapshot.key_id},
    )
    return RevealedSnapshot(text=text, expires_at=snapshot.expires_at)


def snapshots_rotate(*, batch_size: int = 500) -> int:
    """Re-encrypt every snapshot not under the newest key, batch by batch. Returns the count."""
    newest = crypto.current_key_id()
    done = 0
    while True:
        with transaction.atomic():
            rows = list(
                Snapshot.objects.select_for_update(skip_locked=True)
                .exclude(key_id=newest)
                .only("id", "ciphertext")[:batch_size]
            )
            if not rows:
                return done
            for row in rows:
                row.ciphertext = crypto.rotate(row.ciphertext)
                row.key_id = newest
            Snapshot.objects.bulk_update(rows, ["ciphertext", "key_id"])
            done += len(rows)


# --- retention -------------------------------------------------------------------------------------
def _delete_in_batches(select_ids_sql: str, params: list, deletes: list, batch_size: int):
    """Repeat: pick up to batch_size ids, delete them (and dependents), commit. Short
    transactions keep locks brief while ingest goes on."""
    total = 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(select_ids_sql + " LIMIT %s", [*params, batch_size])
            ids = [row[0] for row in cursor.fetchall()]
            if not ids:
                return total
            for delete in deletes:
                statement, extra = delete if isinstance(delete, tuple) else (delete, [])
                cursor.execute(statement, [ids, *extra])
        total += len(ids)


# A snapshot is stored when its trace arrives, and a trace may say it occurred up to the
# allowed clock skew after that: the bound that lets a snapshot's trace be found by its day.
_SNAPSHOT_TRACE_SKEW = timedelta(seconds=MAX_CLOCK_SKEW_SECONDS)


def snapshots_purge_expired(*, now: datetime | None = None, batch_size: int = PURGE_BATCH) -> int:
    """Delete snapshots past their expiry: the one stamped at ingest, or — when an admin has
    shortened the environment's snapshot retention since — `snapshot_retention_days` as it is
    now, counted from when the snapshot was stored. A longer retention does not bring back
    what is gone, nor extend a stamped expiry. Returns how many."""
    now = now or timezone.now()
    total = _delete_in_batches(
        "SELECT id FROM traces_snapshot WHERE expires_at <= %s",
        [now],
        ["DELETE FROM traces_snapshot WHERE id = ANY(%s)"],
        batch_size,
    )
    for environment_id, days in Environment.objects.values_list("pk", "snapshot_retention_days"):
        cutoff = now - timedelta(days=days)
        total += _delete_in_batches(
            "SELECT s.id FROM traces_snapshot s JOIN traces_trace t ON t.id = s.trace_id "
            "WHERE t.environment_id = %s AND t.occurred_at < %s AND s.created_at <= %s",
            [environment_id, cutoff + _SNAPSHOT_TRACE_SKEW, cutoff],
            ["DELETE FROM traces_snapshot WHERE id = ANY(%s)"],
            batch_size,
        )
    return total


# One drop at a time: two purges overlapping (a slow run, a manual one) would each try to
# detach the same day. Any constant unique to this job; a session lock, as DETACH … CONCURRENTLY
# runs outside a transaction.
_DROP_LOCK = 0x7472_6163_6573  # "traces"


def partitions_drop_expired(*, now: datetime | None = None) -> list[str]:
    """Drop the day partitions of traces and candidates that every environment is done with
    (all of the day older than the longest `trace_retention_days` as it is now): DETACH …
    CONCURRENTLY, then DROP — no row is deleted, no long lock is taken on the parents. A day
    an interrupted run left half-detached is finished. Returns the partitions dropped
    (none when another drop is running).

    The beat task runs it outside a transaction; called inside one (DETACH … CONCURRENTLY
    refuses a transaction block), it detaches plainly, which holds the parents' lock until
    that transaction ends."""
    now = now or timezone.now()
    before = partitions.retention_cutoff(now, _longest_retention()).date()
    dropped = []
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [_DROP_LOCK])
        if not cursor.fetchone()[0]:
            return dropped
        try:
            for name, parent, pending in partitions.expired_partitions(cursor, before=before):
                partitions.drop_partition(
                    cursor,
                    name=name,
                    parent=parent,
                    pending=pending,
                    concurrently=not connection.in_atomic_block,
                )
                dropped.append(name)
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [_DROP_LOCK])
    return dropped


def _longest_retention() -> int:
    """Environments share the day partitions: a day goes when the longest retention is over."""
    return max(
        Environment.objects.values_list("trace_retention_days", flat=True),
        default=TRACE_RETENTION_DAYS_DEFAULT,
    )


def traces_purge_expired(*, now: datetime | None = None, batch_size: int = PURGE_BATCH) -> int:
    """Delete, row by row in short batches, the traces of an environment whose retention (as
    it is now: a shortened one applies at this run) is shorter than the longest, with their
    snapshots (the candidates are in the trace's row); and every environment's expired request keys. Returns how many
    traces.

    Whole days past the longest retention are not touched here: `partitions_drop_expired`
    drops them as partitions (the purge task runs it first). So rows are deleted only from
    the days between an environment's cut-off and the longest one, and every statement is
    bounded on `occurred_at` on both sides, so its plan prunes to those days."""
    now = now or timezone.now()
    floor = partitions.retention_cutoff(now, _longest_retention())
    total = 0
    for environment_id, days in Environment.objects.values_list("pk", "trace_retention_days"):
        cutoff = partitions.retention_cutoff(now, days)
        if cutoff > floor:
            bounds = [floor, cutoff]
            total += _delete_in_batches(
                "SELECT id FROM traces_trace WHERE environment_id = %s "
                "AND occurred_at >= %s AND occurred_at < %s",
                [environment_id, *bounds],
                [
                    ("DELETE FROM traces_snapshot WHERE trace_id = ANY(%s)", []),
                    (
                        "DELETE FROM traces_trace WHERE id = ANY(%s) "
                        "AND occurred_at >= %s AND occurred_at < %s",
                        bounds,
                    ),
                ],
                batch_size,
            )
        # The keys' table is not partitioned (it holds the uniqueness across days).
        _delete_in_batches(
            "SELECT request_id FROM traces_request_key "
            "WHERE environment_id = %s AND occurred_at < %s",
            [environment_id, cutoff],
            [
                (
                    "DELETE FROM traces_request_key WHERE request_id = ANY(%s) "
                    "AND environment_id = %s",
                    [environment_id],
                )
            ],
            batch_size,
        )
    return total


def kinds_purge_unnamed() -> int:
    """Forget the kinds of candidate no stored trace names any more (their traces went with
    the retention): a reason is free text and may hold what the redaction rules missed, so it
    does not outlive the traces that carried it (docs/data-protection.md)."""
    with transaction.atomic(), connection.cursor() as cursor:
        return stored.kinds_forget(cursor)


def partitions_maintain(*, now: datetime | None = None, days_ahead: int = 7) -> dict:
    """Create the day partitions for today … today + days_ahead (the expired days are
    dropped by the purge: `partitions_drop_expired`)."""
    now = now or timezone.now()
    today = now.astimezone(UTC).date()
    with connection.cursor() as cursor:
        created = partitions.ensure_range(cursor, today=today, days_back=0, days_ahead=days_ahead)
    return {"created": created}


# --- hourly rollups ----------------------------------------------------------------------------------
_ROLLUP_DELETE = "DELETE FROM traces_hourlyrollup WHERE hour = %(hour)s"
# The traces of the hour, counted with SQL; their candidates, counted per (source, decision,
# reason) from the decoded values (they live in the trace row: ≈ 0.05 ms a trace, ≈ 2 s for an
# hour of 1M traces a day).
ROLLUP_INSERT = """
INSERT INTO traces_hourlyrollup
    (hour, agent_id, environment_id, strategy, strategy_version, status, source, decision, reason,
     count)
SELECT %(hour)s, agent_id, environment_id, strategy, coalesce(strategy_version, 0), status,
       '', '', '', count(*)
FROM traces_trace
WHERE occurred_at >= %(hour)s AND occurred_at < %(hour)s + interval '1 hour'
GROUP BY agent_id, environment_id, strategy, coalesce(strategy_version, 0), status
"""
_ROLLUP_CANDIDATES = """
SELECT agent_id, environment_id, strategy, coalesce(strategy_version, 0), status,
       packed_candidates
FROM traces_trace
WHERE occurred_at >= %(hour)s AND occurred_at < %(hour)s + interval '1 hour'
"""
_ROLLUP_INSERT_COUNTED = (
    "INSERT INTO traces_hourlyrollup (hour, agent_id, environment_id, strategy, "
    "strategy_version, status, source, decision, reason, count) "
    "SELECT %s, * FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::int[], %s::text[], "
    "%s::text[], %s::text[], %s::text[], %s::int[])"
)
_ROLLUP_READ_SIZE = 2_000


def _rollup_candidates(cursor, hour: datetime) -> None:
    counts: Counter = Counter()
    with connection.chunked_cursor() as rows:
        rows.itersize = _ROLLUP_READ_SIZE
        rows.execute(_ROLLUP_CANDIDATES, {"hour": hour})
        for *trace_key, packed in rows:
            trace_key = tuple(trace_key)
            for c in stored.wire_candidates(packed):
                counts[(*trace_key, c.source, c.decision, c.reason)] += 1
    if counts:
        columns = [list(column) for column in zip(*counts, strict=True)]
        cursor.execute(_ROLLUP_INSERT_COUNTED, [hour, *columns, list(counts.values())])


def rollup_hour_refresh(*, hour: datetime) -> None:
    """Recompute one hour's counts from the traces (idempotent: replace, in one transaction)."""
    hour = hour.replace(minute=0, second=0, microsecond=0)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_ROLLUP_DELETE, {"hour": hour})
        cursor.execute(ROLLUP_INSERT, {"hour": hour})
        _rollup_candidates(cursor, hour)


def rollup_recent_hours(*, lookback_hours: int = 3, now: datetime | None = None) -> list[datetime]:
    """Roll up every closed hour that received traces in the last `lookback_hours` (late
    arrivals included) plus the hour that just closed. Returns the hours refreshed."""
    now = now or timezone.now()
    current_hour = now.replace(minute=0, second=0, microsecond=0)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT date_trunc('hour', occurred_at) FROM traces_trace "
            "WHERE received_at >= %s AND occurred_at < %s",
            [now - timedelta(hours=lookback_hours), current_hour],
        )
        hours = {row[0] for row in cursor.fetchall()}
    hours.add(current_hour - timedelta(hours=1))
    for hour in sorted(hours):
        rollup_hour_refresh(hour=hour)
    return sorted(hours)
