"""Health counters, written at ingest: what each stored trace adds to its minute's rows.

`traces.services.trace_batch_store` hands the traces it has just inserted to
`counters_record_batch`, inside its transaction: the batch is aggregated here in Python (one
dict per row key) and written with ONE multi-row INSERT … ON CONFLICT DO UPDATE, so the
counters commit with the traces or not at all, and a trace is counted the moment it is
visible. Outcomes reported later for a request are counted through `outcome_writes`.

A trace counts on the live arm once per document it names ({key: version}); its shadow block
(if any) counts on the shadow arm of the trace's strategy at the shadow's version, with its
agreement with the live selection of the same request. The shadow block, all fields optional
(older runtimes send only the first three):

    {version, status, selected: [ids], degradation, used_tokens,
     differences: [{index, decision, reason_code, required}], differences_total,
     sources_not_fetched: [sources]}

`differences[].index` is a position in the trace's candidates; a candidate not listed was
decided as live decided it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import msgspec
from django.db import connection

from strategies.catalog.models import Agent
from strategies.releases.models import ReleaseEvent
from traces.charts import CHART_GROUP_OF
from traces.health.models import Arm

FAULT_SHADOW_VERSION_UNKNOWN = "shadow_version_unknown"
SEPARATOR = ":"  # in 'source:reason_code' and 'kind:value'; split on the last one


def count_key(first: str, second: str) -> str:
    return f"{first}{SEPARATOR}{second}"


def split_key(key: str) -> tuple[str, str]:
    first, _, second = key.rpartition(SEPARATOR)
    return first, second


def token_bucket(value: float) -> int:
    """The power-of-two bucket of an input estimate: k holds [2^(k-1), 2^k); 0 holds 0."""
    return int(value).bit_length() if value > 0 else 0


# --- the one decision on shadow blocks -------------------------------------------------------------
# A runtime hears of a shadow's start or stop within a second (stream) or a poll (30 s by
# default); one serving its kept copy while the console is unreachable runs a stopped shadow a
# little longer. Blocks within this grace of the shadow's interval count; later ones are a fault.
SHADOW_GRACE = timedelta(minutes=5)


def shadow_release_known(environment, document_key: str, version: int, at, *, agent) -> bool:
    """May a trace's shadow block naming `version` of `document_key` at time `at` (the trace's
    minute) be counted? Only if `version` ran as shadow in `environment` then, as the release
    history says (from its start to its stop, or to the next start), within SHADOW_GRACE.
    Anything else is stored, not counted, and counted as the runtime fault
    `shadow_version_unknown`."""
    agent_id = agent.pk if isinstance(agent, Agent) else agent
    events = (
        ReleaseEvent.objects.filter(
            release__environment_id=getattr(environment, "pk", environment),
            release__document__agent_id=agent_id,
            release__document__key=document_key,
            action__in=ReleaseEvent.SHADOW_ACTIONS,
        )
        .order_by("occurred_at", "id")
        .values_list("action", "to_version__number", "occurred_at")
    )
    running_since = None  # when `version` started as shadow, while it runs
    for action, number, when in events:
        if running_since is not None:  # its stop, or another version's start, ends it
            if running_since - timedelta(minutes=1) <= at <= when + SHADOW_GRACE:
                return True
            running_since = None
        if action == ReleaseEvent.Action.SHADOW_START and number == version:
            running_since = when
    return running_since is not None and at >= running_since - timedelta(minutes=1)


# --- one row's counts ------------------------------------------------------------------------------
# The counter columns: plain counts, and jsonb maps of counts (docs/version-health.md).
COUNTER_MAPS = (
    "statuses",
    "degraded",
    "required_missing",
    "config_fallback",
    "tokens_hist",
    "required_kept",
    "required_lost",
    "outcomes",
    "faults",
    "paired_worse",
    "paired_better",
)
COUNTER_SCALARS = (
    "traces",
    "failures",
    "tokens_sum",
    "tokens_count",
    "compared",
    "same_status",
    "same_selected",
    "token_delta_sum",
    "token_delta_count",
)


@dataclass
class Counts:
    scalars: dict = field(default_factory=lambda: dict.fromkeys(COUNTER_SCALARS, 0))
    maps: dict = field(default_factory=lambda: {name: defaultdict(int) for name in COUNTER_MAPS})

    def add(self, name: str, amount=1) -> None:
        self.scalars[name] += amount

    def tally(self, name: str, key: str, amount: int = 1) -> None:
        self.maps[name][key] += amount


def _minute(when: datetime) -> datetime:
    return when.astimezone(UTC).replace(second=0, microsecond=0)


def block_field(block, name: str, default=None):
    """A shadow block's field: the wire struct's attribute (absent on older consoles' struct)
    or a decoded dict's key."""
    if isinstance(block, dict):
        return block.get(name, default)
    return getattr(block, name, default)


def _required_missing(candidates) -> set[tuple[str, str]]:
    """(source, reason_code) of the required candidates not selected: once per trace."""
    return {
        (c.source, c.reason_code or "")
        for c in candidates
        if c.required and c.decision != "selected"
    }


def _tokens(counts: Counts, value) -> None:
    if value is None:
        return
    counts.add("tokens_sum", value)
    counts.add("tokens_count")
    counts.tally("tokens_hist", str(token_bucket(value)))


def config_fallback_of(trace) -> str | None:
    """The resolution a wire trace's configuration fell back to (None: a fresh copy)."""
    resolution = trace.config_resolution or ""
    if trace.config_fallback or resolution not in ("", "fresh"):
        return resolution or "fallback"
    return None


def live_contribution(trace) -> tuple:
    """What a wire trace adds to each of its live rows besides its tokens: a hashable tuple,
    so a batch counts each distinct one once (most traces of a minute look alike)."""
    return (
        trace.status,
        CHART_GROUP_OF.get(trace.status) == "failed",
        trace.degradation,
        tuple(sorted(count_key(s, c) for s, c in _required_missing(trace.candidates))),
        config_fallback_of(trace),
    )


def live_counts(counts: Counts, contribution: tuple, traces: int = 1) -> None:
    """Add `traces` traces alike (`live_contribution`) to a live row."""
    status, failed, degradation, missing, fallback = contribution
    counts.add("traces", traces)
    counts.tally("statuses", status, traces)
    if failed:
        counts.add("failures", traces)
    if degradation:
        counts.tally("degraded", degradation, traces)
    for key in missing:
        counts.tally("required_missing", key, traces)
    if fallback:
        counts.tally("config_fallback", fallback, traces)


@dataclass(frozen=True)
class ShadowView:
    """The shadow's decisions on a request, next to live's: what agreement is computed from
    (the counters and the list of disagreeing requests ask this one place)."""

    status: str | None
    selected: frozenset
    live_status: str
    live_selected: frozenset
    required_missing: frozenset  # (source, reason_code) under the shadow's strategy
    kept: frozenset  # sources whose live-selected required items the shadow all selected
    lost: frozenset  # sources where the shadow dropped a live-selected required item
    token_delta: float | None

    @property
    def compared(self) -> bool:
        return self.status is not None

    @property
    def same_status(self) -> bool:
        return self.status == self.live_status

    @property
    def same_selected(self) -> bool:
        return self.selected == self.live_selected

    @property
    def agrees(self) -> bool:
        return not self.compared or (self.same_status and self.same_selected and not self.lost)


def shadow_differences(shadow, candidates: int) -> dict:
    """A shadow block's differences by candidate index (those past `candidates` dropped)."""
    differences = {}
    for difference in block_field(shadow, "differences") or ():
        index = block_field(difference, "index")
        if isinstance(index, int) and 0 <= index < candidates:
            differences[index] = difference
    return differences


def shadow_view(*, shadow, status: str, candidates, input_estimate: float | None) -> ShadowView:
    """Compare a shadow block with the live decisions of the same request. `candidates` are
    objects with id/item_id, source, required, decision, reason_code, in trace order."""
    differences = shadow_differences(shadow, len(candidates))
    shadow_selected = frozenset(block_field(shadow, "selected") or ())
    live_selected, missing, kept, lost = set(), set(), set(), set()
    for index, c in enumerate(candidates):
        item = getattr(c, "item_id", None) or c.id
        if c.decision == "selected":
            live_selected.add(item)
            if c.required:
                (kept if item in shadow_selected else lost).add(c.source)
        difference = differences.get(index)
        if difference is None:
            required, decision, code = c.required, c.decision, c.reason_code or ""
        else:
            required = bool(block_field(difference, "required", c.required))
            decision = block_field(difference, "decision") or c.decision
            code = block_field(difference, "reason_code") or ""
        if required and decision != "selected":
            missing.add((c.source, code))
    used = block_field(shadow, "used_tokens")
    return ShadowView(
        status=block_field(shadow, "status"),
        selected=shadow_selected,
        live_status=status,
        live_selected=frozenset(live_selected),
        required_missing=frozenset(missing),
        kept=frozenset(kept - lost),
        lost=frozenset(lost),
        token_delta=used - input_estimate
        if used is not None and input_estimate is not None
        else None,
    )


def metric_keys(*, status, degradation, required_missing) -> set[str]:
    """What one request shows under one version, as the version-health page's metric keys
    (`failed`, `status:<s>`, `degraded:<handler>`, `required_missing:<source:code>`): the
    live side and the shadow side of a request are compared key by key."""
    keys = {f"status:{status}"}
    if CHART_GROUP_OF.get(status) == "failed":
        keys.add("failed")
    if degradation:
        keys.add(f"degraded:{degradation}")
    keys.update(f"required_missing:{count_key(s, c)}" for s, c in required_missing)
    return keys


def shadow_paired(counts: Counts, shadow, view: ShadowView, *, live_degradation, candidates):
    """On a compared request, each metric the shadow showed and live did not (worse), and
    the other way round (better): the pairs the shadow's verdicts are judged on."""
    if not view.compared:
        return
    mine = metric_keys(
        status=view.status,
        degradation=block_field(shadow, "degradation"),
        required_missing=view.required_missing,
    )
    live = metric_keys(
        status=view.live_status,
        degradation=live_degradation,
        required_missing=_required_missing(candidates),
    )
    for key in mine - live:
        counts.tally("paired_worse", key)
    for key in live - mine:
        counts.tally("paired_better", key)


def shadow_counts(counts: Counts, shadow, view: ShadowView) -> None:
    counts.add("traces")
    if view.status is not None:
        counts.tally("statuses", view.status)
        if CHART_GROUP_OF.get(view.status) == "failed":
            counts.add("failures")
    degradation = block_field(shadow, "degradation")
    if degradation:
        counts.tally("degraded", degradation)
    for source, code in view.required_missing:
        counts.tally("required_missing", count_key(source, code))
    _tokens(counts, block_field(shadow, "used_tokens"))
    if view.compared:
        counts.add("compared")
        counts.add("same_status", int(view.same_status))
        counts.add("same_selected", int(view.same_selected))
    for source in view.kept:
        counts.tally("required_kept", source)
    for source in view.lost:
        counts.tally("required_lost", source)
    if view.token_delta is not None:
        counts.add("token_delta_sum", view.token_delta)
        counts.add("token_delta_count")


# --- a batch ---------------------------------------------------------------------------------------
_ENCODE = msgspec.json.Encoder()
MAP_ADD = "health_counts_add(c.{name}, EXCLUDED.{name})"  # jsonb maps of counts: added key by key


@dataclass(frozen=True)
class CounterTable:
    """A table of counters the ingest adds to: its key columns, its plain counts (added) and
    its jsonb maps (merged by an SQL expression of c.<name> and EXCLUDED.<name>, by default
    `health_counts_add`). The health counters and the rollout counters (traces.rollouts) are
    written through this one writer, in one statement per batch."""

    table: str
    key: dict  # column → SQL type, in the primary key's order
    scalars: dict  # column → SQL type
    maps: dict  # column → merge expression

    @property
    def time_column(self) -> str:
        """The key's minute or hour (what retention goes by)."""
        (column,) = (name for name, kind in self.key.items() if kind == "timestamptz")
        return column

    @property
    def types(self) -> dict:
        return {**self.key, **self.scalars, **dict.fromkeys(self.maps, "jsonb")}

    def upsert(self, *, after: str | None = None) -> str:
        """INSERT … SELECT from one jsonb parameter (the rows as a JSON array): a fixed text,
        so the driver adapts one value, not two dozen per row. `after`: the name of an
        earlier CTE of the same statement whose rows must all be written before this
        statement writes its first (`counters_write_tables`: the one lock order)."""
        columns = ", ".join(self.types)
        record = ", ".join(f"{name} {kind}" for name, kind in self.types.items())
        updates = [f"{name} = c.{name} + EXCLUDED.{name}" for name in self.scalars] + [
            f"{name} = {merge.format(name=name)}" for name, merge in self.maps.items()
        ]
        # An uncorrelated subquery is evaluated once, before the first row: it reads every
        # row the earlier CTE returns, so that CTE has written (and locked) all of them.
        wait = f" WHERE (SELECT count(*) FROM {after}) >= 0" if after else ""
        return (
            f"INSERT INTO {self.table} AS c ({columns}) "  # noqa: S608 (constants)
            f"SELECT {columns} FROM jsonb_to_recordset(%s::jsonb) AS r({record}){wait}"
            f" ON CONFLICT ({', '.join(self.key)}) DO UPDATE SET " + ", ".join(updates)
        )

    def encoded(self, rows: dict) -> str:
        """`rows` ({key tuple: Counts}) as the JSON array jsonb_to_recordset reads, in key
        order (so two batches touching the same rows lock them in one order: no deadlock)."""
        return _ENCODE.encode(
            [
                {**dict(zip(self.key, key, strict=True)), **rows[key].scalars, **rows[key].maps}
                for key in sorted(rows)
            ]
        ).decode()

    def counts(self) -> Counts:
        return Counts(
            dict.fromkeys(self.scalars, 0), {name: defaultdict(int) for name in self.maps}
        )


def _health_table(table: str, time_column: str) -> CounterTable:
    key = {
        "agent_id": "bigint",
        "environment_id": "bigint",
        "document": "text",
        "version": "integer",
        "arm": "text",
        time_column: "timestamptz",
    }
    scalars = {
        name: "double precision" if name.endswith("_sum") else "bigint" for name in COUNTER_SCALARS
    }
    return CounterTable(table, key, scalars, dict.fromkeys(COUNTER_MAPS, MAP_ADD))


HEALTH_MINUTES = _health_table("health_counter", "minute")
HEALTH_HOURS = _health_table("health_counter_hour", "hour")


def sum_by_hour(rows: dict[tuple, Counts], *, table: CounterTable, at: int = -1) -> dict:
    """Rows keyed by minute (at position `at` of the key) summed per hour, for `table`."""
    hours: dict[tuple, Counts] = defaultdict(table.counts)
    for key, counts in rows.items():
        key = list(key)
        key[at] = key[at].replace(minute=0)
        total = hours[tuple(key)]
        for name, value in counts.scalars.items():
            total.scalars[name] += value
        for name, counted in counts.maps.items():
            for item, n in counted.items():
                total.maps[name][item] += n
    return hours


_STATEMENTS: dict[tuple, str] = {}


def counters_write_tables(cursor, writes: list[tuple[CounterTable, dict]]) -> None:
    """Add each (table, rows) of `writes` in ONE statement (all but the last in CTEs): one
    round trip, and the rows of all tables commit together. Tables without rows are skipped.

    THE lock order of every counter row, whoever writes it (trace ingest, outcome ingest,
    the task counting late outcomes): tables by name (health_counter, health_counter_hour,
    rollout_counter, rollout_counter_hour, rollout_sample), rows by key within a table
    (`CounterTable.encoded`). PostgreSQL runs the CTEs of one statement in no promised order
    (in practice the last one first), so each waits for the one before it; a transaction
    writes its counters with one call, each table once. Two writers then never hold rows the
    other waits for: no deadlock (docs/version-health.md)."""
    writes = sorted(((t, rows) for t, rows in writes if rows), key=lambda w: w[0].table)
    if not writes:
        return
    names = tuple(table.table for table, _ in writes)
    if len(set(names)) != len(names):
        raise ValueError(f"each counter table once per write, in one lock order: {names}")
    statement = _STATEMENTS.get(names)
    if statement is None:
        sqls = [
            table.upsert(after=f"w{index - 1}" if index else None)
            for index, (table, _) in enumerate(writes)
        ]
        *first, last = sqls
        ctes = ", ".join(f"w{index} AS ({sql} RETURNING 1)" for index, sql in enumerate(first))
        statement = _STATEMENTS[names] = (f"WITH {ctes} " if ctes else "") + last
    cursor.execute(statement, [table.encoded(rows) for table, rows in writes])


def health_writes(rows: dict[tuple, Counts]) -> list[tuple[CounterTable, dict]]:
    """The health rows ({key: Counts}, keyed by minute) for the minute table and, summed per
    hour, for the hour table."""
    return (
        [(HEALTH_MINUTES, rows), (HEALTH_HOURS, sum_by_hour(rows, table=HEALTH_HOURS))]
        if rows
        else []
    )


def counters_write(cursor, rows: dict[tuple, Counts]) -> int:
    """Add health `rows` to the minute and hour tables: one statement. Returns the minute
    rows written."""
    counters_write_tables(cursor, health_writes(rows))
    return len(rows)


def batch_counts(*, environment, agent_ids: dict[str, int], traces) -> dict[tuple, Counts]:
    """The counter rows of a batch of wire traces just stored in `environment` (all of one
    environment): {(agent_id, environment_id, document, version, arm, minute): Counts}.

    Traces alike (same agent, minute, documents and `live_contribution`) are counted
    together: the per-trace work is the scan of its candidates and a dict increment."""
    rows: dict[tuple, Counts] = defaultdict(Counts)
    alike: dict[tuple, int] = defaultdict(int)
    tokens: dict[tuple, list] = {}
    known: dict[tuple, bool] = {}
    for trace in traces:
        # The minute as an integer: converted to a datetime once per group, not per trace.
        base = (
            agent_ids[trace.agent],
            int(trace.occurred_at.timestamp()) // 60,
            tuple(trace.documents.items()),
        )
        alike[(*base, live_contribution(trace))] += 1
        if trace.input_estimate is not None:
            value = trace.input_estimate.value
            summed = tokens.setdefault(base, [0.0, 0, defaultdict(int)])
            summed[0] += value
            summed[1] += 1
            summed[2][str(token_bucket(value))] += 1
        # A rollout's trace carries the other arm's version as its shadow: the rollout
        # counters judge and count it (traces.rollouts.counters), not the shadow releases.
        if trace.shadow is not None and trace.strategy and trace.rollout is None:
            _shadow_trace(rows, known, environment, trace, base)
    for (agent_id, minute, documents, contribution), count in alike.items():
        when = _from_minutes(minute)
        for document, version in documents:
            key = (agent_id, environment.pk, document, version, Arm.LIVE, when)
            live_counts(rows[key], contribution, count)
    for (agent_id, minute, documents), (total, count, histogram) in tokens.items():
        when = _from_minutes(minute)
        for document, version in documents:
            counts = rows[(agent_id, environment.pk, document, version, Arm.LIVE, when)]
            counts.add("tokens_sum", total)
            counts.add("tokens_count", count)
            for bucket, n in histogram.items():
                counts.tally("tokens_hist", bucket, n)
    return rows


def _from_minutes(minutes: int) -> datetime:
    return datetime.fromtimestamp(minutes * 60, UTC)


def _shadow_trace(rows, known: dict, environment, trace, base: tuple) -> None:
    """Count a trace's shadow block on its shadow row, or — when it names a version never
    released as shadow there — as a runtime fault on the live row of its strategy."""
    agent_id, minutes, _ = base
    minute = _from_minutes(minutes)
    shadow = trace.shadow
    version = block_field(shadow, "version")
    asked = (agent_id, trace.strategy, version, minute)
    if asked not in known:
        known[asked] = shadow_release_known(
            environment, trace.strategy, version, minute, agent=agent_id
        )
    if not known[asked]:
        live_version = trace.documents.get(trace.strategy)
        key = (agent_id, environment.pk, trace.strategy, live_version, Arm.LIVE, minute)
        rows[key].tally("faults", FAULT_SHADOW_VERSION_UNKNOWN)
        return
    view = shadow_view(
        shadow=shadow,
        status=trace.status,
        candidates=trace.candidates,
        input_estimate=trace.input_estimate.value if trace.input_estimate else None,
    )
    key = (agent_id, environment.pk, trace.strategy, version, Arm.SHADOW, minute)
    shadow_counts(rows[key], shadow, view)
    shadow_paired(
        rows[key], shadow, view, live_degradation=trace.degradation, candidates=trace.candidates
    )


def counters_record_batch(
    cursor, *, environment, agent_ids: dict[str, int], traces, also=()
) -> int:
    """Count the traces a batch has just stored (call inside the ingest's transaction).
    `also`: more (CounterTable, rows) of the same traces — the rollout counters — written by
    the same statement. Returns the health minute rows written."""
    rows = batch_counts(environment=environment, agent_ids=agent_ids, traces=traces)
    counters_write_tables(cursor, [*health_writes(rows), *also])
    return len(rows)


# --- outcomes, reported after the fact ---------------------------------------------------------------
_TRACES_OF_REQUESTS = """
SELECT k.environment_id, k.request_id, t.agent_id, a.key, t.occurred_at, t.documents
FROM traces_request_key k
JOIN traces_trace t ON t.id = k.trace_id AND t.occurred_at = k.occurred_at
JOIN strategies_agent a ON a.id = t.agent_id
WHERE (k.environment_id, k.request_id) IN (SELECT * FROM unnest(%s::bigint[], %s::text[]))
"""


def outcome_writes(rows) -> tuple[list[tuple], list[tuple[CounterTable, dict]]]:
    """What outcomes reported for requests add to the health counters, not yet written:
    `rows` of (environment_id, agent, request_id, kind, value), `agent` an agent key (or
    id). Each finds its trace by request_id and adds 'kind:value' to the outcomes of the
    trace's live rows (its minute, each document and version it used). A request with no
    stored trace, or of another agent, is not counted. Returns (the rows counted, the
    (table, rows) for `counters_write_tables`)."""
    rows = list(rows)
    if not rows:
        return [], []
    with connection.cursor() as cursor:
        cursor.execute(
            _TRACES_OF_REQUESTS,
            [[int(r[0]) for r in rows], [str(r[2]) for r in rows]],
        )
        found = {(env, request_id): rest for env, request_id, *rest in cursor.fetchall()}
    counters: dict[tuple, Counts] = defaultdict(Counts)
    counted = []
    for row in rows:
        environment_id, agent, request_id, kind, value = row
        trace = found.get((int(environment_id), str(request_id)))
        if trace is None:
            continue
        agent_id, agent_key, occurred_at, documents = trace
        if agent not in (agent_key, agent_id):
            continue
        if isinstance(documents, str):
            documents = msgspec.json.decode(documents)
        minute = _minute(occurred_at)
        for document, version in documents.items():
            key = (agent_id, int(environment_id), document, version, Arm.LIVE, minute)
            counters[key].tally("outcomes", count_key(str(kind), str(value)))
        counted.append(row)
    return counted, health_writes(counters)
