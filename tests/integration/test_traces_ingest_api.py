"""POST /api/v1/runtime/traces, end to end against PostgreSQL (docs/runtime-contract.md §3)."""

from __future__ import annotations

import html

import msgspec
import orjson
import pytest
from context_runtime import wire
from context_runtime.reporter import encode_trace

from tests.factories import candidate, post_batch, runtime_token, trace_payload, world
from tests.factories.traces import candidates_of, snapshots_allowed
from traces.models import RequestKey, Snapshot, Trace

pytestmark = pytest.mark.django_db


def candidates_stored() -> int:
    """How many candidates every stored trace holds."""
    return len(candidates_of(Trace.objects.all()))


def candidate_of(trace, item_id: str):
    (found,) = [c for c in candidates_of(trace) if c.item_id == item_id]
    return found


@pytest.fixture
def env():
    return world()


@pytest.fixture
def secret(env):
    return runtime_token(env["environments"]["sg-test"])


def test_ingest__valid_batch__stored_committed_with_candidates(client, secret):
    response = post_batch(client, secret, [trace_payload("req-92"), trace_payload("req-93")])
    assert response.status_code == 200
    assert response.json() == {"accepted": 2, "duplicates": [], "rejected": []}
    trace = Trace.objects.get(request_id="req-92")
    assert (trace.environment.key, trace.strategy_version, trace.profile_version) == (
        "sg-test",
        3,
        7,
    )
    assert (trace.task_id, trace.task_revision, trace.model_name) == ("T9", 4, "model-x")
    assert [(c.item_id, c.decision) for c in candidates_of(trace)] == [
        ("task_state:T9", "selected"),
        ("P7-v2", "selected"),
        ("old-chat", "irrelevant"),
    ]


def test_ingest__same_batch_reposted__nothing_new_and_each_duplicate_named(client, secret):
    batch = [trace_payload("req-92"), trace_payload("req-93")]
    post_batch(client, secret, batch)
    response = post_batch(client, secret, batch)
    assert response.json() == {"accepted": 0, "duplicates": ["req-92", "req-93"], "rejected": []}
    assert Trace.objects.count() == 2
    assert candidates_stored() == 6


def test_ingest__request_id_repeated_within_batch__stored_once(client, secret):
    response = post_batch(client, secret, [trace_payload("req-1"), trace_payload("req-1")])
    assert response.json()["accepted"] == 1
    assert response.json()["duplicates"] == ["req-1"]
    assert candidates_stored() == 3


def test_ingest__invalid_item__rejected_alone_rest_stored(client, secret):
    bad = trace_payload("req-58")
    bad["candidates"][2]["decision"] = "maybe"
    response = post_batch(client, secret, [trace_payload("req-1"), bad, trace_payload("req-2")])
    body = response.json()
    assert response.status_code == 200
    assert body["accepted"] == 2
    assert body["rejected"] == [
        {
            "index": 1,
            "request_id": "req-58",
            "errors": [
                {
                    "path": "candidates[2].decision",
                    "code": "invalid_choice",
                    "message": "must be one of " + ", ".join(wire.DECISIONS),
                    "severity": "error",
                }
            ],
        }
    ]
    assert not Trace.objects.filter(request_id="req-58").exists()


def test_ingest__too_many_candidates__item_rejected(client, secret):
    response = post_batch(client, secret, [trace_payload("req-1", candidates=[candidate()] * 501)])
    assert response.json()["rejected"][0]["errors"][0]["path"] == "candidates"
    assert Trace.objects.count() == 0


def test_ingest__unknown_agent_or_outside_token_scope__same_rejection(client, env):
    scoped = runtime_token(
        env["environments"]["sg-test"], agents=[env["agents"]["assistant_professional"]]
    )
    response = post_batch(
        client,
        scoped,
        [trace_payload("a", agent="nobody"), trace_payload("b", agent="assistant_lite")],
    )
    errors = [r["errors"][0] for r in response.json()["rejected"]]
    assert [e["code"] for e in errors] == ["unknown_agent", "unknown_agent"]
    assert [e["path"] for e in errors] == ["agent", "agent"]
    assert Trace.objects.count() == 0


