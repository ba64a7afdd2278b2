"""Reads of the health counters: the version-health page and API, the release rows' and the
dashboard's glances, the trace page's "is it this request or everyone's", and the request
ids behind a figure (a look at traces: access-logged by the caller).

Which hours are compared (said on the page too): the live version over the hours since its
release (the last `MAX_WINDOW` at most) against the version it replaced over the same number
of hours just before that release. Adjacent hours, not the previous day's: a release is
usually watched in its first hours, when "yesterday at this time" may still be the live
version's own traffic or an older version's; the page shows the hourly series too, so a
time-of-day effect is visible rather than hidden in a total.
"""

from __future__ import annotations

import json
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import islice

from context_runtime.findings import Finding
from context_runtime.wire import MAX_CLOCK_SKEW_SECONDS
from django.db import connections, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.http import urlencode

from console.kernel.errors import NotFound, ValidationFailed
from console.kernel.policy import Capability, agents_where, check_user_can, user_can
from console.kernel.standby import read_alias
from strategies.catalog.models import Environment
from strategies.documents.models import Document
from strategies.releases.models import Release, ReleaseEvent
from traces.charts import CHART_GROUP_OF
from traces.diagnosis import reason_words, resolution_words
from traces.health.counters import (
    COUNTER_MAPS,
    COUNTER_SCALARS,
    FAULT_SHADOW_VERSION_UNKNOWN,
    count_key,
    shadow_view,
    split_key,
)
from traces.health.models import RETENTION_DAYS, Arm
from traces.health.stats import (
    Rate,
    Spark,
    paired_verdict,
    peak_rate,
    percentile_bound,
    sparkline,
    verdict,
)
from traces.models import Trace
from traces.stored import stored_candidates, trace_candidates, traces_walk

MAX_WINDOW = timedelta(days=7)
SERIES_BUCKETS = 48
MINUTE_SERIES = timedelta(hours=6)  # longer spans are charted from whole hours
GLANCE_BUCKETS = 24
REQUEST_IDS_LIMIT = 100
DISAGREEMENT_SCAN = 2_000  # traces read to find disagreeing ones (newest first)
LIVE_ACTIONS = (
    ReleaseEvent.Action.PUBLISH,
    ReleaseEvent.Action.APPROVE,
    ReleaseEvent.Action.ROLLBACK,
)
FAILED_STATUSES = tuple(s for s, group in CHART_GROUP_OF.items() if group == "failed")


# --- what is live, since when, instead of what -------------------------------------------------------
@dataclass(frozen=True)
class LiveRelease:
    agent_id: int
    document: str
    kind: str
    environment: Environment
    version: int
    released_at: datetime
    released_by: str
    previous: int | None


def live_releases(*, agent_ids, environment=None, document: str = "") -> list[LiveRelease]:
    """The live release of each document × environment of the agents, with when the live
    version went live (its newest publish, approval or rollback) and what it replaced. Two
    queries."""
    releases = Release.objects.filter(document__agent_id__in=agent_ids).select_related(
        "document", "environment", "version"
    )
    if environment is not None:
        releases = releases.filter(environment=environment)
    if document:
        releases = releases.filter(document__key=document)
    releases = list(releases)
    events = (
        ReleaseEvent.objects.filter(release__in=releases, action__in=LIVE_ACTIONS)
        .order_by("release_id", "-occurred_at", "-id")
        .distinct("release_id")
        .values_list("release_id", "to_version_id", "from_version__number", "occurred_at", "actor")
    )
    newest = {release_id: rest for release_id, *rest in events}
    out = []
    for release in releases:
        to_version, previous, occurred_at, actor = newest.get(
            release.pk, (None, None, release.updated_at, release.updated_by)
        )
        if to_version != release.version_id:  # no event for it (a row written directly)
            previous, occurred_at, actor = None, release.updated_at, release.updated_by
        out.append(
            LiveRelease(
                agent_id=release.document.agent_id,
                document=release.document.key,
                kind=release.document.kind,
                environment=release.environment,
                version=release.version.number,
                released_at=occurred_at,
                released_by=actor,
                previous=previous if previous != release.version.number else None,
            )
        )
    return out


# --- sums over the counters ------------------------------------------------------------------------
# The rows of one (agent, environment, document), each labelled with the column it sums into:
# the live version since the window's start, the previous version over the same span before
# the release, each shadow version over the live window. Whole hours come from the hour
# table; only the hours a window's edge cuts are read minute by minute (`_source`).
_SLOT = """
    CASE
        WHEN arm = 'live' AND version = %(live)s AND minute >= %(live_from)s THEN 'live'
        WHEN arm = 'live' AND version = %(previous)s AND minute >= %(previous_from)s
             AND minute < %(released_at)s THEN 'previous'
        WHEN arm = 'shadow' AND minute >= %(live_from)s THEN 'shadow:' || version
    END
"""
_COLUMNS = ", ".join(("version", "arm", *COUNTER_SCALARS, *COUNTER_MAPS))
_KEYED = "agent_id = %(agent)s AND environment_id = %(environment)s AND document = %(document)s"


