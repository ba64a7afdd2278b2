"""The config stream (docs/runtime-contract.md §1a): server-sent events that tell every
connected runtime the agent's config ETag at connect and at every release change.

An ASGI application (`console.stream:application`, served by granian `--interface asgi` beside
the WSGI web server; `make run` starts it on STREAM_PORT). A held connection is a coroutine
and a small queue, never a thread: one process holds thousands.

- **Change notification**: each release change's transaction sends `pg_notify` (in
  `strategies.delivery.config.payload_refresh`), which PostgreSQL delivers only when it
  commits, in commit order, to every stream process of every console instance that LISTENs on
  the same database. One LISTEN connection per process (`Hub`); after it reconnects, the
  current ETag of every key someone listens to is read again from PostgreSQL, so a
  notification lost while it was down is recovered.
- **Authentication first**: the token (the same rules and cache as the config endpoint) and
  the agent's scope are checked before the response starts or anything is registered; a bad
  token gets 401 at once.
- **Capacity**: at most `STREAM_CAPACITY` streams per process (lowered to what its
  file-descriptor limit allows); the next connection gets 503 with Retry-After at once, before
  any work, so the server and its `/healthz` keep answering however many runtimes connect.
  Granian's `--backpressure` must sit above it: at that bound granian answers nothing.
- **Bounded**: at most `STREAM_MAX_PER_TOKEN` open streams per token across every stream
  process sharing the Redis (a sorted set of live connections, refreshed at every
  heartbeat; per process only while Redis is down); each connection has a queue of
  `STREAM_QUEUE_SIZE` events, a write must finish within `STREAM_WRITE_TIMEOUT` seconds:
  a connection that overflows or stalls is closed, and a notification never waits for one.
- **Revocation**: a revoked token's open streams close on every stream process at once (the
  revocation's `pg_notify` on `REVOKED_CHANNEL`, delivered on commit); the tokens of the open
  streams are also read again after the LISTEN connection comes back and at every heartbeat,
  so a notification lost meanwhile closes them within a heartbeat. A reconnect gets 401.
- **Heartbeats**: a comment line every `STREAM_HEARTBEAT_SECONDS`, so proxies keep it open
  and the runtime knows it is alive.
- **Reconnects**: `Last-Event-ID` (or `If-None-Match`) with the current ETag: nothing is sent
  at connect; another value (or none): the current ETag at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import resource
import time
import uuid
from dataclasses import dataclass, field

import psycopg
from django.conf import settings
from django.db import close_old_connections, connection

from console.kernel.errors import ApplicationError, NotAuthenticated, NotFound
from strategies.catalog.models import Environment
from strategies.delivery import config as runtime_config
from strategies.delivery.models import ConfigPayload
from strategies.runtime.auth import (
    RuntimeIdentity,
    active_token_ids,
    authorize_runtime,
    bearer_secret_of,
    cached_identity,
    check_agent_scope,
    note_refused,
)
from strategies.runtime.tokens import REVOKED_CHANNEL

log = logging.getLogger(__name__)

PATH_PREFIX = "/api/v1/runtime/stream/"
RETRY_MILLISECONDS = 2000  # the EventSource `retry:`; the SDK adds its own jitter
REVOKED_REMEMBERED_SECONDS = 60.0  # a stream whose open raced the revocation is refused
_REVOKED = ("not_authenticated", "The runtime token is unknown or revoked.")
_WWW_AUTHENTICATE = (b"www-authenticate", b'Bearer realm="runtime"')
_STREAMS_KEY = "rt-streams:"  # + token id: sorted set of "<process>:<connection>" → last seen


def _setting(name: str, default):
    return getattr(settings, name, default)


def heartbeat_seconds() -> float:
    return float(_setting("STREAM_HEARTBEAT_SECONDS", 15.0))


# File descriptors a process keeps beside its held streams: connections being refused or
# asking /healthz, PostgreSQL, Redis, the threads' sockets, logs.
FD_RESERVE = 1000


def capacity() -> int:
    """Streams this process may hold: STREAM_CAPACITY, or fewer when the file-descriptor
    limit (its soft limit raised to the hard one first) leaves no room for them: a process
    out of descriptors cannot even accept the connection it would refuse."""
    wanted = int(_setting("STREAM_CAPACITY", 9000))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    if soft != resource.RLIM_INFINITY and soft - FD_RESERVE < wanted:
        allowed = max(1, soft - FD_RESERVE)
        log.warning(
            "config stream: STREAM_CAPACITY %s lowered to %s (file-descriptor limit %s)",
            wanted,
            allowed,
            soft,
        )
        return allowed
    return wanted


def max_per_token() -> int:
    return int(_setting("STREAM_MAX_PER_TOKEN", 256))


def queue_size() -> int:
    return int(_setting("STREAM_QUEUE_SIZE", 16))


def write_timeout() -> float:
    return float(_setting("STREAM_WRITE_TIMEOUT", 10.0))


def _revision(etag: str) -> int:
    """`"r41-9f2c"` → 41 (orders two ETags of one agent); -1 when it is not that shape."""
    try:
        return int(etag.strip('"').removeprefix("W/").strip('"')[1:].split("-", 1)[0])
    except (ValueError, IndexError):
        return -1


@dataclass(eq=False)
class Stream:
    """One open stream: what it listens to and its bounded queue of ETags to send."""

    key: tuple[int, str]  # (environment id, agent key)
    token_id: int
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(queue_size()))
    member: str = field(default_factory=lambda: uuid.uuid4().hex)
    overflowed: bool = False
    ended: bool = False  # closed by the server: its token revoked, or the server stopping

    def offer(self, etag: str) -> None:
        """Never blocks: a full queue marks the stream for closing (its reader is too slow)."""
        try:
            self.queue.put_nowait(etag)
        except asyncio.QueueFull:
            self.overflowed = True

    def end(self) -> None:
        """Close it (never blocks): what is queued is dropped, the reader wakes up to end."""
        self.ended = True
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(None)


class Hub:
    """This process's LISTEN connection and the streams that wait for its notifications."""

    def __init__(self) -> None:
        self.streams: dict[tuple[int, str], set[Stream]] = {}
        self.latest: dict[tuple[int, str], str] = {}
        self.listening = asyncio.Event()
        self.process = uuid.uuid4().hex[:12]
        self._task: asyncio.Task | None = None
        self._heartbeat_task: asyncio.Task | None = None
        self.revoked: dict[int, float] = {}  # token id → when this process heard it
        self.admitted = 0  # streams held or being opened: what the capacity bounds
        self.refused_full = 0
        self.dropped_slow = 0
        self.closed_revoked = 0
        self.notifications = 0

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._listen(), name="listen")
            self._heartbeat_task = asyncio.get_running_loop().create_task(
                self._refresh_members(), name="stream-members"
            )

    async def stop(self) -> None:
        for streams in self.streams.values():  # shutting down: every held stream ends now
            for stream in streams:
                stream.end()
        for task in (self._task, self._heartbeat_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    @property
    def open_streams(self) -> int:
        return sum(len(s) for s in self.streams.values())

    # --- subscriptions -----------------------------------------------------------------------
    def add(self, stream: Stream) -> None:
        self.streams.setdefault(stream.key, set()).add(stream)

    def remove(self, stream: Stream) -> None:
        streams = self.streams.get(stream.key)
        if streams is not None:
            streams.discard(stream)
            if not streams:
                del self.streams[stream.key]

    def announce(self, key: tuple[int, str], etag: str) -> None:
        """A change of `key`: offer it to every stream of that key (never waits). An ETag
        older than one announced already (a late recheck) is ignored."""
        known = self.latest.get(key)
        if known is not None and _revision(known) > _revision(etag):
            return
        self.latest[key] = etag
        for stream in tuple(self.streams.get(key, ())):
            stream.offer(etag)

    def revoke(self, token_ids) -> None:
        """These tokens are revoked: close their open streams, refuse the ones being opened."""
        now = time.monotonic()
        self.revoked = {
            t: at for t, at in self.revoked.items() if now - at < REVOKED_REMEMBERED_SECONDS
        }
        self.revoked.update(dict.fromkeys(token_ids, now))
        for streams in self.streams.values():
            for stream in streams:
                if stream.token_id in self.revoked and not stream.ended:
                    stream.end()
                    self.closed_revoked += 1

    def is_revoked(self, token_id: int) -> bool:
        return token_id in self.revoked

    async def _check_tokens(self) -> None:
        """Close the streams of tokens revoked without this process hearing of it."""
        held = {s.token_id for streams in self.streams.values() for s in streams}
        if held:
            active = await asyncio.to_thread(_active_token_ids, held)
            if held - active:
                self.revoke(held - active)

    # --- LISTEN ------------------------------------------------------------------------------
    async def _listen(self) -> None:
        while True:
            try:
                params = _connect_params()
                async with await psycopg.AsyncConnection.connect(**params, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {runtime_config.CONFIG_CHANNEL}")
                    await conn.execute(f"LISTEN {REVOKED_CHANNEL}")
                    self.listening.set()
                    await self._recheck()  # what changed while nobody listened
                    await self._check_tokens()  # who was revoked meanwhile
                    async for notify in conn.notifies():
                        self.notifications += 1
                        if notify.channel == REVOKED_CHANNEL:
                            with contextlib.suppress(ValueError):
                                self.revoke({int(notify.payload)})
                            continue
                        try:
                            env_id, agent_key, etag = notify.payload.split(" ", 2)
                            key = (int(env_id), agent_key)
                        except ValueError:
                            log.warning("unreadable config notification %r", notify.payload)
                            continue
                        self.announce(key, etag)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - reconnect whatever failed
                if self.listening.is_set():
                    log.warning("config stream: LISTEN connection lost (%s); reconnecting", exc)
                self.listening.clear()
                await asyncio.sleep(1.0)

    async def _recheck(self) -> None:
        keys = list(self.streams)
        if not keys:
            return
        current = await asyncio.to_thread(_stored_etags, keys)
        for key, etag in current.items():
            if etag and etag != self.latest.get(key):
                self.announce(key, etag)

    # --- the per-token bound -----------------------------------------------------------------
    async def _refresh_members(self) -> None:
        """Every heartbeat: mark this process's streams alive in Redis (one pipeline), and
        close those of tokens revoked since (one query)."""
        while True:
            await asyncio.sleep(heartbeat_seconds())
            with contextlib.suppress(Exception):  # the database down: the next heartbeat
                await self._check_tokens()
            members: dict[int, list[str]] = {}
            for streams in self.streams.values():
                for stream in streams:
                    members.setdefault(stream.token_id, []).append(self._member(stream))
            if members:
                await asyncio.to_thread(_members_touch, members)

    def _member(self, stream: Stream) -> str:
        return f"{self.process}:{stream.member}"

    def count_local(self, token_id: int) -> int:
        return sum(1 for s in self.streams.values() for x in s if x.token_id == token_id)


def _connect_params() -> dict:
    """psycopg keywords for Django's database (values of the plain kinds only: Django's own
    cursor factory and adapters are for its synchronous connections)."""
    params = connection.get_connection_params()
    return {k: v for k, v in params.items() if isinstance(v, str | int) and k != "cursor_factory"}


def _stored_etags(keys: list[tuple[int, str]]) -> dict[tuple[int, str], str]:
    close_old_connections()
    try:
        wanted = {agent for _, agent in keys}
        rows = ConfigPayload.objects.filter(agent__key__in=wanted).values_list(
            "environment_id", "agent__key", "etag"
        )
        return {(env, agent): etag for env, agent, etag in rows if (env, agent) in set(keys)}
    finally:
        close_old_connections()


def _active_token_ids(token_ids: set[int]) -> set[int]:
    close_old_connections()
    try:
        return active_token_ids(token_ids)
    finally:
        close_old_connections()


def _members_touch(members: dict[int, list[str]]) -> None:
    now = time.time()

    def touch(client):
        pipe = client.pipeline(transaction=False)
        for token_id, names in members.items():
            key = runtime_config.cache_key(f"{_STREAMS_KEY}{token_id}")
            pipe.zadd(key, dict.fromkeys(names, now))
            pipe.expire(key, int(heartbeat_seconds() * 4) + 1)
        pipe.execute()

    runtime_config.redis_call(touch)


# Drop the members not refreshed for three heartbeats, count the rest, add this one unless
# the bound is reached: one script, so two connects at the same instant (on any process) cannot
# both see room for one more.
_CLAIM = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""


def _member_claim(token_id: int, member: str, limit: int) -> bool | None:
    """Register `member` as an open stream of the token unless `limit` are open (across every
    process sharing Redis). None when Redis cannot tell: the caller counts this process's."""
    key = runtime_config.cache_key(f"{_STREAMS_KEY}{token_id}")
    now = time.time()
    claimed = runtime_config.redis_call(
        lambda client: client.eval(
            _CLAIM,
            1,
            key,
            now - 3 * heartbeat_seconds(),
            limit,
            now,
            member,
            int(heartbeat_seconds() * 4) + 1,
        ),
        default=runtime_config.REDIS_UNAVAILABLE,
    )
    if claimed is runtime_config.REDIS_UNAVAILABLE:
        return None
    return claimed == 1


def _member_release(token_id: int, member: str) -> None:
    key = runtime_config.cache_key(f"{_STREAMS_KEY}{token_id}")
    runtime_config.redis_call(lambda client: client.zrem(key, member))


# --- authentication and the current ETag (blocking: run in a thread) ------------------------------
def _open(authorization: str, agent: str) -> tuple[RuntimeIdentity, str]:
    """(identity, current ETag), or the ApplicationError a config GET would get."""
    close_old_connections()
    try:
        secret = bearer_secret_of(authorization)
        identity = cached_identity(secret)
        if identity is None:
            note_refused(secret)
            raise NotAuthenticated(_REVOKED[1])
        authorize_runtime(identity, "config:read")
        check_agent_scope(identity, agent)
        entry = runtime_config.cached_config(agent, identity.environment_id)
        if entry is None:
            environment = Environment.objects.get(pk=identity.environment_id)
            entry = runtime_config.config_load(agent_key=agent, environment=environment)
            if entry is None:
                raise NotFound(f"Unknown agent '{agent}'.")
        return identity, entry[0]
    finally:
        close_old_connections()


# --- the ASGI application ----------------------------------------------------------------------------
def _event(etag: str, agent: str) -> bytes:
    data = json.dumps({"agent": agent, "etag": etag}, separators=(",", ":"))
    return f"id: {etag}\nevent: config\ndata: {data}\n\n".encode()


class StreamApplication:
    """ASGI: `GET /api/v1/runtime/stream/<agent>` and `GET /healthz`; 404 for anything else."""

    def __init__(self) -> None:
        self.hub: Hub | None = None
        self.capacity = capacity()

    def _hub(self) -> Hub:
        if self.hub is None:
            self.hub = Hub()
        self.hub.start()
        return self.hub

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        hub = self._hub()
        path = scope.get("path", "")
        if path == "/healthz":
            await self._health(hub, send)
        elif path.startswith(PATH_PREFIX) and "/" not in path[len(PATH_PREFIX) :]:
            if scope.get("method") != "GET":
                await _error(send, 405, "method_not_allowed", "Use GET.", [(b"allow", b"GET")])
                return
            await self._admitted(hub, scope, receive, send, path[len(PATH_PREFIX) :])
        else:
            await _error(send, 404, "not_found", "Not found.")

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._hub()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.hub is not None:
                    await self.hub.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _health(self, hub: Hub, send) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(hub.listening.wait(), 2.0)
        ok = hub.listening.is_set()
        body = json.dumps(
            {
                "status": "ok" if ok else "unavailable",
                "listening": ok,
                "streams": hub.open_streams,
                "notifications": hub.notifications,
                "dropped_slow": hub.dropped_slow,
                "closed_revoked": hub.closed_revoked,
                "capacity": self.capacity,
                "refused_full": hub.refused_full,
                "pid": os.getpid(),
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200 if ok else 503,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _admitted(self, hub: Hub, scope, receive, send, agent: str) -> None:
        """The capacity, judged before anything else (no await between the count and its
        increment, so simultaneous connects cannot pass it together)."""
        if hub.admitted >= self.capacity:
            hub.refused_full += 1
            # spread: the runtimes refused together do not come back together (they poll)
            retry = str(random.randint(30, 90)).encode()
            await _error(
                send,
                503,
                "stream_capacity",
                f"This stream server holds its capacity of {self.capacity} streams "
                "(STREAM_CAPACITY); poll meanwhile and retry later.",
                [(b"retry-after", retry)],
            )
            return
        hub.admitted += 1
        try:
            await self._stream(hub, scope, receive, send, agent)
        finally:
            hub.admitted -= 1

    async def _stream(self, hub: Hub, scope, receive, send, agent: str) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            identity, etag = await asyncio.to_thread(_open, headers.get("authorization", ""), agent)
        except ApplicationError as exc:
            extra = [_WWW_AUTHENTICATE] if exc.status == 401 else []
            await _error(send, exc.status, exc.code, exc.message, extra)
            return
        stream = Stream(key=(identity.environment_id, agent), token_id=identity.token_id)
        limit = max_per_token()
        claimed = await asyncio.to_thread(
            _member_claim, identity.token_id, hub._member(stream), limit
        )
        if claimed is None:  # Redis cannot tell: this process's own count
            claimed = hub.count_local(identity.token_id) < limit
        if not claimed:
            await _error(
                send,
                429,
                "too_many_streams",
                f"This token holds {limit} open streams already (STREAM_MAX_PER_TOKEN); "
                "poll instead, or use another token.",
                [(b"retry-after", b"60")],
            )
            return
        try:
            if hub.is_revoked(identity.token_id):  # revoked while this stream was being opened
                await _error(send, 401, *_REVOKED, [_WWW_AUTHENTICATE])
                return
            hub.add(stream)  # before comparing: a change from now on is queued
            await self._serve(hub, stream, headers, etag, agent, receive, send)
        finally:
            hub.remove(stream)
            await asyncio.to_thread(_member_release, identity.token_id, hub._member(stream))

    async def _serve(self, hub, stream, headers, etag, agent, receive, send) -> None:
        latest = hub.latest.get(stream.key)
        if latest is None or _revision(etag) > _revision(latest):
            hub.latest[stream.key] = latest = etag
        known = headers.get("last-event-id") or headers.get("if-none-match") or ""
        first = f"retry: {RETRY_MILLISECONDS}\n: connected\n\n".encode()
        if known.strip() != latest:
            first += _event(latest, agent)
        sent = latest
        timeout = write_timeout()
        gone = asyncio.get_running_loop().create_task(_disconnected(receive))
        try:
            await asyncio.wait_for(
                send(
                    {
                        "type": "http.response.start",
                        "status": 200,
                        "headers": [
                            (b"content-type", b"text/event-stream; charset=utf-8"),
                            (b"cache-control", b"no-cache"),
                            (b"x-accel-buffering", b"no"),  # nginx: do not buffer this
                        ],
                    }
                ),
                timeout,
            )
            await asyncio.wait_for(
                send({"type": "http.response.body", "body": first, "more_body": True}), timeout
            )
            heartbeat = heartbeat_seconds()
            while not gone.done():
                getter = asyncio.ensure_future(stream.queue.get())
                done, _ = await asyncio.wait(
                    {getter, gone}, timeout=heartbeat, return_when=asyncio.FIRST_COMPLETED
                )
                if getter not in done:
                    getter.cancel()
                    if gone.done():
                        break
                    chunk = b": hb\n\n"
                else:
                    newest = getter.result()
                    if stream.ended:
                        break
                    while not stream.queue.empty():  # coalesce: only the newest matters
                        newest = stream.queue.get_nowait()
                    if stream.overflowed:
                        raise _Slow()
                    if newest == sent or _revision(newest) < _revision(sent):
                        continue
                    sent = newest
                    chunk = _event(newest, agent)
                await asyncio.wait_for(
                    send({"type": "http.response.body", "body": chunk, "more_body": True}),
                    timeout,
                )
                if stream.overflowed:
                    raise _Slow()
        except (_Slow, TimeoutError):
            hub.dropped_slow += 1
            log.warning(
                "config stream of token %s dropped: the reader is too slow", stream.token_id
            )
        except (OSError, RuntimeError, asyncio.CancelledError):
            pass  # the client went away (the server reports it as an error on send)
        finally:
            gone.cancel()
        with contextlib.suppress(Exception):
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class _Slow(Exception):
    pass


async def _disconnected(receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _error(send, status: int, code: str, message: str, extra=()) -> None:
    """A refusal, and the connection closed after it: granian counts connections against its
    --backpressure, so a refused client idling on keep-alive would hold a slot."""
    body = json.dumps({"error": {"code": code, "message": message, "details": []}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"connection", b"close"),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