def test_ingest__token_of_another_environment__writes_only_its_own(client, env):
    prod_secret = runtime_token(env["environments"]["prod"])
    response = post_batch(
        client,
        prod_secret,
        [trace_payload("a", environment="sg-test"), trace_payload("b")],
    )
    body = response.json()
    assert body["accepted"] == 1
    assert body["rejected"][0]["errors"][0]["code"] == "environment_mismatch"
    assert Trace.objects.get(request_id="b").environment.key == "prod"


def test_ingest__token_without_trace_capability__403(client, env):
    secret = runtime_token(env["environments"]["sg-test"], capabilities=["config:read"])
    response = post_batch(client, secret, [trace_payload()])
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


@pytest.mark.parametrize("secret", [None, "cc_rt_unknown"])
def test_ingest__missing_or_unknown_token__401(client, env, secret):
    response = post_batch(client, secret, [trace_payload()])
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


def test_ingest__malformed_json__400_in_error_shape(client, secret):
    response = post_batch(client, secret, body=b'{"traces": [')
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_json"


def test_ingest__over_1000_traces__400_nothing_stored(client, secret):
    response = post_batch(client, secret, [trace_payload(f"r{i}") for i in range(1001)])
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "too_many_traces"
    assert Trace.objects.count() == 0


def test_ingest__body_over_byte_limit__413(client, secret):
    big = orjson.dumps({"traces": [trace_payload(principal="x" * 100)]}) + b" " * (
        wire.MAX_BATCH_BYTES
    )
    response = post_batch(client, secret, body=big)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert Trace.objects.count() == 0


def test_ingest__snapshot__stored_encrypted_apart_with_environment_expiry(client, secret, env):
    snapshots_allowed()
    response = post_batch(
        client, secret, [trace_payload("req-92", snapshot={"messages": ["secret words"]})]
    )
    assert response.json()["accepted"] == 1
    snapshot = Snapshot.objects.get(trace__request_id="req-92")
    assert b"secret words" not in bytes(snapshot.ciphertext)
    days = env["environments"]["sg-test"].snapshot_retention_days
    assert (snapshot.expires_at - snapshot.created_at).days == days
    assert Trace.objects.get(request_id="req-92").snapshot_expires_at == snapshot.expires_at


def test_ingest__batch_size__query_count_does_not_grow_with_it(
    client, secret, django_assert_max_num_queries
):
    # 13: the batch's kinds numbered, then held until the commit (traces.stored).
    with django_assert_max_num_queries(13):
        post_batch(client, secret, [trace_payload(f"small-{i}") for i in range(2)])
    with django_assert_max_num_queries(13):
        response = post_batch(client, secret, [trace_payload(f"big-{i}") for i in range(300)])
    assert response.json()["accepted"] == 300
    assert candidates_stored() == 3 * 302


@pytest.mark.django_db(transaction=True)
def test_ingest__same_request_id_from_concurrent_batches__stored_once(env):
    """Two runtimes retrying at once: ON CONFLICT waits for the other commit, then skips."""
    import threading

    from django.db import connection
    from django.test import Client

    secret = runtime_token(env["environments"]["sg-test"])
    results = []

    def send():
        results.append(post_batch(Client(), secret, [trace_payload("req-race")]).json())
        connection.close()

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r["accepted"] for r in results) == [0, 0, 0, 1]
    assert Trace.objects.filter(request_id="req-race").count() == 1
    assert candidates_stored() == 3


def test_ingest__config_source_and_replay_fields__stored_and_exported(client, secret, make_user):
    payload = trace_payload(
        "req-stale",
        config_fallback=True,
        config_resolution="stale",
        config_age_seconds=184.5,
        candidates=[
            candidate(
                "order:A1042",
                source="order_delivery",
                decision="not_fetched",
                outcome="not_fetched",
                note="order service timed out after 2,000 ms",
            ),
            candidate(
                "old-chat",
                source="recent_dialogue",
                decision="irrelevant",
                required=False,
                outcome="fetched",
                relevance=0.05,
                depends_on=["task_state:T9"],
            ),
        ],
    )
    assert post_batch(client, secret, [payload]).json()["accepted"] == 1
    trace = Trace.objects.get(request_id="req-stale")
    assert (trace.config_resolution, trace.config_age_seconds) == ("stale", 184.5)
    old_chat = candidate_of(trace, "old-chat")
    assert (old_chat.outcome, old_chat.relevance, old_chat.depends_on) == (
        "fetched",
        0.05,
        ["task_state:T9"],
    )
    client.force_login(make_user("sup", support="assistant_professional"))
    page = client.get("/traces/req-stale/")
    shown = html.unescape(page.content.decode())
    assert "the runtime's last good copy, 3 min old: the console did not answer" in shown
    exported = client.get("/api/v1/traces/req-stale").json()
    assert exported["config_resolution"] == "stale"
    assert exported["candidates"][0]["note"] == "order service timed out after 2,000 ms"


