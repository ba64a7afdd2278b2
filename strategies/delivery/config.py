"""The runtime's live configuration (docs/runtime-contract.md §1): rendered once per release change.

Every release change (publish, approval applied, rollback, a shadow started or stopped)
calls `payload_refresh` inside
its own transaction: it locks the (agent, environment) payload row, renders the JSON bytes
from the releases as they now stand and stores them, so the stored payload commits together
with the release. After commit the bytes are pushed to Redis. The config endpoint then
answers from Redis alone — no database query and no serializer on a hit.

The ETag is `"r<sum of the release and shadow revisions>-<4 hex of the payload hash>"`.
Revisions only grow (a stopped shadow keeps its row and revision), so the sum grows with
every change of any release or shadow of that agent in that environment and with nothing
else; it also orders payloads, so an older payload never overwrites a newer
one in the cache (see `_CACHE_SET_IF_NEWER`).

PostgreSQL is the truth; Redis and the process mirrors are caches of it. Nothing that talks to
Redis may fail a request or a commit: the pushes after commit are robust `on_commit`
callbacks, every request-time Redis call goes through `redis_call` (an error, or a recent
one, is a miss and the caller reads PostgreSQL), mirror entries live at most
`MIRROR_TTL_SECONDS`, and the beat task `strategies.reconcile_runtime_cache` rewrites what a
lost push left behind (`cache_reconcile`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import mmap
import os
import tempfile
import threading
import time
from dataclasses import dataclass

import redis
from context_runtime.manifest import SPLIT, WATCH
from django.conf import settings
from django.core.cache import cache
from django.core.signals import setting_changed
from django.db import connection, transaction
from django.dispatch import receiver

from strategies.catalog.models import Agent
from strategies.catalog.selectors import manifest_latest
from strategies.delivery.models import ConfigPayload
from strategies.documents.models import Document
from strategies.releases.selectors import live_releases, rollouts_in, shadows_in

log = logging.getLogger(__name__)

CACHE_TTL_SECONDS = 7 * 24 * 3600  # a refill from the database is cheap; keep memory bounded
# A mirror entry is re-read from Redis at least this often, even when no invalidation came
# (one lost publish, a blip): the bound on how long a process can serve what Redis no longer
# holds. One Redis GET per key and process this often costs nothing.
MIRROR_TTL_SECONDS = 10.0
# After a Redis error, request-time calls skip Redis this long (a stopped or hung server
# costs one failed call per process per interval, not one per request).
REDIS_RETRY_AFTER_SECONDS = 2.0
REDIS_ERRORS = (redis.RedisError, OSError)
# PostgreSQL LISTEN/NOTIFY channel of release changes: "<environment id> <agent key> <etag>",
# sent inside the change's transaction, so delivered (to the config stream servers,
# strategies.runtime.stream) only when it commits, in commit order.
CONFIG_CHANNEL = "context_console_config"


@dataclass(frozen=True)
class RenderedConfig:
    revision_sum: int
    etag: str
    body: bytes


def _dumps(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def payload_render(*, agent, environment) -> RenderedConfig:
    """Render the §1 document from the releases, shadows and staged rollouts of `agent` in
    `environment` (six queries).

    A rollout runs the other arm as shadow itself, so no `shadow` is sent for its strategy;
    `strategies` keeps the control version (what was live when it started), and `rollouts`
    carries the new one — only to a runtime whose manifest declares `split` (one that does
    not serves the control version alone). A completed rollout in its paired watch sends
    `rollouts[key]` with `phase` `watch`: the previous version, run as shadow beside the live
    one on `share` of the units — only to a runtime that declares `watch`, and never over
    an active rollout or a running shadow release of the same key."""

    releases = live_releases(agent=agent, environment=environment)
    shadows = shadows_in(agent=agent, environment=environment)
    rollouts, watching, rollout_revisions = rollouts_in(agent=agent, environment=environment)
    profile = None
    strategies: dict[str, dict] = {}
    for release in releases:
        entry = {"version": release.version.number, "body": release.version.body}
        if release.document.kind == Document.Kind.PROFILE:
            profile = entry
        else:
            strategies[release.document.key] = entry
    rolling = {r.document.key for r in rollouts}
    shadow = {
        s.document.key: {"version": s.version.number, "body": s.version.body}
        for s in shadows
        if s.running and s.document.key not in rolling
    }
    manifest = manifest_latest(environment=environment) if rollouts or watching else None
    features = set((manifest.body.get("features") or ()) if manifest is not None else ())
    sent: dict[str, dict] = {}
    if WATCH in features:  # a shadow release a person started there keeps its place
        sent.update(
            (r.document.key, _watch_entry(r)) for r in watching if r.document.key not in shadow
        )
    if SPLIT in features:
        sent.update((r.document.key, _rollout_entry(r)) for r in rollouts)
    revision_sum = (
        sum(r.revision for r in releases) + sum(s.revision for s in shadows) + rollout_revisions
    )
    document = {
        "agent": agent.key,
        "environment": environment.key,
        "etag": "",
        "profile": profile,
        "strategies": strategies,
        "shadow": shadow,
        "rollouts": dict(sorted(sent.items())),
    }
    digest = hashlib.sha256(_dumps(document)).hexdigest()
    etag = f'"r{revision_sum}-{digest[:4]}"'
    document["etag"] = etag
    return RenderedConfig(revision_sum=revision_sum, etag=etag, body=_dumps(document))


def _rollout_entry(rollout) -> dict:
    """A running or paused rollout: the new version, served to `share` of the units."""
    return {
        "id": rollout.key,
        "version": rollout.version.number,
        "body": rollout.version.body,
        "share": rollout.share,
        "unit": rollout.unit,
        "step": rollout.step,
    }


def _watch_entry(rollout) -> dict:
    """A completed rollout's paired watch: the previous version, run as shadow on `share`
    of the units (everyone is served the live, new version in `strategies`)."""
    return {
        "id": rollout.key,
        "phase": "watch",
        "version": rollout.control_version.number,
        "body": rollout.control_version.body,
        "share": rollout.watch_share,
        "unit": rollout.unit,
        "step": rollout.watch_step,
    }


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
    with connection.cursor() as cursor:  # delivered on commit; dropped with a rollback
        cursor.execute(
            "SELECT pg_notify(%s, %s)",
            [CONFIG_CHANNEL, f"{environment.pk} {agent.key} {rendered.etag}"],
        )
    # Robust: a Redis error after commit is logged, never raised into the committed change
    # (the request, the other callbacks); the reconcile task pushes what this did not.
    transaction.on_commit(lambda: cache_put(*key, rendered), robust=True)
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


_key_prefix: str | None = None


def cache_key(name: str) -> str:
    """`cache.make_key(name)`, without its cost on the hot path (the prefix is computed once;
    a cache with its own KEY_FUNCTION goes through make_key every time)."""
    global _key_prefix
    if _key_prefix is None:
        prefix = cache.make_key("probe").removesuffix("probe")
        _key_prefix = prefix if cache.make_key("other") == prefix + "other" else ""
    return _key_prefix + name if _key_prefix else cache.make_key(name)


@receiver(setting_changed)
def _cache_settings_changed(*, setting, **kwargs) -> None:
    """A test that swaps CACHES gets a client, key prefix and error state of the new cache."""
    global _client, _key_prefix, _redis_down_until
    if setting == "CACHES":
        _client, _key_prefix, _redis_down_until = None, None, 0.0
        instance_counter.reset()


REDIS_UNAVAILABLE = object()
_redis_down_until = 0.0


def redis_call(action, default=None):
    """`action(client)`, or `default` when Redis fails (or failed less than
    REDIS_RETRY_AFTER_SECONDS ago). For request-time and after-commit calls only: what they
    would have read comes from PostgreSQL, what they would have written the reconcile task
    writes. Periodic tasks call `redis_client()` directly and fail loudly."""
    global _redis_down_until
    if _redis_down_until and time.monotonic() < _redis_down_until:
        return default
    try:
        result = action(redis_client())
    except REDIS_ERRORS as exc:
        if not _redis_down_until:
            log.warning("Redis unavailable, reading PostgreSQL instead: %s", exc)
        _redis_down_until = time.monotonic() + REDIS_RETRY_AFTER_SECONDS
        return default
    if _redis_down_until:
        log.warning("Redis available again")
        _redis_down_until = 0.0
    return result


def redis_circuit_reset() -> None:
    """Forget a recent Redis error (tests; the next call tries Redis again)."""
    global _redis_down_until
    _redis_down_until = 0.0


# --- the process-local mirror ------------------------------------------------------------------
class LocalMirror:
    """A process-local copy of hot Redis values (payloads, token identities).

    On a loaded machine one Redis round trip costs as much as a whole bare Django request,
    so the hot path reads from this dict. Every writer publishes the key it changed on
    INVALIDATIONS after writing Redis, a listener thread in each process drops that key, and
    the writer's own process drops it synchronously. While the listener is not subscribed
    (starting, or Redis unreachable) the mirror is bypassed and every read goes to Redis. A
    value read from Redis is only remembered if no invalidation arrived meanwhile (the
    generation check), so a slow reader can never park a stale value. An entry lives at
    most MIRROR_TTL_SECONDS: a lost invalidation heals by itself.

    Pub/sub arrives a few milliseconds late, so the processes of one instance (this machine,
    this cache) also share an `InstanceCounter`: every invalidation bumps it before the
    writer answers, and every read of the mirror (its `generation` included) first compares
    it, dropping every entry when it moved. After a write answers, no process of its instance
    serves what it replaced (read your writes); other instances follow on pub/sub.
    """

    MAX_ENTRIES = 10_000
    clock = staticmethod(time.monotonic)  # tests move it

    def __init__(self, channel: str):
        self.channel = channel
        self._values: dict[str, tuple[object, float]] = {}
        self._generation = 0
        self._instance_seen = b""
        self.healthy = False
        self._pid = None
        self._start_lock = threading.Lock()
        # What is derived from the mirror and checked by generation alone (the config
        # dispatcher's answers) must not outlive a fork: the child has no listener yet.
        os.register_at_fork(after_in_child=self._forked)

    @property
    def generation(self) -> int:
        """Grows with every invalidation this process learnt of, the instance's included."""
        self._follow_instance()
        return self._generation

    def _follow_instance(self) -> None:
        seen = instance_counter.read()
        if seen != self._instance_seen:
            self._instance_seen = seen
            self.forget_all()

    def followed(self, before: bytes, after: bytes) -> None:
        """This process moved the instance's counter from `before` (having forgotten what it
        changed): nothing else to drop, unless another process moved it unseen before."""
        if self._instance_seen == before:
            self._instance_seen = after

    def get(self, key: str):
        if self._pid != os.getpid():
            self._start()
        self._follow_instance()
        entry = self._values.get(key)
        if entry is None or not self.healthy:
            return None
        value, expires_at = entry
        if self.clock() >= expires_at:
            return None
        return value

    def entry(self, key: str) -> tuple[object, float] | None:
        """`get`, with the time (on `clock`) the value expires: (value, expires_at) or None."""
        if self._pid != os.getpid():
            self._start()
        self._follow_instance()
        entry = self._values.get(key)
        if entry is None or not self.healthy or self.clock() >= entry[1]:
            return None
        return entry

    def _forked(self) -> None:
        self._generation += 1
        self.healthy = False

    def remember(self, key: str, value, generation: int) -> None:
        if self.healthy and generation == self.generation:  # the instance's writes included
            if len(self._values) >= self.MAX_ENTRIES:
                self._values.clear()
            self._values[key] = (value, self.clock() + MIRROR_TTL_SECONDS)

    def forget(self, key: str) -> None:
        self._generation += 1
        self._values.pop(key, None)

    def forget_all(self) -> None:
        self._generation += 1
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


