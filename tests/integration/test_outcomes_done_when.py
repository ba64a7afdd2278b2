"""Issue 22's "Done when" for outcomes: outcomes reported for demo requests show per version
on the version-health page and on each trace page, and a repeated report is stored once.

In the demo world sg-test runs v3, whose requests req-92 … req-97 have the demo's outcomes.
Ops publishes v2 there; sg-test's runtime (the SDK's engine path) serves requests with it and
the application reports their outcomes (the demo's own `outcomes_of`), then reports them all
again. The health figures of each version are checked against a count over the stored
outcomes and traces."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model

from console.demo import traffic
from strategies.catalog.models import Agent, Environment
from strategies.delivery.config import cache_clear_all
from strategies.documents.models import Version
from strategies.releases.services import release_publish
from tests.factories import runtime_token
from tests.factories.outcomes import post_outcomes
from tests.factories.sdk_traffic import sdk_traffic
from traces.health import api, selectors
from traces.health.counters import count_key
from traces.health.models import HealthCounter
from traces.models import Trace
from traces.outcomes.models import Outcome

pytestmark = pytest.mark.django_db

STRATEGY = "after_sales_consultation"


def outcome_rates(column: dict, version: int, env) -> dict[str, tuple[int, int]]:
    """Brute force: per 'kind:value', (outcomes with that value, outcomes of that kind) over
    the stored outcomes of the version's traces in the column's hours."""
    request_ids = set(
        Trace.objects.filter(
            environment=env,
            documents__contains={STRATEGY: version},
            occurred_at__gte=column["since"],
            occurred_at__lt=column["until"],
        ).values_list("request_id", flat=True)
    )
    values = Counter()
    for kind, value in Outcome.objects.filter(
        environment=env, request_id__in=request_ids
    ).values_list("kind__key", "value"):
        # A flag in JSON's words (escalated:true), as the page and API name it.
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        values[count_key(kind, text)] += 1
    kinds = Counter()
    for key, n in values.items():
        kinds[key.rsplit(":", 1)[0]] += n
    return {key: (n, kinds[key.rsplit(":", 1)[0]]) for key, n in values.items()}


def test_outcomes__demo_requests_per_version_on_health_and_trace_pages__repeat_stored_once(
    demo_world, client, django_capture_on_commit_callbacks
):
    cache_clear_all()  # Redis outlives the test database between runs
    ops = get_user_model().objects.get(username="ops")
    sg = Environment.objects.get(key="sg-test")
    secret = runtime_token(sg)
    v2 = Version.objects.get(document__key=STRATEGY, number=2)
    with django_capture_on_commit_callbacks(execute=True):
        release_publish(version=v2, environment=sg, actor=ops, reason="compare outcomes")

    sent = sdk_traffic(secret, count=60, prefix="after-", client=client)
    reports = [
        {"request_id": t.request_id, "kind": kind, "value": value, "agent": traffic.AGENT}
        for t in sent
        for kind, value in traffic.outcomes_of(t.request_id, t.status)
    ]
    first = post_outcomes(client, secret, reports)
    assert first.status_code == 200, first.content
    assert first.json()["accepted"] == len(reports) > 20
    stored = Outcome.objects.count()
    counted = HealthCounter.objects.filter(environment_id=sg.pk, version=2).values_list(
        "outcomes", flat=True
    )
    counted_before = sorted(map(str, counted))

    # The application reports them all again: each is a duplicate, stored and counted once.
    again = post_outcomes(client, secret, reports)
    assert again.status_code == 200, again.content
    assert again.json()["accepted"] == 0
    assert len(again.json()["duplicates"]) == len(reports)
    assert Outcome.objects.count() == stored
    assert sorted(map(str, counted)) == counted_before

    # Per version: live v2 over the hour since its release, v3 over the hour before it
    # (req-92 … req-97's time in sg-test).
    agent = Agent.objects.get(key=traffic.AGENT)
    (release,) = selectors.live_releases(agent_ids=[agent.pk], environment=sg, document=STRATEGY)
    health = selectors.version_health(
        user=ops,
        agent=agent,
        environment=sg,
        document=v2.document,
        now=release.released_at + timedelta(hours=1),
    )
    out = api.version_health_out(health)
    columns = {c["slot"]: c for c in out["columns"]}
    assert (columns["live"]["version"], columns["previous"]["version"]) == (2, 3)
    shown = {
        (slot, m["key"].removeprefix("outcome:")): (cell["count"], cell["total"])
        for m in out["metrics"]
        if m["group"] == "outcome"
        for slot, cell in m["cells"].items()
    }
    for slot, version in (("live", 2), ("previous", 3)):
        expected = outcome_rates(columns[slot], version, sg)
        assert expected, slot
        # (a value seen only in the other column shows here as 0 of the kind's total)
        assert {k: v for (s, k), v in shown.items() if s == slot and v[0]} == expected
    # req-97 (v3): everything required selected, and still a person had to take over.
    assert shown[("previous", "escalated:true")][0] >= 1

    # The page shows the outcome rows of the live version.
    client.force_login(ops)
    page = client.get(f"/agents/{traffic.AGENT}/health/sg-test/{STRATEGY}/").content.decode()
    assert "Live: v2" in page
    for (slot, key), (count, total) in shown.items():
        if slot == "live":
            row = page.split(f'data-metric="outcome:{key}"', 1)[1].split("</tr>", 1)[0]
            assert f"{count}/{total}" in row

    # Each trace page shows its outcomes: a demo request and one of the new ones.
    for request_id in ("req-97", reports[0]["request_id"]):
        body = client.get(f"/traces/{request_id}/?environment=sg-test").content.decode()
        card = body.split('id="outcomes"', 1)[1].split("</section>", 1)[0]
        for kind in Outcome.objects.filter(request_id=request_id).values_list(
            "kind__key", flat=True
        ):
            assert f'data-outcome="{kind}"' in card, (request_id, kind)
