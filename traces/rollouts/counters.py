"""Rollout counters, written at ingest: what each stored trace of a staged rollout adds to
its (rollout, step, minute, arm) row, and the first request ids of each paired kind.

`traces.services.trace_batch_store` hands the rows computed here to the health counters'
call (`counters_record_batch(..., also=rollout_writes(...))`): one statement, in the
ingest's transaction. Outcomes reported later are counted through `rollout_outcome_writes`.

A trace with a `rollout` block {id, arm, step} counts as evidence only when the rollout is
one of its environment's, of its agent, the arm is new or old, and it was served the arm's
version (documents[strategy]) with the other arm's as its shadow; otherwise it is stored
and counted as a runtime fault (FAULT_*), never as evidence. The arm and the step are not
taken on the runtime's word: the console assigns the arm itself from the trace's unit and
the claimed step's share (`context_runtime.rollouts.request_arm`, the SDK's own function),
and a trace whose arm or step disagrees is refused (REFUSED_FAULTS: not stored, counted on
its claimed row) — docs/rollout-evidence.md "What a runtime token is trusted to say".

Paired kinds come from the trace alone: arm new → live is new, the shadow is old; arm old →
live is old, the shadow is new (docs/rollout-evidence.md).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from context_runtime.findings import Finding
from context_runtime.rollouts import request_arm, unit_value
from context_runtime.wire import PHASE_ROLLOUT, PHASE_WATCH
from django.db import connection

from strategies.releases.models import Rollout
from traces.health.counters import (
    MAP_ADD,
    CounterTable,
    Counts,
    block_field,
    config_fallback_of,
    shadow_differences,
    sum_by_hour,
)
from traces.rollouts.evidence import (
    ARMS,
    PAIRED_KINDS,
    PAIRED_REQUIRED_LOST,
    PAIRED_STATUS,
    PAIRED_TOKENS,
    SAMPLE_IDS,
    TOKENS_WORSE_RATIO,
    USABLE_STATUSES,
    both_failed_kind,
)

FAULT_ROLLOUT_UNKNOWN = "rollout_unknown"  # no rollout of that id in the environment/agent
FAULT_ARM_UNKNOWN = "rollout_arm_unknown"  # an arm other than new/old
FAULT_VERSION = "rollout_version"  # served a version that is not the arm's
FAULT_SHADOW_VERSION = "rollout_shadow_version"  # its shadow is not the other arm's version
FAULT_STEP = "rollout_step_mismatch"  # a step the rollout has not served (or no watch)
FAULT_ARM = "rollout_arm_mismatch"  # not the arm the console assigns the trace's unit
# The claims the console can check itself: a trace making a false one is refused, not
# stored (a forged trace must not reach the guards, nor an outcome reported for it later).
REFUSED_FAULTS = (FAULT_STEP, FAULT_ARM)
NOT_REQUESTED = "not_requested"  # the shadow's decision for a source its strategy does not read

SCALARS = (
    "traces",
    "usable",
    "config_fallback",
    "compared",
    *(f"paired_{kind}" for kind in PAIRED_KINDS),
)
MAPS = ("not_fetched", "not_fetched_both", "outcomes", "outcomes_bad", "faults")


def _rollout_table(table: str, time_column: str) -> CounterTable:
    return CounterTable(
        table,
        key={
            "rollout_key": "text",
            "step": "integer",
            time_column: "timestamptz",
            "arm": "text",
            "environment_id": "bigint",
        },
        scalars=dict.fromkeys(SCALARS, "bigint"),
        maps=dict.fromkeys(MAPS, MAP_ADD),
    )


MINUTES = _rollout_table("rollout_counter", "minute")
HOURS = _rollout_table("rollout_counter_hour", "hour")
SAMPLES = CounterTable(
    "rollout_sample",
    key={"rollout_key": "text", "step": "integer"},
    scalars={},
    maps={"request_ids": f"rollout_samples_add(c.{{name}}, EXCLUDED.{{name}}, {SAMPLE_IDS})"},
)


@dataclass(frozen=True)
class RolloutFacts:
    """What ingest checks a trace's rollout block against."""

    key: str
    agent_id: int
    document: str
    versions: dict  # arm → version number
    unit: str  # what the arm is assigned by (Rollout.Unit)
    shares: tuple  # the plan's share of arm new, per step
    step: int  # the step it is at (or ended at)
    served: bool  # it ever served a step (not only waiting for approval)
    watch_share: float | None  # its paired watch's share; None: it never had one

    def served_step(self, step: int) -> bool:
        """Whether the rollout served `step`: one of its plan's up to the one it is at (once
        it started), or its paired watch's (one past the plan's last) when it had a watch."""
        if step == len(self.shares):  # the paired watch's step (Rollout.watch_step)
            return self.watch_share is not None
        return self.served and 0 <= step <= min(self.step, len(self.shares) - 1)

    def arm_of(self, step: int, unit: str) -> str | None:
        """The arm the console assigns `unit` at a served `step` — the SDK's own rule; None
        for a unit the paired watch does not run on (it reports no rollout)."""
        if step == len(self.shares):
            return request_arm(self.key, share=self.watch_share, unit=unit, phase=PHASE_WATCH)
        return request_arm(self.key, share=self.shares[step], unit=unit, phase=PHASE_ROLLOUT)


