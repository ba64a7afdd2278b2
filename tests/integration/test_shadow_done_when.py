"""Issue 22's "Done when", end to end with the real console and traffic from the SDK's engine
path: in the demo world ops freezes a version equal to v3 but with a 4,000-token budget,
starts it as shadow in sg-test, and sg-test's runtime (configuration fetched from the
console, requests run by the engine and `replay.shadow_run`, traces posted to ingest) sends
its traffic. The traces name the shadow, the counters show its disagreements, the request ids
behind them are exactly the stored traces where the shadow decided otherwise, and promoting
it makes it live. An A/A shadow (v3 beside itself) over the same traffic agrees on every
request and reports no runtime fault."""

from __future__ import annotations

import copy

import pytest
from django.contrib.auth import get_user_model
from django.db.models import Sum

from strategies.catalog.models import Environment
from strategies.delivery.config import cache_clear_all
from strategies.documents.models import Version
from strategies.documents.services import draft_create, version_freeze
from strategies.releases.models import Release
from strategies.releases.services import shadow_promote, shadow_start
from tests.factories import runtime_token
from tests.factories.sdk_traffic import runtime_config, sdk_traffic
from tests.factories.traces import candidates_of
from traces.health.models import HealthCounter
from traces.models import Trace

pytestmark = pytest.mark.django_db

STRATEGY = "after_sales_consultation"
HEALTH = f"/api/v1/agents/assistant_professional/health/sg-test/{STRATEGY}/"
REQUESTS = 150  # sg-test's traffic while the shadow runs


