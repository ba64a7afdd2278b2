"""Trace ingest against hostile or broken runtimes (issue 11, items 4–8; docs/RELIABILITY.md).

Each test posts what a broken runtime could send, or stores what an older console let in,
and checks that the batch stands, the bad trace is refused alone with its path, and every
page keeps working.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from urllib.parse import quote

import orjson
import pytest
from django.utils import timezone

from tests.factories import (
    STRATEGY_KEY,
    DocumentFactory,
    FrozenVersionFactory,
    TraceFactory,
    candidate,
    post_batch,
    runtime_token,
    strategy_body,
    trace_payload,
    world,
)
from tests.factories.traces import candidates_of
from traces.models import Snapshot, Trace

pytestmark = pytest.mark.django_db


@pytest.fixture
def env():
    return world()


@pytest.fixture
def secret(env):
    return runtime_token(env["environments"]["sg-test"])


@pytest.fixture
def support(make_user, env):
    return make_user("sup", support=None)  # every agent


def recent(**delta) -> str:
    return (timezone.now() - timedelta(**(delta or {"minutes": 1}))).isoformat()


def payload(request_id, **overrides) -> dict:
    """A valid trace of a minute ago (the factory's fixed date ages out of retention)."""
    return trace_payload(request_id, occurred_at=recent(), **overrides)


def rejections(body) -> dict:
    """{index: [(path, code), ...]} of a response body."""
    return {r["index"]: [(e["path"], e["code"]) for e in r["errors"]] for r in body["rejected"]}


# --- 4. the request_id character set ----------------------------------------------------------
RUNTIME_IDS = [
    str(uuid.uuid4()),
    "req-92",
    f"req-{uuid.uuid4().hex}",  # the ADK integration without an invocation id
    f"e-{uuid.uuid4()}",  # an ADK invocation id
    f"e-{uuid.uuid4()}#2",  # its second model call (a tool round)
    "sim-123-4",
    "svc.api:GET@node_7",
    "x" * 200,
]
REFUSED_IDS = ["a/b", "a b", "a\tb", "caf\u00e9", "..", ".", "x" * 201, "a?b", "a%2Fb"]


def test_request_id__runtime_ids_accepted__others_refused_one_by_one_at_request_id(client, secret):
    traces = [payload(rid) for rid in RUNTIME_IDS + REFUSED_IDS]
    response = post_batch(client, secret, traces)
    assert response.status_code == 200
    body = response.json()
    assert body["accepted"] == len(RUNTIME_IDS)
    assert set(Trace.objects.values_list("request_id", flat=True)) == set(RUNTIME_IDS)
    refused = rejections(body)
    assert sorted(refused) == list(range(len(RUNTIME_IDS), len(traces)))
    for errors in refused.values():
        assert [path for path, _ in errors] == ["request_id"]
    first = body["rejected"][0]["errors"][0]
    assert first["code"] == "invalid_format"
    assert "letters, digits" in first["message"]


@pytest.fixture
def odd_ids(env):
    """Ids an older console stored: a slash, URL syntax, spaces and a newline."""
    ids = ["legacy/with/slash", "odd ?#%id", " padded ", "two\nlines", "search", "x/export.json"]
    for rid in ids:
        TraceFactory(
            request_id=rid,
            status="degraded",
            degradation="general_policy_only",
            occurred_at=timezone.now() - timedelta(minutes=5),
        )
    return ids


def test_pages__stored_ids_outside_the_character_set__list_dashboard_and_trace_open(
    client, support, odd_ids
):
    client.force_login(support)
    listing = client.get("/traces/")
    assert listing.status_code == 200
    assert client.get("/").status_code == 200  # the dashboard lists recent problems
    text = listing.content.decode()
    for rid in odd_ids:
        url = f"/traces/{quote(rid, safe='/~:@!$&()*+,;=')}/"
        assert f'href="{url}?environment=sg-test"' in text, rid
        page = client.get(url)
        assert page.status_code == 200, rid
        assert page.context["trace"].request_id == rid
        assert client.get(url + "export.json").json()["request_id"] == rid
        api = client.get(f"/api/v1/traces/{quote(rid, safe='/~:@!$&()*+,;=')}")
        assert api.status_code == 200 and api.json()["request_id"] == rid


def test_search__stored_id_with_slash__redirects_to_a_page_that_opens(client, support, odd_ids):
    client.force_login(support)
    response = client.get("/traces/search", {"q": "legacy/with/slash"})
    assert response.status_code == 302
    assert client.get(response["Location"]).status_code == 200


# --- 5. occurred_at bounds ------------------------------------------------------------------------
def test_occurred_at__far_future_far_past_or_beyond_retention__refused_and_reads_still_work(
    client, secret, env, support
):
    retention = env["environments"]["sg-test"].trace_retention_days
    now = timezone.now()
    far_offset = (now - timedelta(minutes=1)).astimezone(timezone.get_fixed_timezone(20 * 60))
    traces = [
        payload("ok-recent"),
        trace_payload("ok-skew", occurred_at=(now + timedelta(minutes=2)).isoformat()),
        # +20:00 is a valid ISO offset PostgreSQL refuses: stored in UTC
        trace_payload("ok-offset", occurred_at=far_offset.isoformat()),
        trace_payload("year-10000", occurred_at="9999-12-31T23:00:00-14:00"),  # 10000 in UTC
        trace_payload("year-10000-odd", occurred_at="9999-12-31T23:59:59-23:59"),
        trace_payload("year-0", occurred_at="0001-01-01T00:00:00+23:59"),  # year 0 in UTC
        trace_payload("ahead", occurred_at=(now + timedelta(hours=1)).isoformat()),
        trace_payload("expired", occurred_at=(now - timedelta(days=retention + 1)).isoformat()),
    ]
    response = post_batch(client, secret, traces)
    assert response.status_code == 200
    body = response.json()
    assert body["accepted"] == 3
    assert rejections(body) == {i: [("occurred_at", "out_of_range")] for i in range(3, 8)}
    assert f"{retention} days" in body["rejected"][-1]["errors"][0]["message"]
    stored = dict(Trace.objects.values_list("request_id", "occurred_at"))
    assert sorted(stored) == ["ok-offset", "ok-recent", "ok-skew"]
    assert stored["ok-offset"] == far_offset
    client.force_login(support)
    assert client.get("/traces/").status_code == 200
    assert client.get("/api/v1/traces").status_code == 200


# --- 6. every string and number bounded to the store ----------------------------------------------
BAD_UTF8 = "@@bad-utf8@@"
LONE_SURROGATE = "@@lone-surrogate@@"


def _hostile_body(traces) -> bytes:
    """The batch as bytes, with byte sequences no JSON encoder would write for us."""
    body = orjson.dumps({"traces": traces})
    body = body.replace(BAD_UTF8.encode(), b"bad \xff\xfe bytes")
    return body.replace(LONE_SURROGATE.encode(), b"half \\ud800 a pair")


def test_hostile_values__each_bad_trace_rejected_with_its_path__the_rest_of_the_batch_stands(
    client, secret
):
    nul = "nul\u0000here"
    cases = [  # (trace, the path its error names, its code)
        (payload("nul-principal", principal=nul), "principal", "invalid_string"),
        (payload("nul-reason", candidates=[candidate(reason=nul)]), "candidates[0].reason", None),
        (payload("nul-doc-key", documents={nul: 1}, strategy=""), "documents", None),
        (payload("nul-source", sources=[{"id": nul, "version": "1"}]), "sources[0].id", None),
        (
            payload("nul-shadow", shadow={"version": 2, "selected": [nul]}),
            "shadow.selected[0]",
            None,
        ),
        (payload("nul\u0000id"), "request_id", "invalid_format"),
        (payload("revision-2e63", task={"id": "T9", "revision": 2**63}), "task.revision", None),
        (payload("size-2e31", candidates=[candidate(size=2**31)]), "candidates[0].size", None),
        (payload("utf8-principal", principal=BAD_UTF8), "principal", "invalid_string"),
        (
            payload("surrogate-note", candidates=[candidate(note=LONE_SURROGATE)]),
            "candidates[0].note",
            "invalid_string",
        ),
        (
            payload("surrogate-snapshot", snapshot={"text": LONE_SURROGATE}),
            "snapshot.text",
            "invalid_string",
        ),
        (payload("utf8-snapshot", snapshot={"text": BAD_UTF8}), "snapshot.text", "invalid_string"),
    ]
    traces = [payload("good-1"), *[trace for trace, _, _ in cases], payload("good-2")]
    response = post_batch(client, secret, body=_hostile_body(traces))
    assert response.status_code == 200, response.content
    result = response.json()
    assert result["accepted"] == 2
    assert sorted(Trace.objects.values_list("request_id", flat=True)) == ["good-1", "good-2"]
    assert len(candidates_of(Trace.objects.all())) == 6
    refused = rejections(result)
    assert sorted(refused) == list(range(1, len(cases) + 1))
    for index, (_, path, code) in enumerate(cases, start=1):
        ((got_path, got_code),) = refused[index]
        assert got_path == path, (index, refused[index])
        if code:
            assert got_code == code, (index, refused[index])
    assert refused[7] == [("task.revision", "out_of_range")]


def test_hostile_numbers__overflowing_float__rejected_alone(client, secret):
    body = orjson.dumps({"traces": [payload("inf-estimate"), payload("good")]})
    body = body.replace(b'"value":6200', b'"value":1e999', 1)
    result = post_batch(client, secret, body=body).json()
    assert result["accepted"] == 1
    assert rejections(result) == {0: [("input_estimate.value", "out_of_range")]}


def test_hostile_values__every_trace_bad__200_nothing_stored(client, secret):
    response = post_batch(client, secret, [payload("a", principal="\u0000")])
    assert response.status_code == 200
    assert response.json()["accepted"] == 0 and Trace.objects.count() == 0


# --- 7. request_id unique per environment ------------------------------------------------------------
def test_request_id__same_id_in_two_environments__both_stored_neither_a_duplicate(client, env):
    test_secret = runtime_token(env["environments"]["sg-test"])
    prod_secret = runtime_token(env["environments"]["prod"])
    first = post_batch(client, test_secret, [payload("req-7")]).json()
    second = post_batch(client, prod_secret, [payload("req-7")]).json()
    assert first == second == {"accepted": 1, "duplicates": [], "rejected": []}
    assert sorted(
        Trace.objects.filter(request_id="req-7").values_list("environment__key", flat=True)
    ) == ["prod", "sg-test"]
    again = post_batch(client, prod_secret, [payload("req-7")]).json()
    assert again["duplicates"] == ["req-7"]


def test_duplicates__id_of_an_agent_outside_the_token__not_reported_as_a_duplicate(client, env):
    sg_test = env["environments"]["sg-test"]
    post_batch(client, runtime_token(sg_test), [payload("req-8")])  # assistant_professional
    lite_only = runtime_token(sg_test, agents=[env["agents"]["assistant_lite"]])
    body = post_batch(client, lite_only, [payload("req-8", agent="assistant_lite")]).json()
    assert body["accepted"] == 0
    assert body["duplicates"] == []
    assert rejections(body) == {0: [("request_id", "request_id_taken")]}
    assert "assistant_professional" not in orjson.dumps(body).decode()
    own = post_batch(client, lite_only, [payload("lite-1", agent="assistant_lite")] * 2).json()
    assert own["duplicates"] == ["lite-1"]


# --- issue 31 item 5: a request id another agent holds is a conflict, never a duplicate ---------
def test_duplicates__id_another_agent_of_the_token_stored__rejected_as_taken_not_a_duplicate(
    client, env
):
    # Given a token for assistant_lite that stored a trace under a predictable id first
    sg_test = env["environments"]["sg-test"]
    lite_only = runtime_token(sg_test, agents=[env["agents"]["assistant_lite"]])
    post_batch(client, lite_only, [payload("req-31", agent="assistant_lite")])
    # When the runtime of assistant_professional, whose token covers every agent, reports its
    # own trace with that id
    body = post_batch(client, runtime_token(sg_test), [payload("req-31")]).json()
    # Then it is told its trace was not stored, and whose id it is; the other trace stays
    assert body["accepted"] == 0
    assert body["duplicates"] == []
    assert rejections(body) == {0: [("request_id", "request_id_taken")]}
    assert "assistant_lite" in body["rejected"][0]["errors"][0]["message"]
    assert list(Trace.objects.values_list("request_id", "agent__key")) == [
        ("req-31", "assistant_lite")
    ]


def test_duplicates__same_id_for_two_agents_in_one_batch__second_rejected_as_taken(client, env):
    sg_test = env["environments"]["sg-test"]
    traces = [payload("req-32"), payload("req-32", agent="assistant_lite"), payload("req-32")]
    body = post_batch(client, runtime_token(sg_test), traces).json()
    assert body["accepted"] == 1
    assert body["duplicates"] == ["req-32"]  # the same agent's trace again
    assert rejections(body) == {1: [("request_id", "request_id_taken")]}
    assert Trace.objects.get(request_id="req-32").agent.key == "assistant_professional"


@pytest.fixture
def same_id_twice(env):
    for key in ("sg-test", "prod"):
        TraceFactory(
            request_id="req-7",
            environment=env["environments"][key],
            occurred_at=timezone.now() - timedelta(minutes=5),
        )


def test_trace_page_and_search__id_in_two_environments__the_user_chooses(
    client, support, same_id_twice
):
    client.force_login(support)
    search = client.get("/traces/search", {"q": "req-7"})
    assert search.status_code == 200
    text = search.content.decode()
    assert 'href="/traces/req-7/?environment=sg-test"' in text
    assert 'href="/traces/req-7/?environment=prod"' in text

    choice = client.get("/traces/req-7/")
    assert choice.status_code == 200
    assert "trace" not in choice.context
    assert 'href="/traces/req-7/?environment=prod"' in choice.content.decode()

    prod = client.get("/traces/req-7/", {"environment": "prod"})
    assert prod.context["trace"].environment.key == "prod"
    assert 'href="/traces/req-7/export.json?environment=prod"' in prod.content.decode()
    exported = client.get("/traces/req-7/export.json", {"environment": "prod"}).json()
    assert exported["environment"] == "prod"
    assert client.get("/traces/req-7/", {"environment": "bank-uat"}).status_code == 404

    api = client.get("/api/v1/traces/req-7")
    assert api.status_code == 409
    assert api.json()["error"]["code"] == "ambiguous"
    assert client.get("/api/v1/traces/req-7", {"environment": "prod"}).json()["environment"] == (
        "prod"
    )


# --- 8. snapshot.allowed ---------------------------------------------------------------------------
@pytest.fixture
def strategy_versions(env):
    document = DocumentFactory(agent=env["agents"]["assistant_professional"], key=STRATEGY_KEY)
    bodies = {
        1: strategy_body(),  # says nothing: not allowed
        2: strategy_body(snapshot={"allowed": False}),
        3: strategy_body(snapshot={"allowed": True}),
    }
    for number, body in bodies.items():
        FrozenVersionFactory(document=document, number=number, body=body)


def test_snapshot__stored_only_when_the_named_strategy_version_allows_it(
    client, secret, strategy_versions
):
    snap = {"messages": ["the final request"]}

    def version(n):
        return {"profile": 7, STRATEGY_KEY: n}

    traces = [
        payload("allowed", snapshot=snap),  # v3
        payload("silent", documents=version(1), snapshot=snap),
        payload("refused", documents=version(2), snapshot=snap),
        payload("unknown-version", documents=version(9), snapshot=snap),
        payload("no-strategy", documents={"profile": 7}, strategy="", snapshot=snap),
        payload("other-agent", agent="assistant_lite", snapshot=snap),
        payload("no-snapshot"),
    ]
    response = post_batch(client, secret, traces)
    body = response.json()
    assert body["accepted"] == 7
    assert body["snapshots_dropped"] == [
        "silent",
        "refused",
        "unknown-version",
        "no-strategy",
        "other-agent",
    ]
    assert list(Snapshot.objects.values_list("trace__request_id", flat=True)) == ["allowed"]
    with_expiry = Trace.objects.filter(snapshot_expires_at__isnull=False)
    assert list(with_expiry.values_list("request_id", flat=True)) == ["allowed"]


def test_snapshot__response_field_in_the_openapi_schema(client, make_user):
    client.force_login(make_user("root", admin=None))
    schema = client.get("/api/schema/", {"format": "json"}).json()
    ingest = schema["components"]["schemas"]["IngestResponse"]["properties"]
    assert ingest["snapshots_dropped"]["type"] == "array"