def rollouts_known(environment_id: int, keys) -> dict[str, RolloutFacts]:
    """The rollouts of `environment_id` among `keys` (any state: traces of the last seconds
    of a finished rollout are still its evidence)."""
    rows = Rollout.objects.filter(environment_id=environment_id, key__in=set(keys)).values_list(
        "key",
        "document__agent_id",
        "document__key",
        "version__number",
        "control_version__number",
        "unit",
        "plan",
        "step",
        "step_started_at",
        "watch_until",
        "watch_share",
    )
    return {
        key: RolloutFacts(
            key,
            agent_id,
            document,
            {"new": new, "old": old},
            unit=unit,
            shares=tuple(float(entry["share"]) for entry in plan),
            step=step,
            served=started is not None,
            watch_share=watch_share if watch_until is not None else None,
        )
        for key, agent_id, document, new, old, unit, plan, step, started, watch_until, watch_share in rows
    }


def _minute(when: datetime) -> datetime:
    return when.astimezone(UTC).replace(second=0, microsecond=0)


def _from_minutes(minutes: int) -> datetime:
    return datetime.fromtimestamp(minutes * 60, UTC)


def not_fetched_sources(candidates) -> set[str]:
    """The sources whose provider did not deliver on this request."""
    return {
        c.source for c in candidates if c.decision == "not_fetched" or c.outcome == "not_fetched"
    }


@dataclass(frozen=True)
class PairedView:
    """One request under both versions (from the served one's trace and its shadow block):
    which paired kinds say the new version was worse, and the sources neither version had."""

    compared: bool
    worse: tuple[str, ...]
    not_fetched_both: frozenset


