"""Issue 36: a trace's candidates stored in its row (`packed_candidates`) beside the numbers of
its kinds of candidate (`kinds`) — checked through the ingest API against what the runtime
sent, under concurrent and rolled-back batches, and against brute-force answers for the
candidate search and the hourly rollups."""

from __future__ import annotations

import math
import random
import threading
import time
from collections import Counter
from datetime import timedelta

import msgspec
import orjson
import pytest
from context_runtime import wire
from django.db import connection, connections, transaction
from django.test import Client
from django.utils import timezone

from tests.factories import candidate, post_batch, runtime_token, trace_payload, world
from tests.factories.traces import candidates_of
from traces import services
from traces.filters import TraceFilters
from traces.models import CandidateKind, HourlyRollup, Trace
from traces.selectors import trace_listing
from traces.stored import trace_candidates

pytestmark = pytest.mark.django_db

AGENT = "assistant_professional"


@pytest.fixture
def env():
    return world()


@pytest.fixture
def secret(env):
    return runtime_token(env["environments"]["sg-test"])


@pytest.fixture
def support(make_user, env):
    return make_user("sup", support=AGENT)


def as_sent(payload: dict) -> list[wire.Candidate]:
    """The payload's candidates as the runtime's wire structs (what a replay needs back)."""
    return msgspec.json.decode(orjson.dumps(payload["candidates"]), type=list[wire.Candidate])


def kind_rows() -> dict[int, tuple[str, str, str]]:
    return {k.pk: (k.source, k.decision, k.reason) for k in CandidateKind.objects.order_by("pk")}


def kinds_of(trace: Trace) -> list[tuple[str, str, str]]:
    rows = kind_rows()
    return [rows[number] for number in trace.kinds]


def listed(user, **filters) -> list[str]:
    paginator = trace_listing(user=user, filters=TraceFilters(**filters), per_page=1_000)
    return [t.request_id for t in paginator.page(1).object_list]


# --- what is stored is what was sent ---------------------------------------------------------
def test_ingest__candidates__read_back_field_for_field_as_sent(client, secret):
    words_apart = trace_payload(
        "req-exact",
        candidates=[
            # "" and None are different answers of the runtime: a replay needs which it was.
            candidate("a", bundle="", provider_bundle="", outcome="fetched", relevance=1 / 3),
            candidate("b", outcome=None, reason_code="required", relevance=0.123456789),
            candidate(
                "c",
                source="recent_dialogue",
                decision="over_budget",
                reason="too long for the budget",
                reason_code="over_budget_optional",
                required=False,
                size=None,
                version="",
                relevance=1e-7,
                depends_on=["a", "b"],
                conflicts_with=["b"],
                note="älter als 30 Tage · 旧",
                bundle="dialogue",
                provider_bundle="dialogue-provider",
            ),
            candidate(
                "d",
                source="recent_dialogue",
                decision="over_budget",
                reason="too long for the budget",
                required=False,
            ),  # fmt: skip
            candidate(
                "e",
                source="recent_dialogue",
                decision="irrelevant",
                reason="too long for the budget",
                required=False,
                relevance=0.0,
            ),  # fmt: skip
            candidate(
                "f",
                source="applicable_policy",
                decision="over_budget",
                reason="too long for the budget",
                outcome="not_fetched",
            ),  # fmt: skip
        ],
    )
    thousandths = trace_payload(
        "req-thousandths",
        candidates=[
            candidate(f"r{n}", source="memory", relevance=value, required=False)
            for n, value in enumerate((0.5, 0.001, 0.999, 1.0, 0.0, -0.0, 0.25))
        ],
    )
    empty = trace_payload("req-none", candidates=[])
    response = post_batch(client, secret, [words_apart, thousandths, empty])
    assert response.json()["accepted"] == 3

    for payload in (words_apart, thousandths, empty):
        trace = Trace.objects.get(request_id=payload["request_id"])
        sent = as_sent(payload)
        stored_back = [c.wire for c in trace_candidates(trace)]
        assert stored_back == sent
        assert [msgspec.structs.astuple(c) for c in stored_back] == [
            msgspec.structs.astuple(c) for c in sent
        ]
        # == does not tell 0.0 from -0.0, nor 1 from 1.0: the sign and the type do.
        assert [
            (type(c.relevance), math.copysign(1, c.relevance) if c.relevance is not None else None)
            for c in stored_back
        ] == [
            (type(c.relevance), math.copysign(1, c.relevance) if c.relevance is not None else None)
            for c in sent
        ]

    exact = trace_candidates(Trace.objects.get(request_id="req-exact"))
    assert [(c.wire.bundle, c.wire.outcome, c.wire.reason_code) for c in exact[:2]] == [
        ("", "fetched", None),
        (None, None, "required"),
    ]
    assert exact[0].wire.provider_bundle == "" and exact[1].wire.provider_bundle is None
    # Under the product's names, none is "" whichever the runtime sent.
    assert [(c.bundle, c.outcome, c.reason_code) for c in exact[:2]] == [
        ("", "fetched", ""),
        ("", "", "required"),
    ]
    assert [c.position for c in exact] == list(range(6))
    assert exact[2].relevance == 1e-7 and exact[0].relevance == 1 / 3


