"""The config stream with real processes: two console web processes (granian WSGI, different
ports, one PostgreSQL and Redis), a stream server (granian ASGI) beside each, and simulated
runtimes (tests/runtime_sim.py: the SDK alone, no Django) in other processes.

- a publish reaches every runtime within 1 s, also those whose console is the second
  instance; the releases page then says "N of N runtimes serve" the new version;
- a stream without a token, with a revoked token, or over the token's bound is refused
  before anything is held; a stalled reader is dropped while the others hear the change.

Measured delays are printed (`pytest -s`).
"""

from __future__ import annotations

import contextlib
import json
import socket
import statistics
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from strategies.delivery.config import CONFIG_CHANNEL
from strategies.releases.services import release_publish
from strategies.runtime.models import RuntimeInstance, RuntimeToken
from strategies.runtime.selectors import runtimes_of_agent
from strategies.runtime.tokens import runtime_token_revoke
from tests.engines import console_env
from tests.factories import release_setup_serving, runtime_token
from tests.runtime_sim import (
    AGENT,
    ConsoleServer,
    RuntimeSim,
    publish_and_time,
    stream_server,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)

POLL = 60.0  # so long that only the stream can explain a quick change
LIMIT = 1.0  # the bound: every runtime serves a publish within a second
BOUND = 6  # streams per token in these tests (STREAM_MAX_PER_TOKEN)


@pytest.fixture
def world(transactional_db):
    world = release_setup_serving()
    world.token = runtime_token(world.sg, capabilities=("config:read", "traces:write"))
    return world


@pytest.fixture
def base_env():
    return console_env()


@pytest.fixture
def servers(world, base_env, tmp_path):
    """Two console instances: (web, stream) each; every web advertises its own stream."""
    started = []
    pairs = []
    try:
        for n in (1, 2):
            stream = stream_server(
                {**base_env, "STREAM_MAX_PER_TOKEN": str(BOUND), "STREAM_HEARTBEAT_SECONDS": "2"},
                log_path=tmp_path / f"stream{n}.log",
            )
            started.append(stream.start())
            web = ConsoleServer(
                {**base_env, "STREAM_URL": f":{stream.port}"}, log_path=tmp_path / f"web{n}.log"
            )
            started.append(web.start())
            pairs.append((web, stream))
        yield pairs
    finally:
        for server in started:
            server.stop()


