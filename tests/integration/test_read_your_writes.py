"""Read your writes on the config route (issue 31.15): once a publish has answered, every web
process of that console instance serves the new version — not only the one that published.

Two web processes (granian, one machine, one PostgreSQL, Redis and cache prefix) serve the
runtime config; an operator publishes through the first with a personal token, over and over,
while runtimes in other processes read through both as fast as they can, each read on a new
connection (tests/config_reads.py). Before the fix the busy process served the previous
version for the milliseconds its pub/sub invalidation took to arrive.
"""

from __future__ import annotations

import bisect
import http.client
import json
import os
import re
import subprocess
import sys
import time

import pytest

from console.accounts.personal_tokens import personal_token_create
from strategies.delivery.config import LocalMirror, cache_key
from strategies.releases.services import release_publish
from tests.engines import console_env
from tests.factories import release_setup, runtime_token
from tests.runtime_sim import AGENT, ROOT, STRATEGY_KEY, ConsoleServer, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

READS = 5_000
PUBLISHES = 60
READERS = 3
SECONDS = 12.0


def _request(port: int, path: str, headers: dict, body: bytes | None = None, method="GET"):
    """One request on a new connection: (status, headers, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers={**headers, "Connection": "close"})
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


def _revision(etag: str) -> int:
    """The ETag's revision sum: every publish adds one."""
    return int(re.match(r'"r(\d+)-', etag).group(1))


@pytest.fixture
def instance(settings, tmp_path):
    """Two web processes of one instance (the same machine and cache)."""
    env = console_env()
    servers = []
    try:
        for n in (1, 2):
            servers.append(ConsoleServer(env, log_path=tmp_path / f"web{n}.log").start())
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def world(transactional_db):
    """A live strategy in sg-test, a runtime token there (`token`), and the operator's personal
    API token's headers (`operator`)."""
    world = release_setup()
    world.sg = world.envs["sg-test"]
    release_publish(version=world.profile[1], environment=world.sg, actor=world.ops)
    release_publish(version=world.strategy[1], environment=world.sg, actor=world.ops)
    world.token = runtime_token(world.sg, capabilities=("config:read",))
    _, secret = personal_token_create(
        user=world.ops, name="publisher", capabilities=["view_config", "publish"], all_agents=True
    )
    world.operator = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    return world


CONFIG = f"/api/v1/runtime/config/{AGENT}"
PUBLISH = f"/api/v1/agents/{AGENT}/documents/{STRATEGY_KEY}/releases/sg-test/"


def _publish(port: int, world, version: int) -> None:
    body = json.dumps({"version": version, "reason": "read your writes"}).encode()
    status, _, text = _request(port, PUBLISH, world.operator, body, method="POST")
    assert status == 200, text[:300]


def test_config__publish_answered__a_process_whose_invalidation_is_in_flight_drops_it(
    world, instance
):
    _publish(instance[0].port, world, 2)  # the first request of a process loads its modules
    # Given another process of the instance holding the live config in its mirror, whose
    # pub/sub invalidation has not arrived (it listens on a channel nobody publishes to)
    late = LocalMirror(channel=cache_key("invalidations-still-in-flight"))
    late.get("warm-up")  # starts its listener
    assert wait_until(lambda: late.healthy, timeout=5), "the mirror never subscribed"
    key = cache_key(f"rtcfg:{world.sg.pk}:{AGENT}")
    late.remember(key, ('"r2-old"', b"{}"), late.generation)
    assert late.get(key) is not None

    # When a publish answers through a web process
    _publish(instance[0].port, world, 1)

    # Then the late process no longer serves what the publish replaced
    assert late.get(key) is None


def test_config__after_a_publish_answers__no_web_process_of_the_instance_serves_the_old(
    world, instance
):
    token, config = world.token, CONFIG
    web, other = (server.port for server in instance)
    status, headers, _ = _request(other, config, {"Authorization": f"Bearer {token}"})
    assert status == 200
    revision = _revision(headers["ETag"])
    # runtimes reading through both processes, most through the one that does not publish
    readers = [
        subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "tests" / "config_reads.py"),
                token,
                config,
                str(SECONDS),
                str(other),
                str(other),
                str(web),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(READERS)
    ]
    # When the operator publishes v2 and v1 in turn through the first process
    answered: list[tuple[int, int]] = [(0, revision)]  # (monotonic ns of the 200, revision)
    deadline = time.monotonic() + SECONDS - 0.5
    while len(answered) <= PUBLISHES or time.monotonic() < deadline:
        _publish(web, world, 2 if len(answered) % 2 else 1)
        revision += 1
        answered.append((time.monotonic_ns(), revision))
        time.sleep(0.05)
    reads = []
    for reader in readers:
        out, _ = reader.communicate(timeout=60)
        reads += [line.split(" ", 2) for line in out.splitlines()]

    # Then every read sent after a publish answered serves that publish or a later one
    times = [at for at, _ in answered]
    stale = []
    for sent, status, etag in reads:
        assert status == "200", (status, etag)
        floor = answered[bisect.bisect_right(times, int(sent)) - 1][1]
        if _revision(etag) < floor:
            stale.append((floor, etag))
    assert len(reads) >= READS and len(answered) > PUBLISHES
    assert stale == [], f"{len(stale)} stale reads of {len(reads)}: {stale[:10]}"


def test_config__counter_file_planted_by_someone_else__reads_answered_never_stale(
    world, client, caplog
):
    # Given a link planted where the instance's counter file goes (a shared /dev/shm), before
    # this process first maps it
    from strategies.delivery import config
    from tests.factories import bearer

    path = config.InstanceCounter.path()
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink("/dev/null", path)
    config.instance_counter.reset()
    url = f"/api/v1/runtime/config/{AGENT}"
    try:
        # When a runtime reads, a publish answers, and it reads again
        first = client.get(url, **bearer(world.token))
        release_publish(version=world.strategy[2], environment=world.sg, actor=world.ops)
        second = client.get(url, **bearer(world.token))
    finally:
        os.unlink(path)
        config.instance_counter.reset()

    # Then both reads are answered, the second with the new version, and the log says why
    # the mirror is off
    assert first.status_code == second.status_code == 200
    assert _revision(second["ETag"]) == _revision(first["ETag"]) + 1
    assert "config mirror off: the instance counter is unusable" in caplog.text
