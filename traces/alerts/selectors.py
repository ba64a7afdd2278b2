"""Reads of standing alerts: the per-minute counter sums every rule of a tick needs (one
query), the 7-day baselines (one query, only when a rule has one), a few request ids behind a
fired alert (one indexed query, at fire time only), and what the pages and the API list."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from console.kernel.errors import NotFound
from strategies.documents.models import Document
from traces.alerts import rules
from traces.alerts.models import Alert, AlertRule, Silence
from traces.models import Trace
from traces.outcomes.models import Outcome, OutcomeKind

SAMPLE_REQUESTS = 5
HISTORY_PAGE = 50
SPARK_MINUTES = 60

# How each of rules.COLUMNS is read off one health_counter row (live arm).
COLUMN_SQL = {
    "traces": "traces",
    "failures": "failures",
    "missing_required_data": "(statuses->>'missing_required_data')::bigint",
    "budget_exceeded": "(statuses->>'budget_exceeded')::bigint",
    "source_conflict": "(statuses->>'source_conflict')::bigint",
    "degraded": "(statuses->>'degraded')::bigint",
    "fallback": "(SELECT sum(v::bigint) FROM jsonb_each_text(config_fallback) AS f(k, v))",
    "task_completed_true": "(outcomes->>'task_completed:true')::bigint",
    "task_completed_false": "(outcomes->>'task_completed:false')::bigint",
    "escalated_true": "(outcomes->>'escalated:true')::bigint",
    "escalated_false": "(outcomes->>'escalated:false')::bigint",
}
_SUMS = ", ".join(f"coalesce(sum({COLUMN_SQL[c]}), 0)" for c in rules.COLUMNS)

# A trace counts on the live arm once per document it names: the profile and its strategy.
# Reading the rows of the agent's strategies only counts each trace once (its strategy's). One
# (agent, environment, strategy) at a time, LATERAL: each is a range of the counters' primary
# key (agent, environment, document, minute, …) — never a walk over every minute of 30 days.
_MINUTES = f"""
SELECT p.agent_id, p.environment_id, c.minute, {_SUMS}
FROM unnest(%(agents)s::bigint[], %(environments)s::bigint[], %(documents)s::text[],
            %(since)s::timestamptz[]) AS p(agent_id, environment_id, document, since)
CROSS JOIN LATERAL (
    SELECT * FROM health_counter c
    WHERE c.agent_id = p.agent_id AND c.environment_id = p.environment_id
      AND c.document = p.document COLLATE "C" AND c.minute >= p.since AND c.minute <= %(until)s
      AND c.arm = 'live'
    OFFSET 0  -- kept a subquery: one index range per strategy, not a join over every row
) AS c
GROUP BY p.agent_id, p.environment_id, c.minute
"""  # noqa: S608 (constants)

_BASELINE = f"""
SELECT p.agent_id, p.environment_id, {_SUMS}
FROM unnest(%(agents)s::bigint[], %(environments)s::bigint[], %(documents)s::text[])
     AS p(agent_id, environment_id, document)