def _stream_request(port: int, token: str | None, *, last_event_id: str | None = None):
    """A raw stream request: (status, headers+first bytes, the open socket)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    lines = [f"GET /api/v1/runtime/stream/{AGENT} HTTP/1.1", "Host: 127.0.0.1"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    if last_event_id:
        lines.append(f"Last-Event-ID: {last_event_id}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    head = sock.recv(65536)
    status = int(head.split(b" ", 2)[1])
    return status, head, sock


def test_stream__publish__every_runtime_on_either_console_serves_it_within_a_second(
    world, servers, sims, tmp_path
):
    # Given three runtimes on console 1 and two on console 2, polling only every minute
    for n, (web, _) in enumerate([servers[0]] * 3 + [servers[1]] * 2):
        sim = RuntimeSim(
            console_url=web.url,
            token=world.token,
            poll=POLL,
            interval=0.02,
            cache_dir=tmp_path / f"sim{n}",
            log_path=tmp_path / f"sim{n}.log",
        )
        sims.append(sim)
        sim.start()
    # each holds its stream (the sims' `transport` shows in their heartbeat rows)
    assert wait_until(
        lambda: RuntimeInstance.objects.filter(transport="stream").count() == 5, 20, 0.2
    ), list(RuntimeInstance.objects.values_list("instance", "transport"))

    # When a new strategy version is published (in this process: neither console's)
    # Then every runtime serves it within a second
    delays = publish_and_time(
        sims,
        lambda: release_publish(version=world.strategy[3], environment=world.sg, actor=world.ops),
        3,
    )
    print(
        f"\npublish → served: median {statistics.median(delays) * 1000:.0f} ms, "
        f"max {max(delays) * 1000:.0f} ms ({len(delays)} runtimes, two console instances)"
    )
    assert max(delays) <= LIMIT, delays

    # And the releases page's runtimes card says all of them serve it (heartbeat after change)
    def card():
        env = next(e for e in runtimes_of_agent(agent=world.agent) if e.environment == world.sg)
        return env if env.serving == 5 else None

    env = wait_until(card, 5, 0.1)
    assert env is not None
    assert env.summary.startswith("5 of 5 runtimes serve")
    assert "after_sales_consultation v3" in env.summary


def test_stream__bad_tokens_and_the_bound__are_refused_before_anything_is_held(
    world, servers, sims
):
    _, stream = servers[0]
    # Without a token, and with an unknown one: 401 at once, no stream
    status, head, sock = _stream_request(stream.port, None)
    sock.close()
    assert status == 401 and b"text/event-stream" not in head
    status, _, sock = _stream_request(stream.port, "cc_rt_not-a-token")
    sock.close()
    assert status == 401

    # A revoked token: 401, and its refused calls are counted for the runtimes card
    revoked = runtime_token(world.sg, capabilities=("config:read",))
    token = RuntimeToken.objects.order_by("-pk").first()
    runtime_token_revoke(token=token, actor=world.admin, reason="rotated")
    status, _, sock = _stream_request(stream.port, revoked)
    sock.close()
    assert status == 401
    env = next(e for e in runtimes_of_agent(agent=world.agent) if e.environment == world.sg)
    assert [t.pk for t in env.revoked_tokens] == [token.pk]
    assert env.revoked_tokens[0].refused_count >= 1

    # The bound (BOUND per token here), across both stream servers: one more gets 429
    held = []
    for n in range(BOUND):
        port = servers[n % 2][1].port
        status, head, sock = _stream_request(port, world.token)
        assert status == 200 and b"text/event-stream" in head
        held.append(sock)
    status, head, sock = _stream_request(stream.port, world.token)
    sock.close()
    assert status == 429 and b"too_many_streams" in head
    # one closes: a new one is taken again
    held.pop().close()
    assert wait_until(lambda: _stream_request(stream.port, world.token)[0] == 200, 5, 0.2)
    for sock in held:
        sock.close()


def test_stream__current_last_event_id__gets_nothing_at_connect(world, servers):
    _, stream = servers[0]
    status, head, sock = _stream_request(stream.port, world.token)
    assert status == 200
    body = head
    while b"event: config" not in body:
        body += sock.recv(4096)
    etag = body.split(b"id: ", 1)[1].split(b"\n", 1)[0].decode()
    sock.close()
    status, head, sock = _stream_request(stream.port, world.token, last_event_id=etag)
    sock.settimeout(1.0)
    with contextlib.suppress(TimeoutError):
        head += sock.recv(4096)
    sock.close()
    assert status == 200 and b"event: config" not in head


def test_stream__a_stalled_reader__is_dropped_and_others_still_hear_the_change(
    world, servers, sims, tmp_path
):
    web, stream = servers[0]
    # Given a reader that never reads (a small receive buffer) on bank-uat's stream of the
    # agent, and a runtime on sg-test's that does
    uat = world.envs["bank-uat"]
    uat_token = runtime_token(uat, capabilities=("config:read",))
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(("127.0.0.1", stream.port))
    stalled.sendall(
        f"GET /api/v1/runtime/stream/{AGENT} HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {uat_token}\r\n\r\n".encode()
    )
    sim = RuntimeSim(
        console_url=web.url,
        token=world.token,
        poll=POLL,
        interval=0.02,
        cache_dir=tmp_path / "sim",
        log_path=tmp_path / "sim.log",
    )
    sims.append(sim)
    sim.start()
    time.sleep(1.0)  # its stream is open

    # When a flood of notifications (8 KB ETags, 12 MB in all) fills the stalled reader's
    # buffers and queue. The server's transport takes about 3.6 MB before a write blocks
    # (measured with granian 2.8 on loopback): a smaller flood is dropped or not depending on
    # how the notifications happen to arrive in bursts.
    with connection.cursor() as cursor:
        for n in range(1500):
            fake = f'"r{10_000 + n}-{"x" * 7900}"'
            cursor.execute("SELECT pg_notify(%s, %s)", [CONFIG_CHANNEL, f"{uat.pk} {AGENT} {fake}"])

    def dropped():
        with urllib.request.urlopen(f"{stream.url}/healthz", timeout=2) as resp:
            return json.load(resp)["dropped_slow"] >= 1

    # Then the stalled reader is dropped, and a real publish still reaches the runtime
    assert wait_until(dropped, 30, 0.5), "the stalled reader was never dropped"
    mark = len(sim.lines)
    published = time.time()
    release_publish(version=world.strategy[3], environment=world.sg, actor=world.ops)
    line = sim.wait_line(lambda rec: rec["strategy_version"] == 3, 5.0, start=mark)
    stalled.close()
    assert line is not None and line["t"] - published <= LIMIT


def test_healthz_of_the_stream_server__says_it_listens(servers):
    _, stream = servers[0]
    with urllib.request.urlopen(f"{stream.url}/healthz", timeout=2) as resp:
        assert json.load(resp)["listening"] is True
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{stream.url}/api/v1/other", timeout=2)
    assert refused.value.code == 404


def test_stream__concurrent_connects_of_one_token__never_hold_more_than_the_bound(world, servers):
    # Given two stream servers sharing one Redis, and a token bound to BOUND streams
    ports = [stream.port for _, stream in servers]
    attempts = 12 * BOUND
    barrier = threading.Barrier(attempts)

    def connect(n):
        barrier.wait()
        return _stream_request(ports[n % 2], world.token)

    # When many connect at the same instant, on both servers
    with ThreadPoolExecutor(attempts) as pool:
        answers = list(pool.map(connect, range(attempts)))
    try:
        held = [status for status, _, _ in answers if status == 200]
        refused = [head for status, head, _ in answers if status == 429]
        # Then exactly BOUND are held and every other one is refused with 429
        assert len(held) == BOUND, f"{len(held)} streams held, bound {BOUND}"
        assert len(refused) == attempts - BOUND
        assert all(b"too_many_streams" in head for head in refused)
    finally:
        for _, _, sock in answers:
            sock.close()


def _read_until(sock, done, timeout: float) -> bytes:
    """What the socket sends until `done(received)` or `timeout` seconds (or its end)."""
    received = b""
    deadline = time.monotonic() + timeout
    while not done(received) and (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            break
        received += chunk
    return received


def _stream_ended(received: bytes) -> bool:
    return received.endswith(b"0\r\n\r\n")  # the last chunk: the response is over


def test_stream__token_revoked__its_open_streams_close_on_every_server_within_seconds(
    world, servers
):
    # Given a token holding a stream on each stream server, and another token's stream
    doomed = runtime_token(world.sg, capabilities=("config:read",))
    doomed_token = RuntimeToken.objects.order_by("-pk").first()
    opened = [_stream_request(stream.port, doomed) for _, stream in servers]
    status, other_head, other = _stream_request(servers[0][1].port, world.token)
    assert status == 200 and [s for s, _, _ in opened] == [200, 200]

    # When the token is revoked
    revoked = time.monotonic()
    runtime_token_revoke(token=doomed_token, actor=world.admin, reason="leaked")

    # Then both of its streams end within a few seconds, and a reconnect gets 401
    for _, _, sock in opened:
        tail = _read_until(sock, _stream_ended, 5.0)
        sock.close()
        assert _stream_ended(tail), f"still open {time.monotonic() - revoked:.1f} s after"
    print(f"\nrevoked → both streams closed in {time.monotonic() - revoked:.2f} s")
    status, _, sock = _stream_request(servers[1][1].port, doomed)
    sock.close()
    assert status == 401
    # And the other token's stream still hears the next publish
    release_publish(version=world.strategy[3], environment=world.sg, actor=world.ops)

    def events(got):
        return (other_head + got).count(b"event: config")  # the first: the ETag at connect

    heard = _read_until(other, lambda got: events(got) >= 2, 5.0)
    other.close()
    assert events(heard) == 2
