"""The config stream (RUNTIME_API §1a): server-sent events telling the config client that its
agent's configuration changed, so it refetches within a second instead of at the next poll.

One connection per :class:`~context_runtime.client.ConfigClient`, held by a daemon thread
(:class:`StreamListener`). The stream only says *which ETag is current*; the client then asks
``GET config/{agent}`` with ``If-None-Match`` as always, so every payload still goes through
the same checks. Polling stays on as the safety net.

Standard library only (``http.client``), like :mod:`._http`: the server-sent events format
needed here (``id``, ``event``, ``data``, comments, blank line ends an event; WHATWG HTML
§9.2) is a few lines, not worth a dependency for a package whose only one is msgspec.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import random
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable

import msgspec

import context_runtime.client._http as _http
from context_runtime import _json

logger = logging.getLogger("context_runtime.client")

STREAM_PATH = "stream/"  # under the runtime API prefix: /api/v1/runtime/stream/<agent>
# Statuses after which the console has no stream for us (an older console, a proxy that
# does not route it): try again rarely, poll meanwhile.
_NO_STREAM = (404, 405, 501)
# Bytes read per ``readline``: a longer line arrives in pieces, joined up to the event's cap.
_LINE_PIECE = 64 * 1024


def stream_url(console_url: str, advertised: str | None, agent: str) -> str | None:
    """The stream URL of ``agent``: from the console's ``X-Config-Stream`` header — an
    absolute base URL, or ``:<port>`` (the console URL's scheme and host with that port) —
    or None when the console advertises none."""
    if not advertised:
        return None
    advertised = advertised.strip()
    if advertised.startswith(":") and advertised[1:].isdigit():
        parts = urllib.parse.urlsplit(console_url)
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        base = f"{parts.scheme}://{netloc}:{advertised[1:]}"
    elif advertised.startswith(("http://", "https://")):
        base = advertised
    else:
        return None
    return _http.runtime_url(base, STREAM_PATH + _http.quote_segment(agent))


class StreamRefused(Exception):
    def __init__(self, status: int, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class EventTooLarge(Exception):
    """The stream sent more than ``max_event_bytes`` without ending an event: no config
    event is that large (it carries an ETag), so the stream is broken or hostile."""


class StreamListener:
    """Keeps one stream open and calls ``on_etag(etag)`` for every ``config`` event.

    ``url()`` is asked before every connection (the advertised URL may change or appear);
    ``current_etag()`` is sent as ``Last-Event-ID`` so a runtime that is current gets nothing
    at connect. Reconnects after ``reconnect_initial`` seconds doubling to ``reconnect_max``,
    with full jitter on the first attempt (a console restart does not bring every runtime
    back in the same instant) and equal jitter after. While ``console_reachable()`` (the
    console answers polls) the doubling stops at ``reachable_reconnect_max``, and
    :meth:`console_answered` cuts a longer wait already begun to that: a stream server that
    answers again is back in use within about that long, however long its outage was. No
    byte for ``read_timeout`` seconds (the console sends a heartbeat every 15 s) closes the
    connection and reconnects. An event larger than ``max_event_bytes`` (the cap of a config
    answer) drops the stream, and it is tried again after ``unavailable_retry``.
    """

    def __init__(
        self,
        *,
        url: Callable[[], str | None],
        token: str,
        headers: dict[str, str],
        current_etag: Callable[[], str | None],
        on_etag: Callable[[str], None],
        on_state: Callable[[], None],
        connect_timeout: float = 5.0,
        read_timeout: float = 45.0,
        reconnect_initial: float = 1.0,
        reconnect_max: float = 60.0,
        unavailable_retry: float = 300.0,
        auth_retry: float = 60.0,
        reachable_reconnect_max: float = 8.0,
        console_reachable: Callable[[], bool] = lambda: False,
        max_event_bytes: int = _http.DEFAULT_MAX_RESPONSE_BYTES,
        name: str = "context-runtime-stream",
    ):
        self._url = url
        self._token = token
        self._headers = headers
        self._current_etag = current_etag
        self._on_etag = on_etag
        self._on_state = on_state
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.reconnect_initial = reconnect_initial
        self.reconnect_max = reconnect_max
        self.unavailable_retry = unavailable_retry
        self.auth_retry = auth_retry
        self.reachable_reconnect_max = reachable_reconnect_max
        self._console_reachable = console_reachable
        self.max_event_bytes = max_event_bytes
        self._name = name
        self._stop = threading.Event()
        self._wake = threading.Event()
        # Why ``_wake`` was set: a poke (try now) or a poll the console answered (shorten a
        # backoff that grew while it did not).
        self._poked = False
        self._answered = False
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None  # of the connection open now
        # Status (written by the thread only).
        self.connected = False
        self.url: str | None = None
        self.connects = 0
        self.events = 0
        self.last_error: str | None = None
        self.failures = 0

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._wake.set()
        self._hang_up()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def poke(self) -> None:
        """Try to connect now (e.g. the console just advertised a stream)."""
        self._poked = True
        self._wake.set()

    def console_answered(self) -> None:
        """The console answered a poll: a reconnect wait grown while nothing answered is cut
        to at most ``reachable_reconnect_max`` (jittered), so the stream is tried again soon
        after the console is back, not after a backoff of up to ``reconnect_max``."""
        if not self.connected:
            self._answered = True
            self._wake.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ------------------------------------------------------------ the thread

    def _run(self) -> None:
        first_retry = True
        while not self._stop.is_set():
            url = self._url()
            self.url = url
            if url is None:  # nothing advertised (yet): wait for the poller to learn one
                self._wake.wait(30.0)
                self._wake.clear()
                continue
            delay = None
            # This attempt answers every poke so far: a stale one must not cut short the
            # jittered wait after this stream ends (a restart would bring those runtimes
            # back in the same instant).
            self._wake.clear()
            self._poked = self._answered = False
            try:
                self._listen(url)
                self.failures = 0  # a stream that ended after working: reconnect soon
                first_retry = True
            except EventTooLarge as error:
                # Not an outage a quick retry mends: poll, and look again rarely.
                self.failures += 1
                self.last_error = str(error)
                delay = self.unavailable_retry
                logger.warning("Config stream %s dropped: %s; polling meanwhile", url, error)
            except StreamRefused as refused:
                self.failures += 1
                self.last_error = str(refused)
                if refused.retry_after is not None:
                    delay = refused.retry_after
                elif refused.status in (401, 403):
                    delay = self.auth_retry
                elif refused.status in _NO_STREAM:
                    delay = self.unavailable_retry
                log = logging.INFO if refused.status in _NO_STREAM else logging.WARNING
                logger.log(log, "Config stream %s refused: %s; polling meanwhile", url, refused)
            except Exception as error:  # noqa: BLE001 - connection errors of every kind
                if self._stop.is_set():
                    break
                self.failures += 1
                self.last_error = f"{type(error).__name__}: {error}"
                logger.log(
                    logging.INFO if self.failures == 1 else logging.DEBUG,
                    "Config stream %s unavailable (%s); polling meanwhile",
                    url,
                    self.last_error,
                )
            finally:
                was_connected = self.connected
                self.connected = False
                if was_connected:
                    # A stream that worked and then ended (a console restart drops every
                    # runtime at once): this is a first failure again, so the next attempt
                    # comes after a fully jittered 0.05–``reconnect_initial`` s, not after
                    # the backoff that earlier outages had grown to.
                    self.failures = min(self.failures, 1)
                    first_retry = True
                    self._on_state()
            if self._stop.is_set():
                break
            backoff = delay is None  # a wait of ours, not one the console asked for
            if backoff:
                step = min(
                    self._reconnect_cap(),
                    self.reconnect_initial * 2 ** max(0, self.failures - 1),
                )
                # Full jitter on the first retry after a working stream (a console restart
                # drops every runtime at once), equal jitter afterwards.
                delay = (
                    random.uniform(0.05, step) if first_retry else random.uniform(step / 2, step)
                )
                first_retry = False
            self._pause(delay, backoff=backoff)

    def _reconnect_cap(self) -> float:
        """The longest backoff now: short while the console answers polls (the stream
        server is then likely back soon, or a moment from it), ``reconnect_max`` else."""
        if self._console_reachable():
            return min(self.reconnect_max, self.reachable_reconnect_max)
        return self.reconnect_max

    def _pause(self, delay: float, *, backoff: bool) -> None:
        """Wait ``delay`` seconds, or less: a poke ends it, a poll the console answered cuts
        a backoff to a jittered ``reachable_reconnect_max`` at most."""
        end = time.monotonic() + delay
        while not self._stop.is_set():
            left = end - time.monotonic()
            if left <= 0 or not self._wake.wait(left):
                return
            self._wake.clear()
            if self._poked:
                return
            if self._answered and backoff:
                cap = min(self.reconnect_max, self.reachable_reconnect_max)
                end = min(end, time.monotonic() + random.uniform(cap / 2, cap))
            self._answered = False

    def _listen(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        kind = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        connection = kind(parts.hostname, parts.port, timeout=self.connect_timeout)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        headers = {
            "Authorization": f"Bearer {self._token}",
            "Accept": "text/event-stream",
            "Cache-Control": "no-cache",
            "User-Agent": _http.USER_AGENT,
            **self._headers,
        }
        etag = self._current_etag()
        if etag:
            headers["Last-Event-ID"] = etag
        response = None
        try:
            connection.request("GET", path, headers=headers)
            # The socket itself: once the answer says it ends with the connection,
            # http.client lets go of it (``connection.sock`` is None) and only the
            # response's reader holds it — closing the connection would leave it open.
            self._socket = connection.sock
            response = connection.getresponse()
            if response.status != 200:
                body = response.read(64 * 1024)
                code, message = _http.error_of(body)
                retry = response.getheader("Retry-After")
                raise StreamRefused(
                    response.status,
                    f"HTTP {response.status} {code}: {message}".rstrip(": "),
                    float(retry) if retry and retry.strip().isdigit() else None,
                )
            content_type = response.getheader("Content-Type", "")
            if not content_type.startswith("text/event-stream"):
                raise StreamRefused(response.status, f"not an event stream ({content_type})")
            if connection.sock is not None:
                connection.sock.settimeout(self.read_timeout)
            self.connected = True
            self.connects += 1
            self.last_error = None
            logger.info("Config stream connected: %s", url)
            self._on_state()
            self._read(response)
        finally:
            self._hang_up()
            with contextlib.suppress(Exception):
                if response is not None:
                    response.close()
                connection.close()
            self._socket = None

    def _hang_up(self) -> None:
        """End the connection now, whoever still holds its socket (the reader thread)."""
        sock = self._socket
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _read(self, response) -> None:
        # ``size``: the bytes of the event being read (every line since the last blank one,
        # comments too), capped like a config answer — a stream that never ends an event
        # must not grow the runtime's memory without bound.
        event, data, size, pieces = "message", [], 0, []
        while not self._stop.is_set():
            raw = response.readline(_LINE_PIECE)
            if not raw:
                raise ConnectionError("the console closed the stream")
            size += len(raw)
            if size > self.max_event_bytes:
                raise EventTooLarge(
                    f"an event larger than {self.max_event_bytes:,} bytes (no end in sight)"
                )
            if not raw.endswith(b"\n"):  # a piece of a longer line
                pieces.append(raw)
                continue
            if pieces:
                raw = b"".join((*pieces, raw))
                pieces = []
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if not line:  # end of one event
                if data and event == "config":
                    self._dispatch("\n".join(data))
                event, data, size = "message", [], 0
                continue
            if line.startswith(":"):
                continue  # a comment: the heartbeat
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)

    def _dispatch(self, data: str) -> None:
        try:
            payload = _json.decode(data.encode())
        except (msgspec.DecodeError, ValueError):
            logger.warning("Config stream: unreadable event %r", data[:200])
            return
        etag = payload.get("etag") if isinstance(payload, dict) else None
        if isinstance(etag, str) and etag:
            self.events += 1
            self._on_etag(etag)