CROSS JOIN LATERAL (
    SELECT * FROM health_counter_hour c
    WHERE c.agent_id = p.agent_id AND c.environment_id = p.environment_id
      AND c.document = p.document COLLATE "C" AND c.hour >= %(since)s AND c.hour < %(until)s
      AND c.arm = 'live'
    OFFSET 0
) AS c
GROUP BY p.agent_id, p.environment_id
"""  # noqa: S608 (constants)


def strategies_of(agent_ids) -> dict[int, list[str]]:
    """{agent id: its strategies' keys}: the documents whose counter rows count each trace."""
    out: dict[int, list[str]] = defaultdict(list)
    rows = Document.objects.filter(agent_id__in=set(agent_ids), kind=Document.Kind.STRATEGY)
    for agent_id, key in rows.values_list("agent_id", "key"):
        out[agent_id].append(key)
    return out


def _triples(keys, strategies) -> tuple[list, list, list, list]:
    """The (agent, environment, strategy) of each pair, as arrays: (agents, environments,
    documents, the pair's index for each)."""
    agents, environments, documents, index = [], [], [], []
    for i, (agent_id, environment_id) in enumerate(keys):
        for document in strategies.get(agent_id, ()):
            agents.append(agent_id)
            environments.append(environment_id)
            documents.append(document)
            index.append(i)
    return agents, environments, documents, index


def minute_of(when: datetime) -> datetime:
    return when.replace(second=0, microsecond=0)


@dataclass
class Minutes:
    """The per-minute sums of one (agent, environment): {minute: {column: n}}. Filled first,
    then read: every rule of the pair asks its window, so the first read keeps running sums
    in minute order and each window is two lookups, not a walk over every minute."""

    by_minute: dict = field(default_factory=dict)
    _running: tuple | None = field(default=None, repr=False, compare=False)

    def _sums(self) -> tuple[list, list]:
        if self._running is None:
            order = sorted(self.by_minute)
            running, totals = [0] * len(rules.COLUMNS), [(0,) * len(rules.COLUMNS)]
            for minute in order:
                row = self.by_minute[minute]
                running = [n + row.get(c, 0) for n, c in zip(running, rules.COLUMNS, strict=True)]
                totals.append(tuple(running))
            self._running = (order, totals)
        return self._running

    def window(self, until: datetime, minutes: int) -> dict[str, int]:
        """The sums of the `minutes` minutes ending with `until`'s minute (included: an
        alert should not wait for a minute to close)."""
        order, totals = self._sums()
        low = bisect_left(order, until - timedelta(minutes=minutes - 1))
        high = bisect_right(order, until)
        spans = zip(totals[low], totals[high], strict=True)
        return dict(zip(rules.COLUMNS, (b - a for a, b in spans), strict=True))

    def series(self, until: datetime, minutes: int) -> list[dict]:
        zero = dict.fromkeys(rules.COLUMNS, 0)
        return [
            self.by_minute.get(until - timedelta(minutes=minutes - 1 - i), zero)
            for i in range(minutes)
        ]


def counter_minutes(
    pairs: dict[tuple[int, int], int], *, now: datetime, strategies: dict | None = None
) -> dict:
    """{(agent id, environment id): Minutes} of the last `pairs[(agent, env)]` minutes up to
    `now`'s minute, for every pair at once: one query (the counters' key leads with agent,
    environment, document, minute)."""
    out: dict = defaultdict(Minutes)
    if not pairs:
        return out
    until = minute_of(now)
    keys = list(pairs)
    agents, environments, documents, index = _triples(
        keys, strategies if strategies is not None else strategies_of(a for a, _ in keys)
    )
    params = {
        "agents": agents,
        "environments": environments,
        "documents": documents,
        "since": [until - timedelta(minutes=pairs[keys[i]] - 1) for i in index],
        "until": until,
    }
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:  # SET LOCAL
        cursor.execute("SET LOCAL jit = off")
        cursor.execute(_MINUTES, params)
        for agent_id, environment_id, minute, *sums in cursor.fetchall():
            out[(agent_id, environment_id)].by_minute[minute] = dict(
                zip(rules.COLUMNS, (int(n) for n in sums), strict=True)
            )
    return out


def baselines(
    pairs: set[tuple[int, int]], *, before: datetime, strategies: dict | None = None
) -> dict:
    """{(agent id, environment id): sums} over the whole hours of the 7 days before
    `before` (the hour table: 168 rows a pair, not 10,080)."""
    if not pairs:
        return {}
    until = before.replace(minute=0, second=0, microsecond=0)
    keys = list(pairs)
    agents, environments, documents, _ = _triples(
        keys, strategies if strategies is not None else strategies_of(a for a, _ in keys)
    )
    params = {
        "agents": agents,
        "environments": environments,
        "documents": documents,
        "since": until - timedelta(days=rules.BASELINE_DAYS),
        "until": until,
    }
    out = {}
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:  # SET LOCAL
        cursor.execute("SET LOCAL jit = off")
        cursor.execute(_BASELINE, params)
        for agent_id, environment_id, *sums in cursor.fetchall():
            out[(agent_id, environment_id)] = dict(
                zip(rules.COLUMNS, (int(n) for n in sums), strict=True)
            )
    return out


# A few request ids behind each firing rule, newest first: one LATERAL probe of the traces'
# (agent, environment, time) index per distinct (agent, environment, what, window). The
# bounds of all the windows, as constants, let the planner prune the day partitions: planned
# over every partition, the query cost 15–90 ms of planning for 0.5 ms of work.
_SAMPLE_TRACES = """
SELECT p.i, t.request_id, t.strategy
FROM unnest(%(i)s::int[], %(agents)s::bigint[], %(environments)s::bigint[], %(modes)s::text[],
            %(statuses)s::text[], %(starts)s::timestamptz[], %(ends)s::timestamptz[])
     AS p(i, agent_id, environment_id, mode, status, since, until)
CROSS JOIN LATERAL (
    SELECT t.request_id, t.strategy FROM {trace} t
    WHERE t.agent_id = p.agent_id AND t.environment_id = p.environment_id
      AND t.occurred_at >= p.since AND t.occurred_at < p.until
      AND t.occurred_at >= %(first)s AND t.occurred_at < %(last)s
      AND CASE p.mode
            WHEN 'status' THEN t.status = p.status
            WHEN 'failed' THEN t.status NOT IN ('ready', 'degraded')
            WHEN 'fallback' THEN t.config_fallback OR t.config_resolution NOT IN ('', 'fresh')
            ELSE true END
    ORDER BY t.occurred_at DESC LIMIT {limit}
) AS t
ORDER BY p.i
"""
# The same for outcome rates, on the outcomes' (environment, time) index.
_SAMPLE_OUTCOMES = """
SELECT p.i, o.request_id, ''
FROM unnest(%(i)s::int[], %(agents)s::bigint[], %(environments)s::bigint[], %(kinds)s::text[],
            %(starts)s::timestamptz[], %(ends)s::timestamptz[])
     AS p(i, agent_id, environment_id, kind, since, until)
CROSS JOIN LATERAL (
    SELECT o.request_id FROM {outcome} o JOIN {kind} k ON k.id = o.kind_id
    WHERE o.environment_id = p.environment_id AND o.agent_id = p.agent_id AND k.key = p.kind
      AND o.occurred_at >= p.since AND o.occurred_at < p.until
      AND o.occurred_at >= %(first)s AND o.occurred_at < %(last)s
    ORDER BY o.occurred_at DESC LIMIT {limit}
) AS o
ORDER BY p.i
"""


def _sample_what(metric: rules.Metric) -> tuple[str, str, str]:
    """(table: traces or outcomes; mode or outcome kind; status) of what samples a metric."""
    if metric.numerator.endswith(("_true", "_false")):
        return "outcomes", metric.numerator.rsplit("_", 1)[0], ""
    if metric.status:
        return "traces", "status", metric.status
    mode = {"failed": "failed", "fallback_resolution": "fallback"}.get(metric.key, "all")
    return "traces", mode, ""


def sample_requests_many(wanted: list[tuple[AlertRule, datetime, datetime]]) -> list:
    """For each (rule, start, end): (a few request ids behind its value, newest first; the
    strategy they used), in order. At most two queries for any number of rules (traces,
    outcomes); rules asking the same thing share one probe."""
    probes: dict[tuple, int] = {}
    asked = []
    for rule, start, end in wanted:
        table, what, status = _sample_what(rules.METRICS[rule.metric])
        key = (table, rule.agent_id, rule.environment_id, what, status, start, end)
        asked.append(probes.setdefault(key, len(probes)))
    found: dict[int, list] = defaultdict(list)
    for table in ("traces", "outcomes"):
        mine = [(i, key) for key, i in probes.items() if key[0] == table]
        if not mine:
            continue
        params = {
            "i": [i for i, _ in mine],
            "agents": [k[1] for _, k in mine],
            "environments": [k[2] for _, k in mine],
            "starts": [k[5] for _, k in mine],
            "ends": [k[6] for _, k in mine],
            "first": min(k[5] for _, k in mine),
            "last": max(k[6] for _, k in mine),
        }
        if table == "traces":
            sql = _SAMPLE_TRACES.format(trace=Trace._meta.db_table, limit=SAMPLE_REQUESTS)
            params |= {"modes": [k[3] for _, k in mine], "statuses": [k[4] for _, k in mine]}
        else:
            sql = _SAMPLE_OUTCOMES.format(
                outcome=Outcome._meta.db_table,
                kind=OutcomeKind._meta.db_table,
                limit=SAMPLE_REQUESTS,
            )
            params["kinds"] = [k[3] for _, k in mine]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            for i, request_id, strategy in cursor.fetchall():
                found[i].append((request_id, strategy))
    return [([r for r, _ in found[i]], found[i][0][1] if found[i] else "") for i in asked]


# --- what the pages and the API read --------------------------------------------------------------
def rules_of(*, agent, environment=None) -> list[AlertRule]:
    found = AlertRule.objects.filter(agent=agent).select_related("environment")
    if environment is not None:
        found = found.filter(environment=environment)
    return list(found)


def rule_get(*, agent, pk: int) -> AlertRule:
    rule = AlertRule.objects.filter(agent=agent, pk=pk).select_related("environment").first()
    if rule is None:
        raise NotFound("No such alert rule.")
    return rule


def open_alerts(rule_ids) -> dict[int, Alert]:
    return {a.rule_id: a for a in Alert.objects.filter(rule_id__in=rule_ids, resolved_at=None)}


def open_and_held(rule_ids) -> tuple[dict[int, Alert], list[Alert]]:
    """({rule id: its open alert}, the alerts a silence held a change back from — open or
    resolved since; few, a partial index), in one query."""
    found = Alert.objects.filter(Q(rule_id__in=rule_ids, resolved_at=None) | Q(held=True))
    opens, held = {}, []
    for alert in found.select_related("rule", "agent", "environment"):
        if alert.resolved_at is None and alert.rule_id in rule_ids:
            opens[alert.rule_id] = alert
        if alert.held:
            held.append(alert)
    return opens, held


def history(*, agent, environment=None, rule=None, limit: int = HISTORY_PAGE, before_id=None):
    """Alerts fired and resolved, newest first."""
    found = Alert.objects.filter(agent=agent).select_related("rule", "environment")
    if environment is not None:
        found = found.filter(environment=environment)
    if rule is not None:
        found = found.filter(rule=rule)
    if before_id:
        found = found.filter(pk__lt=before_id)
    return list(found[:limit])


def silences_active(*, now: datetime | None = None, agent=None) -> list[Silence]:
    now = now or timezone.now()
    found = Silence.objects.filter(ends_at__gt=now, lifted_at=None)
    if agent is not None:
        found = found.filter(agent=agent)
    return list(found.select_related("environment", "rule"))


def silences_of(*, agent, limit: int = 20) -> list[Silence]:
    return list(Silence.objects.filter(agent=agent).select_related("environment", "rule")[:limit])


def silence_get(*, agent, pk: int) -> Silence:
    silence = Silence.objects.filter(agent=agent, pk=pk).first()
    if silence is None:
        raise NotFound("No such silence.")
    return silence


def silence_covering(rule: AlertRule, silences: list[Silence]) -> Silence | None:
    """The silence that covers the rule (the rule itself, or its agent in its environment
    or in all), if any."""
    for silence in silences:
        if silence.agent_id != rule.agent_id:
            continue
        if silence.rule_id is not None and silence.rule_id != rule.pk:
            continue
        if silence.environment_id is not None and silence.environment_id != rule.environment_id:
            continue
        return silence
    return None
