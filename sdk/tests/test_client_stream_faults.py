"""The config stream through faults (issue 31): a stream that never ends an event is dropped
at the config answer's cap, not read into memory without end; after an outage of the stream
server alone, runtimes are back on the stream soon after it answers, however long the outage
grew their backoff."""

from __future__ import annotations

import logging
import time

import pytest
from context_runtime.client import ConfigClient
from fake_console import ENDLESS_EVENT, ENDLESS_LINE, TOKEN, FakeConsole

AGENT = "assistant_professional"
CAP = 1024 * 1024  # the client's max_response_bytes here: the event's cap follows it


@pytest.fixture
def clients():
    made: list[ConfigClient] = []
    yield made
    for client in made:
        client.stop(timeout=1.0)


def wait_for(predicate, timeout: float = 3.0, interval: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def strategy(version: int) -> dict:
    return {
        "version": version,
        "body": {"required": ["task_state"], "budget": {"max_input_tokens": 2000}},
    }


@pytest.mark.parametrize("endless", [ENDLESS_EVENT, ENDLESS_LINE])
def test_stream__event_never_ends__dropped_at_the_cap_logged_and_polled(endless, clients, caplog):
    # Given a stream server that, after its first event, sends one event without end (data
    # lines with no blank line after them, or one line with no end), 64 MiB of it
    console = FakeConsole(stream=True)
    try:
        console.modes["stream"] = endless
        client = ConfigClient(
            console.url, TOKEN, AGENT, poll_interval=0.2, heartbeat_interval=None,
            max_response_bytes=CAP,
        )  # fmt: skip
        clients.append(client)
        with caplog.at_level(logging.WARNING, logger="context_runtime.client"):
            client.start(wait=3.0)

            # Then the runtime hangs up once the event passes the cap, long before the end
            assert wait_for(lambda: console.endless_sent, 20.0), client.status()
            written, hung_up = console.endless_sent[0]
            assert hung_up, f"the runtime read all {written:,} bytes"
            # (what the sockets buffer on both sides comes on top of the cap)
            assert written < CAP + 16 * 1024 * 1024, written
            assert wait_for(lambda: "larger than" in (client.status()["stream_error"] or ""))
        # and says so in its log
        assert any("Config stream" in r.getMessage() and "larger than" in r.getMessage()
                   for r in caplog.records), caplog.text  # fmt: skip
        # and polls meanwhile: a publish still arrives
        assert client.transport == "poll"
        etag = console.publish(small_talk=strategy(2))
        assert wait_for(lambda: client.snapshot().etag == etag, 3.0)
        # and it does not come back for more at once
        time.sleep(0.5)
        assert console.stream_requests == 1
    finally:
        console.close()


RUNTIMES = 8
REACHABLE_MAX = 0.5  # stream_reconnect_max here (8 s by default)


def test_stream__stream_server_down_then_back__every_runtime_back_within_the_short_cap(clients):
    # Given a console (polls answered throughout) and its stream server elsewhere, with
    # runtimes on the stream whose backoff could grow to a minute
    config = FakeConsole()
    stream = FakeConsole(stream=True)
    port = stream.server.server_address[1]
    try:
        runtimes = []
        for _ in range(RUNTIMES):
            client = ConfigClient(
                config.url, TOKEN, AGENT, poll_interval=0.2, heartbeat_interval=None,
                stream_url=stream.url, backoff_max=60.0, stream_reconnect_max=REACHABLE_MAX,
            )  # fmt: skip
            clients.append(client)
            client.start(wait=3.0)
            runtimes.append(client)
        assert wait_for(lambda: all(r.transport == "stream" for r in runtimes), 5.0)

        # When the stream server is down for 5 s (the backoff doubling 1, 2, 4 s meanwhile)
        stream.close()
        time.sleep(5.0)
        assert all(r.transport == "poll" for r in runtimes)
        assert all(r.status()["consecutive_failures"] == 0 for r in runtimes)
        stream = FakeConsole(stream=True, port=port)
        back = time.monotonic()

        # Then every runtime is on the stream again within the short cap (and a moment),
        # not after the backoff the outage grew
        assert wait_for(lambda: stream.open_streams == RUNTIMES, 10.0), stream.open_streams
        delays = sorted(at - back for at, _ in stream.stream_connects)
        assert max(delays) <= REACHABLE_MAX + 0.7, delays
        assert wait_for(lambda: all(r.transport == "stream" for r in runtimes), 2.0)
        # and a publish reaches them by the stream (they poll every 0.2 s, but served at once)
        etag = stream.publish(small_talk=strategy(3))
        config.publish(small_talk=strategy(3))
        assert wait_for(lambda: all(r.status()["stream_events"] >= 1 for r in runtimes), 2.0)
        assert wait_for(lambda: all(r.snapshot().etag == etag for r in runtimes), 2.0)
    finally:
        stream.close()
        config.close()