def paired_view(
    *, arm: str, status: str, candidates, tokens, shadow, not_fetched: set | None = None
) -> PairedView:
    """Compare the served version's decisions with the shadow's on the same request; `arm`
    says which of them is new. `not_fetched`: the trace's `not_fetched_sources`, when the
    caller has them. Only required candidates and the shadow's differences are looked at: the
    shadow decided every other candidate as live did."""
    other_status = block_field(shadow, "status")
    if other_status is None:
        return PairedView(False, (), frozenset())
    differences = shadow_differences(shadow, len(candidates))
    other_selected = set(block_field(shadow, "selected") or ())
    lost = False
    for index, c in enumerate(candidates):
        if not c.required:
            continue
        difference = differences.get(index)
        if difference is not None and not block_field(difference, "required", c.required):
            continue  # the other version does not require it
        served_has, other_has = c.decision == "selected", c.id in other_selected
        new_has, old_has = (served_has, other_has) if arm == "new" else (other_has, served_has)
        if old_has and not new_has:
            lost = True
            break
    new_status, old_status = (status, other_status) if arm == "new" else (other_status, status)
    other_tokens = block_field(shadow, "used_tokens")
    new_tokens, old_tokens = (tokens, other_tokens) if arm == "new" else (other_tokens, tokens)
    worse = []
    if new_status not in USABLE_STATUSES and old_status in USABLE_STATUSES:
        worse.append(PAIRED_STATUS)
    if lost:
        worse.append(PAIRED_REQUIRED_LOST)
    if (
        new_tokens is not None
        and old_tokens is not None
        and new_tokens > TOKENS_WORSE_RATIO * old_tokens
    ):
        worse.append(PAIRED_TOKENS)
    if not_fetched is None:
        not_fetched = not_fetched_sources(candidates)
    both = frozenset(not_fetched)
    if both and differences:
        # A source counts for both versions only if the other version reads it: some of its
        # candidates not decided `not_requested` by the shadow.
        read = {
            c.source
            for index, c in enumerate(candidates)
            if c.source in both
            and block_field(differences.get(index), "decision", None) != NOT_REQUESTED
        }
        both = frozenset(read)
    return PairedView(True, tuple(worse), both)


@dataclass(frozen=True)
class RolloutClaim:
    """What a trace says of its rollout, and what its unit is read from."""

    arm: str
    step: int
    documents: dict
    shadow_version: int | None
    task_id: str | None
    principal: str | None
    request_id: str

    @classmethod
    def of(cls, trace) -> RolloutClaim:
        """From a wire trace (`trace.rollout` set)."""
        return cls(
            arm=trace.rollout.arm,
            step=trace.rollout.step,
            documents=trace.documents,
            shadow_version=block_field(trace.shadow, "version")
            if trace.shadow is not None
            else None,
            task_id=trace.task.id if trace.task is not None else None,
            principal=trace.principal,
            request_id=trace.request_id,
        )

    def unit(self, facts: RolloutFacts) -> str:
        """The value the rollout assigns this request's arm by (the SDK's rule)."""
        return unit_value(
            facts.unit, task_id=self.task_id, principal=self.principal, request_id=self.request_id
        )


def rollout_fault(facts: RolloutFacts | None, *, agent_id: int, claim: RolloutClaim) -> str | None:
    """Why a trace's rollout block is not evidence (a FAULT_*), or None when it is."""
    if facts is None or facts.agent_id != agent_id:
        return FAULT_ROLLOUT_UNKNOWN
    if claim.arm not in ARMS:
        return FAULT_ARM_UNKNOWN
    if not facts.served_step(claim.step):
        return FAULT_STEP
    if facts.arm_of(claim.step, claim.unit(facts)) != claim.arm:
        return FAULT_ARM
    if claim.documents.get(facts.document) != facts.versions[claim.arm]:
        return FAULT_VERSION
    other = "old" if claim.arm == "new" else "new"
    if claim.shadow_version is not None and claim.shadow_version != facts.versions[other]:
        return FAULT_SHADOW_VERSION
    return None


def refusal_finding(fault: str, facts: RolloutFacts, claim: RolloutClaim) -> Finding:
    """The per-trace rejection of a refused claim (REFUSED_FAULTS), in words."""
    if fault == FAULT_STEP:
        watch = len(facts.shares)
        return Finding(
            "rollout.step",
            FAULT_STEP,
            f"{facts.key} has not served step {claim.step}: it is at step {facts.step}"
            + (f" (its paired watch reports step {watch})" if facts.watch_share else "")
            + "; report the step of the config the request was served",
        )
    unit = claim.unit(facts)
    assigned = facts.arm_of(claim.step, unit)
    where = (
        f"is in arm '{assigned}' of {facts.key} at step {claim.step}, not '{claim.arm}'"
        if assigned
        else f"is not one the paired watch of {facts.key} runs on: it reports no rollout"
    )
    return Finding(
        "rollout.arm",
        FAULT_ARM,
        f"the {facts.unit} '{unit}' {where}; the console assigns arms by the unit "
        "(context_runtime.rollouts.request_arm)",
    )


