"""The trace reporter (RUNTIME_API §3) against a fake console on loopback: report() never
blocks, what does not fit is dropped and counted, and after outages everything arrives exactly
once (the console de-duplicates by request_id)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import msgspec
import pytest
from context_runtime.client import Resolution
from context_runtime.reporter import TraceReporter, encode_trace, snapshot_allowed
from context_runtime.wire import Candidate, Estimate, Trace
from fake_console import (
    AGENT,
    COMMIT_THEN_500,
    ERROR_500,
    HANG,
    OK,
    PATIENT,
    TOKEN,
    UNAUTHORIZED,
    dead_url,
)

ALLOWING = {"required": ["task_state"], "snapshot": {"allowed": True}}
NOT_ALLOWING = {"required": ["task_state"], "snapshot": {"allowed": False}}


@pytest.fixture
def make_reporter(reporters):
    def make(url, **options):
        settings = {
            "batch_size": 100,
            "flush_interval": 0.02,
            "timeout": PATIENT,
            "backoff_initial": 0.02,
            "backoff_max": 0.1,
            "close_at_exit": False,
            "spool_dir": None,  # the memory queue's rules (the spool's: test_reporter_spool)
        }
        settings.update(options)
        reporter = TraceReporter(url, TOKEN, **settings)
        reporters.append(reporter)
        return reporter

    return make


def trace(i: int, **fields) -> Trace:
    values = {
        "request_id": f"req-{i}",
        "agent": AGENT,
        "occurred_at": datetime(2026, 11, 30, 9, 12, 44, tzinfo=UTC),
        "status": "ready",
        "documents": {"profile": 7, "after_sales_consultation": 3},
        "strategy": "after_sales_consultation",
        "candidates": [
            Candidate(
                id=f"task_state:T{i}",
                source="task_state",
                decision="selected",
                version="4",
                size=310,
                required=True,
                reason="required",
            )
        ],
    }
    values.update(fields)
    return Trace(**values)


def wait_for(predicate, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


# ---------------------------------------------------------------- delivering


def test_reporter__console_up__delivers_every_trace_once_in_bounded_batches(console, make_reporter):
    reporter = make_reporter(console.url, batch_size=100)

    results = [reporter.report(trace(i)) for i in range(250)]

    assert all(results)
    assert reporter.flush(timeout=3.0)
    assert sorted(console.stored) == sorted(f"req-{i}" for i in range(250))
    assert all(len(post["request_ids"]) <= 100 for post in console.trace_posts)
    stats = reporter.stats()
    assert (stats["queued"], stats["sent"], stats["delivered"]) == (250, 250, 250)
    assert (stats["dropped"], stats["rejected"], stats["pending"]) == (0, 0, 0)


def test_reporter__console_down_then_back__delivers_everything_exactly_once(console, make_reporter):
    console.modes["traces"] = ERROR_500
    reporter = make_reporter(console.url)
    for i in range(300):
        reporter.report(trace(i))
    assert wait_for(lambda: reporter.stats()["retries"] >= 2)
    assert console.stored == {}

    console.modes["traces"] = OK

    assert reporter.flush(timeout=3.0)
    assert len(console.stored) == 300
    posted = console.posted_request_ids()
    assert len(posted) == len(set(posted)) == 300  # the failed tries carried nothing stored
    stats = reporter.stats()
    assert stats["delivered"] == 300
    assert stats["dropped"] == stats["rejected"] == 0
    assert "HTTP 500" in stats["last_error"]


def test_reporter__answer_lost_after_commit__retry_never_doubles(console, make_reporter):
    console.modes["traces"] = COMMIT_THEN_500  # stores the batch, answers 500, once
    reporter = make_reporter(console.url, flush_interval=0.2)

    for i in range(50):
        reporter.report(trace(i))

    assert reporter.flush(timeout=3.0)
    assert len(console.posted_request_ids()) == 100  # the batch went twice
    assert sorted(console.stored) == sorted(f"req-{i}" for i in range(50))  # stored once
    stats = reporter.stats()
    assert (stats["sent"], stats["duplicates"], stats["delivered"]) == (0, 50, 50)
    assert stats["retries"] == 1


def test_reporter__413__splits_batch_and_delivers_all(console, make_reporter):
    one = len(encode_trace(trace(0)))
    console.max_batch_bytes = 5 * one  # at most 4 traces per request get through
    reporter = make_reporter(console.url, batch_size=40, flush_interval=0.2)

    for i in range(40):
        reporter.report(trace(i))

    assert reporter.flush(timeout=3.0)
    assert len(console.stored) == 40
    statuses = [post["status"] for post in console.trace_posts]
    assert 413 in statuses
    assert all(post["bytes"] <= 5 * one for post in console.trace_posts if post["status"] == 200)
    assert reporter.stats()["rejected"] == 0


def test_reporter__trace_too_large_alone__counted_rejected_rest_delivered(console, make_reporter):
    console.max_batch_bytes = 2_000
    reporter = make_reporter(console.url, batch_size=10, flush_interval=0.2)
    big = trace(99, principal="x" * 200, candidates=[trace(0).candidates[0]] * 20)

    reporter.report(trace(1))
    reporter.report(big)
    reporter.report(trace(2))

    assert reporter.flush(timeout=3.0)
    assert sorted(console.stored) == ["req-1", "req-2"]
    assert reporter.stats()["rejected"] == 1


def test_reporter__trace_rejected_by_console__counted_and_not_retried(console, make_reporter):
    reporter = make_reporter(console.url, flush_interval=0.1)

    reporter.report(trace(1))
    reporter.report(trace(2, agent="unknown_agent"))
    reporter.report(trace(3))

    assert reporter.flush(timeout=3.0)
    time.sleep(0.1)
    assert sorted(console.stored) == ["req-1", "req-3"]
    assert console.posted_request_ids().count("req-2") == 1
    stats = reporter.stats()
    assert (stats["sent"], stats["rejected"], stats["retries"]) == (2, 1, 0)


def test_reporter__invalid_trace__rejected_locally_without_round_trip(console, make_reporter):
    reporter = make_reporter(console.url)
    invalid = {
        "request_id": "req-bad",
        "agent": AGENT,
        "occurred_at": "2026-11-30T09:12:44Z",
        "status": "bogus",
    }

    assert reporter.report(invalid)  # queued: checking happens off the request path
    reporter.report(trace(1))

    assert reporter.flush(timeout=3.0)
    assert "req-bad" not in console.posted_request_ids()
    assert reporter.stats()["rejected"] == 1
    assert list(console.stored) == ["req-1"]


def test_reporter__dict_trace_in_wire_form__delivered(console, make_reporter):
    reporter = make_reporter(console.url)
    wire = json.loads(msgspec.json.encode(trace(5)))

    reporter.report(wire)

    assert reporter.flush(timeout=3.0)
    assert console.stored["req-5"]["candidates"][0]["id"] == "task_state:T5"


# ---------------------------------------------------------------- never blocking


def test_reporter__console_hangs__report_never_blocks(console, make_reporter):
    console.modes["traces"] = HANG
    reporter = make_reporter(console.url, timeout=2.0, max_queue=1_000)

    slowest = 0.0
    started = time.perf_counter()
    for i in range(2_000):
        begin = time.perf_counter()
        reporter.report(trace(i))
        slowest = max(slowest, time.perf_counter() - begin)
    total = time.perf_counter() - started

    # Waiting on the console even once would take its 2 s timeout; these bounds leave room
    # for a loaded machine (typically: slowest ~0.1 ms, total ~30 ms).
    assert slowest < 0.5
    assert total < 1.5
    closing = time.monotonic()
    reporter.close(timeout=0.2)
    assert time.monotonic() - closing < 1.0


def test_reporter__queue_full__drops_and_counts(console, make_reporter):
    console.modes["traces"] = HANG
    reporter = make_reporter(console.url, max_queue=10, batch_size=5)

    results = [reporter.report(trace(i)) for i in range(100)]

    stats = reporter.stats()
    assert results.count(False) == stats["dropped"] >= 80
    assert results.count(True) == stats["queued"]
    assert stats["pending"] <= 10 + 5


def test_reporter__console_down_at_close__returns_within_timeout_and_counts_dropped(
    make_reporter,
):
    reporter = make_reporter(dead_url())
    for i in range(10):
        reporter.report(trace(i))

    started = time.monotonic()
    delivered_all = reporter.close(timeout=0.3)

    assert time.monotonic() - started < 1.0
    assert not delivered_all
    stats = reporter.stats()
    assert stats["dropped"] == 10
    assert stats["pending"] == 0
    assert "cannot reach the console" in stats["last_error"]


def test_reporter__report_raises_nothing__even_for_garbage(make_reporter):
    reporter = make_reporter(dead_url())

    assert reporter.report(object()) is False
    assert reporter.report({"request_id": "r", "occurred_at": object()}) is False
    assert reporter.stats()["rejected"] == 2


# ---------------------------------------------------------------- flush and close


def test_reporter__close__flushes_pending(console, make_reporter):
    reporter = make_reporter(console.url, flush_interval=10.0)  # would wait 10 s to fill
    for i in range(20):
        reporter.report(trace(i))

    started = time.monotonic()
    assert reporter.close(timeout=2.0)

    assert time.monotonic() - started < 1.0
    assert len(console.stored) == 20


def test_reporter__after_close__report_drops_and_counts(console, make_reporter):
    reporter = make_reporter(console.url)
    reporter.close(timeout=1.0)

    assert reporter.report(trace(1)) is False
    assert reporter.stats()["dropped"] == 1


def test_reporter__flush_with_nothing_reported__true_at_once(make_reporter):
    reporter = make_reporter(dead_url())

    assert reporter.flush(timeout=0.01)


def test_reporter__token_refused__retries_slowly_and_delivers_once_fixed(console, make_reporter):
    console.modes["traces"] = UNAUTHORIZED
    reporter = make_reporter(console.url, auth_retry_interval=0.1)
    for i in range(10):
        reporter.report(trace(i))
    assert wait_for(lambda: "401" in (reporter.stats()["last_error"] or ""))

    console.modes["traces"] = OK

    assert reporter.flush(timeout=3.0)
    assert len(console.stored) == 10
    assert reporter.stats()["dropped"] == 0


def test_reporter__token_refused_with_drop_policy__drops_and_counts(console, make_reporter):
    console.modes["traces"] = UNAUTHORIZED
    reporter = make_reporter(console.url, drop_on_auth_error=True)
    for i in range(10):
        reporter.report(trace(i))

    assert reporter.flush(timeout=3.0)
    assert reporter.stats()["dropped"] == 10
    assert console.stored == {}


def test_reporter__batch_size_above_contract_limit__refused():
    with pytest.raises(ValueError, match="batch_size"):
        TraceReporter(dead_url(), TOKEN, batch_size=1_001, close_at_exit=False)


# ---------------------------------------------------------------- what a trace carries


def test_reporter__snapshot_and_strategy_not_allowing__snapshot_not_sent(console, make_reporter):
    reporter = make_reporter(console.url)
    with_snapshot = msgspec.Raw(b'{"messages": ["secret"]}')

    reporter.report(trace(1, snapshot=with_snapshot), strategy=NOT_ALLOWING)
    reporter.report(trace(2, snapshot=with_snapshot))  # no strategy given: not sent either
    reporter.report(trace(3, snapshot=with_snapshot), strategy=ALLOWING)

    assert reporter.flush(timeout=3.0)
    assert console.stored["req-1"]["snapshot"] is None
    assert console.stored["req-2"]["snapshot"] is None
    assert console.stored["req-3"]["snapshot"] == {"messages": ["secret"]}


def test_reporter__resolution_given__trace_carries_config_fields(console, make_reporter):
    reporter = make_reporter(console.url)

    reporter.report(trace(1), resolution=Resolution("stale", 12.5, True))
    reporter.report(
        json.loads(msgspec.json.encode(trace(2))), resolution=Resolution("fresh", 1, False)
    )

    assert reporter.flush(timeout=3.0)
    stale = console.stored["req-1"]
    assert (stale["config_fallback"], stale["config_resolution"], stale["config_age_seconds"]) == (
        True,
        "stale",
        12.5,
    )
    assert console.stored["req-2"]["config_resolution"] == "fresh"
    assert console.stored["req-2"]["config_fallback"] is False


def test_encode_trace__struct_with_resolution__one_json_object_with_each_field_once():
    data = encode_trace(trace(1, config_fallback=False), resolution=Resolution("cached", 3, True))

    decoded = json.loads(data)
    assert decoded["config_fallback"] is True
    assert decoded["config_resolution"] == "cached"
    assert data.count(b'"config_fallback"') == 1
    assert msgspec.json.decode(data, type=Trace).request_id == "req-1"


@pytest.mark.parametrize(
    ("strategy", "allowed"),
    [
        (ALLOWING, True),
        (NOT_ALLOWING, False),
        ({"snapshot": {"allowed": "yes"}}, False),
        ({"required": []}, False),
        (None, False),
        ("body", False),
    ],
)
def test_snapshot_allowed__only_a_true_boolean__allows(strategy, allowed):
    assert snapshot_allowed(strategy) is allowed


def test_encode_trace__int_in_a_float_field__written_as_the_float_the_console_decodes():
    """What is sent is exactly the encoding of the trace it decodes to (the console then
    proves cheaply that no key came twice): 6200 in a float field goes as 6200.0."""
    data = encode_trace(
        trace(
            1,
            input_estimate=Estimate(value=6200),
            candidates=[
                Candidate(id="a", source="task_state", decision="selected", relevance=1),
                Candidate(id="b", source="task_state", decision="selected", relevance=0.5),
            ],
        ),
        resolution=Resolution("cached", 3, True),
    )

    assert msgspec.json.encode(msgspec.json.decode(data, type=Trace)) == data
    assert b'"value":6200.0' in data and b'"relevance":1.0' in data
    assert b'"config_age_seconds":3.0' in data