@contextmanager
def _reading():
    """A cursor for the counter reads, JIT off: the planner's guess of 100 keys per jsonb map
    makes these small queries look costly enough to compile, and compiling took 110 ms of a
    120 ms read (tests/bench/bench_health.py)."""
    alias = read_alias()  # counters may lag a few seconds: the standby when there is one
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute("SET LOCAL jit = off")
        yield cursor


def _hour(when: datetime) -> datetime:
    return when.replace(minute=0, second=0, microsecond=0)


def _source(params: dict, *, hours: bool = True) -> tuple[str, dict]:
    """`WITH r AS (…)`: the counter rows of the window, slotted, and the parameters. With
    `hours`, the hours no window edge cuts come whole from the hour table."""
    edges = (params["start"], params["previous_from"], params["released_at"], params["live_from"])
    edges += (params["until"],)
    cut = sorted({_hour(e) for e in edges if e != _hour(e)}) if hours else []
    params = {**params, "cut": cut, "start_hour": _hour(params["start"])}
    minutes = f"SELECT minute, {_COLUMNS} FROM health_counter WHERE {_KEYED} " + (
        "AND minute >= %(start)s AND minute < %(until)s"
    )
    if hours:
        ranges = " OR ".join(
            f"(minute >= %(cut{i})s AND minute < %(cut{i})s + interval '1 hour')"
            for i in range(len(cut))
        )
        params.update({f"cut{i}": hour for i, hour in enumerate(cut)})
        minutes += f" AND ({ranges})" if cut else " AND false"
        whole = (
            f"SELECT hour AS minute, {_COLUMNS} FROM health_counter_hour WHERE {_KEYED} "
            "AND hour >= %(start_hour)s AND hour < %(until)s "
            "AND hour <> ALL(%(cut)s::timestamptz[])"
        )
        rows = f"{whole} UNION ALL {minutes}"
    else:
        rows = minutes
    return f"WITH r AS (SELECT {_SLOT} AS slot, * FROM ({rows}) AS rows) ", params


_TOTALS = (
    "SELECT slot, "
    + ", ".join(f"sum({name})" for name in COUNTER_SCALARS)
    + " FROM r WHERE slot IS NOT NULL GROUP BY slot"
)
_MAP_TOTALS = (
    "SELECT slot, cols.name, e.key, sum(e.value::bigint) FROM r "
    + "CROSS JOIN LATERAL (VALUES "
    + ", ".join(f"('{name}', r.{name})" for name in COUNTER_MAPS)
    + ") AS cols(name, counts) CROSS JOIN LATERAL jsonb_each_text(cols.counts) AS e(key, value) "
    + "WHERE slot IS NOT NULL AND cols.counts <> '{}'::jsonb GROUP BY 1, 2, 3"
)
_SERIES = (
    "SELECT slot, date_bin(%(bucket)s, minute, %(origin)s) AS b, sum(traces), sum(failures) "
    "FROM r WHERE slot IS NOT NULL GROUP BY 1, 2"
)


@dataclass
class Totals:
    """The sums of one column of the page (a version on one arm over its window)."""

    slot: str
    version: int
    arm: str
    since: datetime
    until: datetime
    scalars: dict = field(default_factory=lambda: dict.fromkeys(COUNTER_SCALARS, 0))
    maps: dict = field(default_factory=lambda: {name: {} for name in COUNTER_MAPS})

    @property
    def traces(self) -> int:
        return int(self.scalars["traces"])

    def rate(self, count) -> Rate:
        return Rate(int(count), self.traces)

    def tokens(self, q: float) -> int | None:
        return percentile_bound(self.maps["tokens_hist"], q)

    @property
    def tokens_mean(self) -> float | None:
        n = self.scalars["tokens_count"]
        return self.scalars["tokens_sum"] / n if n else None

    @property
    def token_delta_mean(self) -> float | None:
        n = self.scalars["token_delta_count"]
        return self.scalars["token_delta_sum"] / n if n else None


def _slot_params(*, agent_id, environment_id, document, live, previous, windows, until) -> dict:
    live_from, previous_from, released_at = windows
    return {
        "agent": agent_id,
        "environment": environment_id,
        "document": document,
        "live": live,
        "previous": previous if previous is not None else -1,
        "live_from": live_from,
        "previous_from": previous_from,
        "released_at": released_at,
        "start": min(previous_from, live_from) if previous is not None else live_from,
        "until": until,
    }


def _totals(params: dict) -> dict[str, list]:
    """{slot: [scalars dict, maps dict]}: two queries."""
    found: dict[str, list] = {}
    source, params = _source(params)
    with _reading() as cursor:
        cursor.execute(source + _TOTALS, params)
        for slot, *sums in cursor.fetchall():
            found[slot] = [
                {
                    name: float(value or 0) if name.endswith("_sum") else int(value or 0)
                    for name, value in zip(COUNTER_SCALARS, sums, strict=True)
                },
                {},
            ]
        cursor.execute(source + _MAP_TOTALS, params)
        for slot, name, key, total in cursor.fetchall():
            found.setdefault(slot, [dict.fromkeys(COUNTER_SCALARS, 0), {}])[1].setdefault(name, {})[
                key
            ] = int(total)
    return found