@dataclass
class RolloutClaims:
    """A batch's rollout blocks judged before it is stored (one query): the rollouts they
    name, and the traces refused (by batch index, with their finding and fault)."""

    known: dict[str, RolloutFacts]
    refused: dict[int, tuple[Finding, str]]
    refused_traces: list = field(default_factory=list)  # (trace, fault): counted as faults


def rollout_claims_judge(
    *, environment_id: int, agent_ids: dict[str, int], traces
) -> RolloutClaims:
    """Judge the rollout blocks of `traces` ((batch index, wire trace), in scope): which the
    console refuses (a claimed arm or step it does not assign the trace's unit)."""
    in_rollout = [(index, trace) for index, trace in traces if trace.rollout is not None]
    known = rollouts_known(environment_id, {trace.rollout.id for _, trace in in_rollout})
    refused: dict[int, tuple[Finding, str]] = {}
    refused_traces = []
    for index, trace in in_rollout:
        facts = known.get(trace.rollout.id)
        claim = RolloutClaim.of(trace)
        fault = rollout_fault(facts, agent_id=agent_ids[trace.agent], claim=claim)
        if fault in REFUSED_FAULTS:
            refused[index] = (refusal_finding(fault, facts, claim), fault)
            refused_traces.append((trace, fault))
    return RolloutClaims(known, refused, refused_traces)


def batch_counts(
    *, environment_id: int, agent_ids: dict[str, int], traces, claims: RolloutClaims | None = None
):
    """The rollout rows of a batch of wire traces just stored in one environment, and of its
    refused claims (`claims`, judged before storing: counted as faults on their claimed row):
    ({(rollout_key, step, minute, arm, environment_id): Counts},
     {(rollout_key, step): Counts with request_ids {kind: [ids]}})."""
    in_rollout = [trace for trace in traces if trace.rollout is not None]
    rows: dict[tuple, Counts] = defaultdict(MINUTES.counts)
    samples: dict[tuple, Counts] = defaultdict(SAMPLES.counts)
    refused = (claims.refused_traces or []) if claims is not None else []
    if not in_rollout and not refused:
        return rows, samples
    known = (
        claims.known
        if claims is not None
        else rollouts_known(environment_id, {trace.rollout.id for trace in in_rollout})
    )

    def row_of(trace) -> Counts:
        arm = trace.rollout.arm if trace.rollout.arm in ARMS else ""
        minute = int(trace.occurred_at.timestamp()) // 60  # a datetime once per row, below
        return rows[(trace.rollout.id, trace.rollout.step, minute, arm, environment_id)]

    for trace, fault in refused:
        row_of(trace).tally("faults", fault)
    for trace in in_rollout:
        rollout = trace.rollout
        facts = known.get(rollout.id)
        fault = rollout_fault(facts, agent_id=agent_ids[trace.agent], claim=RolloutClaim.of(trace))
        counts = row_of(trace)
        if fault:
            counts.tally("faults", fault)
            continue
        counts.add("traces")
        counts.add("usable", int(trace.status in USABLE_STATUSES))
        counts.add("config_fallback", int(config_fallback_of(trace) is not None))
        not_fetched = not_fetched_sources(trace.candidates)
        for source in not_fetched:
            counts.tally("not_fetched", source)
        if trace.shadow is None:
            continue
        view = paired_view(
            arm=rollout.arm,
            status=trace.status,
            candidates=trace.candidates,
            tokens=trace.input_estimate.value if trace.input_estimate else None,
            shadow=trace.shadow,
            not_fetched=not_fetched,
        )
        if not view.compared:
            continue
        counts.add("compared")
        ids = samples[(rollout.id, rollout.step)].maps["request_ids"]
        for source in view.not_fetched_both:
            counts.tally("not_fetched_both", source)
            _sample(ids, both_failed_kind(source), trace.request_id)
        for kind in view.worse:
            counts.add(f"paired_{kind}")
            _sample(ids, kind, trace.request_id)
    return {(*key[:2], _from_minutes(key[2]), *key[3:]): c for key, c in rows.items()}, samples