class InstanceCounter:
    """A counter in a small file every process of one instance maps: the processes on this
    machine that share this cache (its location and key prefix). `bump` (under a lock: two
    writers never write the same value) is synchronous; `read` is a memory read, cheap enough
    for every request. The file lives in /dev/shm (memory) where there is one."""

    SIZE = 8

    def __init__(self):
        self._map: mmap.mmap | None = None
        self._fd = -1
        self._unusable = 0  # > 0: no counter file; every read a new value (see `read`)

    def _open(self) -> mmap.mmap | None:
        if self._map is None and not self._unusable:
            try:
                self._map_file()
            except OSError as error:
                # A file someone else planted, a full or read-only folder: without the counter
                # the mirror cannot know of the instance's writes, so it serves nothing (reads
                # go to Redis) rather than a stale version — or a 500.
                log.error("config mirror off: the instance counter is unusable (%s)", error)
                self._unusable = 1
        return self._map

    @staticmethod
    def path() -> str:
        """The file of this cache (its location and key prefix), in /dev/shm where there is one."""
        location = settings.CACHES["default"]["LOCATION"]
        name = hashlib.sha256(f"{location} {cache_key(INVALIDATIONS)}".encode()).hexdigest()
        shm = "/dev/shm"  # noqa: S108 - opened O_NOFOLLOW and checked to be ours (_map_file)
        folder = shm if os.access(shm, os.W_OK) else tempfile.gettempdir()
        return os.path.join(folder, f"context-console-{name[:24]}")

    def _map_file(self) -> None:
        # A shared folder: never follow a link, never map a file someone else made.
        path = self.path()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        if os.fstat(fd).st_uid != os.getuid():
            os.close(fd)
            raise PermissionError(f"{path} belongs to another user: remove it")
        if os.fstat(fd).st_size < self.SIZE:
            os.ftruncate(fd, self.SIZE)  # zeros; never shrinks a counter another wrote
        # A forked child keeps both: the mapping stays shared, lockf locks are per process.
        self._fd, self._map = fd, mmap.mmap(fd, self.SIZE)

    def read(self) -> bytes:
        counter = self._map  # the hot path: no call, no system call
        if counter is None and (counter := self._open()) is None:
            self._unusable += 1  # never the same twice: the mirror forgets all, serves nothing
            return b"off %d" % self._unusable
        return counter[: self.SIZE]

    def bump(self) -> tuple[bytes, bytes]:
        """Add one; returns (the value before, the value after)."""
        counter = self._open()
        if counter is None:
            return b"off", b"off"  # `read` already changes every time
        # lockf: per process (a forked child's lock excludes its parent's; flock's would not)
        fcntl.lockf(self._fd, fcntl.LOCK_EX)
        try:
            before = counter[: self.SIZE]
            value = int.from_bytes(before, "little") + 1
            counter[: self.SIZE] = after = (value % 2**64).to_bytes(self.SIZE, "little")
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)
        return before, after

    def reset(self) -> None:
        """Map the file of the cache now configured (a test swapped CACHES)."""
        self._map = None
        self._unusable = 0


