"""Trace pages and the operator API: scope, the access log, snapshots."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from console.kernel.models import AccessLogEntry
from tests.factories import post_batch, runtime_token, trace_payload, world
from tests.factories.traces import snapshots_allowed
from traces.models import Snapshot, Trace

pytestmark = pytest.mark.django_db


@pytest.fixture
def traces(client):
    env = world()
    snapshots_allowed()
    secret = runtime_token(env["environments"]["sg-test"])
    post_batch(
        client,
        secret,
        [
            trace_payload("req-92", snapshot={"messages": ["SECRET-BODY-42"]}),
            trace_payload("lite-1", agent="assistant_lite", documents={"profile": 1}, strategy=""),
        ],
    )
    return env


@pytest.fixture
def support(make_user, traces):
    return make_user("sup", support="assistant_professional")


def looks(action):
    return list(AccessLogEntry.objects.filter(action=action).order_by("id"))


def test_search__pasted_request_id_with_spaces__redirects_to_trace_and_logged(client, support):
    client.force_login(support)
    response = client.get("/traces/search", {"q": "  req-92 \n"})
    assert response.status_code == 302
    assert response["Location"] == "/traces/req-92/"
    (entry,) = looks("trace.search")
    assert (entry.actor_label, entry.target_id, entry.detail["found"]) == ("sup", "req-92", True)


def test_search__unknown_and_out_of_scope__same_friendly_message(client, support):
    client.force_login(support)
    missing = client.get("/traces/search", {"q": "req-404"})
    hidden = client.get("/traces/search", {"q": "lite-1"})
    assert missing.status_code == hidden.status_code == 404
    assert b"No trace with request_id" in missing.content
    banner = re.compile(r'<div class="banner banner-info".*?</div>\s*</div>', re.S)

    def shown(response, q):
        return banner.search(response.content.decode()).group(0).replace(q, "X")

    assert shown(missing, "req-404") == shown(hidden, "lite-1")
    assert [e.detail["found"] for e in looks("trace.search")] == [False, False]


def test_trace_page__support_on_granted_agent__shows_answer_and_logs_the_look(
    client, support, django_assert_max_num_queries
):
    client.force_login(support)
    # 16, the Outcomes card's one, and the Regression sets card's one (the agent's sets of
    # this strategy, each marked when it keeps this request)
    with django_assert_max_num_queries(18):
        response = client.get("/traces/req-92/")
    assert response.status_code == 200
    text = response.content.decode()
    assert "Look first at: model and prompt" in text
    assert "older product introduction" in text
    assert "The runtime assembled the context it needed" in text
    (entry,) = looks("trace.view")
    assert (entry.actor_label, entry.agent_key, entry.target_id) == (
        "sup",
        "assistant_professional",
        "req-92",
    )


def test_trace_page__agent_not_granted__404_like_missing(client, support):
    client.force_login(support)
    assert client.get("/traces/lite-1/").status_code == 404
    assert client.get("/traces/nope/").status_code == 404
    assert client.get("/api/v1/traces/lite-1").status_code == 404


def test_trace_pages__user_without_trace_grant__refused(client, make_user, traces):
    client.force_login(make_user("v", viewer="assistant_professional"))
    assert client.get("/traces/").status_code == 403
    assert client.get("/traces/req-92/").status_code == 404


def test_trace_list__filters_in_url__scoped_and_logged(client, support):
    client.force_login(support)
    response = client.get("/traces/", {"status": "ready", "decision": "irrelevant"})
    assert [t.request_id for t in response.context["traces"]] == ["req-92"]
    response = client.get("/traces/", {"source": "recent_dialogue", "decision": "not_fetched"})
    assert list(response.context["traces"]) == []
    assert looks("trace.list")[0].detail["filters"] == {"status": "ready", "decision": "irrelevant"}


def test_export__json_of_one_trace__no_snapshot_and_logged(client, support):
    client.force_login(support)
    response = client.get("/traces/req-92/export.json")
    data = response.json()
    assert data["request_id"] == "req-92" and len(data["candidates"]) == 3
    assert "SECRET-BODY-42" not in response.content.decode()
    assert looks("trace.export")[0].target_id == "req-92"


def test_api__list_and_detail__scoped_and_logged(client, support):
    client.force_login(support)
    listing = client.get("/api/v1/traces", {"agent": "assistant_professional"})
    assert [t["request_id"] for t in listing.json()["results"]] == ["req-92"]
    detail = client.get("/api/v1/traces/req-92")
    assert detail.json()["candidates"][2]["reason"] == "older product introduction"
    assert [e.action for e in AccessLogEntry.objects.order_by("id")] == ["trace.list", "trace.view"]


def test_api__invalid_filter__400_with_path(client, support):
    client.force_login(support)
    response = client.get("/api/v1/traces", {"status": "fine"})
    assert response.status_code == 400
    assert response.json()["error"]["details"][0]["path"] == "status"


def test_snapshot__without_capability__refused_and_logged(client, support):
    client.force_login(support)
    response = client.post("/traces/req-92/snapshot", {"reason": "ticket 4711"})
    assert response.status_code == 403
    assert b"SECRET-BODY-42" not in response.content
    # Written the way every refusal is, naming the capability and the trace.
    (entry,) = looks("access.denied")
    assert (entry.outcome, entry.detail["capability"], entry.target_id) == (
        "denied",
        "view_snapshots",
        "req-92",
    )


def test_snapshot__without_reason__refused(client, make_user, traces):
    client.force_login(make_user("adm", admin=None))
    response = client.post("/traces/req-92/snapshot", {"reason": "  "})
    assert response.status_code == 400
    assert b"SECRET-BODY-42" not in response.content


def test_snapshot__capability_and_reason__decrypted_and_reason_logged(client, make_user, traces):
    client.force_login(make_user("adm", admin=None))
    response = client.post("/traces/req-92/snapshot", {"reason": "ticket 4711"})
    assert response.status_code == 200
    assert "SECRET-BODY-42" in response.content.decode()
    (entry,) = looks("snapshot.view")
    assert (entry.outcome, entry.reason, entry.actor_label) == ("allowed", "ticket 4711", "adm")


def test_snapshot__past_expiry__gone_even_before_purge(client, make_user, traces):
    Snapshot.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    Trace.objects.update(snapshot_expires_at=timezone.now() - timedelta(seconds=1))
    client.force_login(make_user("adm", admin=None))
    response = client.post("/traces/req-92/snapshot", {"reason": "ticket 4711"})
    assert response.status_code == 404
    assert b"expired" in response.content
    assert b"SECRET-BODY-42" not in response.content
    assert b"is gone" in client.get("/traces/req-92/").content


def test_dashboard__support__latest_non_ready_traces_of_granted_agent(client, support):
    post_batch(
        client,
        runtime_token(Trace.objects.first().environment),
        [
            trace_payload(
                "req-93",
                occurred_at=timezone.now().isoformat(),
                status="degraded",
                degradation="general_policy_only",
            )
        ],
    )
    client.force_login(support)
    response = client.get("/")
    assert b"req-93" in response.content


def test_trace_list__many_traces__query_count_bounded(
    client, support, django_assert_max_num_queries
):
    post_batch(
        client,
        runtime_token(Trace.objects.first().environment),
        [trace_payload(f"bulk-{i}") for i in range(120)],
    )
    client.force_login(support)
    # A constant number, whatever the number of rows: the scope's agent ids, the count, the
    # page's keys and its rows are one query each.
    with django_assert_max_num_queries(17):
        response = client.get("/traces/", {"agent": "assistant_professional"})
    assert len(response.context["traces"]) == 50


def test_trace_list__last_day_counts__read_from_rollups(client, support):
    from traces.services import rollup_hour_refresh

    last_hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    Trace.objects.update(occurred_at=last_hour + timedelta(minutes=5))
    rollup_hour_refresh(hour=last_hour)
    client.force_login(support)
    response = client.get("/traces/")
    counts = {c.status: c.count for c in response.context["last_day"]}
    assert counts["ready"] == 1  # req-92; lite-1 belongs to an agent support cannot see
    assert counts["degraded"] == 0


SELECTED_CHAT = {"source": "recent_dialogue", "decision": "selected"}
OLD_CHAT_EXCLUDED = {
    "source": "recent_dialogue",
    "decision": "irrelevant",
    "reason": "older product introduction",
}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (SELECTED_CHAT, {f"match-{n:02d}" for n in range(1, 13)}),
        # The fixture's req-92 has this one too.
        (OLD_CHAT_EXCLUDED, {"req-92", *(f"match-{n:02d}" for n in range(1, 13))}),
    ],
)
def test_trace_list__candidate_filter__pages_newest_first_across_chunks_within_scope(
    client, support, query, expected
):
    """The candidate-filtered list: traces without the candidate, and those of an agent the
    user cannot see, skipped; pages in time order with nothing lost or repeated — the same
    traces, in the same order, as reading every visible trace's candidates."""
    from tests.factories import candidate
    from tests.factories.traces import candidates_of
    from traces import selectors
    from traces.filters import TraceFilters

    now = timezone.now()
    secret = runtime_token(Trace.objects.first().environment)
    default = trace_payload()["candidates"]
    chat = candidate("chat:e-318", source="recent_dialogue", required=False, reason="fits")
    batch = []
    for n in range(1, 13):  # 12 matches of the support user's agent, one minute apart
        at = now - timedelta(minutes=n)
        batch.append(
            trace_payload(f"match-{n:02d}", occurred_at=at.isoformat(), candidates=[*default, chat])
        )
        # Interleaved: a trace with neither candidate, and a match of another agent,
        # invisible to support.
        batch.append(
            trace_payload(
                f"miss-{n:02d}",
                occurred_at=(at - timedelta(seconds=20)).isoformat(),
                candidates=default[:2],
            )
        )
        batch.append(
            trace_payload(
                f"other-{n:02d}",
                agent="assistant_lite",
                documents={"profile": 1},
                strategy="",
                occurred_at=(at - timedelta(seconds=40)).isoformat(),
                candidates=[*default, chat],
            )
        )
    batch.append(
        trace_payload(
            "old-match",
            occurred_at=(now - timedelta(hours=3)).isoformat(),
            candidates=[*default, chat],
        )
    )
    assert post_batch(client, secret, batch).json()["accepted"] == len(batch)
    since = now - timedelta(hours=1)
    filters = TraceFilters.from_query({**query, "since": since.isoformat()})
    visible = Trace.objects.filter(agent__key="assistant_professional", occurred_at__gte=since)
    read_one_by_one = [
        t.request_id
        for t in visible.order_by("-occurred_at", "-id")
        if any(all(getattr(c, k) == v for k, v in query.items()) for c in candidates_of(t))
    ]
    assert set(read_one_by_one) == expected
    pages = []
    for number in (1, 2, 3):
        page = selectors.trace_page_of(
            user=support, filters=filters, page_number=number, per_page=5
        )
        pages.append([t.request_id for t in page.object_list])
    assert page.paginator.count == len(read_one_by_one)
    assert [r for rows in pages for r in rows] == read_one_by_one
    assert [len(rows) for rows in pages] == [5, 5, len(read_one_by_one) - 10]
    assert not any(
        r.startswith(("other-", "miss-")) or r == "old-match" for rows in pages for r in rows
    )


