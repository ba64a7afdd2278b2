"""Replay on the trace page and in the operator API (issue 20, item 2): the engine again, on a
trace's stored candidates, with the version it used, what is live now, or a draft."""

from __future__ import annotations

import copy
import html

import pytest
from context_runtime.engine import ENGINE

from console.kernel.errors import NotFound, ValidationFailed
from console.kernel.models import AccessLogEntry
from strategies.catalog.models import Environment
from strategies.documents import services as documents
from strategies.documents.models import Document, Version
from strategies.releases.models import Release
from tests.factories import foreign_source_trace, post_batch, runtime_token, trace_payload
from tests.factories.traces import candidates_of
from traces import replay
from traces.models import Trace

pytestmark = pytest.mark.django_db

STRATEGY = "after_sales_consultation"


def _strategy(agent="assistant_professional") -> Document:
    return Document.objects.get(agent__key=agent, key=STRATEGY)


def _draft(max_input_tokens: int) -> Version:
    """A draft of the demo strategy: v3 with another budget."""
    v3 = Version.objects.get(document=_strategy(), number=3)
    body = copy.deepcopy(v3.body)
    body["budget"]["max_input_tokens"] = max_input_tokens
    return documents.draft_create(
        document=_strategy(), body=body, actor=None, note="tighter budget", author_label="ops"
    )


@pytest.fixture
def support(demo_world, make_user):
    return make_user("sup", support="assistant_professional")


def _replays(action="trace.replay"):
    return list(AccessLogEntry.objects.filter(action=action).order_by("id"))


# --- the selector ---------------------------------------------------------------------------------
def test_replay__every_demo_trace_with_its_recorded_version__reproduces(support):
    traces = Trace.objects.filter(strategy=STRATEGY).select_related("agent", "environment")
    assert traces.count() > 300
    for trace in traces:
        result = replay.trace_replay(user=support, trace=trace)
        assert result.reproduces, trace.request_id
        assert result.changed_rows == 0 and not result.status_changed
        assert result.recorded_engine == result.console_engine == ENGINE


def test_replay__live_version__what_the_environment_serves_now(support):
    trace = Trace.objects.select_related("agent", "environment").get(request_id="req-96")
    assert (trace.environment.key, trace.strategy_version) == ("prod", 2)
    same = replay.trace_replay(user=support, trace=trace, version="live")
    assert (same.kind, same.version, same.reproduces) == ("live", 2, True)  # = recorded
    # v3 goes live in prod: "live" now replays with it, and the policy becomes required.
    Release.objects.filter(document=_strategy(), environment=trace.environment).update(
        version=Version.objects.get(document=_strategy(), number=3)
    )
    live = replay.trace_replay(user=support, trace=trace, version="live")
    assert (live.kind, live.version, live.reproduces) == ("live", 3, None)
    policy = [row for row in live.rows if row.source == "applicable_policy"]
    assert policy and all(row.required and not row.recorded_required for row in policy)


def test_replay__draft_with_max_input_tokens_4000__changes_decisions_and_status(support):
    trace = Trace.objects.select_related("agent", "environment").get(request_id="req-92")
    draft = _draft(4000)
    result = replay.trace_replay(user=support, trace=trace, version=str(draft.number))
    assert (result.kind, result.version_state) == ("draft", "draft")
    assert (result.recorded_status, result.status) == ("ready", "budget_exceeded")
    assert result.changed_rows >= 1
    changed = [row for row in result.rows if row.changed]
    assert all(row.decision == "over_budget" for row in changed)
    assert all(row.code.startswith("over_budget_") for row in changed)
    assert any(row.recorded_required for row in changed)  # required content no longer fits


