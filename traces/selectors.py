"""Reads for traces. Every query is scoped to the agents where the user may view traces; a
trace outside that scope is indistinguishable from a missing one."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import timedelta

from context_runtime.wire import DECISIONS, STATUSES
from django.conf import settings
from django.core.paginator import Paginator
from django.db import connection, connections
from django.db.models import QuerySet, Sum
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.http import urlencode

from console.kernel import sql_rows, tracing_links
from console.kernel.errors import Conflict, Forbidden, NotFound
from console.kernel.policy import (
    Capability,
    agent_ids_where,
    agents_where,
    refuse,
    user_can,
    user_can_anywhere,
)
from console.kernel.standby import read_alias
from console.kernel.wording import counted
from strategies.catalog.dependents import Reference
from strategies.catalog.models import Agent, Environment
from strategies.releases.models import ReleaseEvent
from traces import stored
from traces.charts import (
    CHART_TOP_REASONS,
    DASHBOARD_DAYS,
    ChartMark,
    ExclusionReason,
    StatusChart,
    bucket_index,
    chart_ticks,
    chart_window,
    release_mark,
    status_chart,
)
from traces.diagnosis import STATUS_EXPLAINED, config_source, where_to_look
from traces.filters import TraceFilters
from traces.models import HourlyRollup, RequestKey, Snapshot, Trace
from traces.stored import trace_candidates

LIST_COUNT_CAP = 10_000  # counting tens of millions of rows for a page footer is not worth it
CANDIDATE_COUNT_CAP = 1_000  # the same, when every match must be checked against its candidates
MAX_MATCHES = 50  # one request_id in more environments than this is not a real case
DASHBOARD_TRACES_PER_AGENT = 5


def trace_access_check(user) -> None:
    """Deny by default: without the capability on any agent there is no trace to show."""
    if not user_can_anywhere(user, Capability.VIEW_TRACES):
        refuse(
            Forbidden("You have no grant to view traces. Ask an admin for the support role."),
            user=user,
            capability=Capability.VIEW_TRACES,
        )


def trace_scope(user) -> QuerySet:
    # The agent ids as values, not a subquery: PostgreSQL estimates a literal list far
    # better, which decides between an index probe and a scan of a day of traces. Every
    # agent: no condition at all.
    agent_ids = agent_ids_where(user, Capability.VIEW_TRACES)
    if agent_ids is None:
        return Trace.objects.all()
    return Trace.objects.filter(agent_id__in=sorted(agent_ids))


def _time_window(filters: TraceFilters) -> dict:
    return {
        key: value
        for key, value in (("occurred_at__gte", filters.since), ("occurred_at__lte", filters.until))
        if value is not None
    }


def _traces_filtered(*, user, filters: TraceFilters) -> QuerySet:
    """The trace-level filters (everything but the candidate filter)."""
    lookups = {
        "agent__key": filters.agent,
        "environment__key": filters.environment,
        "strategy": filters.strategy,
        "strategy_version": filters.version,
        "status": filters.status,
    }
    return trace_scope(user).filter(
        **{k: v for k, v in lookups.items() if v not in ("", None)}, **_time_window(filters)
    )


def _kinds_filtered(queryset: QuerySet, filters: TraceFilters) -> QuerySet:
    """`queryset` narrowed to the traces with a candidate of the filter's kinds (GIN on
    `kinds` for a rare kind; for a common one the time index walked newest first, each row's
    `kinds` checked, stopping once the page and its capped count have enough)."""
    with connection.cursor() as cursor:
        numbers = stored.kinds_matching(cursor, **filters.candidate_filter)
    return queryset.filter(kinds__overlap=numbers) if numbers else queryset.none()


def trace_list(*, user, filters: TraceFilters) -> QuerySet:
    """Traces the user may see, newest first, narrowed by the filters."""
    queryset = _traces_filtered(user=user, filters=filters).select_related("agent", "environment")
    if filters.candidate_filter:
        queryset = _kinds_filtered(queryset, filters)
    return queryset.order_by("-occurred_at", "-id")


class CappedPaginator(Paginator):
    """Counts at most `cap` rows (`capped` tells the page to say "more than …"), and reads a
    page in two steps: the keys of its rows, then those rows."""

    def __init__(self, object_list, per_page, *, cap: int = LIST_COUNT_CAP, **kwargs):
        super().__init__(object_list, per_page, **kwargs)
        self.cap = cap

    @cached_property
    def count(self) -> int:
        # Unordered: the order of rows does not change how many there are, and sorting up
        # to `cap` rows first was most of the work.
        return self.object_list.order_by()[: self.cap + 1].count()

    @property
    def capped(self) -> bool:
        return self.count > self.cap

    @property
    def cap_label(self) -> str:
        return f"{self.cap:,}"

    def page(self, number):
        number = self.validate_number(number)
        return self._get_page(
            self.rows_at((number - 1) * self.per_page, self.per_page), number, self
        )

    def rows_at(self, offset: int, limit: int) -> list:
        """`limit` traces from `offset` (the page and the API's offset/limit). Sorting narrow
        (id, occurred_at) keys instead of whole rows with their joins keeps a long list from
        sorting wide rows; the rows are read for those keys only."""
        keys = list(self.object_list.values_list("pk", "occurred_at")[offset : offset + limit])
        return self.rows_of(keys)

    def rows_of(self, keys: list) -> list:
        """The traces of these (id, occurred_at) keys, newest first; the bounds of the keys'
        times prune the read to their partitions."""
        if not keys:
            return []
        times = [when for _, when in keys]
        return list(
            Trace.objects.filter(
                pk__in=[pk for pk, _ in keys],
                occurred_at__gte=min(times),
                occurred_at__lte=max(times),
            )
            .select_related("agent", "environment")
            .order_by("-occurred_at", "-id")
        )


class CandidateFilterPaginator(CappedPaginator):
    """The list narrowed by a candidate filter. Its capped count reads the matching keys (off
    the kinds' GIN index for a rare kind); when those are all of them (at most the cap), the
    pages are cut from them, sorted here — so a rare kind is never looked for by walking the
    time index (50 matches among 50,000 traces a page). Past the cap, the pages walk the time
    index newest first, where a common kind's matches come at once."""

    @cached_property
    def _all_keys(self) -> list | None:
        keys = list(self.object_list.order_by().values_list("pk", "occurred_at")[: self.cap + 1])
        if len(keys) > self.cap:
            return None
        return sorted(keys, key=lambda key: (key[1], key[0]), reverse=True)

    @cached_property
    def count(self) -> int:
        return self.cap + 1 if self._all_keys is None else len(self._all_keys)

    def rows_at(self, offset: int, limit: int) -> list:
        if self._all_keys is None:
            return super().rows_at(offset, limit)
        return self.rows_of(self._all_keys[offset : offset + limit])


def trace_listing(*, user, filters: TraceFilters, per_page: int = 50) -> CappedPaginator:
    """The trace list the user may see, narrowed by the filters, newest first — for the page
    and the API alike. A candidate filter counts up to CANDIDATE_COUNT_CAP matches ("more than
    1,000" says what a person needs), others up to LIST_COUNT_CAP: neither ever counts a
    whole table of tens of millions of rows."""
    queryset = trace_list(user=user, filters=filters)
    if filters.candidate_filter:
        return CandidateFilterPaginator(queryset, per_page, cap=CANDIDATE_COUNT_CAP)
    return CappedPaginator(queryset, per_page, cap=LIST_COUNT_CAP)


def trace_page_of(*, user, filters: TraceFilters, page_number, per_page: int = 50):
    """One page of the trace list."""
    return trace_listing(user=user, filters=filters, per_page=per_page).get_page(page_number)


# Written out, as the trace page's lookup below: the ORM took three times the statement.
_REQUEST_KEYS = """
SELECT trace_id, occurred_at FROM traces_request_key
WHERE environment_id IN (SELECT id FROM strategies_environment {environments})
  AND request_id = ANY(%s)
LIMIT %s
"""


def request_keys(request_ids, *, environment_ids=None, environment: str = "") -> list[tuple]:
    """(trace id, occurred_at) of the stored traces with these request ids, in
    `environment_ids` or the environment keyed `environment` when given, else in any. Every
    stored trace has its request key (ingest writes both in one statement), which says its id
    and when it happened, so the trace is read by its primary key from that day's partition
    only — a lookup by request_id without the partition key is planned and probed in every
    day partition, which with a month of them was most of its cost. No key, no trace: a miss
    costs one probe per environment."""
    request_ids = list(request_ids)
    environments, params = "", []
    if environment_ids is not None:
        environments, params = "WHERE id = ANY(%s)", [list(environment_ids)]
    elif environment:
        environments, params = "WHERE key = %s", [environment]
    with connections[read_alias()].cursor() as cursor:
        cursor.execute(
            _REQUEST_KEYS.format(environments=environments),
            [*params, request_ids, MAX_MATCHES * len(request_ids)],
        )
        return cursor.fetchall()


def traces_keyed(
    queryset: QuerySet, request_ids, *, environment_ids=None, environment: str = ""
) -> QuerySet:
    """`queryset` narrowed to the traces with these request ids (`request_keys`)."""
    found = request_keys(request_ids, environment_ids=environment_ids, environment=environment)
    return queryset.filter(
        pk__in=[trace_id for trace_id, _ in found],
        occurred_at__in={when for _, when in found},
    )


# The trace page's lookup written out: the ORM spent about 1.5 ms of Python building this
# query of some 80 columns and its rows, against 0.3 ms for the statement (docs/PERFORMANCE.md).
# The keys' times are literals, so PostgreSQL plans only their day partitions.
@functools.cache
def _traces_by_key_sql(in_scope: bool) -> str:
    return f"""
SELECT {sql_rows.columns(Trace, "t")}, {sql_rows.columns(Agent, "a")},
       {sql_rows.columns(Environment, "e")}
FROM traces_trace t
JOIN strategies_agent a ON a.id = t.agent_id
JOIN strategies_environment e ON e.id = t.environment_id
WHERE t.id = ANY(%s) AND t.occurred_at = ANY(%s) {"AND t.agent_id = ANY(%s)" if in_scope else ""}
ORDER BY e.position, e.key
LIMIT {MAX_MATCHES}
"""


def _traces_by_key(found: list[tuple], agent_ids) -> list[Trace]:
    """The traces of these request keys with their agent and environment (as
    `select_related` gives them), in promotion order; only `agent_ids`' unless None."""
    if not found:
        return []
    params = [[trace_id for trace_id, _ in found], sorted({when for _, when in found})]
    if agent_ids is not None:
        params.append(sorted(agent_ids))
    alias = read_alias()
    with connections[alias].cursor() as cursor:
        cursor.execute(_traces_by_key_sql(agent_ids is not None), params)
        rows = cursor.fetchall()
    traces = []
    agent_at, environment_at = sql_rows.width(Trace), sql_rows.width(Trace) + sql_rows.width(Agent)
    for row in rows:
        trace = sql_rows.built(Trace, row[:agent_at], db=alias)
        trace.agent = sql_rows.built(Agent, row[agent_at:environment_at], db=alias)
        trace.environment = sql_rows.built(Environment, row[environment_at:], db=alias)
        traces.append(trace)
    return traces


def trace_matches(*, user, request_id: str, environment: str = "") -> list[Trace]:
    """The traces with exactly this request_id that the user may see: one per environment
    (a request_id is unique per environment), in promotion order; only `environment`'s when
    given."""
    found = request_keys([request_id], environment=environment)
    return _traces_by_key(found, agent_ids_where(user, Capability.VIEW_TRACES))


def trace_find(*, user, text: str, environment: str = "") -> list[Trace]:
    """A pasted request_id: trimmed, exact. Empty when missing or out of scope."""
    text = (text or "").strip()
    if not text:
        return []
    return trace_matches(user=user, request_id=text, environment=(environment or "").strip())


def trace_near_matches(*, user, text: str) -> list[Trace]:
    """After an exact miss, what the user may have meant among the traces they may see: the
    same id in another case (lower or upper) or in another environment. Still exact lookups
    of a handful of spellings in the request keys, never a scan."""
    text = (text or "").strip()
    if not text:
        return []
    spellings = {text, text.lower(), text.upper()}
    return list(
        traces_keyed(trace_scope(user).select_related("agent", "environment"), spellings).order_by(
            "environment__position", "environment__key", "request_id"
        )[:MAX_MATCHES]
    )


class TraceAmbiguous(Conflict):
    """The request_id exists in several environments the user may see: they choose one."""

    code = "ambiguous"

    def __init__(self, request_id: str, matches: list[Trace]):
        keys = [trace.environment.key for trace in matches]
        super().__init__(
            f"request_id '{request_id}' exists in {counted(len(keys), 'environment')} "
            f"({', '.join(keys)}); choose one with ?environment=.",
            details=[{"path": "environment", "code": "ambiguous", "message": key} for key in keys],
        )
        self.request_id, self.matches = request_id, matches


def trace_get_visible(*, user, request_id: str, environment: str = "") -> Trace:
    """The one trace a URL names: its exact request_id (as stored: not trimmed), in
    `environment` when given. Several environments and none given → TraceAmbiguous."""
    matches = trace_matches(user=user, request_id=request_id, environment=environment)
    if not matches:
        where = f" in environment '{environment}'" if environment else ""
        _refuse_if_out_of_scope(
            NotFound(f"No trace with request_id '{request_id}'{where}."),
            user=user,
            request_id=request_id,
            environment=environment,
        )
    if len(matches) > 1:
        raise TraceAmbiguous(request_id, matches)
    return matches[0]


def _refuse_if_out_of_scope(error, *, user, request_id: str, environment: str = ""):
    """Raise `error` (the 404 of a missing trace); when the trace exists but belongs to an
    agent out of the user's scope, as a refusal written to the access log."""
    hidden = traces_keyed(
        Trace.objects.select_related("agent"),
        [request_id],
        environment=environment,
    ).first()
    if hidden is None:
        raise error
    refuse(
        error,
        user=user,
        capability=Capability.VIEW_TRACES,
        agent=hidden.agent,
        target=("trace", hidden.request_id, hidden.request_id),
    )


# --- what other jobs ask of traces --------------------------------------------------------------
def agent_has_traces(agent) -> bool:
    """Whether the agent's runtime sent a trace yet (its onboarding's last step)."""
    return Trace.objects.filter(agent=agent).exists()


def references_to_agent(agent) -> list[Reference]:
    """Stored traces refer to their agent (its delete is refused)."""
    if agent_has_traces(agent):
        return [Reference("has_traces", "its runtime sent traces")]
    return []


def references_to_environment(environment) -> list[Reference]:
    """Stored traces refer to their environment (its delete is refused)."""
    # The request keys, one per stored trace, are indexed by environment.
    if RequestKey.objects.filter(environment_id=environment.pk).exists():
        return [Reference("has_traces", "its runtime sent traces")]
    return []


def trace_links(trace: Trace) -> dict[str, str]:
    """The trace's own pages, naming its environment (the same request_id may exist in
    another one)."""
    query = "?" + urlencode({"environment": trace.environment.key})
    return {
        name: reverse(f"trace-{name}", kwargs={"request_id": trace.request_id}) + query
        for name in ("detail", "export", "snapshot", "replay")
    }


def trace_export(trace: Trace) -> dict:
    """The trace in the runtime's wire form (references and reasons; never the snapshot)."""
    return {
        "request_id": trace.request_id,
        "agent": trace.agent.key,
        "environment": trace.environment.key,
        "occurred_at": trace.occurred_at.isoformat(),
        "received_at": trace.received_at.isoformat(),
        "documents": trace.documents,
        "strategy": trace.strategy,
        "config_fallback": trace.config_fallback,
        "config_resolution": trace.config_resolution or None,
        "config_age_seconds": trace.config_age_seconds,
        "task": {"id": trace.task_id, "revision": trace.task_revision},
        "principal": trace.principal,
        "model": {
            "name": trace.model_name,
            "adapter": trace.model_adapter,
            "context_window": trace.model_context_window,
        },
        "status": trace.status,
        "degradation": trace.degradation or None,
        "budget": {
            "max_input_tokens": trace.budget_max_input_tokens,
            "reserve_output_tokens": trace.budget_reserve_output_tokens,
        },
        "input_estimate": None
        if trace.input_estimate is None
        else {
            "value": trace.input_estimate,
            "unit": trace.input_estimate_unit,
            "estimator": trace.input_estimate_estimator,
        },
        "sources": trace.sources,
        "candidates": [
            {
                "id": c.item_id,
                "source": c.source,
                "version": c.version,
                "size": c.size,
                "required": c.required,
                "bundle": c.bundle,
                "decision": c.decision,
                "reason": c.reason,
                "outcome": c.outcome or None,
                "relevance": c.relevance,
                "depends_on": c.depends_on,
                "conflicts_with": c.conflicts_with,
                "note": c.note,
                "provider_bundle": c.provider_bundle or None,
                "reason_code": c.reason_code or None,
            }
            for c in trace_candidates(trace)
        ],
        "shadow": trace.shadow,
        "selection": trace_selection(trace),
        "candidates_truncated": trace.candidates_truncated,
        "candidate_counts": trace.candidate_counts,
        "input_errors": trace.input_errors or [],
        "input_errors_total": trace.input_errors_total,
        "sections": trace.sections,
        "otel": {"trace_id": trace.otel_trace_id, "span_id": trace.otel_span_id}
        if trace.otel_trace_id
        else None,
        "has_snapshot": trace.has_snapshot,
        "redactions": trace.redactions,
    }


def trace_selection(trace: Trace) -> dict | None:
    """The trace's `selection` block as the runtime sent it (`wire.SelectionInfo`), or None
    for a runtime that sends no replay fields."""
    if not trace.engine:
        return None
    return {
        "engine": trace.engine,
        "fixed_input_tokens": trace.fixed_input_tokens,
        "relevance_threshold": trace.relevance_threshold,
        "context_window": trace.selection_context_window,
        "max_input_tokens": trace.selection_max_input_tokens,
    }


# --- the trace page -------------------------------------------------------------------------------
def _url(name: str, query: str = "", **kwargs) -> str:
    """A link to another app's page."""
    return reverse(name, kwargs=kwargs) + query


@dataclass
class VersionUsed:
    document: str
    number: int
    url: str | None
    live_number: int | None  # what the trace's environment serves now
    compare_url: str | None

    @property
    def is_live(self) -> bool:
        return self.live_number == self.number


# Written out: every trace page reads it, and the ORM took about 1 ms of Python to build
# this two-join query against 0.15 ms for the statement (docs/PERFORMANCE.md).
_LIVE_NUMBERS = """
SELECT d.key, v.number
FROM strategies_release r
JOIN strategies_document d ON d.id = r.document_id
JOIN strategies_version v ON v.id = r.version_id
WHERE d.agent_id = %s AND r.environment_id = %s
"""


def versions_used(trace: Trace) -> list[VersionUsed]:
    with connection.cursor() as cursor:
        cursor.execute(_LIVE_NUMBERS, [trace.agent_id, trace.environment_id])
        live = dict(cursor.fetchall())
    used = []
    for document, number in sorted(
        trace.documents.items(), key=lambda item: (item[0] != trace.strategy, item[0])
    ):
        kwargs = {"agent": trace.agent.key, "document": document}
        live_number = live.get(document)
        compare = None
        if live_number is not None and live_number != number:
            compare = _url("version-compare", f"?a={number}&b={live_number}", **kwargs)
        used.append(
            VersionUsed(
                document=document,
                number=number,
                url=_url("version-detail", number=number, **kwargs),
                live_number=live_number,
                compare_url=compare,
            )
        )
    return used


@dataclass
class CandidateGroup:
    decision: str
    candidates: list
    size: int


def candidate_groups(candidates) -> list[CandidateGroup]:
    """Candidates grouped by decision: selected first, then in the contract's order."""
    groups = []
    for decision in DECISIONS:
        members = [c for c in candidates if c.decision == decision]
        if members:
            groups.append(CandidateGroup(decision, members, sum(c.size or 0 for c in members)))
    return groups


@dataclass
class SnapshotState:
    sent: bool
    available: bool
    expires_at: object
    can_view: bool


def snapshot_state(*, user, trace: Trace) -> SnapshotState:
    if not trace.has_snapshot:
        return SnapshotState(False, False, None, False)
    available = (
        trace.snapshot_expires_at > timezone.now() and Snapshot.objects.filter(trace=trace).exists()
    )
    return SnapshotState(
        True,
        available,
        trace.snapshot_expires_at,
        user_can(user, Capability.VIEW_SNAPSHOTS, trace.agent),
    )


def engine_label(engine: str) -> str:
    """An engine id as the page shows it: "context_runtime 0.2.0 · rules 1a2b3c4d5e6f"."""
    name, rules, digest = engine.rpartition(" rules ")
    return f"{name} · rules {digest}" if rules and name else engine


def engine_words(engine: str) -> str:
    """An engine id in words: "the SDK's selection engine 0.4.0" for the SDK's engine (its
    rules' digest matters to a replay, not to a reader: the page puts the id on hover)."""
    name, _, _ = engine.rpartition(" rules ")
    package, _, version = (name or engine).partition(" ")
    if package == "context_runtime" and version:
        return f"the SDK's selection engine {version}"
    return engine_label(engine)


def trace_page_context(*, user, trace: Trace) -> dict:
    candidates = list(trace_candidates(trace))
    groups = candidate_groups(candidates)
    selected = sum(g.size for g in groups if g.decision == "selected")
    excluded = sum(
        g.size for g in groups if g.decision not in ("selected", "not_fetched", "no_access")
    )
    config_words, config_fallback = config_source(trace)
    return {
        "trace": trace,
        "links": trace_links(trace),
        "config_source": config_words,
        "config_is_fallback": config_fallback,
        "status_explained": STATUS_EXPLAINED.get(trace.status, ""),
        "versions": versions_used(trace),
        "groups": groups,
        "candidate_count": len(candidates),
        "required_count": sum(1 for c in candidates if c.required),
        "selected_size": selected,
        "excluded_size": excluded,
        "estimate": int(trace.input_estimate) if trace.input_estimate is not None else None,
        "estimate_unit": "tokens"
        if trace.input_estimate_unit in ("", "token")
        else trace.input_estimate_unit,
        "hints": where_to_look(trace, candidates),
        "snapshot": snapshot_state(user=user, trace=trace),
        "engine": engine_label(trace.engine) if trace.engine else "",
        "engine_words": engine_words(trace.engine) if trace.engine else "",
        "candidates_total": sum(trace.candidate_counts.values())
        if trace.candidates_truncated and trace.candidate_counts
        else len(candidates),
        "candidate_counts": _counts_in_order(trace.candidate_counts)
        if trace.candidates_truncated
        else [],
        "input_errors": trace.input_errors or [],
        "input_errors_more": max(
            0, (trace.input_errors_total or 0) - len(trace.input_errors or [])
        ),
        "sections": trace.sections,
        "trace_link": trace_link(trace),
        "shadow": shadow_card(trace, candidates),
    }


def _counts_in_order(counts: dict | None) -> list[tuple[str, int]]:
    """(decision, count) in the decisions' order, the ones with none left out."""
    counts = counts or {}
    return [(decision, counts[decision]) for decision in DECISIONS if counts.get(decision)]


@dataclass(frozen=True)
class TraceLink:
    """The trace in the users' tracing system (TRACE_LINK_URL_TEMPLATE): its URL, or why
    there is none."""

    url: str | None
    why_none: str = ""


def trace_link(trace: Trace) -> TraceLink | None:
    """None without a template. A template needing an OpenTelemetry id the trace lacks gives
    no URL and the reason in plain words: never a link that opens nothing."""
    template = settings.TRACE_LINK_URL_TEMPLATE
    if not template:
        return None
    url, missing = tracing_links.fill(
        template,
        {
            "request_id": trace.request_id,
            "trace_id": trace.otel_trace_id,
            "span_id": trace.otel_span_id,
        },
    )
    if missing:
        return TraceLink(None, "its runtime recorded no trace id for this request")
    return TraceLink(url)


@dataclass
class StatusCount:
    status: str
    count: int

    @property
    def label(self) -> str:
        return self.status.replace("_", " ")


def status_counts_last_day(*, user, now=None) -> list[StatusCount]:
    """Traces per status over the last 24 closed hours, from the hourly rollups (never a
    scan of the traces), for the agents the user may investigate."""

    now = now or timezone.now()
    end = now.replace(minute=0, second=0, microsecond=0)
    counts = dict(
        HourlyRollup.objects.filter(
            agent__in=agents_where(user, Capability.VIEW_TRACES),
            hour__gte=end - timedelta(hours=24),
            hour__lt=end,
            decision="",
        )
        .values_list("status")
        .annotate(total=Sum("count"))
    )
    return [StatusCount(status, counts.get(status, 0)) for status in STATUSES]


# --- the dashboard's charts (from the hourly rollups, never a scan of the traces) --------------
def status_charts(*, user, agents, now=None) -> dict[int, list[StatusChart]]:
    """For each agent shown on which the user may view traces (others are left out): one
    chart per environment that has traces in the last 7 days, with release changes marked (up
    to now, even in the hour not counted yet) and the top exclusion reasons. Three queries for
    all agents: the trace rollups, the candidate rollups, the release events; the geometry is
    traces.charts'."""
    now = now or timezone.now()
    start, end, bucket_count = chart_window(now)
    allowed = agents_where(user, Capability.VIEW_TRACES).filter(pk__in=[a.pk for a in agents])
    rollups = HourlyRollup.objects.filter(agent__in=allowed, hour__gte=start, hour__lt=end)
    per_status = (
        rollups.filter(decision="")
        .values_list("agent_id", "environment__key", "environment__position", "hour", "status")
        .annotate(total=Sum("count"))
        .order_by()
    )
    counts: dict[tuple, list[dict]] = {}
    positions: dict[str, int] = {}
    for agent_id, env, position, hour, status, total in per_status:
        positions[env] = position
        buckets = counts.setdefault((agent_id, env), [{} for _ in range(bucket_count)])
        index = bucket_index(hour, start)
        if 0 <= index < bucket_count:
            buckets[index][status] = buckets[index].get(status, 0) + total

    reasons: dict[tuple, list[ExclusionReason]] = {}
    excluded = (
        rollups.exclude(decision__in=("", "selected"))
        .values_list("agent_id", "environment__key", "source", "decision", "reason")
        .annotate(total=Sum("count"))
        .order_by("-total", "source", "decision", "reason")
    )
    for agent_id, env, source, decision, reason, total in excluded:
        top = reasons.setdefault((agent_id, env), [])
        if len(top) < CHART_TOP_REASONS:
            top.append(ExclusionReason(source, decision, reason, total))

    marks: dict[tuple, list[ChartMark]] = {}
    events = (
        # What went live (publish, approval, rollback): a shadow's start or stop changes no
        # answer, so it is no mark on a chart of what users got.
        ReleaseEvent.objects.moves()
        .filter(release__document__agent__in=allowed, occurred_at__gte=start, occurred_at__lte=now)
        .values_list(
            "release__document__agent_id",
            "release__environment__key",
            "release__document__key",
            "action",
            "to_version__number",
            "actor",
            "occurred_at",
        )
        .order_by("occurred_at")
    )
    for agent_id, env, document, action, number, actor, when in events:
        mark = release_mark(
            when=when,
            document=document,
            action=action,
            number=number,
            actor=actor,
            start=start,
            bucket_count=bucket_count,
        )
        if mark is not None:
            marks.setdefault((agent_id, env), []).append(mark)

    ticks = chart_ticks(start, bucket_count)
    charts: dict[int, list[StatusChart]] = {}
    for (agent_id, env), buckets in sorted(counts.items(), key=lambda i: positions[i[0][1]]):
        charts.setdefault(agent_id, []).append(
            status_chart(
                env,
                buckets,
                start=start,
                end=end,
                marks=marks.get((agent_id, env), []),
                ticks=ticks,
                reasons=reasons.get((agent_id, env), []),
            )
        )
    return charts


def dashboard_context(*, user, agents) -> dict:
    """The latest non-ready traces (last days) of each agent the user may investigate,
    attached to the agent objects as `problem_traces`, and their status charts as
    `trace_charts` (None where the user may not view traces), for
    templates/traces/_dashboard_agent.html."""
    allowed = set(agents_where(user, Capability.VIEW_TRACES).values_list("pk", flat=True))
    since = timezone.now() - timedelta(days=DASHBOARD_DAYS)
    charts = status_charts(user=user, agents=agents)
    for agent in agents:
        agent.problem_traces = (
            list(
                Trace.objects.filter(agent=agent, occurred_at__gte=since)
                .exclude(status="ready")
                .select_related("environment")
                .order_by("-occurred_at", "-id")[:DASHBOARD_TRACES_PER_AGENT]
            )
            if agent.pk in allowed
            else None
        )
        agent.trace_charts = charts.get(agent.pk, []) if agent.pk in allowed else None
    return {"trace_list_url": _url("trace-list")}


# --- the Shadow run card --------------------------------------------------------------------------
@dataclass
class ShadowRow:
    """A candidate the shadow decided differently: live's decision beside the shadow's."""

    position: int
    item_id: str
    source: str
    live_decision: str
    live_code: str
    live_reason: str
    live_required: bool
    decision: str
    code: str
    required: bool


# A rollout arm in words, as the trace's shadow card names the served and the shadow version.
_ARM_WORDS = {"new": "the rollout's new version", "old": "the version it replaces"}


@dataclass
class ShadowCard:
    version: int
    live_version: int | None
    status: str | None
    live_status: str
    degradation: str | None
    live_degradation: str | None
    used_tokens: int | None
    live_tokens: int | None
    sources_not_fetched: list[str]
    rows: list[ShadowRow]
    differences_total: int | None  # None: a runtime before SDK 0.3.0 sends no differences
    only_shadow: list[str]  # selected by the shadow only
    only_live: list[str]
    # In a staged rollout the served version is this request's arm and the shadow the other
    # arm (runtime-contract §3 `rollout`): neither is "live" then, so the card names the arms.
    rollout_arm: str = ""

    @property
    def same_version(self) -> bool:
        return self.version == self.live_version

    @property
    def served_words(self) -> str:
        """The version that served the request: "live v4", or during a rollout "v4 (this
        request's arm: the version it replaces)"."""
        version = f"v{self.live_version if self.live_version is not None else '?'}"
        if not self.rollout_arm:
            return f"live {version}"
        return f"{version} (this request's arm: {_ARM_WORDS.get(self.rollout_arm, 'served')})"

    @property
    def shadow_words(self) -> str:
        """The shadow version: "v5", or during a rollout "v5 (the rollout's new version)"."""
        if not self.rollout_arm:
            return f"v{self.version}"
        other = {"new": "old", "old": "new"}.get(self.rollout_arm)
        return f"v{self.version} ({_ARM_WORDS.get(other, 'the other arm')})"

    @property
    def detailed(self) -> bool:
        return self.differences_total is not None

    @property
    def more(self) -> int:
        """Differences counted but not listed (over the limit, or of candidates the trace
        does not carry)."""
        return max(0, (self.differences_total or 0) - len(self.rows))

    @property
    def token_delta(self) -> int | None:
        if self.used_tokens is None or self.live_tokens is None:
            return None
        return self.used_tokens - self.live_tokens

    @property
    def agrees(self) -> bool:
        return (
            self.status == self.live_status
            and (self.degradation or None) == (self.live_degradation or None)
            and not self.only_shadow
            and not self.only_live
            and not self.differences_total
        )

    @property
    def runtime_fault(self) -> bool:
        """The A/A calibration: the same version decided twice on the same input must agree;
        when it does not, the runtime is at fault, not a version."""
        return self.same_version and not self.agrees


def shadow_card(trace: Trace, candidates: list) -> ShadowCard | None:
    """The trace's shadow block against what live decided, or None when no shadow ran.
    ``candidates``: the trace's candidates in order (a difference names its position)."""
    shadow = trace.shadow
    if not isinstance(shadow, dict) or shadow.get("version") is None:
        return None
    by_position = {c.position: c for c in candidates}
    rows = []
    for difference in shadow.get("differences") or ():
        c = by_position.get(difference.get("index"))
        if c is None:
            continue
        rows.append(
            ShadowRow(
                position=c.position,
                item_id=c.item_id,
                source=c.source,
                live_decision=c.decision,
                live_code=c.reason_code,
                live_reason=c.reason,
                live_required=c.required,
                decision=difference.get("decision") or "",
                code=difference.get("reason_code") or "",
                required=bool(difference.get("required")),
            )
        )
    live_selected = [c.item_id for c in candidates if c.decision == "selected"]
    shadow_selected = list(shadow.get("selected") or ())
    live_set, shadow_set = set(live_selected), set(shadow_selected)
    return ShadowCard(
        version=shadow["version"],
        live_version=trace.documents.get(trace.strategy) if trace.strategy else None,
        status=shadow.get("status"),
        live_status=trace.status,
        degradation=shadow.get("degradation"),
        live_degradation=trace.degradation or None,
        used_tokens=shadow.get("used_tokens"),
        live_tokens=int(trace.input_estimate) if trace.input_estimate is not None else None,
        sources_not_fetched=list(shadow.get("sources_not_fetched") or ()),
        rows=rows,
        differences_total=shadow.get("differences_total"),
        only_shadow=[i for i in shadow_selected if i not in live_set],
        only_live=[i for i in live_selected if i not in shadow_set],
        rollout_arm=(trace.rollout_arm or "") if trace.rollout_key else "",
    )
