"""A console that answers one byte at a time ("slow loris"): every request of the SDK ends
within its ``timeout`` (one deadline for connect, send, headers and body, not a bound per
socket read), and the client keeps its last good copy and says why the refresh failed."""

from __future__ import annotations

import time

import pytest
from context_runtime.client import STALE, ConfigClient
from context_runtime.client._http import TransportError, request
from context_runtime.manifest_report import ManifestReportError, report_manifest
from context_runtime.reporter import TraceReporter
from fake_console import AGENT, PAYLOAD, TOKEN
from test_reporter import trace
from test_reporter_manifest import RUNTIME, bank_registry
from trickling_console import BODY, HEADERS, TricklingConsole

TIMEOUT = 1.0
# Room for the thread switches around the deadline; far below what the trickle would take
# (a byte every 0.3 s: the smallest answer here trickles for 6 s, when the server gives up).
MARGIN = 0.5
GOOD_PAYLOAD = {**PAYLOAD, "etag": '"r1-good"'}


@pytest.fixture
def slow_console():
    server = TricklingConsole()
    server.serve_json(GOOD_PAYLOAD)
    yield server
    server.close()


@pytest.mark.parametrize("trickle", [HEADERS, BODY])
def test_request__console_trickles_bytes__fails_within_the_timeout(slow_console, trickle):
    slow_console.trickle = trickle
    started = time.monotonic()

    with pytest.raises(TransportError, match="no answer within 1 s"):
        request("GET", slow_console.url + "api/v1/runtime/config/x", token=TOKEN, timeout=TIMEOUT)

    assert time.monotonic() - started < TIMEOUT + MARGIN


@pytest.mark.parametrize("trickle", [HEADERS, BODY])
def test_client__console_trickles_the_refresh__fails_in_time_and_keeps_last_good_copy(
    slow_console, trickle, tmp_path
):
    client = ConfigClient(
        slow_console.url, TOKEN, AGENT, timeout=TIMEOUT, cache_path=tmp_path / "cache.json"
    )
    slow_console.answer_normally = 1
    assert client.refresh_now()
    slow_console.trickle = trickle
    started = time.monotonic()

    refreshed = client.refresh_now()

    assert time.monotonic() - started < TIMEOUT + MARGIN
    assert refreshed is False
    snapshot = client.snapshot()
    assert snapshot.etag == '"r1-good"'
    assert snapshot.strategy("after_sales_consultation").version == 3
    status = client.status()
    assert status["reason"] == STALE
    assert "no answer within 1 s" in status["last_error"]
    assert status["consecutive_failures"] == 1


def test_reporter__console_trickles_its_answer__batch_fails_in_time_and_stays_queued(
    slow_console,
):
    slow_console.trickle = BODY
    reporter = TraceReporter(
        slow_console.url,
        TOKEN,
        timeout=TIMEOUT,
        flush_interval=0.01,
        backoff_initial=30.0,
        backoff_max=30.0,
        close_at_exit=False,
    )
    try:
        started = time.monotonic()
        assert reporter.report(trace(1))
        while reporter.stats()["last_error"] is None and time.monotonic() - started < 10:
            time.sleep(0.02)

        stats = reporter.stats()
        assert stats["last_error_at"] is not None
        assert "no answer within 1 s" in stats["last_error"]
        assert time.monotonic() - started < TIMEOUT + MARGIN
        assert (stats["pending"], stats["sent"], stats["dropped"]) == (1, 0, 0)
    finally:
        reporter.close(timeout=0.1)


def test_report_manifest__console_trickles_its_answer__gives_up_in_time(slow_console):
    slow_console.trickle = HEADERS
    started = time.monotonic()

    with pytest.raises(ManifestReportError, match="no answer within 1 s"):
        report_manifest(
            slow_console.url,
            TOKEN,
            bank_registry(),
            RUNTIME,
            timeout=TIMEOUT,
            attempts=1,
            raise_on_failure=True,
        )

    assert time.monotonic() - started < TIMEOUT + MARGIN
