"""The config hot path's process-local mirror stays exact: invalidations from other
processes drop entries, a value read before an invalidation is never kept, and an entry whose
invalidation was lost expires by itself."""

from __future__ import annotations

import time

import pytest

from strategies.delivery import config as runtime_config
from strategies.delivery.config import cache_key, mirror, redis_client

pytestmark = pytest.mark.django_db


def wait_until(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def subscribed_mirror():
    mirror.get("warm-up")  # starts the listener in this process
    assert wait_until(lambda: mirror.healthy), "the mirror never subscribed"
    return mirror


def test_mirror__another_process_publishes_change__entry_dropped(subscribed_mirror):
    key = cache_key("rtcfg:test:agent")
    subscribed_mirror.remember(key, ("etag", b"{}"), subscribed_mirror.generation)
    assert subscribed_mirror.get(key) == ("etag", b"{}")

    # What another web process's writer does after changing the key in Redis:
    redis_client().publish(cache_key(runtime_config.INVALIDATIONS), key)

    assert wait_until(lambda: subscribed_mirror.get(key) is None)


def test_mirror__invalidation_while_reading__stale_value_not_kept(subscribed_mirror):
    key = cache_key("rtcfg:test:other")
    generation = subscribed_mirror.generation  # a reader starts its Redis GET…
    runtime_config.invalidate(key)  # …a writer changes the key meanwhile

    subscribed_mirror.remember(key, ("old", b"{}"), generation)

    assert subscribed_mirror.get(key) is None


def test_mirror__listener_not_subscribed__reads_bypass_it(subscribed_mirror):
    key = cache_key("rtcfg:test:third")
    subscribed_mirror.remember(key, ("etag", b"{}"), subscribed_mirror.generation)
    subscribed_mirror.healthy = False
    try:
        assert subscribed_mirror.get(key) is None
    finally:
        subscribed_mirror.healthy = True


def test_mirror__invalidation_lost__entry_expires_after_its_lifetime(
    subscribed_mirror, monkeypatch
):
    key = cache_key("rtcfg:test:fourth")
    subscribed_mirror.remember(key, ("etag", b"{}"), subscribed_mirror.generation)
    almost = time.monotonic() + runtime_config.MIRROR_TTL_SECONDS - 1
    monkeypatch.setattr(subscribed_mirror, "clock", lambda: almost)
    assert subscribed_mirror.get(key) == ("etag", b"{}")

    later = almost + 2  # no invalidation came (a publish lost to a Redis blip)
    monkeypatch.setattr(subscribed_mirror, "clock", lambda: later)

    assert subscribed_mirror.get(key) is None
