"""Rollout counters, written at ingest: what each stored trace of a staged rollout adds to
its (rollout, step, minute, arm) row, and the first request ids of each paired kind.

`traces.services.trace_batch_store` hands the rows computed here to the health counters'
call (`counters_record_batch(..., also=rollout_writes(...))`): one statement, in the
ingest's transaction. Outcomes reported later are counted through `rollout_outcome_writes`.

A trace with a `rollout` block {id, arm, step} counts as evidence only when the rollout is
one of its environment's, of its agent, the arm is new or old, and it was served the arm's
version (documents[strategy]) with the other arm's as its shadow; otherwise it is stored
and counted as a runtime fault (FAULT_*), never as evidence.

Paired kinds come from the trace alone: arm new → live is new, the shadow is old; arm old →
live is old, the shadow is new (docs/rollout-evidence.md).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

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


def rollouts_known(environment_id: int, keys) -> dict[str, RolloutFacts]:
    """The rollouts of `environment_id` among `keys` (any state: traces of the last seconds
    of a finished rollout are still its evidence)."""
    rows = Rollout.objects.filter(environment_id=environment_id, key__in=set(keys)).values_list(
        "key",
        "document__agent_id",
        "document__key",
        "version__number",
        "control_version__number",
    )
    return {
        key: RolloutFacts(key, agent_id, document, {"new": new, "old": old})
        for key, agent_id, document, new, old in rows
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


def rollout_fault(
    facts: RolloutFacts | None, *, agent_id: int, arm: str, documents: dict, shadow_version
) -> str | None:
    """Why a trace's rollout block is not evidence (a FAULT_*), or None when it is."""
    if facts is None or facts.agent_id != agent_id:
        return FAULT_ROLLOUT_UNKNOWN
    if arm not in ARMS:
        return FAULT_ARM_UNKNOWN
    if documents.get(facts.document) != facts.versions[arm]:
        return FAULT_VERSION
    other = "old" if arm == "new" else "new"
    if shadow_version is not None and shadow_version != facts.versions[other]:
        return FAULT_SHADOW_VERSION
    return None


def batch_counts(*, environment_id: int, agent_ids: dict[str, int], traces):
    """The rollout rows of a batch of wire traces just stored in one environment:
    ({(rollout_key, step, minute, arm, environment_id): Counts},
     {(rollout_key, step): Counts with request_ids {kind: [ids]}})."""
    in_rollout = [trace for trace in traces if trace.rollout is not None]
    rows: dict[tuple, Counts] = defaultdict(MINUTES.counts)
    samples: dict[tuple, Counts] = defaultdict(SAMPLES.counts)
    if not in_rollout:
        return rows, samples
    known = rollouts_known(environment_id, {trace.rollout.id for trace in in_rollout})
    for trace in in_rollout:
        rollout = trace.rollout
        agent_id = agent_ids[trace.agent]
        fault = rollout_fault(
            known.get(rollout.id),
            agent_id=agent_id,
            arm=rollout.arm,
            documents=trace.documents,
            shadow_version=block_field(trace.shadow, "version")
            if trace.shadow is not None
            else None,
        )
        arm = rollout.arm if rollout.arm in ARMS else ""
        minute = int(trace.occurred_at.timestamp()) // 60  # a datetime once per row, below
        counts = rows[(rollout.id, rollout.step, minute, arm, environment_id)]
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


def rollout_writes(*, environment_id: int, agent_ids: dict[str, int], traces) -> list:
    """The (CounterTable, rows) a batch adds, for `counters_record_batch(also=…)`."""
    rows, samples = batch_counts(environment_id=environment_id, agent_ids=agent_ids, traces=traces)
    return [*minutes_and_hours(rows), (SAMPLES, samples)]


def minutes_and_hours(rows: dict) -> list:
    """Minute rows, and the same summed per hour (the minute is the key's third column)."""
    return [(MINUTES, rows), (HOURS, sum_by_hour(rows, table=HOURS, at=2))] if rows else []


# --- outcomes, reported after the fact --------------------------------------------------------------
_ROLLOUT_OF_REQUESTS = """
SELECT k.environment_id, k.request_id, t.rollout_key, t.rollout_step, t.rollout_arm,
       t.occurred_at, t.agent_id, t.documents, (t.shadow ->> 'version')::integer
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
        key, step, arm, occurred_at, agent_id, documents, shadow_version = trace
        if isinstance(documents, str):
            documents = json.loads(documents)
        facts = known.get((int(environment_id), key))
        if rollout_fault(
            facts,
            agent_id=agent_id,
            arm=arm,
            documents=documents,
            shadow_version=shadow_version,
        ):
            continue
        counts = rows[(key, step, _minute(occurred_at), arm, int(environment_id))]
        counts.tally("outcomes", str(kind))
        if bad:
            counts.tally("outcomes_bad", str(kind))
    return minutes_and_hours(rows)
