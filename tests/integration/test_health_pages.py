"""The version-health page and API (traces.health): figures against a brute-force count over
the stored traces, the request ids behind them (access-logged), empty states, access, and
the glances on the releases page, the dashboard and the trace page."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from console.kernel.models import AccessLogEntry
from strategies.catalog.models import Agent, Environment
from strategies.documents.models import Document
from strategies.releases.models import Release
from tests.factories import candidate, post_batch, runtime_token, trace_payload
from tests.factories.documents import AgentFactory
from tests.factories.releases import publish, release_setup, shadow_history
from tests.factories.users import user_with_grants
from traces import stored
from traces.health import api, selectors
from traces.models import Trace

pytestmark = pytest.mark.django_db

DOC = "after_sales_consultation"


@pytest.fixture
def w():
    """v2 live in sg-test, then v3 published over it (R = when v3 went live)."""
    w = release_setup()
    sg = w.envs["sg-test"]
    publish(w.profile[1], sg, actor=w.ops)
    publish(w.strategy[2], sg, actor=w.ops)
    publish(w.strategy[3], sg, actor=w.ops)
    w.released_at = selectors.live_releases(agent_ids=[w.agent.pk], document=DOC)[0].released_at
    w.secret = runtime_token(sg)
    return w


def left_out(source="applicable_policy", code="provider_not_fetched"):
    return [
        candidate(),
        candidate("P7", source=source, decision="not_fetched", reason_code=code),
    ]


def traffic(w, *, version, at, n_ready, n_missing, n_degraded=0, shadow=None, prefix=""):
    batch = []
    for i in range(n_ready):
        batch.append(trace_payload(f"{prefix}ok-{i}", occurred_at=at.isoformat()))
    for i in range(n_missing):
        batch.append(
            trace_payload(
                f"{prefix}miss-{i}",
                occurred_at=at.isoformat(),
                status="missing_required_data",
                candidates=left_out(),
            )
        )
    for i in range(n_degraded):
        batch.append(
            trace_payload(
                f"{prefix}deg-{i}",
                occurred_at=at.isoformat(),
                status="degraded",
                degradation="general_policy_only",
            )
        )
    for trace in batch:
        trace["documents"] = {"profile": 1, DOC: version}
        if shadow:
            trace["shadow"] = shadow
    response = post_batch(w.client, w.secret, batch)
    assert response.json()["accepted"] == len(batch), response.json()


@pytest.fixture
def traffic_before_and_after(w, client):
    """v2 before the release of v3 (20 ready, 5 missing), v3 after (10 ready, 10 missing,
    3 degraded), a shadow v3 (A/A) on 4 of v3's requests, one disagreeing."""
    w.client = client
    # v3 also runs as its own shadow (A/A) from its release on
    live = Release.objects.get(document=w.strategy[3].document, environment=w.envs["sg-test"])
    shadow_history(live, (w.strategy[3], w.released_at, None))
    before = w.released_at - timedelta(minutes=20)
    after = w.released_at + timedelta(minutes=2)
    traffic(w, version=2, at=before, n_ready=20, n_missing=5, prefix="v2-")
    traffic(w, version=3, at=after, n_ready=10, n_missing=10, n_degraded=3, prefix="v3-")
    selected = ["task_state:T9", "P7-v2"]
    traffic(
        w,
        version=3,
        at=after,
        n_ready=3,
        n_missing=0,
        prefix="aa-",
        shadow={"version": 3, "status": "ready", "selected": selected},
    )
    traffic(
        w,
        version=3,
        at=after,
        n_ready=1,
        n_missing=0,
        prefix="aa-bad-",
        shadow={"version": 3, "status": "missing_required_data", "selected": ["task_state:T9"]},
    )
    return w


def brute_force(*, version, since, until, status=None):
    traces = Trace.objects.filter(
        strategy=DOC, strategy_version=version, occurred_at__gte=since, occurred_at__lt=until
    )
    return traces.filter(status=status).count() if status else traces.count()