def test_replay__bad_unknown_or_unreplayable__400_404_409(support, client):
    trace = Trace.objects.select_related("agent", "environment").get(request_id="req-92")
    for bad in ("latest", "0", "-1", "v3", "3.0"):
        with pytest.raises(ValidationFailed) as refused:
            replay.trace_replay(user=support, trace=trace, version=bad)
        assert refused.value.code == "bad_version"
    with pytest.raises(NotFound) as missing:
        replay.trace_replay(user=support, trace=trace, version="99")
    assert missing.value.code == "unknown_version"
    # An older runtime's trace (no selection block) and a profile-only trace.
    secret = runtime_token(trace.environment)
    post_batch(client, secret, [trace_payload("req-old"), trace_payload("req-lite", strategy="")])
    for request_id, words in (("req-old", "sends no replay fields"), ("req-lite", "no strategy")):
        old = Trace.objects.select_related("agent", "environment").get(request_id=request_id)
        with pytest.raises(replay.NotReplayable) as refused:
            replay.trace_replay(user=support, trace=old)
        assert words in refused.value.message


# --- the operator API -----------------------------------------------------------------------------
def test_api_replay__recorded_version__both_engines_and_every_decision_and_logged(client, support):
    client.force_login(support)
    response = client.get("/api/v1/traces/req-92/replay", {"environment": "sg-test"})
    assert response.status_code == 200
    body = response.json()
    assert (body["version"], body["version_kind"], body["reproduces"]) == (3, "recorded", True)
    assert body["recorded_engine"] == body["console_engine"] == ENGINE
    assert body["recorded"] == body["replayed"]
    first = body["candidates"][0]
    assert first["recorded"] == first["replayed"] and first["recorded"]["reason_code"]
    assert body["changed"] == 0
    (entry,) = _replays()
    assert (entry.actor_label, entry.target_id, entry.agent_key) == (
        "sup",
        "req-92",
        "assistant_professional",
    )
    assert entry.detail | {"version": 3, "kind": "recorded", "api": True} == entry.detail


def test_api_replay__draft__status_and_tokens_old_to_new(client, support):
    draft = _draft(4000)
    client.force_login(support)
    body = client.get("/api/v1/traces/req-92/replay", {"version": draft.number}).json()
    assert (body["version_kind"], body["reproduces"]) == ("draft", None)
    assert (body["recorded"]["status"], body["replayed"]["status"]) == (
        "ready",
        "budget_exceeded",
    )
    assert body["replayed"]["input_tokens"] < body["recorded"]["input_tokens"]
    assert [c["changed"] for c in body["candidates"]].count(True) == body["changed"] >= 1
    assert _replays()[0].detail["state"] == "draft"


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ({"version": "newest"}, 400, "bad_version"),
        ({"version": "99"}, 404, "unknown_version"),
    ],
)
def test_api_replay__bad_or_unknown_version__error_shape_and_nothing_logged(
    client, support, query, status, code
):
    client.force_login(support)
    response = client.get("/api/v1/traces/req-92/replay", query)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert _replays() == []


def test_api_replay__unknown_trace_or_old_runtime__404_and_409(client, support):
    client.force_login(support)
    assert client.get("/api/v1/traces/req-nope/replay").status_code == 404
    secret = runtime_token(Trace.objects.get(request_id="req-92").environment)
    post_batch(client, secret, [trace_payload("req-old")])
    response = client.get("/api/v1/traces/req-old/replay")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "not_replayable"


def test_api_replay__user_without_trace_or_config_rights__404_or_403_and_denial_logged(
    client, demo_world, make_user
):
    from console.kernel.models import Role

    client.force_login(make_user("lite-sup", support="assistant_lite"))
    assert client.get("/api/v1/traces/req-92/replay").status_code == 404
    traces_only = Role.objects.create(name="trace-reader", capabilities=["view_traces"])
    client.force_login(make_user("reader", **{traces_only.name: "assistant_professional"}))
    response = client.get("/api/v1/traces/req-92/replay")
    assert response.status_code == 403
    assert "view this agent's configuration" in response.json()["error"]["message"]
    assert _replays() == []
    assert _replays("access.denied")[-1].detail["capability"] == "view_config"


def test_schema__replay_operation__documents_its_errors(admin_client):
    schema = admin_client.get("/api/schema/", {"format": "json"}).json()
    operation = schema["paths"]["/api/v1/traces/{request_id}/replay"]["get"]
    assert {"200", "400", "403", "404", "409"} <= set(operation["responses"])
    names = {p["name"] for p in operation["parameters"]}
    assert {"environment", "version"} <= names


