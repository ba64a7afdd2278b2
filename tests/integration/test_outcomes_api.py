"""Outcomes end to end against PostgreSQL: POST /api/v1/runtime/outcomes (docs/runtime-contract.md
§3b), the operator's kinds and reads, and retention."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from console.kernel.models import AccessLogEntry, AuditRecord
from tests.factories import post_batch, runtime_token, trace_payload, user_with_grants, world
from tests.factories.outcomes import outcome_kinds, post_outcomes
from traces import tasks
from traces.health.models import HealthCounter
from traces.outcomes import selectors
from traces.outcomes import services as outcome_services
from traces.outcomes.models import Outcome, OutcomeKind

pytestmark = pytest.mark.django_db


@pytest.fixture
def env():
    data = world()
    outcome_kinds(data["environments"]["sg-test"])
    return data


@pytest.fixture
def secret(env):
    return runtime_token(env["environments"]["sg-test"])


def outcome(request_id="req-97", kind="escalated", value=True, **fields) -> dict:
    return {
        "request_id": request_id,
        "kind": kind,
        "value": value,
        "agent": "assistant_professional",
        **fields,
    }


def stored() -> set[tuple]:
    return set(Outcome.objects.values_list("request_id", "kind__key", "value"))


# --- the batch -----------------------------------------------------------------------------------
def test_report__valid_batch__each_stored_once_with_its_token(client, secret):
    response = post_outcomes(
        client,
        secret,
        [outcome(), outcome(kind="rating", value=1), outcome(kind="resolution", value="refund")],
    )
    assert response.status_code == 200
    assert response.json() == {"accepted": 3, "duplicates": [], "rejected": []}
    assert stored() == {
        ("req-97", "escalated", True),
        ("req-97", "rating", 1),
        ("req-97", "resolution", "refund"),
    }
    row = Outcome.objects.get(kind__key="rating")
    assert row.reported_by == "test sg-test"
    assert row.agent.key == "assistant_professional"


def test_report__same_outcome_again__duplicate_and_stored_once(client, secret):
    post_outcomes(client, secret, [outcome(), outcome(kind="rating", value=1)])
    response = post_outcomes(client, secret, [outcome(), outcome(kind="rating", value=1)])
    assert response.json() == {
        "accepted": 0,
        "duplicates": [
            {"index": 0, "request_id": "req-97", "kind": "escalated"},
            {"index": 1, "request_id": "req-97", "kind": "rating"},
        ],
        "rejected": [],
    }
    assert Outcome.objects.count() == 2


def test_report__other_value_for_a_reported_kind__refused_and_first_kept(client, secret):
    post_outcomes(client, secret, [outcome(kind="rating", value=1)])
    response = post_outcomes(
        client, secret, [outcome(kind="rating", value=5), outcome("req-96", value=False)]
    )
    body = response.json()
    assert body["accepted"] == 1
    (rejected,) = body["rejected"]
    assert (rejected["index"], rejected["request_id"], rejected["kind"]) == (0, "req-97", "rating")
    (error,) = rejected["errors"]
    assert (error["path"], error["code"]) == ("value", "conflicting_value")
    assert "already reported as 1" in error["message"]
    assert Outcome.objects.get(request_id="req-97").value == 1


def test_report__repeated_within_one_batch__same_is_duplicate_other_refused(client, secret):
    response = post_outcomes(
        client, secret, [outcome(), outcome(), outcome(value=False), outcome(value=1)]
    )
    body = response.json()
    assert body["accepted"] == 1
    assert body["duplicates"] == [{"index": 1, "request_id": "req-97", "kind": "escalated"}]
    # false is another value; 1 is no flag at all (true is not 1)
    assert [(r["index"], r["errors"][0]["code"]) for r in body["rejected"]] == [
        (2, "conflicting_value"),
        (3, "invalid_value"),
    ]
    assert stored() == {("req-97", "escalated", True)}


@pytest.mark.parametrize("value", [True, False], ids=["same_value", "other_value"])
def test_report__id_preempted_by_another_agents_token__taken_not_duplicate_nor_conflicting_value(
    client, env, value
):
    # Given a token for assistant_lite that reported an outcome under a predictable id first
    sg_test = env["environments"]["sg-test"]
    lite_only = runtime_token(sg_test, agents=[env["agents"]["assistant_lite"]])
    first = post_outcomes(client, lite_only, [outcome(agent="assistant_lite")]).json()
    assert first["accepted"] == 1
    # When assistant_professional's runtime reports the outcome of its own request
    professional_only = runtime_token(sg_test, agents=[env["agents"]["assistant_professional"]])
    body = post_outcomes(client, professional_only, [outcome(value=value)]).json()
    # Then it sees a conflict on the request id (naming no agent outside its token), not a
    # duplicate that says it was stored, nor a value conflict that says it reported twice
    assert body["accepted"] == 0
    assert body["duplicates"] == []
    ((error,),) = [r["errors"] for r in body["rejected"]]
    assert (error["path"], error["code"]) == ("request_id", "request_id_taken")
    assert "assistant_lite" not in error["message"]
    assert list(Outcome.objects.values_list("agent__key", "value")) == [("assistant_lite", True)]


def test_report__same_request_and_kind_for_two_agents_in_one_batch__second_taken(client, secret):
    outcomes = [outcome(), outcome(agent="assistant_lite"), outcome()]
    body = post_outcomes(client, secret, outcomes).json()
    assert body["accepted"] == 1
    assert body["duplicates"] == [{"index": 2, "request_id": "req-97", "kind": "escalated"}]
    ((error,),) = [r["errors"] for r in body["rejected"] if r["index"] == 1]
    assert (error["path"], error["code"]) == ("request_id", "request_id_taken")
    assert "assistant_professional" in error["message"]


def test_report__unknown_or_retired_kind__rejected_naming_the_declared_kinds(client, secret, env):
    OutcomeKind.objects.filter(key="resolution").update(retired_at=timezone.now())
    response = post_outcomes(
        client,
        secret,
        [outcome(kind="nps", value=9), outcome(kind="resolution", value="refund"), outcome()],
    )
    body = response.json()
    assert body["accepted"] == 1
    unknown, retired = body["rejected"]
    assert unknown["errors"][0]["path"] == "kind"
    assert unknown["errors"][0]["code"] == "unknown_kind"
    assert unknown["errors"][0]["message"] == (
        "'nps' is not an outcome kind of 'sg-test'; declared: escalated, rating, task_completed"
    )
    assert retired["errors"][0]["code"] == "retired_kind"


def test_report__environment_without_kinds__refused_saying_an_admin_declares_them(client, env):
    secret = runtime_token(env["environments"]["prod"])
    response = post_outcomes(client, secret, [outcome()])
    (rejected,) = response.json()["rejected"]
    assert "none yet (an admin declares them)" in rejected["errors"][0]["message"]


@pytest.mark.parametrize(
    "kind, value, words",
    [
        ("rating", 7, "a rating is a whole number from 1 to 5"),
        ("rating", True, "a rating is a whole number from 1 to 5"),
        ("escalated", "yes", "a flag is true or false"),
        ("resolution", "lost", "one of refund, replacement, explained, other"),
    ],
)
def test_report__value_the_kind_does_not_take__rejected_at_value(
    client, secret, kind, value, words
):
    response = post_outcomes(client, secret, [outcome(kind=kind, value=value)])
    (rejected,) = response.json()["rejected"]
    assert rejected["errors"][0]["path"] == "value"
    assert words in rejected["errors"][0]["message"]
    assert not Outcome.objects.exists()


def test_report__late_within_retention_accepted_older_or_future_refused(client, secret):
    now = timezone.now()
    response = post_outcomes(
        client,
        secret,
        [
            outcome("req-1", occurred_at=(now - timedelta(days=29)).isoformat()),
            outcome("req-2", occurred_at=(now - timedelta(days=31)).isoformat()),
            outcome("req-3", occurred_at=(now + timedelta(hours=1)).isoformat()),
            outcome("req-4", occurred_at="2026-11-30T09:12:00"),
        ],
    )
    body = response.json()
    assert body["accepted"] == 1
    messages = {r["request_id"]: r["errors"][0] for r in body["rejected"]}
    assert "older than this environment's trace retention (30 days)" in messages["req-2"]["message"]
    assert "in the future" in messages["req-3"]["message"]
    assert messages["req-4"]["message"] == "needs a timezone, e.g. 2026-11-30T09:12Z"
    assert stored() == {("req-1", "escalated", True)}


def test_report__before_its_trace__kept_and_the_trace_page_shows_it_later(client, secret, env):
    post_outcomes(client, secret, [outcome("req-1")])
    assert post_batch(client, secret, [trace_payload("req-1")]).json()["accepted"] == 1
    rows = selectors.outcomes_for_requests(
        environment_id=env["environments"]["sg-test"].pk, request_ids=["req-1"]
    )
    assert [(r.kind, r.value, r.bad, r.rate_name) for r in rows["req-1"]] == [
        ("escalated", True, True, "escalation rate")
    ]


def test_report__without_agent__the_stored_traces_or_the_tokens_only_agent(client, env, secret):
    post_batch(client, secret, [trace_payload("req-1", agent="assistant_lite")])
    no_agent = {"request_id": "req-1", "kind": "escalated", "value": True}
    assert post_outcomes(client, secret, [no_agent]).json()["accepted"] == 1
    assert Outcome.objects.get().agent.key == "assistant_lite"
    # No trace yet and a token for every agent: which agent is unknowable.
    response = post_outcomes(client, secret, [{**no_agent, "request_id": "req-2"}])
    assert response.json()["rejected"][0]["errors"][0]["path"] == "agent"
    # A token for one agent: that one.
    sg_test = env["environments"]["sg-test"]
    one = runtime_token(sg_test, agents=[env["agents"]["assistant_professional"]])
    assert post_outcomes(client, one, [{**no_agent, "request_id": "req-2"}]).json()["accepted"] == 1
    # Named, but the trace is another agent's.
    mismatch = post_outcomes(client, secret, [outcome("req-1", kind="rating", value=3)])
    assert mismatch.json()["rejected"][0]["errors"][0]["code"] == "agent_mismatch"
    # A request of an agent outside the token's scope is not the token's to judge.
    taken = post_outcomes(client, one, [{**no_agent, "kind": "rating", "value": 3}])
    assert taken.json()["rejected"][0]["errors"][0]["code"] == "request_id_taken"


@pytest.mark.parametrize("capabilities", [("outcomes:write",), ("traces:write",)])
def test_report__either_capability__accepted(client, env, capabilities):
    secret = runtime_token(env["environments"]["sg-test"], capabilities=capabilities)
    assert post_outcomes(client, secret, [outcome()]).json()["accepted"] == 1


def test_report__no_token_401_token_without_capability_403(client, env):
    assert post_outcomes(client, None, [outcome()]).status_code == 401
    assert post_outcomes(client, "cc_rt_unknown", [outcome()]).status_code == 401
    secret = runtime_token(env["environments"]["sg-test"], capabilities=("config:read",))
    response = post_outcomes(client, secret, [outcome()])
    assert response.status_code == 403
    assert "outcomes:write" in response.json()["error"]["message"]
    assert not Outcome.objects.exists()


@pytest.mark.parametrize(
    "body, code, path",
    [
        (b"", "malformed_json", "outcomes"),
        (b"{not json", "malformed_json", ""),
        (b'{"traces": []}', "validation_failed", "outcomes"),
        (b'{"outcomes": {"request_id": "req-1"}}', "validation_failed", "outcomes"),
        (
            b'{"outcomes": [' + b",".join([b"{}"] * 1001) + b"]}",
            "too_many_outcomes",
            "outcomes",
        ),
    ],
)
def test_report__malformed_batch__400_and_nothing_stored(client, secret, body, code, path):
    response = post_outcomes(client, secret, body=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["details"][0]["path"]) == (code, path)
    assert not Outcome.objects.exists()


def test_report__malformed_item__rejected_alone_with_its_path(client, secret):
    response = post_outcomes(
        client,
        secret,
        [
            {"request_id": "req-1", "kind": "escalated"},
            {"request_id": "a b", "kind": "x", "value": 1},
            outcome(),
        ],
    )
    body = response.json()
    assert body["accepted"] == 1
    assert [
        (r["index"], r["errors"][0]["path"], r["errors"][0]["code"]) for r in body["rejected"]
    ] == [
        (0, "value", "required"),
        (1, "request_id", "invalid_format"),
    ]


def live_outcome_counts() -> dict:
    counts: dict = {}
    for row in HealthCounter.objects.filter(arm="live", document="after_sales_consultation"):
        for key, n in row.outcomes.items():
            counts[key] = counts.get(key, 0) + n
    return counts


def test_health_counters__outcome_of_a_stored_trace__counted_at_once_and_once(client, secret):
    post_batch(client, secret, [trace_payload("req-97")])

    post_outcomes(client, secret, [outcome(), outcome(kind="rating", value=1)])
    post_outcomes(client, secret, [outcome()])  # a repeat: a duplicate, not counted again

    assert live_outcome_counts() == {"escalated:true": 1, "rating:1": 1}
    assert not Outcome.objects.filter(counted_at__isnull=True).exists()


def test_health_counters__outcome_before_its_trace__counted_when_the_trace_arrives(
    client, secret, settings
):
    post_outcomes(client, secret, [outcome("req-early")])
    assert live_outcome_counts() == {}  # no trace: nothing to count it on yet
    assert tasks.count_pending_outcomes() == 0

    post_batch(client, secret, [trace_payload("req-early")])
    assert settings.CELERY_BEAT_SCHEDULE["traces-count-pending-outcomes"]["schedule"] <= 60
    assert tasks.count_pending_outcomes() == 1
    assert tasks.count_pending_outcomes() == 0  # counted once

    assert live_outcome_counts() == {"escalated:true": 1}


def test_count_pending__outcomes_that_can_never_count__do_not_hold_up_the_ones_that_can(
    client, secret, env
):
    # Given outcomes stored before their trace that will never count: another agent's token
    # took the ids of assistant_professional's coming requests, and one trace never came
    lite_only = runtime_token(
        env["environments"]["sg-test"], agents=[env["agents"]["assistant_lite"]]
    )
    for request_id in ("req-a", "req-b"):
        post_outcomes(client, lite_only, [outcome(request_id, agent="assistant_lite")])
    post_outcomes(client, secret, [outcome("req-never")])
    post_batch(client, secret, [trace_payload("req-a"), trace_payload("req-b")])
    # When a real late outcome's trace arrives, behind them in the queue
    post_outcomes(client, secret, [outcome("req-late", kind="rating", value=2)])
    post_batch(client, secret, [trace_payload("req-late")])
    # Then the task, even taking one at a time, counts it on its first run
    assert outcome_services.outcomes_count_pending(batch_size=1) == 1
    assert live_outcome_counts() == {"rating:2": 1}
    assert outcome_services.outcomes_count_pending(batch_size=1) == 0
    assert Outcome.objects.filter(counted_at__isnull=True).count() == 3  # kept, not counted


# --- retention -----------------------------------------------------------------------------------
def test_purge__outcomes_past_the_trace_retention_go_with_the_traces_task(client, secret, env):
    post_outcomes(
        client,
        secret,
        [
            outcome("req-old", occurred_at=(timezone.now() - timedelta(days=20)).isoformat()),
            outcome(),
        ],
    )
    sg_test = env["environments"]["sg-test"]
    sg_test.trace_retention_days = 10
    sg_test.save()
    assert tasks.purge_expired()["outcomes"] == 1
    assert stored() == {("req-97", "escalated", True)}


# --- operator API ------------------------------------------------------------------------------
def test_read__outcomes_of_a_request__for_those_who_see_its_traces_and_logged(client, secret, env):
    post_outcomes(client, secret, [outcome(), outcome(kind="rating", value=1)])
    support = user_with_grants(support="assistant_professional")
    client.force_login(support)
    response = client.get("/api/v1/outcomes", {"request_id": "req-97"})
    assert response.status_code == 200
    assert [(o["kind"], o["value"], o["bad"]) for o in response.json()["outcomes"]] == [
        ("escalated", True, True),
        ("rating", 1, True),
    ]
    assert AccessLogEntry.objects.filter(action="outcome.view", target_id="req-97").exists()
    lite = user_with_grants(support="assistant_lite")
    client.force_login(lite)
    assert client.get("/api/v1/outcomes", {"request_id": "req-97"}).json()["outcomes"] == []
    assert client.get("/api/v1/outcomes").status_code == 400


def test_kinds_api__admin_declares_changes_retires_each_audited(client, env):
    admin = user_with_grants(admin=None)
    client.force_login(admin)
    url = "/api/v1/environments/prod/outcome-kinds"
    created = client.post(
        url,
        {
            "key": "csat",
            "label": "Satisfaction",
            "type": "rating",
            "rating_min": 1,
            "rating_max": 5,
            "bad_values": [1],
        },
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    assert created.json()["bad_values"] == [1]
    narrowed = client.patch(url + "/csat", {"rating_max": 4}, content_type="application/json")
    assert narrowed.status_code == 400
    assert narrowed.json()["error"]["details"][0]["code"] == "narrowed"
    widened = client.patch(
        url + "/csat",
        {"rating_max": 10, "rate_label": "unhappy rate"},
        content_type="application/json",
    )
    assert (widened.json()["rating_max"], widened.json()["rate_label"]) == (10, "unhappy rate")
    retired = client.patch(url + "/csat", {"retired": True}, content_type="application/json")
    assert retired.json()["retired"] is True
    assert list(
        AuditRecord.objects.filter(target_type="outcome_kind")
        .values_list("action", flat=True)
        .order_by("id")
    ) == [
        "outcome_kind.declare",
        "outcome_kind.update",
        "outcome_kind.retire",
    ]
    assert [k["key"] for k in client.get(url).json()] == ["csat"]


def test_kinds_api__operator_refused_and_bad_declaration_named_at_its_fields(client, env):
    operator = user_with_grants(operator="assistant_professional")
    client.force_login(operator)
    url = "/api/v1/environments/sg-test/outcome-kinds"
    refused = client.post(
        url, {"key": "x", "label": "X", "type": "flag"}, content_type="application/json"
    )
    assert refused.status_code == 403
    client.force_login(user_with_grants(admin=None))
    bad = client.post(
        url,
        {"key": "Bad Key", "label": "X", "type": "label", "choices": [], "bad_values": ["nope"]},
        content_type="application/json",
    )
    assert bad.status_code == 400
    assert {d["path"] for d in bad.json()["error"]["details"]} == {"key", "choices"}
    taken = client.post(
        url, {"key": "escalated", "label": "Again", "type": "flag"}, content_type="application/json"
    )
    assert taken.status_code == 409
    assert client.get("/api/v1/environments/nowhere/outcome-kinds").status_code == 404
