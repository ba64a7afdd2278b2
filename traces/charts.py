"""The dashboard's status charts as geometry: counts per bucket turned into stacked bars, the
time axis, release marks and SVG coordinates (templates/_components/status_chart.html).

Pure: no queries and no Django. `traces.selectors.status_charts` reads the hourly rollups
and the release events and hands them here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from context_runtime.wire import STATUSES

from console.kernel.wording import counted

DASHBOARD_DAYS = 7
CHART_BUCKET_HOURS = 6  # one bar per 6 hours: 28 bars for the 7 days
CHART_TOP_REASONS = 5
# The three colours of the chart, bottom up: ready green, degraded amber, the failures red.
CHART_GROUPS = ("ready", "degraded", "failed")
CHART_GROUP_OF = {status: "failed" for status in STATUSES} | {
    "ready": "ready",
    "degraded": "degraded",
}
CHART_WIDTH = 10  # SVG units per bar slot (bar 8 + gap 2)
CHART_BARS_HEIGHT = 60  # SVG units for the bars; the axis labels sit under them


@dataclass
class ChartSegment:
    group: str  # ready | degraded | failed
    y: float
    height: float


@dataclass
class ChartBucket:
    start: object  # aware datetime (UTC)
    counts: dict  # status → traces
    x: int
    segments: list

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def title(self) -> str:
        end = self.start + timedelta(hours=CHART_BUCKET_HOURS)
        when = f"{self.start:%Y-%m-%d %H:%M}–{end:%H:%M} UTC"
        if not self.total:
            return f"{when}: no traces"
        parts = [
            f"{self.counts[status]} {status.replace('_', ' ')}"
            for status in sorted(STATUSES, key=lambda s: CHART_GROUPS.index(CHART_GROUP_OF[s]))
            if self.counts.get(status)
        ]
        return f"{when}: {counted(self.total, 'trace')} — {', '.join(parts)}"


@dataclass
class ChartMark:
    """A release change on the time axis."""

    x: float
    occurred_at: object
    label: str


@dataclass
class ChartTick:
    x: int
    label: str


@dataclass
class ExclusionReason:
    source: str
    decision: str
    reason: str
    count: int


@dataclass
class StatusChart:
    """Traces per 6 hours by status over the last 7 days, for one agent in one environment."""

    environment: str
    since: object
    until: object
    buckets: list
    marks: list
    ticks: list
    reasons: list  # the top exclusion reasons (candidates not sent), most frequent first
    totals: dict  # chart group → traces

    width: int = 0
    height: int = CHART_BARS_HEIGHT + 14
    bars_height: int = CHART_BARS_HEIGHT
    bar_width: int = CHART_WIDTH - 2

    @property
    def total(self) -> int:
        return sum(self.totals.values())

    @property
    def summary(self) -> str:
        """The chart in words, for screen readers (and the legend)."""
        return (
            f"{counted(self.total, 'trace')} in {self.environment} in the last {DASHBOARD_DAYS} days: "
            f"{self.totals['ready']} ready, {self.totals['degraded']} degraded, "
            f"{self.totals['failed']} failed"
            + (f"; {counted(len(self.marks), 'release change')} marked" if self.marks else "")
            + "."
        )


def chart_window(now) -> tuple:
    """(start, end, bucket count): the 28 six-hour buckets that end with the one holding the
    last closed hour, aligned to 00/06/12/18 UTC; `end` is the open hour (not counted)."""
    end = now.replace(minute=0, second=0, microsecond=0)
    last = end - timedelta(hours=1)
    last_bucket = last.replace(hour=last.hour - last.hour % CHART_BUCKET_HOURS)
    buckets = DASHBOARD_DAYS * 24 // CHART_BUCKET_HOURS
    start = last_bucket - timedelta(hours=CHART_BUCKET_HOURS * (buckets - 1))
    return start, end, buckets


def bucket_index(when, start) -> int:
    return int((when - start).total_seconds() // (CHART_BUCKET_HOURS * 3600))


def _chart_x(when, start) -> float:
    hours = (when - start).total_seconds() / 3600
    return round(hours * CHART_WIDTH / CHART_BUCKET_HOURS, 1)


def chart_ticks(start, bucket_count: int) -> list[ChartTick]:
    """A tick and a date label at each midnight (UTC) on the axis."""
    return [
        ChartTick(i * CHART_WIDTH, f"{start + timedelta(hours=CHART_BUCKET_HOURS * i):%m-%d}")
        for i in range(bucket_count)
        if (start + timedelta(hours=CHART_BUCKET_HOURS * i)).hour == 0
    ]


_ACTION_WORDS = {
    "publish": "published",
    "approve": "published (approved)",
    "rollback": "rolled back to",
}


def release_mark(
    *, when, document: str, action: str, number, actor: str, start, bucket_count: int
) -> ChartMark | None:
    """A release change where it falls on the axis; None past the newest bucket (its hours
    are not counted yet)."""
    x = _chart_x(when, start)
    if x > bucket_count * CHART_WIDTH:
        return None
    label = f"{when:%Y-%m-%d %H:%M} UTC: {document} v{number} {_ACTION_WORDS.get(action, action)}"
    return ChartMark(x, when, f"{label} by {actor}")


def status_chart(env, buckets, *, start, end, marks, ticks, reasons) -> StatusChart:
    """One environment's chart: `buckets` holds each bucket's counts by status, oldest first;
    the bars are scaled to the fullest bucket and stacked ready, degraded, failed."""
    peak = max((sum(b.values()) for b in buckets), default=0) or 1
    scale = CHART_BARS_HEIGHT / peak
    chart_buckets = []
    totals = dict.fromkeys(CHART_GROUPS, 0)
    for i, bucket_counts in enumerate(buckets):
        grouped = dict.fromkeys(CHART_GROUPS, 0)
        for status, count in bucket_counts.items():
            grouped[CHART_GROUP_OF.get(status, "failed")] += count
        segments, top = [], float(CHART_BARS_HEIGHT)
        for group in CHART_GROUPS:
            totals[group] += grouped[group]
            if grouped[group]:
                height = round(grouped[group] * scale, 2)
                top -= height
                segments.append(ChartSegment(group, round(top, 2), height))
        chart_buckets.append(
            ChartBucket(
                start=start + timedelta(hours=CHART_BUCKET_HOURS * i),
                counts=bucket_counts,
                x=i * CHART_WIDTH,
                segments=segments,
            )
        )
    return StatusChart(
        environment=env,
        since=start,
        until=end,
        buckets=chart_buckets,
        marks=marks,
        ticks=ticks,
        reasons=reasons,
        totals=totals,
        width=len(buckets) * CHART_WIDTH,
    )