INVALIDATIONS = "rt-invalidate"
instance_counter = InstanceCounter()
mirror = LocalMirror(channel="")  # channel set on first use (needs the cache prefix)


def invalidate(key: str) -> None:
    """After writing `key` in Redis: drop it here and in every process of this instance
    before the caller answers (read your writes), and in every other process through
    pub/sub (a publish that fails is healed by the mirror entries' lifetime)."""
    mirror.forget(key)
    mirror.followed(*instance_counter.bump())
    redis_call(lambda client: client.publish(cache_key(INVALIDATIONS), key))


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


def cache_put(agent_key: str, environment_id: int, rendered: RenderedConfig) -> bool:
    """Push a payload to Redis (set-if-newer) and invalidate it everywhere; False when Redis
    did not take it (an error: the reconcile task retries; or it holds a newer one)."""
    value = b"%d|%s|%s" % (rendered.revision_sum, rendered.etag.encode(), rendered.body)
    key = _config_key(agent_key, environment_id)
    mirror.forget(key)  # this process stops serving the old one whatever Redis does
    stored = redis_call(
        lambda client: client.eval(
            _CACHE_SET_IF_NEWER, 1, key, rendered.revision_sum, value, CACHE_TTL_SECONDS
        ),
        default=REDIS_UNAVAILABLE,
    )
    invalidate(key)  # without Redis too: the instance's other processes read PostgreSQL
    return stored is not REDIS_UNAVAILABLE and stored == 1