def _sample(ids: dict, kind: str, request_id: str) -> None:
    kept = ids.setdefault(kind, [])
    if len(kept) < SAMPLE_IDS:
        kept.append(request_id)


def rollout_writes(
    *, environment_id: int, agent_ids: dict[str, int], traces, claims: RolloutClaims | None = None
) -> list:
    """The (CounterTable, rows) a batch adds, for `counters_record_batch(also=…)`: its
    stored `traces`, and the faults of the claims refused (`claims`)."""
    rows, samples = batch_counts(
        environment_id=environment_id, agent_ids=agent_ids, traces=traces, claims=claims
    )
    return [*minutes_and_hours(rows), (SAMPLES, samples)]


def minutes_and_hours(rows: dict) -> list:
    """Minute rows, and the same summed per hour (the minute is the key's third column)."""
    return [(MINUTES, rows), (HOURS, sum_by_hour(rows, table=HOURS, at=2))] if rows else []


# --- outcomes, reported after the fact --------------------------------------------------------------
_ROLLOUT_OF_REQUESTS = """
SELECT k.environment_id, k.request_id, t.rollout_key, t.rollout_step, t.rollout_arm,
       t.occurred_at, t.agent_id, t.documents, (t.shadow ->> 'version')::integer,
       t.task_id, t.principal
FROM traces_request_key k
JOIN traces_trace t ON t.id = k.trace_id AND t.occurred_at = k.occurred_at
WHERE (k.environment_id, k.request_id) IN (SELECT * FROM unnest(%s::bigint[], %s::text[]))
  AND t.rollout_key IS NOT NULL
"""


def rollout_outcome_writes(counted) -> list:
    """What outcomes just counted on the health counters (`counted`: rows of
    (environment_id, request_id, kind, bad)) add to their trace's rollout arm — only for a
    trace that was the rollout's evidence (the ingest's checks, asked again), not yet
    written: the (table, rows) for `counters_write_tables`, which the outcome store writes
    with the health rows (one statement, one lock order)."""
    counted = list(counted)
    if not counted:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            _ROLLOUT_OF_REQUESTS,
            [[int(r[0]) for r in counted], [str(r[1]) for r in counted]],
        )
        found = {(env, request_id): rest for env, request_id, *rest in cursor.fetchall()}
    by_environment = defaultdict(set)
    for (environment_id, _), (key, *_) in found.items():
        by_environment[environment_id].add(key)
    known = {
        (environment_id, key): facts
        for environment_id, keys in by_environment.items()
        for key, facts in rollouts_known(environment_id, keys).items()
    }
    rows: dict[tuple, Counts] = defaultdict(MINUTES.counts)
    for environment_id, request_id, kind, bad in counted:
        trace = found.get((int(environment_id), str(request_id)))
        if trace is None:
            continue
        key, step, arm, occurred_at, agent_id, documents, shadow_version, task, who = trace
        if isinstance(documents, str):
            documents = json.loads(documents)
        facts = known.get((int(environment_id), key))
        claim = RolloutClaim(
            arm=arm,
            step=step,
            documents=documents,
            shadow_version=shadow_version,
            task_id=task,
            principal=who,
            request_id=str(request_id),
        )
        if rollout_fault(facts, agent_id=agent_id, claim=claim):
            continue
        counts = rows[(key, step, _minute(occurred_at), arm, int(environment_id))]
        counts.tally("outcomes", str(kind))
        if bad:
            counts.tally("outcomes_bad", str(kind))
    return minutes_and_hours(rows)
