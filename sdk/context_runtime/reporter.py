"""The trace reporter (RUNTIME_API §3): hands traces to the console in batches, in the
background, without ever blocking or failing the runtime's request.

:meth:`TraceReporter.report` encodes the trace and puts it on a bounded queue
(``put_nowait``); when the queue is full the trace is dropped and counted. One sender thread
takes up to ``batch_size`` traces (and at most ``max_batch_bytes``), POSTs them, and:

- 2xx: committed. ``accepted`` and ``duplicates`` both count as delivered; each ``rejected``
  trace is permanently failed (counted, logged, never retried).
- 413 / 400 for the whole request: the batch is split in halves until the offending trace is
  alone, and that one is counted as rejected.
- 408, 429, 5xx, timeouts, connection errors: the same batch is retried with exponential
  backoff and jitter, capped. The console de-duplicates by ``request_id``, so a retry whose
  first try was committed after all never stores a trace twice.
- 401, 403, 404, 405 (a token or URL problem): logged as an error and retried every
  ``auth_retry_interval`` seconds, since the token may be fixed while the runtime runs; the
  bounded queue keeps memory flat meanwhile (new traces are dropped and counted). With
  ``drop_on_auth_error=True`` the batch is dropped instead.

:meth:`flush` waits until everything reported so far is settled; :meth:`close` flushes within
its timeout, counts what is left as dropped, and also runs at interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping
from typing import Any

import msgspec

from context_runtime import _json
from context_runtime.client import _http as http
from context_runtime.client._http import TransportError
from context_runtime.wire import MAX_BATCH_BYTES, MAX_TRACES_PER_BATCH, Trace

__all__ = [
    "TraceReporter",
    "encode_trace",
    "snapshot_allowed",
]

logger = logging.getLogger("context_runtime.reporter")

_ENVELOPE_OPEN = b'{"traces":['
_ENVELOPE_CLOSE = b"]}"
_ENVELOPE_BYTES = len(_ENVELOPE_OPEN) + len(_ENVELOPE_CLOSE)
_WAKE = None  # put on the queue to wake the sender (flush, close)
_NULL = msgspec.Raw(b"null")
_RESOLUTION_FIELDS = ("config_resolution", "config_age_seconds")
_CONFIG_STATUSES = (401, 403, 404, 405)
_SPLIT_STATUSES = (400, 413, 422)


def snapshot_allowed(strategy) -> bool:
    """True only when the strategy body says ``"snapshot": {"allowed": true}``.

    ``strategy`` is a body (mapping) or anything with a ``body`` (a served
    :class:`~context_runtime.client.Document`); anything else, and a missing or non-boolean
    ``allowed``, means no.
    """
    body = getattr(strategy, "body", strategy)
    if not isinstance(body, Mapping):
        return False
    snapshot = body.get("snapshot")
    return isinstance(snapshot, Mapping) and snapshot.get("allowed") is True


def encode_trace(trace: Trace | Mapping[str, Any], *, resolution=None, strategy=None) -> bytes:
    """The wire bytes of one trace, as the reporter sends it.

    ``resolution`` (a :class:`~context_runtime.client.Resolution`, or a snapshot with a
    ``resolution``) sets ``config_fallback`` and adds ``config_resolution`` and
    ``config_age_seconds``. The trace's ``snapshot`` is kept only when ``strategy`` allows it
    (:func:`snapshot_allowed`); without a strategy it is removed.
    """
    resolution = getattr(resolution, "resolution", resolution)
    fields = resolution.trace_fields() if resolution is not None else None
    keep_snapshot = snapshot_allowed(strategy)
    if isinstance(trace, Trace):
        changes: dict[str, Any] = {}
        if not keep_snapshot and bytes(trace.snapshot) != b"null":
            changes["snapshot"] = _NULL
        if fields is not None:
            changes["config_fallback"] = fields["config_fallback"]
            # A newer wire.Trace may have the fields itself; otherwise they are appended.
            for name in _RESOLUTION_FIELDS:
                if name in trace.__struct_fields__:
                    changes[name] = fields[name]
        if changes:
            trace = msgspec.structs.replace(trace, **changes)
        data = msgspec.json.encode(_floats_written_as_floats(trace))
        extra = {
            name: fields[name]
            for name in _RESOLUTION_FIELDS
            if fields is not None and name not in trace.__struct_fields__
        }
        if extra:  # a struct always encodes as a non-empty object: append before its "}"
            data = data[:-1] + b"," + msgspec.json.encode(extra)[1:]
        return data
    if not isinstance(trace, Mapping):
        raise TypeError(f"a trace is a context_runtime.wire.Trace or a mapping, not {trace!r}")
    wire = dict(trace)
    if not keep_snapshot and wire.get("snapshot") is not None:
        wire["snapshot"] = None
    if fields is not None:
        wire.update(fields)
    return msgspec.json.encode(wire)


def _floats_written_as_floats(trace: Trace) -> Trace:
    """The trace with an int in a float field as a float (6200 → 6200.0), so that what is
    sent is exactly the console's encoding of the trace it decodes (a float field decodes as
    a float): then the console proves cheaply that no key came twice
    (traces.ingest._repeated_in_trace). The same number on the wire; ints are rare here (the
    engine writes floats), so the check is all it costs."""
    changes: dict[str, Any] = {}
    if type(trace.config_age_seconds) is int:
        changes["config_age_seconds"] = float(trace.config_age_seconds)
    estimate = trace.input_estimate
    if estimate is not None and type(estimate.value) is int:
        changes["input_estimate"] = msgspec.structs.replace(estimate, value=float(estimate.value))
    candidates = trace.candidates
    if any(type(c.relevance) is int for c in candidates):
        changes["candidates"] = [
            msgspec.structs.replace(c, relevance=float(c.relevance))
            if type(c.relevance) is int
            else c
            for c in candidates
        ]
    return msgspec.structs.replace(trace, **changes) if changes else trace


_TRACE_DECODER = msgspec.json.Decoder(Trace)


class TraceReporter:
    """Sends traces to ``POST /api/v1/runtime/traces`` in the background.

    ``max_queue`` traces wait at most (beyond that, new ones are dropped and counted);
    ``batch_size`` (1–1,000) and ``max_batch_bytes`` bound one request; a batch waits up to
    ``flush_interval`` seconds to fill; ``timeout`` bounds every request. Failed requests are
    retried after ``backoff_initial`` doubling up to ``backoff_max`` seconds, with jitter.
    ``validate`` checks each trace against the wire structs before sending, so a trace the
    console would reject is counted (and logged) without a round trip.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        max_queue: int = 10_000,
        batch_size: int = 500,
        flush_interval: float = 1.0,
        timeout: float = 5.0,
        max_batch_bytes: int = MAX_BATCH_BYTES,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        auth_retry_interval: float = 60.0,
        drop_on_auth_error: bool = False,
        validate: bool = True,
        close_at_exit: bool = True,
        exit_timeout: float = 5.0,
    ):
        if not 1 <= batch_size <= MAX_TRACES_PER_BATCH:
            raise ValueError(f"batch_size must be between 1 and {MAX_TRACES_PER_BATCH}")
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        if not _ENVELOPE_BYTES < max_batch_bytes <= MAX_BATCH_BYTES:
            raise ValueError(f"max_batch_bytes must be at most {MAX_BATCH_BYTES:,}")
        self._url = http.runtime_url(base_url, "traces")
        self._token = token
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.timeout = timeout
        self.max_batch_bytes = max_batch_bytes
        self.backoff_initial = backoff_initial
        self.backoff_max = max(backoff_max, backoff_initial)
        self.auth_retry_interval = auth_retry_interval
        self.drop_on_auth_error = drop_on_auth_error
        self._validate = validate
        self._max_item_bytes = max_batch_bytes - _ENVELOPE_BYTES
        self._warned_snapshot = False
        self._reset()
        if close_at_exit:
            self._exit_timeout = exit_timeout
            atexit.register(_close_at_exit, weakref.ref(self))
        if hasattr(os, "register_at_fork"):
            ref = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: _reset_in_child(ref))

    def _reset(self) -> None:
        """The state that lives with the sender thread (fresh in a forked child)."""
        self._queue: queue.Queue = queue.Queue(self.max_queue)
        self._work: deque[list[tuple[str, bytes]]] = deque()  # batches being sent
        self._lock = threading.Lock()  # counters
        self._settled_cond = threading.Condition(self._lock)
        self._closing = threading.Event()
        self._deadline: float | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._counts = dict.fromkeys(
            ("queued", "sent", "duplicates", "rejected", "dropped", "retries", "batches"), 0
        )
        self._settled = 0
        self._failures = 0
        self._last_error: str | None = None
        self._last_error_at: float | None = None
        self._last_success_at: float | None = None

    # ------------------------------------------------------------ request path

    def report(self, trace: Trace | Mapping[str, Any], *, resolution=None, strategy=None) -> bool:
        """Queue one trace for sending; True if queued, False if dropped (queue full, closed,
        or not encodable). Never blocks, never raises.

        ``resolution``: the config snapshot (or its ``Resolution``) the request used, so the
        trace says where its configuration came from. ``strategy``: the strategy body (or
        document) the request used; the trace's ``snapshot`` is sent only if it allows it.
        """
        try:
            if self._closed:
                self._count("dropped")
                return False
            if self._thread is None:
                self._start()
            if strategy is None and not self._warned_snapshot and _has_snapshot(trace):
                self._warned_snapshot = True
                logger.warning(
                    "A trace carried a snapshot but report() was not given its strategy; "
                    "snapshots are only sent when the strategy's snapshot.allowed is true, so "
                    "it was removed (pass strategy=...)"
                )
            data = encode_trace(trace, resolution=resolution, strategy=strategy)
            request_id = _request_id(trace)
            if len(data) > self._max_item_bytes:
                logger.error(
                    "Trace %s is %s bytes, more than a batch may carry; not sent",
                    request_id,
                    f"{len(data):,}",
                )
                self._count("rejected")
                return False
            self._queue.put_nowait((request_id, data))
        except queue.Full:
            self._count("dropped")
            return False
        except Exception:
            logger.exception("A trace could not be queued")
            self._count("rejected")
            return False
        self._count("queued")
        return True

    # ------------------------------------------------------------ control

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every trace reported before the call is settled (delivered, rejected or
        dropped); True if that happened within ``timeout``."""
        with self._lock:
            target = self._counts["queued"]
            if self._settled >= target:
                return True
        self._wake()
        deadline = time.monotonic() + timeout
        with self._settled_cond:
            while self._settled < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._sender_alive():
                    return self._settled >= target
                self._settled_cond.wait(min(remaining, 0.1))
        return True

    def close(self, timeout: float = 5.0) -> bool:
        """Stop taking traces, send what is queued within ``timeout`` seconds, and count the
        rest as dropped. True if nothing had to be dropped. Idempotent."""
        if self._closed and not self._sender_alive():
            return self.pending() == 0
        with self._lock:
            dropped_before = self._counts["dropped"]
        self._closed = True
        self._deadline = time.monotonic() + timeout
        self._closing.set()
        self._wake()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            # A request already in flight keeps its own timeout; close() does not wait for
            # it beyond its own: the sender settles those traces when the request returns.
            thread.join(timeout + 0.1)
        if not self._sender_alive():
            self._drop_remaining("the reporter was closed")
        with self._lock:
            dropped = self._counts["dropped"] - dropped_before
        return dropped == 0 and self.pending() == 0

    def __enter__(self) -> TraceReporter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def pending(self) -> int:
        """Traces queued or in a batch being sent."""
        return self._queue.qsize() + sum(len(batch) for batch in list(self._work))

    def stats(self) -> dict[str, Any]:
        """Counters since start: ``queued`` (accepted by :meth:`report`), ``sent`` (accepted
        by the console), ``duplicates`` (already stored: delivered too), ``rejected``,
        ``dropped``, ``retries``, ``batches``; ``pending`` now; ``last_error``."""
        with self._lock:
            result: dict[str, Any] = dict(self._counts)
        result["delivered"] = result["sent"] + result["duplicates"]
        result["pending"] = self.pending()
        result["last_error"] = self._last_error
        result["last_error_at"] = self._last_error_at
        result["last_success_at"] = self._last_success_at
        result["running"] = self._sender_alive()
        return result

    # ------------------------------------------------------------ sender thread

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                thread = threading.Thread(
                    target=self._run, name="context-runtime-traces", daemon=True
                )
                thread.start()
                self._thread = thread

    def _sender_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _wake(self) -> None:
        # When the queue is full the sender has plenty to do and looks at the flags soon.
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(_WAKE)

    def _run(self) -> None:
        while True:
            try:
                if self._past_deadline():
                    break
                if not self._work:
                    batch = self._collect()
                    if batch:
                        self._work.append(batch)
                    elif self._closing.is_set() and self._queue.empty():
                        break
                    continue
                self._send(self._work[0])
            except Exception:  # the sender must survive anything
                logger.exception("The trace sender failed unexpectedly")
                self._sleep(1.0)
        self._drop_remaining("shutdown: the console could not be reached in time")

    def _collect(self) -> list[tuple[str, bytes]]:
        """Wait for traces, then take a batch: up to ``batch_size`` traces and
        ``max_batch_bytes``, waiting at most ``flush_interval`` after the first for more (not
        at all when flushing or closing)."""
        try:
            if self._closing.is_set():
                item = self._queue.get_nowait()
            else:
                item = self._queue.get(timeout=0.5)
        except queue.Empty:
            return []
        batch: list[tuple[str, bytes]] = []
        size = _ENVELOPE_BYTES
        linger_until = time.monotonic() + self.flush_interval
        urgent = False
        while True:
            if item is _WAKE:
                urgent = True
            elif self._acceptable(item):
                added = len(item[1]) + (1 if batch else 0)
                if batch and size + added > self.max_batch_bytes:
                    # Full by bytes: that batch goes first, this trace starts the next one.
                    self._work.append(batch)
                    return [item]
                batch.append(item)
                size += added
                if len(batch) >= self.batch_size:
                    return batch
            try:
                item = self._queue.get_nowait()
                continue
            except queue.Empty:
                pass
            remaining = linger_until - time.monotonic()
            if urgent or self._closing.is_set() or remaining <= 0:
                return batch
            try:
                item = self._queue.get(timeout=remaining)
            except queue.Empty:
                return batch

    def _acceptable(self, item: tuple[str, bytes]) -> bool:
        if not self._validate:
            return True
        try:
            _TRACE_DECODER.decode(item[1])
        except msgspec.ValidationError as error:
            logger.warning("Trace %s is not valid and is not sent: %s", item[0], error)
            self._settle(rejected=1)
            return False
        return True

    def _send(self, batch: list[tuple[str, bytes]]) -> None:
        body = _ENVELOPE_OPEN + b",".join(data for _, data in batch) + _ENVELOPE_CLOSE
        timeout = self.timeout
        if self._deadline is not None:
            timeout = max(0.05, min(timeout, self._deadline - time.monotonic()))
        try:
            response = http.request(
                "POST", self._url, token=self._token, timeout=timeout, body=body
            )
        except TransportError as error:
            self._retry_later(str(error), batch)
            return
        if response.ok:
            self._work.popleft()
            self._committed(batch, response)
        elif response.status in _SPLIT_STATUSES:
            self._work.popleft()
            if len(batch) > 1:
                middle = len(batch) // 2
                self._work.extendleft([batch[middle:], batch[:middle]])
                logger.info(
                    "Console answered %s to %d traces; sending them in halves",
                    response.status,
                    len(batch),
                )
            else:
                logger.error(
                    "Console refused trace %s on its own (%s); not retried",
                    batch[0][0],
                    response.error_summary(),
                )
                self._settle(rejected=1)
        elif response.status in _CONFIG_STATUSES:
            message = response.error_summary()
            if self.drop_on_auth_error:
                self._work.popleft()
                self._note_error(message)
                logger.error("Trace upload refused (%s); %d traces dropped", message, len(batch))
                self._settle(dropped=len(batch))
            else:
                self._retry_later(message, batch, delay=self.auth_retry_interval, loud=True)
        else:
            delay = http.retry_after_seconds(response)
            self._retry_later(response.error_summary(), batch, minimum=delay)

    def _committed(self, batch: list[tuple[str, bytes]], response: http.Response) -> None:
        try:
            answer = _json.decode(response.body)
        except (msgspec.DecodeError, ValueError):
            answer = None
        if not isinstance(answer, dict):
            logger.warning(
                "Console accepted %d traces with an unreadable answer; counted as sent",
                len(batch),
            )
            answer = {}
        duplicates = answer.get("duplicates")
        duplicates = len(duplicates) if isinstance(duplicates, list) else 0
        rejected = answer.get("rejected")
        rejected = rejected if isinstance(rejected, list) else []
        for entry in rejected[:10]:
            if isinstance(entry, dict):
                logger.warning(
                    "Console rejected trace %s: %s",
                    entry.get("request_id"),
                    _errors_text(entry.get("errors")),
                )
        if len(rejected) > 10:
            logger.warning("… and %d more rejected traces in that batch", len(rejected) - 10)
        sent = max(0, len(batch) - duplicates - len(rejected))
        if self._failures:
            logger.info("Console takes traces again after %d failed attempt(s)", self._failures)
        self._failures = 0
        self._last_success_at = time.time()
        self._settle(sent=sent, duplicates=duplicates, rejected=len(rejected), batches=1)

    def _retry_later(
        self,
        message: str,
        batch: list,
        *,
        delay: float | None = None,
        minimum: float | None = None,
        loud: bool = False,
    ) -> None:
        self._failures += 1
        repeated = message == self._last_error
        self._note_error(message)
        if delay is None:
            delay = http.backoff_delay(self._failures, self.backoff_initial, self.backoff_max)
            if minimum is not None:
                delay = min(max(delay, minimum), self.backoff_max)
        level = logging.ERROR if loud else logging.WARNING
        if repeated and not loud:
            level = logging.DEBUG
        logger.log(
            level,
            "Trace upload failed (%s); %d traces kept, next try in %.1f s (attempt %d)",
            message,
            len(batch),
            delay,
            self._failures,
        )
        with self._lock:
            self._counts["retries"] += 1
        self._sleep(delay)

    def _sleep(self, delay: float) -> None:
        """Sleep, shortened by close() to what its deadline leaves."""
        end = time.monotonic() + delay
        while True:
            now = time.monotonic()
            limit = end if self._deadline is None else min(end, self._deadline)
            if now >= limit:
                return
            if not self._closing.is_set():
                self._closing.wait(limit - now)
            else:  # closing: keep the backoff, cut only at close()'s deadline
                time.sleep(limit - now)
                return

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _drop_remaining(self, why: str) -> None:
        count = 0
        while self._work:
            count += len(self._work.popleft())
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not _WAKE:
                count += 1
        if count:
            logger.error("%d traces dropped: %s", count, why)
            self._settle(dropped=count)

    def _note_error(self, message: str) -> None:
        self._last_error = message
        self._last_error_at = time.time()

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def _settle(self, **counts: int) -> None:
        with self._settled_cond:
            for name, value in counts.items():
                self._counts[name] += value
                if name != "batches":
                    self._settled += value
            self._settled_cond.notify_all()


def _close_at_exit(ref) -> None:
    reporter = ref()
    if reporter is not None and not reporter._closed:
        reporter.close(reporter._exit_timeout)


def _reset_in_child(ref) -> None:
    reporter = ref()
    if reporter is not None:  # the parent's thread and queue do not exist in the child
        reporter._reset()


def _has_snapshot(trace) -> bool:
    if isinstance(trace, Trace):
        return bytes(trace.snapshot) != b"null"
    return isinstance(trace, Mapping) and trace.get("snapshot") is not None


def _request_id(trace) -> str:
    if isinstance(trace, Trace):
        return trace.request_id
    value = trace.get("request_id") if isinstance(trace, Mapping) else None
    return value if isinstance(value, str) else "?"


def _errors_text(errors) -> str:
    if not isinstance(errors, list):
        return "no details"
    parts = [
        f"{e.get('path', '')}: {e.get('message') or e.get('code', '')}"
        for e in errors[:5]
        if isinstance(e, dict)
    ]
    return "; ".join(parts) or "no details"