def mirrored_config(agent_key: str, environment_id: int) -> tuple[tuple[str, bytes], float] | None:
    """((etag, body), expires_at on the mirror's clock) from this process's mirror only, or
    None (no I/O at all)."""
    return mirror.entry(_config_key(agent_key, environment_id))


def cached_config(agent_key: str, environment_id: int) -> tuple[str, bytes] | None:
    """(etag, body) from the local mirror or Redis, or None on a miss (or when Redis is
    unavailable: the caller reads the stored payload). The hot path."""
    key = _config_key(agent_key, environment_id)
    entry = mirror.get(key)
    if entry is not None:
        return entry
    generation = mirror.generation
    value = redis_call(lambda client: client.get(key))
    if value is None:
        return None
    _, etag, body = value.split(b"|", 2)
    entry = (etag.decode(), body)
    mirror.remember(key, entry, generation)
    return entry


def config_load(*, agent_key: str, environment) -> tuple[str, bytes] | None:
    """A cache miss: the stored payload (rendered now if it never was), pushed to the cache
    when Redis is there. None when the agent does not exist."""

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


def cache_reconcile(batch: int = 500) -> int:
    """Make Redis (and, through invalidations, every mirror) follow the stored payloads:
    a cached payload whose ETag differs from its `ConfigPayload` row and is not newer is
    replaced. A key Redis does not hold is left alone (the next read fills it from
    PostgreSQL). Returns how many were replaced. Run by beat; fails loudly without Redis."""
    client = redis_client()
    rows = list(
        ConfigPayload.objects.exclude(etag="")
        .order_by("pk")
        .values_list("pk", "agent__key", "environment_id", "revision_sum", "etag")
    )
    repaired = 0
    for start in range(0, len(rows), batch):
        chunk = rows[start : start + batch]
        cached = client.mget(
            [_config_key(agent_key, env_id) for _, agent_key, env_id, _, _ in chunk]
        )
        for (pk, agent_key, env_id, revision_sum, etag), value in zip(chunk, cached, strict=True):
            if value is None:
                continue
            stored_sum, stored_etag, _ = value.split(b"|", 2)
            if stored_etag.decode() == etag or int(stored_sum) > revision_sum:
                continue  # current, or a newer render committed since the rows were read
            body = ConfigPayload.objects.values_list("body", flat=True).get(pk=pk)
            if cache_put(agent_key, env_id, RenderedConfig(revision_sum, etag, bytes(body))):
                log.warning(
                    "reconciled the cached config of %s in environment %s", agent_key, env_id
                )
                repaired += 1
    return repaired


def cache_clear_all() -> int:
    """Drop every cached payload and token identity of this console (e.g. after restoring the
    database from a backup, when cached revisions may be ahead of the restored ones)."""
    client = redis_client()
    keys = [
        *client.scan_iter(match=cache_key("rtcfg:*"), count=500),
        *client.scan_iter(match=cache_key("rtid*:*"), count=500),  # rtid2: and the older rtid:
    ]
    deleted = client.delete(*keys) if keys else 0
    for key in keys:
        invalidate(key.decode())
    return deleted