def test_ingest__kinds__one_number_per_distinct_kind_of_the_trace(client, secret):
    too_long = "too long for the budget"
    excluded = [
        candidate("c", source="recent_dialogue", decision="over_budget", reason=too_long),
        candidate("d", source="recent_dialogue", decision="over_budget", reason=too_long),
        candidate("e", source="recent_dialogue", decision="irrelevant", reason=too_long),
        candidate("f", source="applicable_policy", decision="over_budget", reason=too_long),
        candidate("g", source="applicable_policy", decision="over_budget", reason=""),
    ]
    payload = trace_payload("req-kinds", candidates=[candidate("a"), *excluded])
    again = trace_payload("req-kinds-again", candidates=list(reversed(excluded)))
    only_selected = trace_payload("req-selected", candidates=[candidate("a"), candidate("b")])
    post_batch(client, secret, [payload, only_selected])
    post_batch(client, secret, [again])

    selected = ("task_state", "selected", "required")
    expected = {
        selected,
        ("recent_dialogue", "over_budget", too_long),
        ("recent_dialogue", "irrelevant", too_long),
        ("applicable_policy", "over_budget", too_long),
        ("applicable_policy", "over_budget", ""),
    }
    first = Trace.objects.get(request_id="req-kinds")
    assert len(first.kinds) == 5
    assert set(kinds_of(first)) == expected
    # The kind table holds each once, and a later trace of the same kinds reuses the numbers.
    assert set(kind_rows().values()) == expected
    assert len(kind_rows()) == 5
    later = Trace.objects.get(request_id="req-kinds-again")
    assert set(kinds_of(later)) == expected - {selected}
    # Two selected candidates of one kind: one number.
    assert kinds_of(Trace.objects.get(request_id="req-selected")) == [selected]


# --- new kinds under concurrent and rolled-back batches --------------------------------------
NEW_KIND = {"source": "weather", "decision": "not_requested", "reason": "not in the strategy"}


def new_kind_trace(request_id: str) -> dict:
    return trace_payload(
        request_id, candidates=[candidate(), candidate("weather:SG", required=False, **NEW_KIND)]
    )


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE %s",
            ["%traces_candidate_kind%"],
        )
        return cursor.fetchone()[0] > 0


def race(holder, contender) -> tuple[dict, bool]:
    """`holder()` inside a transaction left open, then `contender()` on its own connection
    while it is; the holder commits once the contender waits on a lock (or after 15 s).
    Returns their results and whether the contender did wait."""
    results: dict[str, object] = {}
    held, may_commit = threading.Event(), threading.Event()

    def hold():
        try:
            with transaction.atomic():
                results["holder"] = holder()
                held.set()
                assert may_commit.wait(30)
        finally:
            held.set()
            connections.close_all()

    def contend():
        try:
            results["contender"] = contender()
        finally:
            connections.close_all()

    first = threading.Thread(target=hold)
    first.start()
    assert held.wait(30)
    second = threading.Thread(target=contend)
    second.start()
    deadline = time.monotonic() + 15
    while not _waiting_on_a_lock() and time.monotonic() < deadline:
        time.sleep(0.05)
    waited = _waiting_on_a_lock()
    may_commit.set()
    first.join(30)
    second.join(30)
    return results, waited


@pytest.mark.django_db(transaction=True)
def test_ingest__two_batches_add_the_same_new_kind_at_once__both_stored_one_kind(env, support):
    """Batch A numbers a new kind and has not committed; batch B, wanting the same kind, waits
    on A's row, and once A commits its statement cannot see it (its snapshot is older): the
    second read of `kind_numbers` finds it. Both batches are stored, the kind once."""
    secret = runtime_token(env["environments"]["sg-test"])
    responses, b_waited = race(
        lambda: post_batch(Client(), secret, [new_kind_trace("req-a")]),
        lambda: post_batch(Client(), secret, [new_kind_trace("req-b")]),
    )
    responses = {"a": responses["holder"], "b": responses["contender"]}

    assert b_waited, "batch B never waited on batch A's new kind: the race was not exercised"
    for name in ("a", "b"):
        assert responses[name].status_code == 200, responses[name].content
        assert responses[name].json()["accepted"] == 1
    assert CandidateKind.objects.filter(**NEW_KIND).count() == 1
    number = CandidateKind.objects.get(**NEW_KIND).pk
    assert all(number in t.kinds for t in Trace.objects.filter(request_id__in=["req-a", "req-b"]))
    assert sorted(listed(support, **NEW_KIND)) == ["req-a", "req-b"]


