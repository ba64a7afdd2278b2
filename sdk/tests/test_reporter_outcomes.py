"""Outcomes after the fact (RUNTIME_API §3b) through the trace reporter's own delivery: batched,
retried across outages, spooled to disk, and stored exactly once by the console."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from context_runtime.reporter import TraceReporter
from fake_console import COMMIT_THEN_500, ERROR_500, OK, PATIENT, TOKEN, FakeConsole
from test_reporter import wait_for

SETTINGS = {
    "batch_size": 100,
    "flush_interval": 0.02,
    "timeout": PATIENT,
    "backoff_initial": 0.02,
    "backoff_max": 0.1,
    "close_at_exit": False,
    "spool_dir": None,  # memory; the spooled outcomes' test names its directory
}


@pytest.fixture
def make_reporter(reporters):
    def make(url, **options):
        reporter = TraceReporter(url, TOKEN, **{**SETTINGS, **options})
        reporters.append(reporter)
        return reporter

    return make


def report_story(reporter: TraceReporter, requests: int) -> None:
    for i in range(requests):
        reporter.report_outcome(f"req-{i}", "task_completed", i % 3 != 0)
        reporter.report_outcome(f"req-{i}", "rating", 1 + i % 5)


def test_report_outcome__delivered_in_batches_and_counted(console, make_reporter):
    reporter = make_reporter(console.url)
    when = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)

    assert reporter.report_outcome("req-97", "escalated", True, occurred_at=when)
    assert reporter.report_outcome("req-97", "resolution", "refund")

    assert reporter.flush(timeout=3.0)
    assert console.outcomes == {("req-97", "escalated"): True, ("req-97", "resolution"): "refund"}
    assert console.stored == {}  # no trace went anywhere
    stats = reporter.stats()["outcomes"]
    assert (stats["sent"], stats["delivered"], stats["rejected"]) == (2, 2, 0)


def test_report_outcome__across_a_console_outage__each_stored_exactly_once(console, make_reporter):
    console.modes["outcomes"] = ERROR_500
    reporter = make_reporter(console.url)
    report_story(reporter, 50)
    assert not reporter.flush(timeout=0.3)  # the console is down: nothing settles

    console.modes["outcomes"] = COMMIT_THEN_500  # back, but the first answer is lost
    assert reporter.flush(timeout=5.0)

    assert len(console.outcomes) == 100
    assert console.outcomes[("req-3", "task_completed")] is False
    stats = reporter.stats()["outcomes"]
    assert stats["delivered"] == 100
    assert stats["sent"] + stats["duplicates"] == 100
    assert stats["duplicates"] > 0  # the retry of the committed batch came back as duplicates
    assert stats["retries"] >= 2
    assert console.modes["outcomes"] == OK


def test_report_outcome__spooled__a_new_process_delivers_what_an_earlier_one_left(
    tmp_path, make_reporter
):
    console = FakeConsole()
    url = console.url
    console.modes["outcomes"] = ERROR_500
    try:
        first = make_reporter(url, spool_dir=tmp_path)
        report_story(first, 20)
        assert first.close(timeout=0.3) is True  # on disk, not dropped
        assert console.outcomes == {}

        console.modes["outcomes"] = OK
        second = make_reporter(url, spool_dir=tmp_path)  # adopts the spool at start
        assert wait_for(lambda: second.stats()["outcomes"]["recovered"] == 40, timeout=8.0)
        assert second.flush(timeout=5.0)
        assert len(console.outcomes) == 40
        assert second.stats()["outcomes"]["delivered"] == 40
    finally:
        console.close()


def test_report_outcome__console_refuses_a_kind__rejected_and_not_retried(console, make_reporter):
    reporter = make_reporter(console.url)
    reporter.report_outcome("req-1", "nps", 9)
    reporter.report_outcome("req-1", "rating", 4)
    reporter.report_outcome("req-1", "rating", 2)  # another value: the first one stays
    assert reporter.flush(timeout=3.0)
    assert console.outcomes == {("req-1", "rating"): 4}
    stats = reporter.stats()["outcomes"]
    assert (stats["sent"], stats["rejected"]) == (1, 2)
    assert len(console.outcome_posts) == 1


def test_report_outcome__not_an_outcome__counted_without_a_request(console, make_reporter):
    reporter = make_reporter(console.url)
    assert reporter.report_outcome("req 1", "rating", 4)  # queued: never blocks or raises
    assert reporter.report_outcome("req-2", "rating", 4.5)
    assert reporter.flush(timeout=3.0)
    assert reporter.stats()["outcomes"]["rejected"] == 2
    assert console.outcome_posts == []
