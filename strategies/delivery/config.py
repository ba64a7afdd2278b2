"""The runtime's live configuration (docs/runtime-contract.md §1): rendered once per release change.

Every release change (publish, approval applied, rollback) calls `payload_refresh` inside
its own transaction: it locks the (agent, environment) payload row, renders the JSON bytes
from the releases as they now stand and stores them, so the stored payload commits together
with the release. After commit the bytes are pushed to Redis. The config endpoint then
answers from Redis alone — no database query and no serializer on a hit.

The ETag is `"r<sum of the release revisions>-<4 hex of the payload hash>"`. Revisions only
grow, so the sum grows with every change of any release of that agent in that environment
and with nothing else; it also orders payloads, so an older payload never overwrites a newer
one in the cache (see `_CACHE_SET_IF_NEWER`).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass

import redis
from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from strategies.catalog.models import Agent
from strategies.delivery.models import ConfigPayload
from strategies.documents.models import Document
from strategies.releases.models import Release

CACHE_TTL_SECONDS = 7 * 24 * 3600  # a refill from the database is cheap; keep memory bounded


@dataclass(frozen=True)
class RenderedConfig:
    revision_sum: int
    etag: str
    body: bytes


def _dumps(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def payload_render(*, agent, environment) -> RenderedConfig:
    """Render the §1 document from the releases of `agent` in `environment` (two queries)."""

    releases = list(
        Release.objects.filter(document__agent=agent, environment=environment)
        .select_related("document", "version")
        .order_by("document__key")
    )
    profile = None
    strategies: dict[str, dict] = {}
    for release in releases:
        entry = {"version": release.version.number, "body": release.version.body}
        if release.document.kind == Document.Kind.PROFILE:
            profile = entry
        else:
            strategies[release.document.key] = entry
    revision_sum = sum(r.revision for r in releases)
    document = {
        "agent": agent.key,
        "environment": environment.key,
        "etag": "",
        "profile": profile,
        "strategies": strategies,
        "shadow": {},
    }
    digest = hashlib.sha256(_dumps(document)).hexdigest()
    etag = f'"r{revision_sum}-{digest[:4]}"'
    document["etag"] = etag
    return RenderedConfig(revision_sum=revision_sum, etag=etag, body=_dumps(document))


def payload_refresh(*, agent, environment) -> RenderedConfig:
    """Re-render and store the payload inside the caller's transaction; push it to the
    cache after commit. The row lock serialises concurrent changes of different documents
    of the same agent and environment, so the last writer renders what is really live."""
    ConfigPayload.objects.bulk_create(
        [ConfigPayload(agent=agent, environment=environment)], ignore_conflicts=True
    )
    row = ConfigPayload.objects.select_for_update().get(agent=agent, environment=environment)
    rendered = payload_render(agent=agent, environment=environment)
    row.revision_sum, row.etag, row.body = rendered.revision_sum, rendered.etag, rendered.body
    row.save(update_fields=["revision_sum", "etag", "body", "rendered_at"])
    key = (agent.key, environment.pk)
    transaction.on_commit(lambda: cache_put(*key, rendered))
    return rendered


# --- the Redis side ------------------------------------------------------------------------------
_client = None


def redis_client():
    """A raw client on the cache's Redis server (same key prefix via cache_key), made once
    per process: building a client per call costs more than the GET itself."""
    global _client
    if _client is None:
        _client = cache._cache.get_client(write=True)
    return _client


def cache_key(name: str) -> str:
    return cache.make_key(name)


# --- the process-local mirror ------------------------------------------------------------------
class LocalMirror:
    """A process-local copy of hot Redis values (payloads, token identities).

    On a loaded machine one Redis round trip costs as much as a whole bare Django request,
    so the hot path reads from this dict. It is exact, not a TTL cache: every writer
    publishes the key it changed on INVALIDATIONS after writing Redis, a listener thread
    in each process drops that key, and the writer's own process drops it synchronously.
    While the listener is not subscribed (starting, or Redis unreachable) the mirror is
    bypassed and every read goes to Redis. A value read from Redis is only remembered if
    no invalidation arrived meanwhile (the generation check), so a slow reader can never
    park a stale value.
    """

    MAX_ENTRIES = 10_000

    def __init__(self, channel: str):
        self.channel = channel
        self._values: dict[str, object] = {}
        self.generation = 0
        self.healthy = False
        self._pid = None
        self._start_lock = threading.Lock()

    def get(self, key: str):
        if self._pid != os.getpid():
            self._start()
        return self._values.get(key) if self.healthy else None

    def remember(self, key: str, value, generation: int) -> None:
        if self.healthy and generation == self.generation:
            if len(self._values) >= self.MAX_ENTRIES:
                self._values.clear()
            self._values[key] = value

    def forget(self, key: str) -> None:
        self.generation += 1
        self._values.pop(key, None)

    def forget_all(self) -> None:
        self.generation += 1
        self._values.clear()

    def _start(self) -> None:
        if not self.channel:
            self.channel = cache_key(INVALIDATIONS)
        with self._start_lock:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()  # a forked worker starts its own listener
            self.healthy = False
            self._values = {}
            threading.Thread(target=self._listen, name="config-mirror", daemon=True).start()

    def _listen(self) -> None:
        location = settings.CACHES["default"]["LOCATION"]
        while True:
            try:
                client = redis.Redis.from_url(
                    location, socket_timeout=15, socket_connect_timeout=5, health_check_interval=10
                )
                pubsub = client.pubsub()
                pubsub.subscribe(self.channel)
                while True:
                    message = pubsub.get_message(timeout=5)
                    if message is None:
                        continue
                    if message["type"] == "subscribe":
                        self.forget_all()
                        self.healthy = True
                    elif message["type"] == "message":
                        self.forget(message["data"].decode())
            except Exception:  # noqa: BLE001 - any failure: bypass the mirror and reconnect
                self.healthy = False
                self.forget_all()
                time.sleep(1)


INVALIDATIONS = "rt-invalidate"
mirror = LocalMirror(channel="")  # channel set on first use (needs the cache prefix)


def invalidate(key: str) -> None:
    """After writing `key` in Redis: drop it here at once and in every other process."""
    mirror.forget(key)
    redis_client().publish(cache_key(INVALIDATIONS), key)


def _config_key(agent_key: str, environment_id: int) -> str:
    return cache_key(f"rtcfg:{environment_id}:{agent_key}")


# Value layout: b"<revision_sum>|<etag>|<body>". Set only when newer than what is stored.
_CACHE_SET_IF_NEWER = """
local current = redis.call('GET', KEYS[1])
if current then
  local stored = tonumber(string.match(current, '^(%d+)|'))
  if stored and stored > tonumber(ARGV[1]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
return 1
"""


def cache_put(agent_key: str, environment_id: int, rendered: RenderedConfig) -> None:
    value = b"%d|%s|%s" % (rendered.revision_sum, rendered.etag.encode(), rendered.body)
    key = _config_key(agent_key, environment_id)
    redis_client().eval(
        _CACHE_SET_IF_NEWER, 1, key, rendered.revision_sum, value, CACHE_TTL_SECONDS
    )
    invalidate(key)


def cached_config(agent_key: str, environment_id: int) -> tuple[str, bytes] | None:
    """(etag, body) from the local mirror or Redis, or None on a miss. The hot path."""
    key = _config_key(agent_key, environment_id)
    entry = mirror.get(key)
    if entry is not None:
        return entry
    generation = mirror.generation
    value = redis_client().get(key)
    if value is None:
        return None
    _, etag, body = value.split(b"|", 2)
    entry = (etag.decode(), body)
    mirror.remember(key, entry, generation)
    return entry


def config_load(*, agent_key: str, environment) -> tuple[str, bytes] | None:
    """A cache miss: the stored payload (rendered now if it never was), pushed to the cache.
    None when the agent does not exist."""

    agent = Agent.objects.filter(key=agent_key).first()
    if agent is None:
        return None
    row = ConfigPayload.objects.filter(agent=agent, environment=environment).first()
    if row is not None and row.etag:
        rendered = RenderedConfig(row.revision_sum, row.etag, bytes(row.body))
    else:
        with transaction.atomic():
            rendered = payload_refresh(agent=agent, environment=environment)
    cache_put(agent_key, environment.pk, rendered)
    return rendered.etag, rendered.body


def cache_forget(agent_key: str, environment_id: int) -> None:
    key = _config_key(agent_key, environment_id)
    redis_client().delete(key)
    invalidate(key)


def cache_clear_all() -> int:
    """Drop every cached payload and token identity of this console (e.g. after restoring the
    database from a backup, when cached revisions may be ahead of the restored ones)."""
    client = redis_client()
    keys = [
        *client.scan_iter(match=cache_key("rtcfg:*"), count=500),
        *client.scan_iter(match=cache_key("rtid:*"), count=500),
    ]
    deleted = client.delete(*keys) if keys else 0
    for key in keys:
        invalidate(key.decode())
    return deleted