# --- the version-health page -----------------------------------------------------------------------
@dataclass
class Cell:
    rate: Rate | None
    verdict: str = ""  # against the column it is compared with: worse | better | same | unknown
    link: str = ""  # the request ids behind it; blank when there are none
    fault: bool = False  # A/A: any disagreement is a runtime fault, not a difference


@dataclass
class Metric:
    group: str  # status | degraded | required | config | outcome | agreement
    label: str
    key: str
    cells: dict  # slot → Cell
    note: str = ""
    hint: str = ""  # the code the label words plainly: on hover, never in front

    @property
    def anything(self) -> bool:
        """Worth a row: a cell counts something, or has requests behind it (an agreement
        rate counts the requests that agree: at 0% every request is behind its link)."""
        return any(c.rate is not None and (c.rate.count or c.link) for c in self.cells.values())


@dataclass
class Agreement:
    """How often a shadow decided as live did, on the requests it ran beside live."""

    totals: Totals
    compared: int
    same_status: int
    same_selected: int
    aa: bool

    @property
    def status_rate(self) -> Rate:
        return Rate(self.same_status, self.compared)

    @property
    def selected_rate(self) -> Rate:
        return Rate(self.same_selected, self.compared)


@dataclass
class VersionHealth:
    agent: object
    environment: Environment
    document: str
    kind: str
    release: LiveRelease | None
    now: datetime
    columns: list = field(default_factory=list)  # Totals, previous first, live, shadows
    metrics: list = field(default_factory=list)
    tokens: list = field(default_factory=list)  # (slot, p50, p95, mean)
    faults: dict = field(default_factory=dict)  # fault → traces (live column)
    series: dict = field(default_factory=dict)  # slot → Spark (failed rate per bucket)
    series_counts: dict = field(default_factory=dict)  # slot → [(failed, traces)] per bucket
    series_start: datetime | None = None
    series_peak: float = 0.0
    release_x: float | None = None  # where the release falls on the chart (0–480)
    bucket: timedelta | None = None
    window: timedelta | None = None

    @property
    def bucket_words(self) -> str:
        minutes = int(self.bucket.total_seconds() // 60) if self.bucket else 0
        return f"{minutes // 60} h" if minutes and minutes % 60 == 0 else f"{minutes} min"

    def column(self, slot: str) -> Totals | None:
        return next((c for c in self.columns if c.slot == slot), None)

    @property
    def live(self) -> Totals | None:
        return self.column("live")

    @property
    def previous(self) -> Totals | None:
        return self.column("previous")

    @property
    def shadows(self) -> list[Totals]:
        return [c for c in self.columns if c.arm == Arm.SHADOW]

    @property
    def empty(self) -> bool:
        return not any(c.traces for c in self.columns)

    @property
    def rates(self) -> list[Metric]:
        """The rows of the rates table: every column's rates (the failed rate always)."""
        return [
            m for m in self.metrics if m.group != "agreement" and (m.anything or m.key == "failed")
        ]

    @property
    def agreement(self) -> list[Metric]:
        """The rows of the agreement table: how each shadow decided against live on the
        same requests (a shadow column's only)."""
        return [m for m in self.metrics if m.group == "agreement" and m.anything]

    @property
    def token_rows(self) -> list[tuple]:
        """The input-size rows with their column: (column, p50, p95, mean, shadow − live)."""
        return [(c, *row[1:]) for c, row in zip(self.columns, self.tokens, strict=True)]

    @property
    def agreements(self) -> list[Agreement]:
        """Each shadow's agreement with live in one sentence's numbers."""
        return [
            Agreement(
                totals=t,
                compared=int(t.scalars["compared"]),
                same_status=int(t.scalars["same_status"]),
                same_selected=int(t.scalars["same_selected"]),
                aa=self.is_aa(t),
            )
            for t in self.shadows
        ]

    def is_aa(self, totals: Totals) -> bool:
        """The shadow runs the live version itself: the A/A self-test."""
        return (
            totals.arm == Arm.SHADOW
            and self.release is not None
            and (totals.version == self.release.version)
        )


def health_target(*, user, agent, environment_key: str, document_key: str):
    """(environment, document) of a health URL, after the policy: 404 for an unknown one."""
    check_user_can(user, Capability.VIEW_TRACES, agent)
    environment = Environment.objects.filter(key=environment_key).first()
    document = Document.objects.filter(agent=agent, key=document_key).first()
    if environment is None or document is None:
        raise NotFound(f"{agent.key} has no document '{document_key}' in '{environment_key}'.")
    return environment, document


def _windows(release: LiveRelease, now: datetime, hours: int | None):
    span = min(now - release.released_at, MAX_WINDOW)
    if hours:
        span = min(span, timedelta(hours=hours))
    span = max(span, timedelta(minutes=1))
    # The previous version's window stays within the counters' retention.
    previous_from = max(release.released_at - span, now - timedelta(days=RETENTION_DAYS))
    # Counters are per minute: the live window starts at the start of its first minute, so
    # the traces of the release's own minute count (they were left out once the release was
    # a minute old: the first requests of a new version, the ones people watch).
    return _minute(now - span), previous_from, release.released_at, span


def _minute(when: datetime) -> datetime:
    return when.replace(second=0, microsecond=0)


def _request_link(health: VersionHealth, totals: Totals, **filters) -> str:
    query = {
        "version": totals.version,
        "arm": totals.arm,
        "since": totals.since.isoformat(),
        "until": totals.until.isoformat(),
        **{k: v for k, v in filters.items() if v not in (None, "")},
    }
    url = reverse(
        "health-requests",
        kwargs={
            "agent": health.agent.key,
            "environment": health.environment.key,
            "document": health.document,
        },
    )
    return url + "?" + urlencode(query)


def _compare_to(slot: str) -> str | None:
    return "previous" if slot == "live" else ("live" if slot.startswith("shadow:") else None)


def _metric(health, group, label, key, count_of, *, link=None, live_only=False, note=""):
    cells = {}
    for totals in health.columns:
        if live_only and totals.arm != Arm.LIVE:
            continue
        count = count_of(totals) if totals.traces else 0
        cells[totals.slot] = Cell(
            rate=totals.rate(count) if totals.traces else None,
            link=_request_link(health, totals, **link) if link and count else "",
        )
    for slot, cell in cells.items():
        other = cells.get(_compare_to(slot) or "")
        if cell.rate is None or other is None or other.rate is None:
            continue
        totals = health.column(slot)
        if totals.arm == Arm.SHADOW:
            # A shadow ran on some of live's requests only: judged on those same requests
            # (paired), never against live's rate over all of live's hours.
            cell.verdict = paired_verdict(
                totals.maps["paired_worse"].get(key, 0),
                totals.maps["paired_better"].get(key, 0),
                compared=int(totals.scalars["compared"]),
            )
        else:
            cell.verdict = verdict(cell.rate, other.rate)
    return Metric(group=group, label=label, key=key, cells=cells, note=note)


def _keys(health, name: str) -> list[str]:
    keys: set[str] = set()
    for totals in health.columns:
        keys.update(totals.maps[name])
    return sorted(keys)


def _agreement(health: VersionHealth) -> list[Metric]:
    metrics = []
    for totals in health.shadows:
        compared = int(totals.scalars["compared"])
        aa = health.is_aa(totals)
        rows = [
            ("Same status as live", "same_status", int(totals.scalars["same_status"])),
            ("Same selected items as live", "same_selected", int(totals.scalars["same_selected"])),
        ]
        for label, key, same in rows:
            cell = Cell(
                rate=Rate(same, compared) if compared else None,
                link=_request_link(health, totals, disagree=1) if compared > same else "",
                fault=aa and compared > same,
            )
            metrics.append(Metric("agreement", label, key, {totals.slot: cell}))
        kept, lost = totals.maps["required_kept"], totals.maps["required_lost"]
        for source in sorted(set(kept) | set(lost)):
            n = kept.get(source, 0) + lost.get(source, 0)
            cell = Cell(
                rate=Rate(lost.get(source, 0), n),
                link=_request_link(health, totals, disagree=1, source=source)
                if lost.get(source)
                else "",
                fault=aa and bool(lost.get(source)),
            )
            metrics.append(
                Metric(
                    "agreement",
                    f"Required {source} items the shadow drops (live selected them)",
                    f"required_lost:{source}",
                    {totals.slot: cell},
                )
            )
    return metrics


def version_health(
    *, user, agent, environment, document, now=None, hours: int | None = None
) -> VersionHealth:
    """Everything the version-health page and API show for one (agent, environment,
    document). The caller asked the policy (health_target)."""
    now = now or timezone.now()
    (release,) = live_releases(
        agent_ids=[agent.pk], environment=environment, document=document.key
    ) or [None]
    health = VersionHealth(
        agent=agent,
        environment=environment,
        document=document.key,
        kind=document.kind,
        release=release,
        now=now,
    )
    if release is None:
        return health
    live_from, previous_from, released_at, span = _windows(release, now, hours)
    health.window = span
    # A runtime's clock may run ahead of the console's (ingest accepts it): its traces are
    # counted at once, not when the console's clock catches up.
    until = now + timedelta(seconds=MAX_CLOCK_SKEW_SECONDS)
    params = _slot_params(
        agent_id=agent.pk,
        environment_id=environment.pk,
        document=document.key,
        live=release.version,
        previous=release.previous,
        windows=(live_from, previous_from, released_at),
        until=until,
    )
    found = _totals(params)
    if release.previous is not None:
        health.columns.append(
            Totals("previous", release.previous, Arm.LIVE, previous_from, released_at)
        )
    health.columns.append(Totals("live", release.version, Arm.LIVE, live_from, until))
    for slot in sorted(s for s in found if s.startswith("shadow:")):
        health.columns.append(Totals(slot, int(slot.split(":")[1]), Arm.SHADOW, live_from, until))
    for totals in health.columns:
        scalars, maps = found.get(totals.slot, (dict.fromkeys(COUNTER_SCALARS, 0), {}))
        totals.scalars = scalars
        totals.maps = {name: maps.get(name, {}) for name in COUNTER_MAPS}

    health.metrics.append(
        _metric(
            health,
            "status",
            "Failed (missing required data, over budget, conflict, input refused)",
            "failed",
            lambda t: t.scalars["failures"],
            link={"status": "failed"},
        )
    )
    for status in ("degraded", *FAILED_STATUSES):
        health.metrics.append(
            _metric(
                health,
                "status",
                status.replace("_", " ").capitalize(),
                f"status:{status}",
                lambda t, s=status: t.maps["statuses"].get(s, 0),
                link={"status": status},
            )
        )
    for handler in _keys(health, "degraded"):
        health.metrics.append(
            _metric(
                health,
                "degraded",
                f"Degraded via {handler}",
                f"degraded:{handler}",
                lambda t, h=handler: t.maps["degraded"].get(h, 0),
                link={"degradation": handler},
            )
        )
    for key in _keys(health, "required_missing"):
        source, code = split_key(key)
        metric = _metric(
            health,
            "required",
            f"Required {source} left out: {reason_words(code) if code else 'no reason given'}",
            f"required_missing:{key}",
            lambda t, k=key: t.maps["required_missing"].get(k, 0),
            link={"source": source, "reason_code": code or "-"},
        )
        metric.hint = f"reason code: {code}" if code else ""
        health.metrics.append(metric)
    for resolution in _keys(health, "config_fallback"):
        metric = _metric(
            health,
            "config",
            f"Served from {resolution_words(resolution)}",
            f"config_fallback:{resolution}",
            lambda t, r=resolution: t.maps["config_fallback"].get(r, 0),
            link={"resolution": resolution},
            live_only=True,
        )
        metric.hint = f"configuration resolution: {resolution}"
        health.metrics.append(metric)
    health.metrics.extend(_outcome_metrics(health))
    health.metrics.extend(_agreement(health))
    health.tokens = [
        (t.slot, t.tokens(0.5), t.tokens(0.95), t.tokens_mean, t.token_delta_mean)
        for t in health.columns
    ]
    live = health.live
    health.faults = dict(live.maps["faults"]) if live else {}
    _series(health, params, span)
    return health


def _outcome_metrics(health: VersionHealth) -> list[Metric]:
    """Each outcome value's share of the outcomes of its kind reported for the version."""
    metrics = []
    for key in _keys(health, "outcomes"):
        kind, value = split_key(key)
        cells = {}
        for totals in health.columns:
            if totals.arm != Arm.LIVE:
                continue
            of_kind = sum(n for k, n in totals.maps["outcomes"].items() if split_key(k)[0] == kind)
            cells[totals.slot] = Cell(
                rate=Rate(totals.maps["outcomes"].get(key, 0), of_kind) if of_kind else None
            )
        live, previous = cells.get("live"), cells.get("previous")
        if live and previous and live.rate and previous.rate:
            # Which direction is worse depends on the value; say only that it changed.
            change = verdict(live.rate, previous.rate)
            live.verdict = "changed" if change in ("worse", "better") else change
        metrics.append(
            Metric(
                "outcome",
                f"{kind}: {value}",
                f"outcome:{key}",
                cells,
                note=f"share of the {kind} reports",
            )
        )
    return metrics


def _series(health: VersionHealth, params: dict, span: timedelta) -> None:
    """The failed rate per bucket for each column, on one time axis from the previous
    version's window to now: about SERIES_BUCKETS buckets of whole minutes, read minute by
    minute up to MINUTE_SERIES; beyond, of whole hours from the hour table."""
    start = params["start"]
    total = params["until"] - start
    minutes = -(-int(total.total_seconds() // 60) // SERIES_BUCKETS) or 1
    by_hour = total > MINUTE_SERIES
    if by_hour:
        minutes = -(-minutes // 60) * 60
        start = _hour(start)
    bucket = timedelta(minutes=minutes)
    count = int((params["until"] - start) / bucket) + 1
    source, query = _source(params, hours=by_hour)
    query = {**query, "bucket": bucket, "origin": start}
    per_slot: dict[str, list] = defaultdict(lambda: [(0, 0)] * count)
    with _reading() as cursor:
        cursor.execute(source + _SERIES, query)
        for slot, when, traces, failures in cursor.fetchall():
            index = int((when - start) / bucket)
            if 0 <= index < count:
                buckets = per_slot[slot]
                f, t = buckets[index]
                buckets[index] = (f + int(failures), t + int(traces))
    health.series_start, health.bucket = start, bucket
    health.series_counts = {totals.slot: per_slot[totals.slot] for totals in health.columns}
    peak = peak_rate([per_slot[totals.slot] for totals in health.columns])
    health.series = {
        totals.slot: sparkline(per_slot[totals.slot], width=480, height=60, peak=peak)
        for totals in health.columns
    }
    health.series_peak = peak
    released = (health.release.released_at - start) / (params["until"] - start)
    health.release_x = round(min(max(released, 0.0), 1.0) * 480, 1)


# --- glances: the release rows and the dashboard -------------------------------------------------------
@dataclass
class Glance:
    release: LiveRelease
    traces: int
    failures: int
    spark: Spark

    @property
    def rate(self) -> Rate:
        return Rate(self.failures, self.traces)


# Whole hours: a glance starts at the hour of the release.
_GLANCE = """
SELECT agent_id, environment_id, document, version, hour, traces, failures
FROM health_counter_hour
WHERE agent_id = ANY(%s) AND arm = 'live' AND hour >= %s
"""


def glances(*, user, agents, now=None) -> dict[int, dict[tuple[str, str], Glance]]:
    """{agent id: {(document, environment key): Glance}} of each live version since its
    release (the last 7 days at most), for the agents where the user may view traces: the
    failed rate per hour, merged into at most GLANCE_BUCKETS points. Four queries."""
    now = now or timezone.now()
    allowed = set(agents_where(user, Capability.VIEW_TRACES).values_list("pk", flat=True))
    agent_ids = [a.pk for a in agents if a.pk in allowed]
    if not agent_ids:
        return {}
    releases = live_releases(agent_ids=agent_ids)
    since = now - MAX_WINDOW
    hourly: dict[tuple, dict] = defaultdict(dict)
    with _reading() as cursor:
        cursor.execute(_GLANCE, [agent_ids, _hour(since)])
        for agent_id, environment_id, document, version, hour, traces, failures in cursor:
            hourly[(agent_id, environment_id, document, version)][hour] = (
                int(failures),
                int(traces),
            )
    out: dict[int, dict] = defaultdict(dict)
    ahead = now + timedelta(seconds=MAX_CLOCK_SKEW_SECONDS)  # a runtime's clock ahead
    hour_now = ahead.replace(minute=0, second=0, microsecond=0)
    for release in releases:
        agent_id = release.agent_id
        counts = hourly.get((agent_id, release.environment.pk, release.document, release.version))
        start = max(release.released_at, since).replace(minute=0, second=0, microsecond=0)
        hours = int((hour_now - start) / timedelta(hours=1)) + 1
        per_hour = [(counts or {}).get(start + timedelta(hours=i), (0, 0)) for i in range(hours)]
        step = -(-hours // GLANCE_BUCKETS)
        merged = [
            (sum(f for f, _ in per_hour[i : i + step]), sum(t for _, t in per_hour[i : i + step]))
            for i in range(0, hours, step)
        ]
        out[agent_id][(release.document, release.environment.key)] = Glance(
            release=release,
            traces=sum(t for _, t in merged),
            failures=sum(f for f, _ in merged),
            spark=sparkline(merged, width=80, height=16),
        )
    return out


# --- the trace page: this request, or everyone's? ------------------------------------------------------
@dataclass
class Pattern:
    source: str
    reason_code: str
    items: list  # the trace's item ids of that source and code
    count: int  # traces of the live version with such an item, since its release
    traces: int  # all traces of the live version since its release
    release: LiveRelease
    spark: Spark
    link: str

    @property
    def rate(self) -> Rate:
        return Rate(self.count, self.traces)


# Whole hours, from the hour of the release.
_PATTERN = """
SELECT hour, traces, required_missing
FROM health_counter_hour
WHERE agent_id = %s AND environment_id = %s AND document = %s AND hour >= %s
  AND version = %s AND arm = 'live'
"""


def trace_patterns(*, user, trace, candidates=None, now=None) -> list[Pattern] | None:
    """For each (source, reason code) of the trace's required items not selected: how many
    traces of the strategy version live in the trace's environment had one too, since that
    release (from its hour; the last 7 days at most). `candidates`: the trace's, when the
    caller has them (the trace page), else read. None when the user may not view the
    agent's traces or nothing is live; [] when no required item was left out. Three queries
    when one was, none otherwise."""
    if not trace.strategy or not user_can(user, Capability.VIEW_TRACES, trace.agent):
        return None
    if candidates is None:
        candidates = trace_candidates(trace)
    items: dict[tuple[str, str], list[str]] = defaultdict(list)
    for c in candidates:
        if c.required and c.decision != "selected":
            items[(c.source, c.reason_code)].append(c.item_id)
    if not items:
        return []
    (release,) = live_releases(
        agent_ids=[trace.agent_id], environment=trace.environment, document=trace.strategy
    ) or [None]
    if release is None:
        return None
    now = now or timezone.now()
    since = max(release.released_at, now - MAX_WINDOW)
    start = _hour(since)
    ahead = now + timedelta(seconds=MAX_CLOCK_SKEW_SECONDS)  # a runtime's clock ahead
    hours = int((ahead - start) / timedelta(hours=1)) + 1
    with _reading() as cursor:
        cursor.execute(
            _PATTERN,
            [trace.agent_id, trace.environment_id, trace.strategy, start, release.version],
        )
        # Raw cursors hand jsonb over as text (Django decodes it in JSONField only).
        per_hour = {
            hour: (int(total), json.loads(missing) if isinstance(missing, str) else missing)
            for hour, total, missing in cursor.fetchall()
        }
    link = reverse(
        "health-requests",
        kwargs={
            "agent": trace.agent.key,
            "environment": trace.environment.key,
            "document": trace.strategy,
        },
    )
    step = -(-hours // GLANCE_BUCKETS)
    patterns = []
    for (source, code), ids in sorted(items.items()):
        key = count_key(source, code)
        buckets = []
        for i in range(hours):
            total, missing = per_hour.get(start + timedelta(hours=i), (0, {}))
            buckets.append((int((missing or {}).get(key, 0)), total))
        merged = [
            (sum(n for n, _ in buckets[i : i + step]), sum(t for _, t in buckets[i : i + step]))
            for i in range(0, hours, step)
        ]
        query = {
            "version": release.version,
            "arm": Arm.LIVE,
            "since": since.isoformat(),
            "until": ahead.isoformat(),
            "source": source,
            "reason_code": code or "-",
        }
        patterns.append(
            Pattern(
                source=source,
                reason_code=code,
                items=ids,
                count=sum(n for n, _ in merged),
                traces=sum(t for _, t in merged),
                release=release,
                spark=sparkline(merged, width=120, height=20, what="had it"),
                link=link + "?" + urlencode(query),
            )
        )
    return patterns


_OUTCOMES_OF_VERSION = """
SELECT outcomes FROM health_counter_hour
WHERE agent_id = %s AND environment_id = %s AND document = %s AND version = %s
  AND arm = 'live' AND hour >= %s AND outcomes <> '{}'::jsonb
"""


@dataclass(frozen=True)
class OutcomeShare:
    """Of the outcomes of one kind reported for a strategy version in an environment lately,
    how many had a given value."""

    version: int
    count: int
    of_kind: int

    @property
    def rate(self) -> Rate:
        return Rate(self.count, self.of_kind)


def outcome_shares(*, user, trace, now=None) -> dict[tuple[str, str], OutcomeShare] | None:
    """Beside a request's outcomes on its trace page: per (kind, value) of the counters, how
    often the trace's strategy version had that outcome in its environment over the last
    MAX_WINDOW — is this escalation one of many? One query; None when the user may not view
    the agent's traces or the trace names no strategy version."""
    if not trace.strategy or trace.strategy_version is None:
        return None
    if not user_can(user, Capability.VIEW_TRACES, trace.agent):
        return None
    since = _hour((now or timezone.now()) - MAX_WINDOW)
    totals: dict[str, int] = defaultdict(int)
    with connections[
        read_alias()
    ].cursor() as cursor:  # at most 168 rows of one key prefix: no JIT to fear
        cursor.execute(
            _OUTCOMES_OF_VERSION,
            [trace.agent_id, trace.environment_id, trace.strategy, trace.strategy_version, since],
        )
        for (outcomes,) in cursor.fetchall():
            for key, n in (json.loads(outcomes) if isinstance(outcomes, str) else outcomes).items():
                totals[key] += int(n)
    of_kind: dict[str, int] = defaultdict(int)
    for key, n in totals.items():
        of_kind[split_key(key)[0]] += n
    return {
        split_key(key): OutcomeShare(trace.strategy_version, n, of_kind[split_key(key)[0]])
        for key, n in totals.items()
    }


# --- the request ids behind a figure --------------------------------------------------------------------
@dataclass(frozen=True)
class RequestFilter:
    version: int
    arm: str
    since: datetime
    until: datetime
    status: str = ""  # a status, or "failed" for any failed one
    degradation: str = ""
    source: str = ""
    reason_code: str = ""  # "-" for none given
    resolution: str = ""
    disagree: bool = False

    def as_dict(self) -> dict:
        return {
            "version": self.version,
            "arm": self.arm,
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            **{
                k: v
                for k, v in (
                    ("status", self.status),
                    ("degradation", self.degradation),
                    ("source", self.source),
                    ("reason_code", self.reason_code),
                    ("resolution", self.resolution),
                )
                if v
            },
            **({"disagree": True} if self.disagree else {}),
        }

    @property
    def words(self) -> str:
        parts = [f"v{self.version} ({self.arm})"]
        if self.status:
            parts.append(f"status {self.status.replace('_', ' ')}")
        if self.degradation:
            parts.append(f"degraded via {self.degradation}")
        if self.source:
            why = "no reason given" if self.reason_code == "-" else reason_words(self.reason_code)
            parts.append(f"required {self.source} not selected" + (f" ({why})" if why else ""))
        if self.resolution:
            parts.append(f"served from {resolution_words(self.resolution)}")
        if self.disagree:
            parts.append("shadow disagrees with live")
        return ", ".join(parts)


def request_filter_parse(query) -> RequestFilter:
    """The request-ids filter from a query string; ValidationFailed names the bad field."""

    def refuse(name: str, message: str):
        raise ValidationFailed(message, details=[Finding(name, "invalid", message)])

    def need(name: str) -> str:
        value = (query.get(name) or "").strip()
        if not value:
            refuse(name, f"'{name}' is required.")
        return value

    version = need("version")
    if not version.isdigit():
        refuse("version", "'version' must be a version number.")
    arm = need("arm")
    if arm not in Arm.values:
        refuse("arm", "'arm' must be live or shadow.")
    times = {}
    for name in ("since", "until"):
        when = parse_datetime(need(name).replace(" ", "+"))
        if when is None or when.tzinfo is None:
            refuse(name, f"'{name}' must be a time with its zone, e.g. 2026-12-02T09:00:00+00:00.")
        times[name] = when
    status = (query.get("status") or "").strip()
    if status and status != "failed" and status not in CHART_GROUP_OF:
        refuse("status", f"Unknown status '{status}'.")
    return RequestFilter(
        version=int(version),
        arm=arm,
        since=times["since"],
        until=times["until"],
        status=status,
        degradation=(query.get("degradation") or "").strip(),
        source=(query.get("source") or "").strip(),
        reason_code=(query.get("reason_code") or "").strip(),
        resolution=(query.get("resolution") or "").strip(),
        disagree=(query.get("disagree") or "") in ("1", "true"),
    )


@dataclass(frozen=True)
class RequestRow:
    request_id: str
    occurred_at: datetime
    status: str
    shadow_status: str | None
    reason_codes: tuple  # (source, reason code) of the required items not selected


def health_requests(*, agent, environment, document: str, filters: RequestFilter) -> list:
    """The newest request ids (REQUEST_IDS_LIMIT at most) behind a figure of the health
    page, with the reason codes behind them. A look at traces: the caller logs it."""
    traces = Trace.objects.filter(
        agent=agent,
        environment=environment,
        occurred_at__gte=filters.since,
        occurred_at__lt=filters.until,
    )
    if filters.arm == Arm.LIVE:
        traces = traces.filter(documents__contains={document: filters.version})
    else:
        traces = traces.filter(strategy=document, shadow__version=filters.version)
    # The live arm's fields are the trace's own; the shadow's are in its shadow block.
    live = filters.arm == Arm.LIVE
    status, degradation = (
        ("status", "degradation") if live else ("shadow__status", "shadow__degradation")
    )
    if filters.status == "failed":
        traces = traces.filter(**{f"{status}__in": FAILED_STATUSES})
    elif filters.status:
        traces = traces.filter(**{status: filters.status})
    if filters.degradation:
        traces = traces.filter(**{degradation: filters.degradation})
    if filters.resolution:
        traces = (
            traces.filter(config_fallback=True, config_resolution="")
            if filters.resolution == "fallback"
            else traces.filter(config_resolution=filters.resolution)
        )
    code = "" if filters.reason_code == "-" else filters.reason_code
    if filters.source and filters.arm == Arm.LIVE and not filters.disagree:
        # A required item of the source left out (with that reason code): read off the
        # traces' candidates, newest first, until enough are found.
        def missing(packed) -> bool:
            return any(
                c.required
                and c.decision != "selected"
                and c.source == filters.source
                and (not filters.reason_code or c.reason_code == code)
                for c in stored_candidates(packed)
            )

        keys = [pk for pk, _ in islice(traces_walk(traces, missing), REQUEST_IDS_LIMIT)]
        traces = traces.filter(pk__in=keys)
    shadow_pass = filters.arm == Arm.SHADOW and (filters.disagree or filters.source)
    scan = DISAGREEMENT_SCAN if shadow_pass else REQUEST_IDS_LIMIT
    rows = list(
        traces.order_by("-occurred_at", "-id").values_list(
            "request_id", "occurred_at", "status", "shadow", "input_estimate", "packed_candidates"
        )[:scan]
    )
    out = []
    for request_id, occurred_at, status, shadow, estimate, packed in rows:
        items = stored_candidates(packed)
        reasons = tuple(
            sorted(
                {
                    (c.source, c.reason_code)
                    for c in items
                    if c.required and c.decision != "selected"
                }
            )
        )
        shadow_status = shadow.get("status") if isinstance(shadow, dict) else None
        if shadow_pass:
            view = shadow_view(
                shadow=shadow, status=status, candidates=items, input_estimate=estimate
            )
            if filters.disagree and view.agrees:
                continue
            if filters.disagree and filters.source and filters.source not in view.lost:
                continue
            if (
                not filters.disagree
                and filters.source
                and not any(
                    s == filters.source and (not filters.reason_code or c == code)
                    for s, c in view.required_missing
                )
            ):
                continue
            reasons = tuple(sorted(view.required_missing))
        out.append(RequestRow(request_id, occurred_at, status, shadow_status, reasons))
        if len(out) >= REQUEST_IDS_LIMIT:
            break
    return out


def shadow_fault_words(health: VersionHealth) -> list[str]:
    """Runtime faults on the live column, in words."""
    words = []
    unknown = health.faults.get(FAULT_SHADOW_VERSION_UNKNOWN)
    if unknown:
        words.append(
            f"{unknown} trace{'s' if unknown != 1 else ''} named a shadow version never "
            f"released as shadow in {health.environment.key}: stored, not counted."
        )
    return words