# --- the trace page ----------------------------------------------------------------------------
def test_trace_page__replayable_trace__card_offers_versions_within_the_query_budget(
    client, support, django_assert_max_num_queries
):
    _draft(4000)
    client.force_login(support)
    # 16, the Outcomes card's two (the request's outcomes, its version's outcome shares) and
    # the Regression sets card's one (the agent's sets of the strategy, each marked when it
    # keeps this request)
    with django_assert_max_num_queries(19):
        response = client.get("/traces/req-92/", {"environment": "sg-test"})
    page = html.unescape(response.content.decode())
    assert "Decided by" in page and "rules" in page
    assert 'id="replay-form"' in page
    assert "v3 · recorded, live now" in page and "v4 · draft" in page
    assert "below_threshold" in page or "optional_fits" in page or "required" in page


def test_replay_view__without_javascript__a_page_with_the_side_by_side(client, support):
    draft = _draft(4000)
    client.force_login(support)
    response = client.get("/traces/req-92/replay", {"version": draft.number})
    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    assert "Replay of req-92" in page
    assert 'data-changed="true"' in page
    assert 'data-status="budget_exceeded"' in page
    fragment = client.get(
        "/traces/req-92/replay", {"version": draft.number}, headers={"HX-Request": "true"}
    )
    assert "<html" not in fragment.content.decode()
    assert 'id="replay-result"' in fragment.content.decode()
    assert [e.detail["version"] for e in _replays()] == [draft.number, draft.number]


def test_replay_view__old_runtime_trace__card_says_why_no_500(client, support):
    secret = runtime_token(Trace.objects.get(request_id="req-92").environment)
    post_batch(client, secret, [trace_payload("req-old")])
    client.force_login(support)
    page = client.get("/traces/req-old/").content.decode()
    assert 'id="replay-unavailable"' in page and "sends no replay fields" in page
    response = client.get("/traces/req-old/replay")
    assert response.status_code == 409
    assert "sends no replay fields" in response.content.decode()


def test_api_replay__selection_block_but_bare_candidates__409_not_500(client, support):
    """A runtime that sends the selection block without each candidate's outcome and reason
    code cannot be replayed exactly: said so, never a crash."""
    selection = {"engine": ENGINE, "fixed_input_tokens": 900, "relevance_threshold": 0.2}
    secret = runtime_token(Trace.objects.get(request_id="req-92").environment)
    post_batch(client, secret, [trace_payload("req-half", selection=selection)])
    client.force_login(support)
    response = client.get("/api/v1/traces/req-half/replay")
    assert response.status_code == 409
    assert "every candidate's replay fields" in response.json()["error"]["message"]
    page = client.get("/traces/req-half/replay")
    assert page.status_code == 409 and 'id="replay-error"' in page.content.decode()


# --- a provider's item of a source the strategy does not read (issue 32, item 3) -----------------
def test_foreign_source_item__stored_shown_counted_and_replay_reproduces(client, support):
    """The SDK's engine records it not_requested (source_not_read) instead of losing it: the
    console stores it, the trace page shows it among the candidates considered, in words,
    and a replay with the recorded version reproduces the record."""
    v3 = Version.objects.get(document=_strategy(), number=3)
    sg = Environment.objects.get(key="sg-test")
    answer = post_batch(
        client, runtime_token(sg), body=foreign_source_trace("req-foreign", v3.body)
    )
    assert answer.status_code == 200 and answer.json()["rejected"] == [], answer.json()

    stored = Trace.objects.select_related("agent", "environment").get(request_id="req-foreign")
    (foreign,) = [c for c in candidates_of(stored) if c.item_id == "weather:SG"]
    assert (foreign.decision, foreign.reason_code, foreign.required) == (
        "not_requested",
        "source_not_read",
        False,
    )
    client.force_login(support)
    page = html.unescape(client.get("/traces/req-foreign/?environment=sg-test").content.decode())
    assert "4 considered" in page
    assert "weather:SG" in page and "this strategy does not read weather" in page

    result = replay.trace_replay(user=support, trace=stored)
    assert result.reproduces is True and result.changed_rows == 0
