"""Issue 31's stream capacity, with a real stream server (granian ASGI, its default capacity
and backpressure) and 10,500 connections opened with asyncio from this process: the ones past
the capacity get 503 with Retry-After at once, `/healthz` keeps answering, and every held
stream still hears the next publish. Measured figures are printed (`pytest -s`)."""

from __future__ import annotations

import asyncio
import json
import resource
import time
import urllib.request

import pytest
from django.conf import settings

from strategies.releases.services import release_publish
from tests.engines import console_env, run_apart
from tests.factories import release_setup_serving, runtime_token
from tests.runtime_sim import AGENT, stream_server

pytestmark = pytest.mark.django_db(transaction=True)

CONNECTIONS = 10_500
CAPACITY = settings.STREAM_CAPACITY  # the default a process gets
OPENING_AT_ONCE = 300  # connects in flight at a time (the listen backlog is granian's 1024)


async def _open(port: int, token: str) -> tuple[int, bytes, float, asyncio.StreamReader, object]:
    """(status, head, seconds from connected to the answer, reader, writer) of one stream
    request."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    connected = time.monotonic()
    writer.write(
        f"GET /api/v1/runtime/stream/{AGENT} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {token}\r\n\r\n".encode()
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
    status = int(head.split(b" ", 2)[1])
    if status == 200:  # held: wait for its first bytes (the ETag at connect)
        head += await asyncio.wait_for(reader.readuntil(b"event: config"), 60)
    else:  # the error body
        head += await asyncio.wait_for(reader.readuntil(b"}}"), 5)
    return status, head, time.monotonic() - connected, reader, writer


async def _next_event(reader: asyncio.StreamReader) -> bool:
    await asyncio.wait_for(reader.readuntil(b"event: config"), 30)
    return True


def _healthz(port: int) -> tuple[float, dict]:
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
        return time.monotonic() - started, json.load(resp)


def test_stream_server__10500_connections__past_capacity_503_at_once_health_and_publish_hold(
    transactional_db, tmp_path
):
    # Given a stream server with the default capacity, and a token allowed more streams
    # than that (so only the capacity refuses)
    world = release_setup_serving()
    token = runtime_token(world.sg, capabilities=("config:read",))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, CONNECTIONS + 2000)), hard))
    env = console_env(
        STREAM_MAX_PER_TOKEN=str(CONNECTIONS * 2),
    )
    server = stream_server(env, log_path=tmp_path / "stream.log").start()
    try:
        run_apart(_flood(server.port, token, world))
    finally:
        server.stop()


async def _flood(port: int, token: str, world) -> None:
    gate = asyncio.Semaphore(OPENING_AT_ONCE)

    async def one():
        async with gate:
            return await _open(port, token)

    # When 10,500 runtimes connect
    started = time.monotonic()
    answers = await asyncio.gather(*(one() for _ in range(CONNECTIONS)))
    opened_in = time.monotonic() - started
    held = [a for a in answers if a[0] == 200]
    refused = [a for a in answers if a[0] == 503]
    try:
        # Then the capacity is held and every one past it is refused with 503 at once
        assert len(held) == CAPACITY, f"{len(held)} held; capacity {CAPACITY}"
        assert len(refused) == CONNECTIONS - CAPACITY, {a[0] for a in answers}
        assert all(b"retry-after:" in a[1].lower() for a in refused)
        assert all(b'"stream_capacity"' in a[1] for a in refused)
        # "At once" is judged on the 99th percentile: each time is read by this process's
        # own event loop, which carries 10,500 sockets beside the server on the same cores
        # (CI runs two suites on two), so a single answer can be read late without the
        # server having made it wait (in CI: 1.05 s for one of 1,500).
        refusal_times = sorted(a[2] for a in refused)
        slowest_refusal = refusal_times[-1]
        refusal_p99 = refusal_times[max(0, -(-len(refusal_times) * 99 // 100) - 1)]
        assert refusal_p99 < 1.0, f"1 % of refusals took {refusal_p99:.2f} s or more"

        # And /healthz answers, saying how many it holds
        health_in, health = await asyncio.to_thread(_healthz, port)
        assert health["streams"] == CAPACITY and health["refused_full"] >= len(refused)

        # And every held stream hears the next publish
        published = time.monotonic()
        await asyncio.to_thread(
            release_publish, version=world.strategy[3], environment=world.sg, actor=world.ops
        )
        heard = await asyncio.gather(*(_next_event(a[3]) for a in held), return_exceptions=True)
        heard_in = time.monotonic() - published
        assert sum(1 for h in heard if h is True) == CAPACITY
        print(
            f"\n{CONNECTIONS} connections in {opened_in:.1f} s: {len(held)} held, "
            f"{len(refused)} refused (503 p99 {refusal_p99 * 1000:.0f} ms, slowest "
            f"{slowest_refusal * 1000:.0f} ms); "
            f"/healthz {health_in * 1000:.0f} ms; publish heard by all held in {heard_in:.1f} s"
        )
    finally:
        for answer in answers:
            answer[4].close()