def test_ingest__batch_rolled_back_after_numbering_a_new_kind__a_later_batch_stores_it(
    client, secret, support, monkeypatch
):
    def counters_fail(*args, **kwargs):
        raise RuntimeError("the counters could not be written")

    # The last step of the batch's transaction, after its kinds were numbered.
    monkeypatch.setattr(services, "_counters_record", counters_fail)
    assert post_batch(client, secret, [new_kind_trace("req-lost")]).status_code == 500
    assert not CandidateKind.objects.filter(**NEW_KIND).exists()
    assert not Trace.objects.filter(request_id="req-lost").exists()

    monkeypatch.undo()
    response = post_batch(client, secret, [new_kind_trace("req-later")])
    assert response.status_code == 200
    assert response.json()["accepted"] == 1
    trace = Trace.objects.get(request_id="req-later")
    assert tuple(NEW_KIND.values()) in kinds_of(trace)
    assert listed(support, **NEW_KIND) == ["req-later"]
    assert listed(support, source="weather") == ["req-later"]


# --- the exclusion search and the rollups against brute force --------------------------------
SOURCES = ("task_state", "order_delivery", "applicable_policy", "recent_dialogue", "memory")
REASONS = ("required", "older turn", "duplicate", "over the budget", "")


def mixed_world(client, secret, *, count: int, start, spread: timedelta, seed: int = 36):
    """`count` traces posted in batches of 50, each with 0–6 candidates of random source,
    decision and reason (some of the other agent, outside support's scope), at distinct random
    times from `start` over `spread`."""
    rng = random.Random(seed)
    seconds = rng.sample(range(int(spread.total_seconds())), count)
    payloads = []
    for n, second in enumerate(seconds):
        candidates = [
            candidate(
                f"item-{n}-{p}",
                source=rng.choice(SOURCES),
                decision=rng.choice(wire.DECISIONS),
                reason=rng.choice(REASONS),
                required=False,
            )
            for p in range(rng.randint(0, 6))
        ]
        payloads.append(
            trace_payload(
                f"mix-{n}",
                agent=AGENT if n % 7 else "assistant_lite",
                occurred_at=(start + timedelta(seconds=second)).isoformat(),
                documents={"profile": 7, "after_sales_consultation": rng.choice((3, 4))},
                status=rng.choice(("ready", "budget_exceeded", "source_conflict")),
                candidates=candidates,
            )
        )
    for at in range(0, count, 50):
        response = post_batch(client, secret, payloads[at : at + 50])
        assert response.json()["accepted"] == len(payloads[at : at + 50])


def _brute_force(traces: list[Trace], lookups: dict) -> list[str]:
    """The traces with a candidate having every value of `lookups` (and in its time window:
    `since`, `until`), newest first."""
    lookups = dict(lookups)
    since, until = lookups.pop("since", None), lookups.pop("until", None)
    newest_first = sorted(traces, key=lambda t: (t.occurred_at, t.pk), reverse=True)
    return [
        t.request_id
        for t in newest_first
        if (since is None or t.occurred_at >= since)
        and (until is None or t.occurred_at <= until)
        and any(all(getattr(c, k) == v for k, v in lookups.items()) for c in candidates_of(t))
    ]


def test_trace_listing__candidate_filters__the_traces_brute_force_finds_newest_first(
    client, secret, support, monkeypatch
):
    start = timezone.now() - timedelta(hours=20)
    mixed_world(client, secret, count=350, start=start, spread=timedelta(hours=19))
    visible = list(Trace.objects.filter(agent__key=AGENT))
    assert len(visible) == 300

    lookups = [{"source": s} for s in (*SOURCES, "weather")]
    lookups += [{"decision": d} for d in wire.DECISIONS]
    lookups += [{"reason": r} for r in REASONS if r]
    lookups += [
        {"source": "recent_dialogue", "decision": "irrelevant"},
        {"source": "memory", "decision": "selected"},
        {"decision": "over_budget", "reason": "over the budget"},
        {"decision": "selected", "reason": "required"},
        {"source": "applicable_policy", "reason": "duplicate"},
        {"source": "order_delivery", "decision": "not_fetched", "reason": "older turn"},
        {"source": "task_state", "decision": "selected", "reason": "required"},
        {"source": "task_state", "decision": "conflict", "reason": "no such reason"},
        # Narrowed to a window of time.
        {"decision": "irrelevant", "since": start + timedelta(hours=6)},
        {"source": "recent_dialogue", "until": start + timedelta(hours=12)},
        {
            "decision": "selected",
            "since": start + timedelta(hours=3),
            "until": start + timedelta(hours=9),
        },
    ]
    wrong = {}
    for lookup in lookups:
        expected = _brute_force(visible, lookup)
        paginator = trace_listing(user=support, filters=TraceFilters(**lookup), per_page=20)
        found = [t.request_id for n in paginator.page_range for t in paginator.page(n)]
        if found != expected or paginator.count != len(expected):
            wrong[str(lookup)] = {
                "count": (paginator.count, len(expected)),
                "missing": [r for r in expected if r not in found][:5],
                "extra": [r for r in found if r not in expected][:5],
                "in_order": found == [r for r in expected if r in found],
            }
    assert wrong == {}, sorted(wrong)
    assert any(_brute_force(visible, lookup) for lookup in lookups)  # the world is not empty


