"""The status charts' geometry (traces.charts): pure, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from traces.charts import CHART_BARS_HEIGHT, CHART_WIDTH, chart_window, release_mark, status_chart

NOW = datetime(2026, 11, 30, 10, 20, tzinfo=UTC)


def test_status_chart__counts__bars_scaled_to_the_fullest_bucket_ready_at_the_bottom():
    start, end, count = chart_window(NOW)
    buckets = [{} for _ in range(count)]
    buckets[0] = {"ready": 2, "budget_exceeded": 1, "source_conflict": 1}  # 4: the fullest
    buckets[1] = {"degraded": 1}

    chart = status_chart("prod", buckets, start=start, end=end, marks=[], ticks=[], reasons=[])

    full, one, empty = chart.buckets[0], chart.buckets[1], chart.buckets[2]
    assert [(s.group, s.height) for s in full.segments] == [
        ("ready", CHART_BARS_HEIGHT / 2),
        ("failed", CHART_BARS_HEIGHT / 2),  # the failures, whatever their status, one red bar
    ]
    assert full.segments[0].y == CHART_BARS_HEIGHT / 2  # ready sits on the baseline
    assert [(s.group, s.y, s.height) for s in one.segments] == [
        ("degraded", CHART_BARS_HEIGHT * 3 / 4, CHART_BARS_HEIGHT / 4)
    ]
    assert empty.segments == [] and empty.title.endswith("no traces")
    assert (one.x, chart.width) == (CHART_WIDTH, count * CHART_WIDTH)
    assert chart.totals == {"ready": 2, "degraded": 1, "failed": 2}
    assert chart.summary == "5 traces in prod in the last 7 days: 2 ready, 1 degraded, 2 failed."


def test_release_mark__on_the_axis_or_past_its_newest_bucket__placed_or_left_out():
    start, _end, count = chart_window(NOW)
    fields = dict(document="after_sales_consultation", number=4, actor="ana", start=start)

    mark = release_mark(
        when=start + timedelta(hours=9), action="rollback", bucket_count=count, **fields
    )
    late = release_mark(
        when=start + timedelta(hours=6 * count + 1),  # after the newest bucket ends
        action="publish",
        bucket_count=count,
        **fields,
    )

    assert mark.x == 1.5 * CHART_WIDTH  # 9 hours: half way through the second bucket
    assert mark.label.endswith("after_sales_consultation v4 rolled back to by ana")
    assert late is None