ENGINE_ID = "context_runtime 0.2.0 rules 1a2b3c4d5e6f"


def test_ingest__selection_block_and_reason_codes__stored_shown_and_exported(
    client, secret, make_user
):
    payload = trace_payload(
        "req-new",
        selection={
            "engine": ENGINE_ID,
            "fixed_input_tokens": 2890,
            "relevance_threshold": 0.35,
            "context_window": 128000,
            "max_input_tokens": None,
        },
        candidates=[
            candidate(reason_code="required", outcome="fetched"),
            candidate(
                "P7-v2",
                source="applicable_policy",
                bundle="policy-P7+terms",
                provider_bundle="policy-P7",
                reason_code="required",
                outcome="fetched",
            ),
            candidate(
                "old-chat",
                source="recent_dialogue",
                required=False,
                decision="irrelevant",
                reason="relevance 0.05 is below 0.35",
                reason_code="below_threshold",
                outcome="fetched",
                relevance=0.05,
            ),
        ],
    )
    assert post_batch(client, secret, [payload]).json()["accepted"] == 1
    trace = Trace.objects.get(request_id="req-new")
    assert (
        trace.engine,
        trace.fixed_input_tokens,
        trace.relevance_threshold,
        trace.selection_context_window,
        trace.selection_max_input_tokens,
    ) == (ENGINE_ID, 2890, 0.35, 128000, None)
    policy = candidate_of(trace, "P7-v2")
    assert (policy.bundle, policy.provider_bundle, policy.reason_code) == (
        "policy-P7+terms",
        "policy-P7",
        "required",
    )

    client.force_login(make_user("sup", support="assistant_professional"))
    page = html.unescape(client.get("/traces/req-new/").content.decode())
    assert (
        'Decided by <span class="help-term" title="engine context_runtime 0.2.0 · rules '
        '1a2b3c4d5e6f (a replay with the same rules decides alike)">'
        "the SDK's selection engine 0.2.0</span>"
    ) in page
    # The reason in words, its code one hover away.
    assert 'title="reason code: below_threshold" data-reason-code="below_threshold"' in page
    exported = client.get("/api/v1/traces/req-new").json()
    assert exported["selection"] == {
        "engine": ENGINE_ID,
        "fixed_input_tokens": 2890,
        "relevance_threshold": 0.35,
        "context_window": 128000,
        "max_input_tokens": None,
    }
    assert [(c["provider_bundle"], c["reason_code"]) for c in exported["candidates"]] == [
        (None, "required"),
        ("policy-P7", "required"),
        (None, "below_threshold"),
    ]
    download = client.get("/traces/req-new/export.json").json()
    assert download["selection"]["relevance_threshold"] == 0.35
    # What the export says decodes as the runtime's own trace (the wire form, round trip).
    again = msgspec.convert(download, wire.Trace, strict=False)
    assert again.selection.engine == ENGINE_ID
    assert again.candidates[1].provider_bundle == "policy-P7"


def test_ingest__runtime_without_replay_fields__stored_blank_and_page_says_so(
    client, secret, make_user
):
    assert post_batch(client, secret, [trace_payload("req-old")]).json()["accepted"] == 1
    trace = Trace.objects.get(request_id="req-old")
    assert (trace.engine, trace.fixed_input_tokens, trace.relevance_threshold) == ("", None, None)
    assert {(c.provider_bundle, c.reason_code) for c in candidates_of(trace)} == {("", "")}
    client.force_login(make_user("sup", support="assistant_professional"))
    page = client.get("/traces/req-old/").content.decode()
    assert "Recorded by a runtime that sends no replay fields" in page
    assert "data-reason-code" not in page
    exported = client.get("/api/v1/traces/req-old").json()
    assert exported["selection"] is None
    assert {c["reason_code"] for c in exported["candidates"]} == {None}