def test_trace_list__candidate_filter_over_cap__says_more_than(client, support, monkeypatch):
    from traces import selectors

    monkeypatch.setattr(selectors, "CANDIDATE_COUNT_CAP", 3)
    secret = runtime_token(Trace.objects.first().environment)
    post_batch(client, secret, [trace_payload(f"many-{n}") for n in range(5)])
    client.force_login(support)
    response = client.get("/traces/", {"source": "recent_dialogue", "decision": "irrelevant"})
    assert response.context["page_obj"].paginator.capped
    assert "More than 3 traces match" in response.content.decode()


@pytest.mark.parametrize("query", [{}, {"source": "recent_dialogue", "decision": "irrelevant"}])
def test_api__list_over_the_count_cap__says_capped_and_pages_on_to_the_end(
    client, support, monkeypatch, query
):
    """The API counts no further than the page does (a count over tens of millions of rows
    takes seconds): past the cap it says so, and `next` still walks every matching trace."""
    from traces import selectors

    monkeypatch.setattr(selectors, "LIST_COUNT_CAP", 3)
    monkeypatch.setattr(selectors, "CANDIDATE_COUNT_CAP", 3)
    secret = runtime_token(Trace.objects.first().environment)
    now = timezone.now()
    post_batch(
        client,
        secret,
        [
            trace_payload(f"many-{n}", occurred_at=(now - timedelta(seconds=n)).isoformat())
            for n in range(6)
        ],
    )
    client.force_login(support)
    first = client.get("/api/v1/traces", {**query, "limit": 4}).json()
    assert (first["count"], first["count_capped"]) == (4, True)  # "more than 3"
    seen = [t["request_id"] for t in first["results"]]
    url = first["next"]
    while url:
        page = client.get(url).json()
        seen += [t["request_id"] for t in page["results"]]
        url = page["next"]
    # Every visible trace once, newest first: the six, then the fixture's req-92.
    assert seen == [f"many-{n}" for n in range(6)] + ["req-92"]
    small = client.get(
        "/api/v1/traces",
        {
            **query,
            "agent": "assistant_professional",
            "since": (now - timedelta(seconds=1, milliseconds=500)).isoformat(),
        },
    ).json()
    assert (small["count"], small["count_capped"], small["next"]) == (2, False, None)