def test_version_health__figures__match_a_count_over_the_stored_traces(traffic_before_and_after):
    w = traffic_before_and_after
    now = w.released_at + timedelta(minutes=30)
    health = selectors.version_health(
        user=w.ops,
        agent=w.agent,
        environment=w.envs["sg-test"],
        document=w.strategy[3].document,
        now=now,
    )
    out = api.version_health_out(health)
    columns = {c["slot"]: c for c in out["columns"]}
    assert set(columns) == {"previous", "live", "shadow:3"}
    live, previous = columns["live"], columns["previous"]
    # The same span on each side of the release: 30 minutes.
    assert out["window_hours"] == 0.5
    assert previous["until"] == w.released_at
    assert previous["since"] == w.released_at - timedelta(minutes=30)
    for column, version in ((live, 3), (previous, 2)):
        assert column["traces"] == brute_force(
            version=version, since=column["since"], until=column["until"]
        )
    metrics = {m["key"]: m["cells"] for m in out["metrics"]}
    for column, version, slot in ((live, 3, "live"), (previous, 2, "previous")):
        stored = brute_force(
            version=version,
            since=column["since"],
            until=column["until"],
            status="missing_required_data",
        )
        cell = metrics["status:missing_required_data"][slot]
        assert (cell["count"], cell["total"]) == (stored, column["traces"])
        assert cell["low"] <= cell["rate"] <= cell["high"]
    assert metrics["status:missing_required_data"]["live"]["count"] == 10
    assert metrics["status:missing_required_data"]["previous"]["count"] == 5
    # 10 of 27 against 5 of 25: the intervals overlap, so no change is claimed...
    assert metrics["failed"]["live"]["verdict"] == "same"
    # ...while the required source lost with its reason code is named.
    missing = metrics["required_missing:applicable_policy:provider_not_fetched"]
    assert (missing["live"]["count"], missing["previous"]["count"]) == (10, 5)
    assert metrics["degraded:general_policy_only"]["live"]["count"] == 3
    # A/A: the shadow runs v3 itself, so its one disagreement is a runtime fault.
    assert columns["shadow:3"]["a_a"] is True
    same_status = metrics["same_status"]["shadow:3"]
    assert (same_status["count"], same_status["total"], same_status["runtime_fault"]) == (
        3,
        4,
        True,
    )


def test_request_ids__behind_the_figure__the_right_ones_and_access_logged(
    traffic_before_and_after, client
):
    w = traffic_before_and_after
    client.force_login(w.ops)
    now = timezone.now()
    response = client.get(
        f"/api/v1/agents/{w.agent.key}/health/sg-test/{DOC}/requests",
        {
            "version": 3,
            "arm": "live",
            "since": w.released_at.isoformat(),
            "until": (now + timedelta(minutes=10)).isoformat(),
            "source": "applicable_policy",
            "reason_code": "provider_not_fetched",
        },
    )
    assert response.status_code == 200, response.content
    ids = {r["request_id"] for r in response.json()["requests"]}
    assert ids == {f"v3-miss-{i}" for i in range(10)}
    assert response.json()["requests"][0]["reason_codes"] == [
        ["applicable_policy", "provider_not_fetched"]
    ]
    logged = AccessLogEntry.objects.filter(action="trace.list").latest("pk")
    assert logged.detail["health"]["source"] == "applicable_policy"

    # The shadow's disagreements, on the page.
    page = client.get(
        f"/agents/{w.agent.key}/health/sg-test/{DOC}/requests",
        {
            "version": 3,
            "arm": "shadow",
            "since": w.released_at.isoformat(),
            "until": (now + timedelta(minutes=10)).isoformat(),
            "disagree": 1,
        },
    )
    assert page.status_code == 200
    assert b"aa-bad-ok-0" in page.content
    assert b"aa-ok-0" not in page.content