def test_ingest__unknown_reason_code_or_bad_selection__that_trace_rejected_alone(client, secret):
    bad_code = trace_payload("req-bad-code", candidates=[candidate(reason_code="because")])
    bad_selection = trace_payload(
        "req-bad-sel",
        selection={"engine": "", "fixed_input_tokens": -1, "relevance_threshold": 2},
    )
    body = post_batch(client, secret, [bad_code, bad_selection, trace_payload("req-ok")]).json()
    assert body["accepted"] == 1
    paths = {r["request_id"]: r["errors"][0]["path"] for r in body["rejected"]}
    assert paths["req-bad-code"] == "candidates[0].reason_code"
    assert paths["req-bad-sel"].startswith("selection.")
    assert list(Trace.objects.values_list("request_id", flat=True)) == ["req-ok"]


def test_ingest__replay_fields_out_of_range__rejected_alone(client, secret):
    bad = trace_payload(
        "req-bad", candidates=[candidate("old-chat", relevance=1.5, outcome="maybe")]
    )
    body = post_batch(client, secret, [bad, trace_payload("req-ok")]).json()
    assert body["accepted"] == 1
    assert body["rejected"][0]["errors"][0]["path"].startswith("candidates[0].")


@pytest.mark.parametrize("separator", [b",", b",\n  "], ids=["compact", "with-whitespace"])
def test_ingest__key_twice_inside_a_trace__that_trace_rejected_alone_nothing_of_it_stored(
    client, secret, separator
):
    """Issue 19, item 7: msgspec keeps the last of two equal keys, so `"decision": "selected",
    "decision": "irrelevant"` would be stored as one of them. The trace is rejected instead,
    like any invalid trace: 200 for the batch, the rest stored."""
    sdk_made = encode_trace(
        msgspec.json.decode(orjson.dumps(trace_payload("req-2")), type=wire.Trace)
    )
    bad = orjson.dumps(trace_payload("req-58")).replace(
        b'"decision":"irrelevant"', b'"decision":"selected","decision":"irrelevant"', 1
    )
    sdk_bad = encode_trace(
        msgspec.json.decode(orjson.dumps(trace_payload("req-59")), type=wire.Trace)
    ).replace(b'"name":"model-x"', b'"name":"model-y","name":"model-x"', 1)
    body = (
        b'{"traces":['
        + separator.join([orjson.dumps(trace_payload("req-1")), bad, sdk_made, sdk_bad])
        + b"]}"
    )
    response = post_batch(client, secret, body=body)
    assert response.status_code == 200
    answer = response.json()
    assert answer["accepted"] == 2
    assert [
        (r["index"], r["request_id"], e["path"], e["code"])
        for r in answer["rejected"]
        for e in r["errors"]
    ] == [
        (1, "req-58", "candidates[2].decision", "duplicate_key"),
        (3, "req-59", "model.name", "duplicate_key"),
    ]
    assert answer["rejected"][0]["errors"][0]["message"] == (
        "candidates[2].decision appears twice in one object; say it once."
    )
    assert sorted(Trace.objects.values_list("request_id", flat=True)) == ["req-1", "req-2"]
    assert not RequestKey.objects.filter(request_id__in=["req-58", "req-59"]).exists()
    assert candidates_stored() == 6


def test_ingest__revoked_token_resolution__stored_and_said_on_the_trace_page(
    client, secret, make_user
):
    """Issue 21.5: a runtime whose config token was refused serves its last good copy and
    says so; support read it on the trace page (it was sent as `stale` before)."""
    payload = trace_payload(
        "req-unauth",
        config_fallback=True,
        config_resolution="unauthorized",
        config_age_seconds=3700,
    )
    assert post_batch(client, secret, [payload]).json()["accepted"] == 1
    assert Trace.objects.get(request_id="req-unauth").config_resolution == "unauthorized"
    client.force_login(make_user("sup", support="assistant_professional"))
    shown = html.unescape(client.get("/traces/req-unauth/").content.decode())
    assert "the console refused its token (revoked or expired)" in shown