@pytest.fixture
def sg(demo_world, django_capture_on_commit_callbacks):
    """The demo world with sg-test's runtime token; what the services do after commit (the
    configuration pushed to the cache) runs, so the runtime endpoint serves each change."""
    cache_clear_all()  # Redis outlives the test database between runs
    ops = get_user_model().objects.get(username="ops")
    env = Environment.objects.get(key="sg-test")

    def act(service, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return service(actor=ops, environment=env, **kwargs)

    return ops, env, runtime_token(env), act


def v3() -> Version:
    return Version.objects.get(document__key=STRATEGY, number=3)


def smaller_budget_version(ops) -> Version:
    """v3 with budget.max_input_tokens 4000, drafted and frozen through the documents service."""
    body = copy.deepcopy(v3().body)
    body["budget"]["max_input_tokens"] = 4000
    draft = draft_create(document=v3().document, body=body, actor=ops, note="a 4k budget?")
    return version_freeze(draft=draft, actor=ops)


def disagreeing(traces) -> set[str]:
    """Brute force over stored traces: where the shadow's status or selected set is not
    live's (live's selection read from the trace's stored candidates)."""
    out = set()
    for trace in traces:
        live_selected = {c.item_id for c in candidates_of(trace) if c.decision == "selected"}
        shadow = trace.shadow
        if shadow["status"] != trace.status or set(shadow["selected"]) != live_selected:
            out.add(trace.request_id)
    return out


def shadow_health(client, ops, version: int) -> tuple[dict, dict, dict]:
    """The version-health API's column and its metrics for the shadow of `version`."""
    client.force_login(ops)
    response = client.get(HEALTH)
    assert response.status_code == 200, response.content
    body = response.json()
    slot = f"shadow:{version}"
    (column,) = [c for c in body["columns"] if c["slot"] == slot]
    metrics = {m["key"]: m["cells"][slot] for m in body["metrics"] if slot in m["cells"]}
    return body, column, metrics


def shadow_counters(env, version: int) -> dict:
    return HealthCounter.objects.filter(
        environment_id=env.pk, document=STRATEGY, version=version, arm="shadow"
    ).aggregate(
        traces=Sum("traces"),
        compared=Sum("compared"),
        same_status=Sum("same_status"),
        same_selected=Sum("same_selected"),
    )


def test_shadow_4k__sdk_traffic__disagreements_with_their_request_ids__promoted_live(sg, client):
    ops, env, secret, act = sg
    v4 = smaller_budget_version(ops)
    assert v4.number == 4
    act(shadow_start, version=v4, reason="does 4k tokens keep the order?")
    served = runtime_config(client, secret)
    assert served["shadow"][STRATEGY]["version"] == 4
    assert served["strategies"][STRATEGY]["version"] == 3

    sdk_traffic(secret, count=REQUESTS, prefix="k4-", client=client)

    stored = Trace.objects.filter(request_id__startswith="k4-", environment=env)
    assert stored.count() == REQUESTS
    assert {(t.strategy_version, t.shadow["version"]) for t in stored} == {(3, 4)}
    expected = disagreeing(stored)
    # The demo's consultation needs about 5,000 tokens: over 4,000, so most requests differ.
    assert REQUESTS // 2 < len(expected) < REQUESTS
    statuses = {t.shadow["status"] for t in stored if t.request_id in expected}
    assert "budget_exceeded" in statuses

    # Counters, written at ingest.
    counted = shadow_counters(env, 4)
    assert counted["traces"] == counted["compared"] == REQUESTS
    differ_status = sum(1 for t in stored if t.shadow["status"] != t.status)
    assert counted["compared"] - counted["same_status"] == differ_status > 0
    assert counted["compared"] - counted["same_selected"] > 0

    # The version-health API: the shadow's column, its agreement figures and the ids behind.
    body, column, metrics = shadow_health(client, ops, 4)
    assert column["traces"] == REQUESTS and column["a_a"] is False
    assert metrics["same_status"]["count"] == counted["same_status"]
    assert metrics["same_status"]["total"] == REQUESTS
    assert metrics["same_status"]["runtime_fault"] is False
    assert column["token_delta_mean"] < 0  # the shadow packs fewer tokens
    listed = client.get(
        HEALTH + "requests",
        {
            "version": 4,
            "arm": "shadow",
            "since": column["since"],
            "until": column["until"],
            "disagree": 1,
        },
    )
    assert listed.status_code == 200, listed.content
    ids = [r["request_id"] for r in listed.json()["requests"]]
    assert len(ids) == len(set(ids)) == min(len(expected), listed.json()["limit"])
    assert set(ids) <= expected  # each one really disagrees in its stored trace
    shadow_statuses = {r["request_id"]: r["shadow_status"] for r in listed.json()["requests"]}
    assert all(shadow_statuses[i] == stored.get(request_id=i).shadow["status"] for i in ids)
    # The page's link is the same list.
    assert "disagree=1" in metrics["same_status"]["requests_url"]

    # Promote: a publish of v4 (sg-test is not protected); the runtime gets it with no shadow.
    outcome = act(shadow_promote, document=v4.document, reason="4k is what we want")
    assert outcome.approval is None
    assert Release.objects.get(document__key=STRATEGY, environment=env).version.number == 4
    served = runtime_config(client, secret)
    assert served["strategies"][STRATEGY]["version"] == 4 and served["shadow"] == {}
    after = sdk_traffic(secret, count=3, prefix="after-", client=client)
    assert {(t.documents[STRATEGY], t.shadow) for t in after} == {(4, None)}


def test_aa_shadow__v3_beside_itself__same_traffic_agrees_on_every_request_no_fault(sg, client):
    ops, env, secret, act = sg
    act(shadow_start, version=v3(), reason="A/A calibration")

    sdk_traffic(secret, count=REQUESTS, prefix="aa-", client=client)

    stored = Trace.objects.filter(request_id__startswith="aa-", environment=env)
    assert {(t.strategy_version, t.shadow["version"]) for t in stored} == {(3, 3)}
    assert disagreeing(stored) == set()
    assert shadow_counters(env, 3) == {
        "traces": REQUESTS,
        "compared": REQUESTS,
        "same_status": REQUESTS,
        "same_selected": REQUESTS,
    }
    body, column, metrics = shadow_health(client, ops, 3)
    assert column["a_a"] is True and column["traces"] == REQUESTS
    for key in ("same_status", "same_selected"):
        cell = metrics[key]
        assert (cell["count"], cell["total"], cell["rate"]) == (REQUESTS, REQUESTS, 1.0)
        assert cell["runtime_fault"] is False and cell["requests_url"] == ""
    assert body["runtime_faults"] == {}
    assert column["token_delta_mean"] == 0
    lost = {k: cell["count"] for k, cell in metrics.items() if k.startswith("required_lost:")}
    assert lost and set(lost.values()) == {0}  # no required item dropped by the shadow
