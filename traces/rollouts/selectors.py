"""Reads of the rollout counters: a step's evidence, for the guards (traces.rollouts.guards)
and the rollout page. Returns frozen dataclasses (traces.rollouts.evidence), never models."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

from django.db import connection

from strategies.releases.models import Rollout
from traces.rollouts.counters import not_fetched_sources
from traces.rollouts.evidence import (
    ARMS,
    PAIRED_KINDS,
    ArmEvidence,
    PairedCount,
    ProviderBaseline,
    StepEvidence,
    both_failed_kind,
)
from traces.stored import wire_candidates

# The step's rows: the minutes before its first whole hour, then whole hours (the hour table
# holds every minute of its hour, the current one included).
_ROWS = """
WITH r AS (
    SELECT * FROM (
        SELECT arm, traces, usable, config_fallback, compared, paired_status,
               paired_required_lost, paired_tokens, not_fetched, not_fetched_both, outcomes,
               outcomes_bad, faults
        FROM rollout_counter
        WHERE rollout_key = %(key)s AND step = %(step)s
          AND minute >= %(since)s AND minute < %(first_hour)s
        UNION ALL
        SELECT arm, traces, usable, config_fallback, compared, paired_status,
               paired_required_lost, paired_tokens, not_fetched, not_fetched_both, outcomes,
               outcomes_bad, faults
        FROM rollout_counter_hour
        WHERE rollout_key = %(key)s AND step = %(step)s AND hour >= %(first_hour)s
    ) AS rows
)
"""
_SCALARS = (
    _ROWS
    + """
SELECT arm, sum(traces), sum(usable), sum(config_fallback), sum(compared),
       sum(paired_status), sum(paired_required_lost), sum(paired_tokens)
FROM r GROUP BY arm
"""
)
# The maps summed key by key, in SQL: one row per (arm, map, key), not per minute.
_MAPS = (
    _ROWS
    + """
SELECT r.arm, m.name, e.key, sum(e.value::bigint)
FROM r
CROSS JOIN LATERAL (VALUES ('not_fetched', r.not_fetched),
                           ('not_fetched_both', r.not_fetched_both),
                           ('outcomes', r.outcomes), ('outcomes_bad', r.outcomes_bad),
                           ('faults', r.faults)) AS m(name, counts)
CROSS JOIN LATERAL jsonb_each_text(m.counts) AS e
WHERE m.counts <> '{}'::jsonb
GROUP BY 1, 2, 3
"""
)
_SAMPLES = "SELECT request_ids FROM rollout_sample WHERE rollout_key = %s AND step = %s"


def _frozen(counts: dict) -> MappingProxyType:
    return MappingProxyType(dict(counts))


def step_share(rollout_key: str, step: int) -> float | None:
    """The share of arm new the rollout's plan gives `step` (None: no such rollout/step)."""
    plan = Rollout.objects.filter(key=rollout_key).values_list("plan", flat=True).first()
    if not plan or not 0 <= step < len(plan):
        return None
    return float(plan[step]["share"])


# The provider baseline: the latest requests before the rollout began, no older than this.
BASELINE_TRACES = 2000
BASELINE_WINDOW = timedelta(days=7)
# The latest requests before the rollout (their candidates are counted by
# `counters.not_fetched_sources`, the rule the guards apply to the rollout's own traces).
_BASELINE = """
SELECT packed_candidates FROM traces_trace
WHERE agent_id = %(agent)s AND environment_id = %(environment)s
  AND strategy = %(document)s AND rollout_key IS NULL
  AND occurred_at >= %(since)s AND occurred_at < %(before)s
ORDER BY occurred_at DESC LIMIT %(limit)s
"""