@pytest.mark.parametrize("query", [{}, {"source": "recent_dialogue", "decision": "irrelevant"}])
def test_api__list_offset_past_the_depth__400_at_offset_never_a_server_error(
    client, support, monkeypatch, query
):
    """Skipping rows still reads them: pages stop MAX_DEPTH traces deep (an offset beyond a
    bigint once reached PostgreSQL as a 500), and `next` stops there too."""
    from traces import api

    monkeypatch.setattr(api.TraceListPagination, "MAX_DEPTH", 2)
    client.force_login(support)
    for offset in ("2", "99999999999999999999"):
        response = client.get("/api/v1/traces", {**query, "offset": offset})
        assert response.status_code == 400
        assert response.json()["error"]["details"][0]["path"] == "offset"
    secret = runtime_token(Trace.objects.first().environment)
    post_batch(client, secret, [trace_payload(f"deep-{n}") for n in range(3)])
    monkeypatch.setattr(api.selectors, "LIST_COUNT_CAP", 1)
    monkeypatch.setattr(api.selectors, "CANDIDATE_COUNT_CAP", 1)
    first = client.get("/api/v1/traces", {**query, "limit": 1}).json()
    second = client.get(first["next"]).json()
    assert first["count_capped"] and len(second["results"]) == 1
    assert second["next"] is None  # the next one would be 2 deep