def test_rollup_hour_refresh__candidate_counts__equal_a_count_of_the_decoded_candidates(
    client, secret
):
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    # Around the hour: a few traces fall just before and after it, and are not counted.
    mixed_world(
        client, secret, count=200, start=hour - timedelta(minutes=10),
        spread=timedelta(minutes=80),
    )  # fmt: skip
    services.rollup_hour_refresh(hour=hour)

    in_hour = Trace.objects.filter(occurred_at__gte=hour, occurred_at__lt=hour + timedelta(hours=1))
    assert 0 < in_hour.count() < 200
    expected: Counter = Counter()
    traces_expected: Counter = Counter()
    for t in in_hour:
        key = (t.agent_id, t.environment_id, t.strategy, t.strategy_version or 0, t.status)
        traces_expected[key] += 1
        for c in trace_candidates(t):
            expected[(*key, c.source, c.decision, c.reason)] += 1
    rows = HourlyRollup.objects.filter(hour=hour)
    counted = {
        (r.agent_id, r.environment_id, r.strategy, r.strategy_version, r.status, r.source,
         r.decision, r.reason): r.count
        for r in rows
        if (r.source, r.decision, r.reason) != ("", "", "")
    }  # fmt: skip
    traces_counted = {
        (r.agent_id, r.environment_id, r.strategy, r.strategy_version, r.status): r.count
        for r in rows
        if (r.source, r.decision, r.reason) == ("", "", "")
    }
    assert counted == dict(expected)
    assert traces_counted == dict(traces_expected)
    # Idempotent: a second refresh replaces the hour's rows with the same counts.
    services.rollup_hour_refresh(hour=hour)
    assert HourlyRollup.objects.filter(hour=hour).count() == len(counted) + len(traces_counted)


# --- kinds no trace names any more are forgotten ------------------------------------------------
def test_purge__a_kind_no_trace_names__forgotten_the_named_kept(client, secret):
    """A kind's reason is free text: once the traces naming it are gone (here deleted as the
    retention deletes rows), the purge forgets it; kinds other traces name stay."""
    from traces import tasks

    post_batch(client, secret, [new_kind_trace("req-gone"), trace_payload("req-stays")])
    Trace.objects.filter(request_id="req-gone")._raw_delete(Trace.objects.db)
    assert CandidateKind.objects.filter(**NEW_KIND).exists()

    assert tasks.purge_expired()["kinds"] == 1
    assert not CandidateKind.objects.filter(**NEW_KIND).exists()
    stays = Trace.objects.get(request_id="req-stays")
    assert kinds_of(stays) and all(CandidateKind.objects.filter(pk=n) for n in stays.kinds)
    assert tasks.purge_expired()["kinds"] == 0


@pytest.mark.django_db(transaction=True)
def test_purge__a_batch_holds_an_unnamed_kind__the_purge_waits_and_keeps_it(env, support):
    """A kind no stored trace names, being numbered by a batch that has not committed: the
    purge waits on the batch's hold, sees the batch's trace once it commits, and keeps the
    kind — the trace stays findable by it."""
    from traces import services as trace_services

    secret = runtime_token(env["environments"]["sg-test"])
    assert post_batch(Client(), secret, [new_kind_trace("req-gone")]).status_code == 200
    Trace.objects.filter(request_id="req-gone")._raw_delete(Trace.objects.db)
    results, purge_waited = race(
        lambda: post_batch(Client(), secret, [new_kind_trace("req-held")]),
        trace_services.kinds_purge_unnamed,
    )
    results = {"batch": results["holder"], "forgotten": results["contender"]}

    assert purge_waited, "the purge never waited on the batch's hold: the race was not exercised"
    assert results["batch"].status_code == 200
    assert results["forgotten"] == 0
    assert CandidateKind.objects.filter(**NEW_KIND).count() == 1
    assert listed(support, **NEW_KIND) == ["req-held"]
