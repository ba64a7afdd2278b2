"""The extended shadow block (issue 22, items 2 and 6): accepted and kept at ingest, returned
by the export and the API as sent, and shown on the trace page's "Shadow run" card — the
versions, both statuses, the token delta, the sources the shadow could not see, the
candidates it decided otherwise (linked to their rows), and a disagreement of a version with
itself called what it is: a runtime fault."""

from __future__ import annotations

import re

import orjson
import pytest

from tests.factories import post_batch, runtime_token, trace_payload, world
from tests.factories.traces import SHADOW_LIVE_BODY, shadowed_trace

pytestmark = pytest.mark.django_db

SMALLER = {**SHADOW_LIVE_BODY, "budget": {"max_input_tokens": 4000, "reserve_output_tokens": 1000}}


@pytest.fixture
def secret():
    return runtime_token(world()["environments"]["sg-test"])


@pytest.fixture
def support(client, make_user, secret):
    user = make_user("sup", support="assistant_professional")
    client.force_login(user)
    return user


def sent_shadow(body: bytes) -> dict:
    return orjson.loads(body)["traces"][0]["shadow"]


def test_ingest__extended_shadow_block__kept_and_exported_as_sent(client, secret, support):
    body = shadowed_trace("req-s4", shadow_version=4, shadow_body=SMALLER)

    response = post_batch(client, secret, body=body)

    assert response.json()["accepted"] == 1
    exported = client.get("/traces/req-s4/export.json").json()
    api = client.get("/api/v1/traces/req-s4").json()
    assert exported["shadow"] == api["shadow"] == sent_shadow(body)
    assert exported["shadow"]["differences_total"] == 2
    assert exported["shadow"]["used_tokens"] == 2000 + 310 + 640


def test_ingest__difference_pointing_past_the_candidates__that_trace_rejected_with_its_path(
    client, secret
):
    good = trace_payload("req-ok")
    bad = trace_payload(
        "req-bad",
        shadow={
            "version": 4,
            "status": "ready",
            "selected": [],
            "differences": [{"index": 7, "decision": "not_requested"}],
            "differences_total": 1,
        },
    )

    result = post_batch(client, secret, [good, bad]).json()

    assert result["accepted"] == 1
    (rejected,) = result["rejected"]
    assert rejected["request_id"] == "req-bad"
    (error,) = rejected["errors"]
    assert (error["path"], error["code"]) == ("shadow.differences[0].index", "out_of_range")


def test_ingest__unknown_shadow_decision__invalid_choice_lists_the_shadows_words(client, secret):
    bad = trace_payload(
        "req-bad",
        shadow={"version": 4, "selected": [], "differences": [{"index": 0, "decision": "maybe"}]},
    )

    (rejected,) = post_batch(client, secret, [bad]).json()["rejected"]

    (error,) = rejected["errors"]
    assert (error["path"], error["code"]) == ("shadow.differences[0].decision", "invalid_choice")
    assert "not_requested" in error["message"]


def test_trace_page__other_version__card_shows_statuses_tokens_and_linked_differences(
    client, secret, support
):
    post_batch(client, secret, body=shadowed_trace("req-s4", shadow_version=4, shadow_body=SMALLER))

    text = client.get("/traces/req-s4/").content.decode()

    card = re.search(r'<section class="card"[^>]*id="shadow-run".*?</section>', text, re.S)[0]
    assert "v4 beside live v3" in card
    assert "2 decisions differ" in card and "the status changes" in card
    assert 'data-status="ready"' in card and 'data-status="budget_exceeded"' in card
    # 2,000 fixed + task, order, policy and a turn → 2,000 + task and order
    assert "5,170 →" in card and "2,950" in card and "(-2,220)" in card
    # The differing candidates, each linked to its row, with the shadow's reason code.
    links = re.findall(r'href="#candidate-(\d+)"><code>([^<]+)</code>', card)
    assert links == [("2", "P7-v2"), ("3", "chat:e-318")]
    assert "over_budget_required" in card and "over_budget_optional" in card
    assert 'id="candidate-2"' in text and 'id="candidate-3"' in text
    assert "Runtime fault" not in card


def test_trace_page__shadow_of_the_live_version_that_disagrees__a_runtime_fault(
    client, secret, support
):
    body = orjson.loads(shadowed_trace("req-aa", shadow_version=3, shadow_body=SHADOW_LIVE_BODY))
    # A runtime that charged its shadow no fixed input (the bug measured on main): the same
    # version, another status.
    body["traces"][0]["shadow"].update(status="budget_exceeded", differences_total=1)
    post_batch(client, secret, [body["traces"][0]])

    text = client.get("/traces/req-aa/").content.decode()

    assert "Runtime fault (A/A calibration)" in text
    assert "not a difference between versions" in text


def test_trace_page__shadow_of_the_live_version_that_agrees__the_a_a_check_holds(
    client, secret, support
):
    body = shadowed_trace("req-aa", shadow_version=3, shadow_body=SHADOW_LIVE_BODY)
    post_batch(client, secret, body=body)

    text = client.get("/traces/req-aa/").content.decode()

    assert "The A/A check holds" in text and "Runtime fault" not in text


def test_trace_page__shadow_reads_a_source_live_did_not__named_and_its_items_not_requested(
    client, secret, support
):
    other = {**SHADOW_LIVE_BODY, "optional": ["memory"]}
    post_batch(client, secret, body=shadowed_trace("req-m", shadow_version=5, shadow_body=other))

    text = client.get("/traces/req-m/").content.decode()

    assert re.search(r'id="shadow-not-fetched"><code>memory</code>', text)
    assert text.count("not requested") >= 2  # the two dialogue items the shadow never asked for


def test_trace_page__older_runtime_block__status_and_selection_only_said_so(
    client, secret, support
):
    shadow = {"version": 4, "status": "ready", "selected": ["task_state:T9"]}
    post_batch(client, secret, [trace_payload("req-old", shadow=shadow)])

    text = client.get("/traces/req-old/").content.decode()

    assert "context_runtime before 0.3.0" in text
    assert "only live selects" in text  # P7-v2 (and the task) vs the shadow's one item
