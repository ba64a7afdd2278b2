"""Every request leaves a trace (issue 21.4, 21.8, 21.9): a request with more candidates than a
trace holds, one whose input the runtime refused, the sections rendered, and the link to the
users' tracing system — ingested for real (the SDK's encoding, PostgreSQL) and read on the
trace page."""

from __future__ import annotations

import html
from datetime import UTC, datetime

import orjson
import pytest
from context_runtime import wire
from context_runtime.engine import CandidateItem, EngineInputError, select
from context_runtime.reporter import encode_trace

from tests.factories import post_batch, runtime_token, trace_payload, world
from tests.factories.traces import candidates_of
from traces.models import Trace

pytestmark = pytest.mark.django_db

STRATEGY = {
    "required": ["task_state"],
    "optional": ["recent_dialogue"],
    "budget": {"max_input_tokens": 2_000_000, "reserve_output_tokens": 0},
}


@pytest.fixture
def secret():
    env = world()
    return runtime_token(env["environments"]["sg-test"])


@pytest.fixture
def support(make_user, secret):
    return make_user("sup", support="assistant_professional")


def sdk_trace(request_id: str, **fields) -> wire.Trace:
    return wire.Trace(
        request_id=request_id,
        agent="assistant_professional",
        occurred_at=datetime.now(UTC),
        documents={"profile": 7, "after_sales_consultation": 3},
        strategy="after_sales_consultation",
        **fields,
    )


def post_sdk(client, secret, *traces: wire.Trace):
    """POST what the SDK's reporter sends (encode_trace: truncation included)."""
    body = b'{"traces":[' + b",".join(encode_trace(t) for t in traces) + b"]}"
    return post_batch(client, secret, body=body)


def five_thousand() -> wire.Trace:
    items = [CandidateItem(id="task_state:T9", source="task_state", size=10)] + [
        CandidateItem(
            id=f"turn-{i:04d}", source="recent_dialogue", size=10, relevance=0.5 if i % 2 else 0.1
        )
        for i in range(4_999)
    ]
    selection = select(strategy=STRATEGY, candidates=items)
    return sdk_trace("req-5000", **selection.trace_fields())


def refused() -> wire.Trace:
    items = [
        CandidateItem(id="task_state:T9", source="task_state", size=10),
        CandidateItem(id="old-chat", source="recent_dialogue", size=900, relevance=float("nan")),
    ]
    with pytest.raises(EngineInputError) as caught:
        select(strategy=STRATEGY, candidates=items)
    return sdk_trace("req-nan", **caught.value.trace_fields(items))


# --- 5,000 candidates ---------------------------------------------------------------------------
def test_ingest__5000_candidates_from_the_sdk__stored_truncated_with_all_counts(client, secret):
    response = post_sdk(client, secret, five_thousand())

    assert response.json() == {"accepted": 1, "duplicates": [], "rejected": []}
    trace = Trace.objects.get(request_id="req-5000")
    assert trace.candidates_truncated is True
    assert trace.candidate_counts == {"selected": 2_500, "irrelevant": 2_500}
    stored = candidates_of(trace)
    assert len(stored) == wire.MAX_CANDIDATES_PER_TRACE
    # What matters most is kept: the required item, then selected ones.
    assert ("task_state:T9", "selected") in {(c.item_id, c.decision) for c in stored}
    assert {c.decision for c in stored} == {"selected"}


def test_trace_page__truncated_trace__says_how_many_and_counts_by_decision(client, secret, support):
    post_sdk(client, secret, five_thousand())
    client.force_login(support)

    page = html.unescape(client.get("/traces/req-5000/").content.decode())

    assert "5,000 candidates, 500 shown" in page
    assert "selected 2,500, irrelevant 2,500" in " ".join(page.split())
    assert 'id="replay-unavailable"' in page
    assert "only part of its candidates" in page


def test_replay_api__truncated_trace__refused_409_with_the_reason(client, secret, support):
    post_sdk(client, secret, five_thousand())
    client.force_login(support)

    response = client.get("/api/v1/traces/req-5000/replay")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "not_replayable"
    assert "only part of its candidates" in response.json()["error"]["message"]