def provider_baseline(*, rollout_key: str, sources) -> ProviderBaseline:
    """How often each of `sources` was not fetched on the environment's latest requests of
    the rollout's agent and strategy before the rollout began (BASELINE_TRACES at most,
    within BASELINE_WINDOW; requests of rollouts left out): what the attribution guard
    judges a provider failing in both versions against."""
    rollout = (
        Rollout.objects.filter(key=rollout_key)
        .values("environment_id", "document__agent_id", "document__key", "started_at")
        .first()
    )
    if rollout is None or not sources:
        return ProviderBaseline()
    params = {
        "agent": rollout["document__agent_id"],
        "environment": rollout["environment_id"],
        "document": rollout["document__key"],
        "since": rollout["started_at"] - BASELINE_WINDOW,
        "before": rollout["started_at"],
        "limit": BASELINE_TRACES,
    }
    with connection.cursor() as cursor:
        cursor.execute(_BASELINE, params)
        rows = cursor.fetchall()
    wanted = set(sources)
    not_fetched: Counter = Counter()
    for (packed,) in rows:
        not_fetched.update(not_fetched_sources(wire_candidates(packed)) & wanted)
    return ProviderBaseline(traces=len(rows), not_fetched=_frozen(not_fetched))


def step_evidence(
    *, rollout_key: str, step: int, since: datetime, baseline: bool = True
) -> StepEvidence:
    """What the rollout's `step` has shown since `since` (its start): per-arm totals, paired
    counts with their first request ids, the sources neither version had, and faults; with
    `baseline`, how often those sources failed before the rollout (`provider_baseline`)."""
    minute = since.astimezone(UTC).replace(second=0, microsecond=0)
    first_hour = minute if minute.minute == 0 else minute.replace(minute=0) + timedelta(hours=1)
    params = {"key": rollout_key, "step": step, "since": minute, "first_hour": first_hour}
    with connection.cursor() as cursor:
        cursor.execute(_SCALARS, params)
        scalars = {row[0]: row[1:] for row in cursor.fetchall()}
        cursor.execute(_MAPS, params)
        maps: dict[tuple, dict] = defaultdict(dict)
        for arm, name, key, total in cursor.fetchall():
            maps[(arm, name)][key] = int(total)
        cursor.execute(_SAMPLES, [rollout_key, step])
        sample = cursor.fetchone()
    request_ids = (sample[0] if sample else None) or {}
    if isinstance(request_ids, str):  # jsonb comes back as text on the raw cursor
        request_ids = json.loads(request_ids)
    arms, paired, both, faults = {}, defaultdict(int), defaultdict(int), defaultdict(int)
    for arm in ARMS:
        sums = scalars.get(arm) or (0,) * (4 + len(PAIRED_KINDS))
        traces, usable, fallback, compared, *kinds = (int(v or 0) for v in sums)
        for kind, count in zip(PAIRED_KINDS, kinds, strict=True):
            paired[kind] += count
        for source, count in maps[(arm, "not_fetched_both")].items():
            both[source] += count
        arms[arm] = ArmEvidence(
            traces=traces,
            usable=usable,
            config_fallback=fallback,
            compared=compared,
            not_fetched=_frozen(maps[(arm, "not_fetched")]),
            not_fetched_both=_frozen(maps[(arm, "not_fetched_both")]),
            outcomes=_frozen(maps[(arm, "outcomes")]),
            outcomes_bad=_frozen(maps[(arm, "outcomes_bad")]),
        )
    for (_, name), counts in maps.items():
        if name == "faults":
            for fault, count in counts.items():
                faults[fault] += count
    return StepEvidence(
        rollout_key=rollout_key,
        step=step,
        since=since,
        share=step_share(rollout_key, step),
        new=arms["new"],
        old=arms["old"],
        paired=MappingProxyType(
            {
                kind: PairedCount(paired[kind], tuple(request_ids.get(kind, ())))
                for kind in PAIRED_KINDS
            }
        ),
        not_fetched_both=_frozen(both),
        not_fetched_both_ids=MappingProxyType(
            {source: tuple(request_ids.get(both_failed_kind(source), ())) for source in both}
        ),
        faults=_frozen(faults),
        baseline=provider_baseline(rollout_key=rollout_key, sources=both)
        if baseline and both
        else ProviderBaseline(),
    )