def test_request_ids__bad_filter__400_naming_the_field(w, client):
    client.force_login(w.ops)
    response = client.get(
        f"/api/v1/agents/{w.agent.key}/health/sg-test/{DOC}/requests",
        {"version": "x", "arm": "live", "since": "2026-12-01T00:00Z", "until": "2026-12-02T00:00Z"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"][0]["path"] == "version"


def test_version_health_page__with_traffic__rates_chart_and_links(traffic_before_and_after, client):
    w = traffic_before_and_after
    client.force_login(w.ops)
    response = client.get(f"/agents/{w.agent.key}/health/sg-test/{DOC}/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "Live: v3" in body
    assert 'id="health-series"' in body
    assert "A/A self-test" in body
    assert "request ids →" in body


def test_version_health_page__nothing_live__says_what_to_do(w, client):
    client.force_login(w.ops)
    response = client.get(f"/agents/{w.agent.key}/health/prod/{DOC}/")
    assert response.status_code == 200
    assert "Nothing is live here yet" in response.content.decode()


def test_version_health_page__live_without_traffic__empty_state(w, client):
    client.force_login(w.ops)
    body = client.get(f"/agents/{w.agent.key}/health/sg-test/{DOC}/").content.decode()
    assert "No traffic counted yet" in body
    assert "No shadow version ran" in body


def test_version_health__user_without_the_agent__404_and_viewer__403(w, client):
    stranger = user_with_grants("stranger", operator=AgentFactory(key="assistant_lite"))
    client.force_login(stranger)
    assert client.get(f"/agents/{w.agent.key}/health/sg-test/{DOC}/").status_code == 404
    assert client.get(f"/api/v1/agents/{w.agent.key}/health/sg-test/{DOC}/").status_code == 404
    viewer = user_with_grants("viewer1", viewer=w.agent)  # configuration only, no traces
    client.force_login(viewer)
    assert client.get(f"/agents/{w.agent.key}/health/sg-test/{DOC}/").status_code == 403
    # The releases page shows them no health glance.
    assert b"data-health-glance" not in client.get("/releases/").content


def test_releases_and_dashboard__glance_of_each_live_version(traffic_before_and_after, client):
    w = traffic_before_and_after
    client.force_login(w.ops)
    releases = client.get("/releases/").content.decode()
    assert f'data-health-glance="{DOC}-sg-test"' in releases
    assert f"/agents/{w.agent.key}/health/sg-test/{DOC}/" in releases
    dashboard = client.get("/").content.decode()
    assert f'data-health-glance="{DOC}-sg-test"' in dashboard
    glance = selectors.glances(user=w.ops, agents=[w.agent])[w.agent.pk][(DOC, "sg-test")]
    assert (glance.traces, glance.failures) == (27, 10)  # v3 only, since its release


def test_trace_page__left_out_required_item__how_often_since_the_release(
    traffic_before_and_after, client
):
    w = traffic_before_and_after
    client.force_login(w.ops)
    body = client.get("/traces/v3-miss-0/?environment=sg-test").content.decode()
    assert 'id="trace-patterns"' in body
    assert 'data-pattern="applicable_policy:provider_not_fetched"' in body
    assert "10 of 27 requests" in body
    # A ready trace has nothing left out: no card.
    assert (
        'id="trace-patterns"'
        not in client.get("/traces/v3-ok-0/?environment=sg-test").content.decode()
    )


def test_version_health_page__shadow_that_never_agrees__0_percent_row_with_its_request_ids(
    w, client
):
    """An agreement rate counts the requests that agree: at 0% every request is behind it,
    so its row and link show (a row is left out only when nothing is behind it)."""
    w.client = client
    live = Release.objects.get(document=w.strategy[3].document, environment=w.envs["sg-test"])
    shadow_history(live, (w.strategy[2], w.released_at, None))
    shadow = {"version": 2, "status": "budget_exceeded", "selected": ["task_state:T9"]}
    at = w.released_at + timedelta(minutes=2)
    traffic(w, version=3, at=at, n_ready=3, n_missing=0, shadow=shadow, prefix="never-")
    client.force_login(w.ops)

    body = client.get(f"/agents/{w.agent.key}/health/sg-test/{DOC}/").content.decode()

    for key in ("same_status", "same_selected"):
        row = body.split(f'data-metric="{key}"', 1)[1].split("</tr>", 1)[0]
        assert "0/3" in row and "0.0%" in row
        assert "disagree=1" in row and "request ids →" in row


def test_version_health__traffic_in_the_release_minute__counted_once_the_release_is_older(
    w, client
):
    """Counters are per minute: the requests of the release's own minute, after the release,
    belong to the live version for as long as the page looks back to its release."""
    w.client = client
    at = w.released_at + timedelta(seconds=1)
    traffic(w, version=3, at=at, n_ready=2, n_missing=1, prefix="first-minute-")

    for minutes_later in (0.5, 30, 24 * 60):
        health = selectors.version_health(
            user=w.ops,
            agent=w.agent,
            environment=w.envs["sg-test"],
            document=w.strategy[3].document,
            now=w.released_at + timedelta(minutes=minutes_later),
        )
        (live,) = [c for c in health.columns if c.slot == "live"]
        assert live.traces == 3, minutes_later
        assert live.since <= at


def test_demo__v3_in_sg_test__against_v2_over_the_same_hours_and_a_change_behind_its_requests(
    demo_world, client
):
    """Given the demo world (v2 live in sg-test for days, v3 since yesterday, traffic on
    both), when support opens v3's version-health page, then v3 is compared with v2 over the
    hours just before v3's release, both with traffic, and a rate that changed (v3 degrades
    where v2 failed) has request ids that are v3's stored traces, each with its trace page."""
    support = get_user_model().objects.get(username="support")
    agent = Agent.objects.get(key="assistant_professional")
    sg = Environment.objects.get(key="sg-test")
    health = selectors.version_health(
        user=support,
        agent=agent,
        environment=sg,
        document=Document.objects.get(agent=agent, key=DOC),
    )
    released_at = health.release.released_at
    assert timedelta(hours=6) < timezone.now() - released_at < timedelta(days=2)
    assert (health.previous.version, health.live.version) == (2, 3)
    assert health.previous.until == released_at
    assert health.previous.traces >= 50 and health.live.traces >= 50
    failed = next(m for m in health.metrics if m.key == "failed")
    assert failed.cells["previous"].rate.total and failed.cells["live"].rate.total
    changed = {
        m.key: m.cells["live"]
        for m in health.metrics
        if m.group != "outcome" and m.cells["live"].verdict in ("worse", "better")
    }
    assert "degraded:general_policy_only" in changed, changed
    # Outcomes per version beside the context-health rates, for both.
    outcome = next(m for m in health.metrics if m.key == "outcome:escalated:true")
    assert outcome.cells["previous"].rate.total and outcome.cells["live"].rate.total

    client.force_login(support)
    page = client.get(f"/agents/{agent.key}/health/sg-test/{DOC}/").content.decode()
    assert "Before: v2" in page and "Live: v3" in page
    row = page.split('data-metric="degraded:general_policy_only"')[1].split("</tr>")[0]
    live_cell = row.split('data-column="live"')[1]
    assert 'data-verdict="worse"' in live_cell
    link = html.unescape(re.search(r'href="([^"]+)" data-requests', live_cell).group(1))
    rows = client.get(link).context["rows"]
    assert len(rows) == changed["degraded:general_policy_only"].rate.count
    traces = Trace.objects.filter(request_id__in=[r.request_id for r in rows], environment=sg)
    assert {(t.strategy_version, t.status, t.degradation) for t in traces} == {
        (3, "degraded", "general_policy_only")
    }
    assert traces.count() == len(rows)
    assert client.get(f"/traces/{rows[0].request_id}/").status_code == 200


def _failed_verdicts(w, client, shadow_slot="shadow:2"):
    client.force_login(w.ops)
    page = client.get(f"/agents/{w.agent.key}/health/sg-test/{DOC}/").content.decode()
    row = page.split('data-metric="failed"', 1)[1].split("</tr>", 1)[0]
    return row.split(f'data-column="{shadow_slot}"', 1)[1].split("</td>", 1)[0]


def test_version_health__shadow_agreeing_on_16_of_16__never_worse_than_live(w, client):
    """Issue 31 item 8: a shadow started late in live's window ran on 16 requests, half of
    them failing for live too, and agreed on every one. Against live's rate over all of its
    hours (5%) its 50% looked worse; on the same requests it is the same."""
    w.client = client
    live = Release.objects.get(document=w.strategy[3].document, environment=w.envs["sg-test"])
    early = w.released_at + timedelta(seconds=1)
    later = w.released_at + timedelta(minutes=3)  # within the clock skew ingest accepts
    shadow_history(live, (w.strategy[2], later - timedelta(minutes=1), None))
    traffic(w, version=3, at=early, n_ready=190, n_missing=10, prefix="live-")
    ready = {"version": 2, "status": "ready", "selected": ["task_state:T9", "P7-v2"]}
    missing = {"version": 2, "status": "missing_required_data", "selected": ["task_state:T9"]}
    traffic(w, version=3, at=later, n_ready=8, n_missing=0, shadow=ready, prefix="agree-ok-")
    traffic(w, version=3, at=later, n_ready=0, n_missing=8, shadow=missing, prefix="agree-bad-")

    health = selectors.version_health(
        user=w.ops,
        agent=w.agent,
        environment=w.envs["sg-test"],
        document=Document.objects.get(agent=w.agent, key=DOC),
    )
    failed = next(m for m in health.metrics if m.key == "failed")
    shadow, live_cell = failed.cells["shadow:2"], failed.cells["live"]
    assert (shadow.rate.count, shadow.rate.total) == (8, 16)
    assert live_cell.rate.value < 0.1  # live over all of its hours
    assert shadow.verdict == "same"
    assert all(
        m.cells["shadow:2"].verdict in ("same", "")
        for m in health.metrics
        if "shadow:2" in m.cells and m.group != "agreement"
    )
    cell = _failed_verdicts(w, client)
    assert 'data-verdict="worse"' not in cell and "▲" not in cell


def test_version_health__shadow_failing_where_live_was_ready__worse_on_the_same_requests(w, client):
    """The paired comparison still tells a worse shadow: it failed on 12 of 16 requests
    live answered ready, and never the other way round."""
    w.client = client
    live = Release.objects.get(document=w.strategy[3].document, environment=w.envs["sg-test"])
    at = w.released_at + timedelta(minutes=2)
    shadow_history(live, (w.strategy[2], w.released_at, None))
    worse = {"version": 2, "status": "missing_required_data", "selected": ["task_state:T9"]}
    same = {"version": 2, "status": "ready", "selected": ["task_state:T9", "P7-v2"]}
    traffic(w, version=3, at=at, n_ready=12, n_missing=0, shadow=worse, prefix="worse-")
    traffic(w, version=3, at=at, n_ready=4, n_missing=0, shadow=same, prefix="same-")

    cell = _failed_verdicts(w, client)
    assert 'data-verdict="worse"' in cell


def test_request_ids__a_required_source_left_out__exactly_those_traces_newest_first(
    w, client, monkeypatch
):
    """The live arm's "source S missing" figure lists the requests where a required item of
    S was left out (with the reason code asked, or none: "-"), newest first — not those
    where S was selected, optional, or another source was missing; read in several chunks."""
    monkeypatch.setattr(stored, "WALK_CHUNK", 2)
    now = timezone.now()
    policy = {"source": "applicable_policy"}

    def sent(request_id, minutes_ago, candidates, status="missing_required_data"):
        trace = trace_payload(
            request_id,
            occurred_at=(now - timedelta(minutes=minutes_ago)).isoformat(),
            status=status,
            candidates=[candidate(), *candidates],
        )
        trace["documents"] = {"profile": 1, DOC: 3}
        return trace

    not_fetched = {"decision": "not_fetched", "reason_code": "provider_not_fetched"}
    batch = [
        sent("old-not-fetched", 9, [candidate("P7", **policy, **not_fetched)]),
        sent(
            "over-budget",
            8,
            [candidate("P7", **policy, decision="over_budget", reason_code="over_budget_required")],
        ),
        sent("optional", 7, [candidate("P7", **policy, required=False, **not_fetched)], "ready"),
        sent("selected", 6, [candidate("P7", **policy)], "ready"),
        sent("other-source", 5, [candidate("o", source="order_delivery", **not_fetched)]),
        sent("no-code", 4, [candidate("P7", **policy, decision="not_fetched")]),
        sent("new-not-fetched", 3, [candidate("P7", **policy, **not_fetched)]),
    ]
    assert post_batch(client, w.secret, batch).json()["accepted"] == len(batch)
    client.force_login(w.ops)

    def listed(reason_code: str) -> list[str]:
        response = client.get(
            f"/api/v1/agents/{w.agent.key}/health/sg-test/{DOC}/requests",
            {
                "version": 3,
                "arm": "live",
                "since": (now - timedelta(hours=1)).isoformat(),
                "until": (now + timedelta(minutes=10)).isoformat(),
                "source": "applicable_policy",
                "reason_code": reason_code,
            },
        )
        assert response.status_code == 200, response.content
        return [r["request_id"] for r in response.json()["requests"]]

    assert listed("provider_not_fetched") == ["new-not-fetched", "old-not-fetched"]
    assert listed("-") == ["no-code"]
    assert listed("") == ["new-not-fetched", "no-code", "over-budget", "old-not-fetched"]