@pytest.mark.parametrize(
    "since",
    [
        "{day}",  # what the page's date field sends
        "{day}T00:00",  # what the "last 24 hours" counts link to: no offset, UTC
        "{day}T00:00:00-23:59",  # an offset Python allows and PostgreSQL refuses
    ],
)
def test_trace_list__since_as_a_date_or_odd_datetime__filters_never_a_server_error(
    client, support, since
):
    client.force_login(support)
    day = (timezone.now() - timedelta(days=1)).date().isoformat()
    query = {"since": since.format(day=day)}
    page = client.get("/traces/", query)
    assert page.status_code == 200
    assert [t.request_id for t in page.context["traces"]] == ["req-92"]
    assert "since" in page.context["active_filters"]
    api = client.get("/api/v1/traces", query)
    assert api.status_code == 200
    assert [t["request_id"] for t in api.json()["results"]] == ["req-92"]


def test_trace_list__since_past_the_last_moment_in_utc__explained_not_a_server_error(
    client, support
):
    client.force_login(support)
    query = {"since": "9999-12-31T23:59:59-23:00"}  # after 9999 in UTC
    page = client.get("/traces/", query)
    assert page.status_code == 200
    assert "since" in page.context["filters"].errors
    api = client.get("/api/v1/traces", query)
    assert api.status_code == 400
    assert api.json()["error"]["details"][0]["path"] == "since"
