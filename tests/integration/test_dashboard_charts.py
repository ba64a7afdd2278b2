"""The dashboard's status charts: counts per 6-hour bucket from the hourly rollups, release
changes on the axis, top exclusion reasons, and only the agents the user may investigate."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.template.loader import render_to_string
from django.utils import timezone

from strategies.releases.models import ReleaseEvent
from tests.factories import ReleaseFactory
from tests.factories.traces import world as traces_world
from traces.charts import chart_window
from traces.models import HourlyRollup
from traces.selectors import dashboard_context, status_charts

pytestmark = pytest.mark.django_db


@pytest.fixture
def w():
    return traces_world()


def rollup(w, hour, status, count, *, agent="assistant_professional", env="sg-test", **extra):
    return HourlyRollup.objects.create(
        hour=hour,
        agent=w["agents"][agent],
        environment=w["environments"][env],
        strategy="after_sales_consultation",
        strategy_version=3,
        status=status,
        count=count,
        **extra,
    )


def test_status_charts__rollups__counted_per_bucket_by_status(w, make_user):
    now = datetime(2026, 11, 30, 10, 20, tzinfo=UTC)
    start, end, buckets = chart_window(now)
    last = start + timedelta(hours=6 * (buckets - 1))  # the newest bucket: 06:00–12:00
    assert (start, last, end) == (
        datetime(2026, 11, 23, 12, tzinfo=UTC),
        datetime(2026, 11, 30, 6, tzinfo=UTC),
        datetime(2026, 11, 30, 10, tzinfo=UTC),
    )
    rollup(w, last, "ready", 4)
    rollup(w, last, "degraded", 1)
    rollup(w, last, "budget_exceeded", 2)
    rollup(w, last + timedelta(hours=1), "ready", 3)
    rollup(w, start + timedelta(hours=13), "source_conflict", 5)  # bucket 2
    rollup(w, start - timedelta(hours=1), "ready", 100)  # older than 7 days
    rollup(w, end, "ready", 9)  # the hour still open
    rollup(w, last, "ready", 2, env="prod")
    # Candidate rows: exclusions by source and reason (selected ones are not exclusions).
    policy, order = {"source": "applicable_policy"}, {"source": "order_delivery"}
    rollup(w, last, "budget_exceeded", 3, decision="over_budget", reason="does not fit", **policy)
    rollup(w, last, "ready", 1, decision="over_budget", reason="does not fit", **policy)
    rollup(w, last, "ready", 1, decision="over_budget", reason="does not fit", **order)
    rollup(w, last, "ready", 2, decision="not_fetched", reason="timeout", **order)
    rollup(w, last, "ready", 40, decision="selected", reason="required", **order)
    user = make_user("sup", support="assistant_professional")

    charts = status_charts(user=user, agents=list(w["agents"].values()), now=now)

    professional = w["agents"]["assistant_professional"]
    assert set(charts) == {professional.pk}
    sg_test, prod = charts[professional.pk]
    assert (sg_test.environment, prod.environment) == ("sg-test", "prod")
    assert len(sg_test.buckets) == buckets == 28
    assert sg_test.buckets[-1].counts == {"ready": 7, "degraded": 1, "budget_exceeded": 2}
    assert sg_test.buckets[2].counts == {"source_conflict": 5}
    assert sum(b.total for b in sg_test.buckets) == 15
    assert sg_test.totals == {"ready": 7, "degraded": 1, "failed": 7}
    assert [(s.group, s.height) for s in sg_test.buckets[-1].segments] == [
        ("ready", 42.0),
        ("degraded", 6.0),
        ("failed", 12.0),
    ]  # the tallest bar (10 traces) fills the 60 units
    assert "7 ready, 1 degraded, 2 budget exceeded" in sg_test.buckets[-1].title
    assert [(r.source, r.decision, r.reason, r.count) for r in sg_test.reasons] == [
        ("applicable_policy", "over_budget", "does not fit", 4),
        ("order_delivery", "not_fetched", "timeout", 2),
        ("order_delivery", "over_budget", "does not fit", 1),
    ]
    assert prod.buckets[-1].counts == {"ready": 2} and prod.reasons == []
    assert sg_test.summary.startswith("15 traces in sg-test in the last 7 days: 7 ready")


def test_status_charts__other_agents_grant__sees_only_that_agent(w, make_user):
    now = timezone.now()
    start, _end, _buckets = chart_window(now)
    rollup(w, start, "ready", 3)
    rollup(w, start, "ready", 5, agent="assistant_lite")
    lite = w["agents"]["assistant_lite"]
    viewer = make_user("viewer_only", viewer="assistant_professional")
    support = make_user("lite_support", support="assistant_lite")

    assert status_charts(user=viewer, agents=list(w["agents"].values()), now=now) == {}
    charts = status_charts(user=support, agents=list(w["agents"].values()), now=now)
    assert list(charts) == [lite.pk] and charts[lite.pk][0].buckets[0].counts == {"ready": 5}


def test_status_charts__release_event__marked_on_the_axis(w, make_user):
    professional = w["agents"]["assistant_professional"]
    release = ReleaseFactory(
        version__document__agent=professional, environment=w["environments"]["sg-test"]
    )
    ReleaseEvent.objects.create(
        release=release,
        revision=1,
        action="publish",
        to_version=release.version,
        actor="ops",
    )
    # A shadow's start changes no answer: not a mark (the single mark below is the publish)
    ReleaseEvent.objects.create(
        release=release, revision=1, action="shadow_start", to_version=release.version, actor="ops"
    )
    now = timezone.now() + timedelta(hours=2)  # the event's hour has closed
    start, _end, _buckets = chart_window(now)
    rollup(w, start, "ready", 1)

    (chart,) = status_charts(
        user=make_user("sup2", support=professional), agents=[professional], now=now
    )[professional.pk]

    (mark,) = chart.marks
    assert 0 < mark.x <= chart.width
    assert f"v{release.version.number} published by ops" in mark.label


def test_dashboard_part__no_rollups__empty_state_and_many_agents_in_few_queries(
    w, make_user, django_assert_max_num_queries
):
    user = make_user("sup3", support=None)
    agents = list(w["agents"].values())

    with django_assert_max_num_queries(4):
        status_charts(user=user, agents=agents)
    context = dashboard_context(user=user, agents=agents)
    html = render_to_string("traces/_dashboard_agent.html", {"agent": agents[0], **context})

    assert agents[0].trace_charts == []
    assert "No traces in the last 7 days" in html and "Connect a runtime" in html


def test_dashboard_part__rollups__svg_with_bars_legend_and_words(w, make_user):
    now = timezone.now()
    start, _end, buckets = chart_window(now)
    rollup(w, start + timedelta(hours=6 * (buckets - 1)), "ready", 4)
    rollup(w, start + timedelta(hours=6 * (buckets - 1)), "degraded", 2)
    user = make_user("sup4", support=None)
    agent = w["agents"]["assistant_professional"]

    context = dashboard_context(user=user, agents=[agent])
    html = render_to_string("traces/_dashboard_agent.html", {"agent": agent, **context})

    assert 'id="chart-assistant_professional-sg-test"' in html
    assert html.count('class="chart-seg chart-ready"') == 1
    assert html.count('class="chart-seg chart-degraded"') == 1
    assert "6 traces in sg-test in the last 7 days: 4 ready, 2 degraded, 0 failed." in html
    assert "✓ ready 4" in html and "degraded 2" in html