def test_ingest__counts_fewer_than_the_candidates_sent__rejected_at_candidate_counts(
    client, secret
):
    bad = trace_payload("req-bad", candidates_truncated=True, candidate_counts={"selected": 1})

    response = post_batch(client, secret, [bad])

    (rejection,) = response.json()["rejected"]
    assert rejection["errors"][0]["path"] == "candidate_counts"
    assert not Trace.objects.filter(request_id="req-bad").exists()


# --- input refused -----------------------------------------------------------------------------
def test_ingest__refused_input_from_the_sdk__stored_with_the_engine_findings(client, secret):
    response = post_sdk(client, secret, refused())

    assert response.json()["accepted"] == 1
    trace = Trace.objects.get(request_id="req-nan")
    assert trace.status == "input_refused"
    (finding,) = trace.input_errors
    assert finding["path"] == "candidates[1].relevance"
    assert (finding["source"], finding["item"]) == ("recent_dialogue", "old-chat")
    assert "nan" in finding["message"]


def test_ingest__input_refused_without_findings__rejected_at_input_errors(client, secret):
    response = post_batch(client, secret, [trace_payload("req-x", status="input_refused")])

    (rejection,) = response.json()["rejected"]
    assert rejection["errors"][0]["path"] == "input_errors"


def test_trace_page__refused_input__red_status_findings_and_the_provider_to_look_at(
    client, secret, support
):
    post_sdk(client, secret, refused())
    client.force_login(support)

    page = html.unescape(client.get("/traces/req-nan/").content.decode())

    assert 'data-status="input_refused"' in page and "badge-bad" in page
    assert "Runtime refused its input" in page
    assert "The relevance of old-chat must be a number from 0 to 1, not nan." in page
    assert "Look first at: recent_dialogue provider." in page
    assert "Nothing stands out" not in page


def test_trace_list__status_filter_input_refused__lists_only_those(client, secret, support):
    post_sdk(client, secret, refused())
    post_batch(client, secret, [trace_payload("req-ok")])
    client.force_login(support)

    page = client.get("/traces/", {"status": "input_refused"}).content.decode()

    assert "req-nan" in page and "req-ok" not in page


def test_ingest__old_runtime_without_the_new_fields__stored_as_before(client, secret):
    response = post_batch(client, secret, [trace_payload("req-old")])

    assert response.json()["accepted"] == 1
    trace = Trace.objects.get(request_id="req-old")
    assert (trace.candidates_truncated, trace.candidate_counts, trace.sections) == (
        False,
        None,
        None,
    )


# --- sections and the tracing link -------------------------------------------------------------
def test_trace_page__sections_rendered__named_by_block_next_to_the_versions(
    client, secret, support
):
    sections = {"user_context": ["high_level_profile"], "query_context": ["time_summary"]}
    post_batch(client, secret, [trace_payload("req-s", sections=sections)])
    client.force_login(support)

    page = client.get("/traces/req-s/").content.decode()
    exported = orjson.loads(client.get("/api/v1/traces/req-s").content)

    assert "user context:</span> <code>high_level_profile</code>" in page
    assert "query context:</span> <code>time_summary</code>" in page
    assert exported["sections"] == sections


def test_trace_page__trace_link_template_set__request_id_links_to_the_tracing_system(
    client, secret, support, settings
):
    settings.TRACE_LINK_URL_TEMPLATE = "https://grafana.example/explore?traceId={request_id}"
    post_batch(client, secret, [trace_payload("e-1#2")])
    client.force_login(support)

    page = html.unescape(client.get("/traces/e-1%232/").content.decode())

    assert 'href="https://grafana.example/explore?traceId=e-1%232"' in page


def test_trace_page__no_trace_link_template__no_link(client, secret, support, settings):
    settings.TRACE_LINK_URL_TEMPLATE = ""
    post_batch(client, secret, [trace_payload("req-1")])
    client.force_login(support)

    assert 'id="trace-link"' not in client.get("/traces/req-1/").content.decode()
