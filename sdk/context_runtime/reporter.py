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
  ``auth_retry_interval`` seconds (never hot), since the token may be fixed while the runtime
  runs; 401/403 also show as ``unauthorized`` in :meth:`TraceReporter.status` until a
  request is accepted again. Meanwhile new traces wait in the spool (or, without one, in the
  bounded queue: beyond it they are dropped and counted). With ``drop_on_auth_error=True``
  the batch is dropped instead.

**Spool** (on by default): every trace is appended to a segment file in that directory by
:meth:`report` itself (one ``os.write`` of a checksummed record, a few microseconds), and the
sender delivers from the disk, deleting a segment only after the console's 2xx. So traces
survive SIGTERM, kill -9 and restarts: a reporter on the same directory delivers what earlier
processes left (each segment locked by one live process at a time), and the console's
``request_id`` idempotency stores each trace once. The spool is bounded by
``spool_max_bytes`` (oldest traces dropped first, counted); a disk that is full or read-only
degrades the reporter to its memory queue with one WARNING and ``spool: "memory"`` in
:meth:`~TraceReporter.status`, and it returns to the disk once a write succeeds again; a
corrupt record is skipped and counted, the rest delivered. Format, locking and fsync policy:
``context_runtime._spool``.

Where (:func:`default_spool_dir`): ``spool_dir`` when given; by default beside the config
client's cache (:meth:`TraceReporter.for_client`, ``<cache file>.spool/``), else a directory
of this user's (``$XDG_STATE_HOME`` or ``~/.local/state``, then
``context-console/<console host>/<token fingerprint>/spool``, ``0700``): a restart during a
console outage loses nothing without any setting. ``spool_dir=None`` turns the spool off
(memory only: what is queued at a restart is lost, counted as dropped). A directory that
cannot be used is said once in the log and the reporter keeps traces in memory; it never
fails the runtime.

:meth:`flush` waits until everything reported so far is settled; :meth:`close` flushes within
its timeout, counts what is left in memory as dropped (what is in the spool stays there for
the next process), and also runs at interpreter exit.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import errno
import hashlib
import logging
import os
import queue
import re
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import msgspec

from context_runtime import _json
from context_runtime._spool import Spool
from context_runtime.client import _http as http
from context_runtime.client._http import TransportError
from context_runtime.wire import (
    INPUT_REFUSED,
    MAX_BATCH_BYTES,
    MAX_CANDIDATES_PER_TRACE,
    MAX_OUTCOME_BATCH_BYTES,
    MAX_OUTCOMES_PER_BATCH,
    MAX_TRACES_PER_BATCH,
    Outcome,
    Trace,
    candidate_counts,
    truncate_candidates,
)

__all__ = [
    "DEFAULT_SPOOL",
    "TraceReporter",
    "default_spool_dir",
    "encode_trace",
    "snapshot_allowed",
]

logger = logging.getLogger("context_runtime.reporter")

_ENVELOPE_CLOSE = b"]}"
# The console's ingest server, when it runs apart from the one that answers config reads
# (docs/runtime-contract.md §3): the reporter's default for ``ingest_url``.
INGEST_URL_ENV = "CONTEXT_CONSOLE_INGEST_URL"
_WAKE = None  # put on the queue to wake the sender (flush, close)
_NULL = msgspec.Raw(b"null")
_RESOLUTION_FIELDS = ("config_resolution", "config_age_seconds")
_CONFIG_STATUSES = (401, 403, 404, 405)
_AUTH_STATUSES = (401, 403)
_ORPHAN_RESCAN_SECONDS = 5.0
_SPOOL_RETRY_SECONDS = 30.0
_SPLIT_STATUSES = (400, 413, 422)
# Request ids whose agent report() remembers for report_outcome (an entry is ~200 bytes).
_AGENTS_REMEMBERED = 50_000
# A rejection's reason is logged once, then at most once per this many seconds with a count.
_REJECTION_LOG_SECONDS = 60.0
_POSITION = re.compile(r"\[\d+\]")


class _DefaultSpool:
    """The ``spool_dir`` a caller did not give (:data:`DEFAULT_SPOOL`): durable by default."""

    def __repr__(self) -> str:
        return "DEFAULT_SPOOL"


# TraceReporter(spool_dir=DEFAULT_SPOOL), the default: a spool in default_spool_dir().
DEFAULT_SPOOL: Any = _DefaultSpool()


def default_spool_dir(
    base_url: str, token: str, *, cache_path: str | os.PathLike | None = None
) -> str | None:
    """Where a reporter spools when not told: beside the config client's cache when known
    (``/var/lib/app/config.json`` → ``/var/lib/app/config.json.spool``), else in this user's
    state directory (``$XDG_STATE_HOME``, default ``~/.local/state``), under
    ``context-console/<console host>/<token fingerprint>/spool``. The fingerprint (a hash,
    never the token) keeps runtimes with different tokens apart: a process adopts the
    segments that dead processes left in its directory and sends them with its own token,
    which another token's traces would not pass. ``None`` when no such directory can be
    named (no home directory)."""
    if cache_path is not None:
        return os.fspath(cache_path) + ".spool"
    state = os.environ.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(state):  # the XDG rule: a relative value is ignored
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        state = os.path.join(home, ".local", "state")
    host = urlsplit(base_url).netloc.rsplit("@", 1)[-1] or "console"
    host = "".join(ch if ch.isalnum() or ch in "-._" else "_" for ch in host)
    fingerprint = hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()[:16]
    return os.path.join(state, "context-console", host, fingerprint, "spool")


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
        if len(trace.candidates) > MAX_CANDIDATES_PER_TRACE:  # a record rather than none
            kept, _ = truncate_candidates(trace.candidates)
            changes["candidates"] = kept
            changes["candidates_truncated"] = True
            changes["candidate_counts"] = candidate_counts(trace.candidates)
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


class TraceReporter:
    """Sends traces to ``POST /api/v1/runtime/traces`` in the background.

    ``max_queue`` traces wait at most (beyond that, new ones are dropped and counted);
    ``batch_size`` (1–1,000) and ``max_batch_bytes`` bound one request; a batch waits up to
    ``flush_interval`` seconds to fill; ``timeout`` bounds every request. Failed requests are
    retried after ``backoff_initial`` doubling up to ``backoff_max`` seconds, with jitter.
    ``validate`` checks each trace against the wire structs before sending, so a trace the
    console would reject is counted (and logged) without a round trip.

    The durable spool (module docstring) is on by default, in :func:`default_spool_dir`
    (:meth:`for_client`: beside the config client's cache); ``spool_dir`` names another
    directory, ``spool_dir=None`` turns it off (memory only). At most ``spool_max_bytes`` on
    disk, in segment files of about ``spool_segment_bytes``, fsynced at most every
    ``spool_fsync_interval`` seconds (``None``: left to the operating system). The directory
    should be on a local disk that outlives the process (not a tmpfs); replicas with the same
    token may share one.

    Traces and outcomes go to ``ingest_url`` when given, else to ``$CONTEXT_CONSOLE_INGEST_URL``
    when set, else to ``base_url``: a console that serves ingest on its own port (``make run``:
    INGEST_PORT, 8002) keeps trace batches away from the processes answering config reads. A
    console answering 503 with Retry-After (its ingest bound is full) is retried after it.

    :meth:`report_outcome` reports how a request turned out, after the fact (RUNTIME_API
    §3b), through the same machinery: batched, retried, spooled (in ``spool_dir/outcomes``),
    delivered once.
    """

    # What this reporter delivers, and where: a subclass delivers outcomes the same way.
    _WHAT = "trace"
    _PATH = "traces"
    _ENVELOPE_OPEN = b'{"traces":['
    _DECODER = msgspec.json.Decoder(Trace)
    _MAX_ITEMS = MAX_TRACES_PER_BATCH
    _MAX_BYTES = MAX_BATCH_BYTES

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        max_queue: int = 10_000,
        batch_size: int = 500,
        flush_interval: float = 1.0,
        timeout: float = 5.0,
        max_batch_bytes: int | None = None,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        auth_retry_interval: float = 60.0,
        drop_on_auth_error: bool = False,
        validate: bool = True,
        close_at_exit: bool = True,
        exit_timeout: float = 5.0,
        spool_dir: str | os.PathLike | None = DEFAULT_SPOOL,
        spool_max_bytes: int = 256 * 1024 * 1024,
        spool_segment_bytes: int = 1024 * 1024,
        spool_fsync_interval: float | None = 1.0,
        ingest_url: str | None = None,
    ):
        self._envelope_bytes = len(self._ENVELOPE_OPEN) + len(_ENVELOPE_CLOSE)
        if max_batch_bytes is None:
            max_batch_bytes = self._MAX_BYTES
        if not 1 <= batch_size <= self._MAX_ITEMS:
            raise ValueError(f"batch_size must be between 1 and {self._MAX_ITEMS}")
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        if not self._envelope_bytes < max_batch_bytes <= self._MAX_BYTES:
            raise ValueError(f"max_batch_bytes must be at most {self._MAX_BYTES:,}")
        self._base_url = base_url
        # Where batches go: the console's ingest server when it has one of its own (ingest_url,
        # else CONTEXT_CONSOLE_INGEST_URL), else the console itself (base_url), as before.
        self.ingest_url = ingest_url or os.environ.get(INGEST_URL_ENV, "").strip() or base_url
        self._url = http.runtime_url(self.ingest_url, self._PATH)
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
        self._max_item_bytes = max_batch_bytes - self._envelope_bytes
        self._warned_snapshot = False
        if spool_dir is not None and spool_max_bytes < 4 * spool_segment_bytes:
            raise ValueError("spool_max_bytes must be at least 4 × spool_segment_bytes")
        if spool_dir is DEFAULT_SPOOL:
            spool_dir = default_spool_dir(base_url, token)
            if spool_dir is None:
                logger.warning(
                    "No directory for the trace spool (no home directory, no XDG_STATE_HOME): "
                    "traces are kept in memory only and lost at a restart; pass spool_dir=..."
                )
        self.spool_dir = os.fspath(spool_dir) if spool_dir is not None else None
        self.spool_max_bytes = spool_max_bytes
        self.spool_segment_bytes = spool_segment_bytes
        self.spool_fsync_interval = spool_fsync_interval
        self._reset()
        self._outcomes: _OutcomeReporter | None = None
        self._outcomes_lock = threading.Lock()
        # request_id → agent of the traces reported, so that an outcome names its agent
        # (a token covering several agents needs it while the trace is not stored yet).
        self._agents: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._agents_lock = threading.Lock()
        self._close_at_exit = close_at_exit
        self._exit_timeout = exit_timeout
        if close_at_exit:
            atexit.register(_close_at_exit, weakref.ref(self))
        if hasattr(os, "register_at_fork"):
            ref = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: _reset_in_child(ref))
        if self._spool is not None:
            # What earlier processes spooled is delivered without waiting for a new trace.
            self._start()
            if os.path.isdir(os.path.join(self.spool_dir, _OutcomeReporter._PATH)):
                self._outcome_reporter()  # and their outcomes

    @classmethod
    def for_client(cls, client, **options) -> TraceReporter:
        """The reporter of a runtime whose configuration ``client`` (a
        :class:`~context_runtime.client.ConfigClient`) reads: the same console and token, and
        unless ``spool_dir`` is given, the spool beside the client's ``cache_path`` (or in
        :func:`default_spool_dir` without one). ``options``: the constructor's."""
        base_url, token = client.base_url, client.token
        if options.get("spool_dir", DEFAULT_SPOOL) is DEFAULT_SPOOL:
            cache_path = getattr(client, "cache_path", None)
            options["spool_dir"] = default_spool_dir(base_url, token, cache_path=cache_path)
        return cls(base_url, token, **options)

    def _reset(self) -> None:
        """The state that lives with the sender thread (fresh in a forked child)."""
        self._queue: queue.Queue = queue.Queue(self.max_queue)
        # batches being sent: (request id, wire bytes, spool segment or None)
        self._work: deque[list[tuple]] = deque()
        self._lock = threading.Lock()  # counters
        self._settled_cond = threading.Condition(self._lock)
        self._closing = threading.Event()
        self._deadline: float | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._counts = dict.fromkeys(
            (
                "queued",
                "recovered",
                "sent",
                "duplicates",
                "rejected",
                "dropped",
                "retries",
                "batches",
                "downgraded",
            ),
            0,
        )
        self._settled = 0
        self._failures = 0
        self._last_error: str | None = None
        self._last_error_at: float | None = None
        self._last_success_at: float | None = None
        self._unauthorized = False
        self._downgrade_warned = False
        self._rejection_log: dict[str, list] = {}  # reason → [last logged at, not logged since]
        self._kick = threading.Event()  # new spooled traces for an idle sender
        self._idle = False
        old = getattr(self, "_spool", None)
        if old is not None:  # a forked child: the parent's segments stay the parent's
            old.forget()
        self._spool: Spool | None = None
        self._spool_ok = False
        self._spool_error: str | None = None
        self._spool_retry_at = 0.0
        self._orphans_at = 0.0
        if self.spool_dir is not None:
            self._spool = Spool(
                self.spool_dir,
                max_bytes=self.spool_max_bytes,
                segment_bytes=self.spool_segment_bytes,
                fsync_interval=self.spool_fsync_interval,
            )
            try:
                self._spool.open()
            except OSError as error:
                self._spool_failed(error)
            else:
                self._spool_ok = True

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
            self._remember_agent(request_id, _agent(trace))
            return self._enqueue(request_id, data)
        except Exception:
            logger.exception("A trace could not be queued")
            self._count("rejected")
            return False

    def report_outcome(
        self,
        request_id: str,
        kind: str,
        value: bool | int | str,
        *,
        occurred_at: datetime | None = None,
        agent: str | None = None,
    ) -> bool:
        """Queue how a request turned out, after the fact (RUNTIME_API §3b): ``kind`` is one
        the environment declares (``task_completed``, ``escalated``, ``rating``…) and
        ``value`` true/false, an integer or a label. ``occurred_at`` (with a timezone):
        when it happened, else when the console receives it. ``agent``: the agent that
        answered; by default the one of the trace this reporter sent for ``request_id`` (the
        last 50,000 are remembered), which a token covering several agents needs while the
        trace is not stored yet. Name it yourself for a request this process did not report.

        Delivered like traces — batched, retried, spooled, never blocking; a repeat with the
        same value is stored once. An outcome the console rejects is counted
        (``stats()["outcomes_rejected"]``) and its reason logged. True if queued, False if
        dropped; never raises."""
        if agent is None:
            with self._agents_lock:
                agent = self._agents.get(request_id)
        try:
            outcome = Outcome(
                request_id=request_id,
                kind=kind,
                value=value,
                occurred_at=occurred_at,
                agent=agent,
            )
            data = msgspec.json.encode(outcome)
        except Exception:
            logger.exception("Outcome %s of %s could not be encoded", kind, request_id)
            self._outcome_reporter()._count("rejected")  # counted like any other rejection
            return False
        return self._outcome_reporter().submit(request_id, data)

    def _remember_agent(self, request_id: str, agent: str | None) -> None:
        if not agent:
            return
        with self._agents_lock:  # OrderedDict: dropping the oldest stays O(1)
            agents = self._agents
            if request_id in agents:
                agents.move_to_end(request_id)
            agents[request_id] = agent
            if len(agents) > _AGENTS_REMEMBERED:
                agents.popitem(last=False)

    def _outcome_reporter(self) -> _OutcomeReporter:
        with self._outcomes_lock:
            if self._outcomes is None:
                self._outcomes = _OutcomeReporter(self)
            return self._outcomes

    def _enqueue(self, request_id: str, data: bytes) -> bool:
        """Put one encoded item on the spool (or the memory queue); the caller counts a
        failure."""
        try:
            if len(data) > self._max_item_bytes:
                logger.error(
                    "%s %s is %s bytes, more than a batch may carry; not sent",
                    self._WHAT.capitalize(),
                    request_id,
                    f"{len(data):,}",
                )
                self._count("rejected")
                return False
            spool = self._spool
            if spool is not None and self._spool_ok:
                try:
                    dropped = spool.append(request_id, data)
                except OSError as error:
                    self._spool_failed(error)
                else:
                    if dropped:
                        self._settle(dropped=dropped)
                    self._count("queued")
                    if self._idle:
                        self._kick.set()
                    return True
            self._queue.put_nowait((request_id, data, None))
            if self._idle:  # a spool sender waits on the kick, not on the queue
                self._kick.set()
        except queue.Full:
            self._count("dropped")
            return False
        self._count("queued")
        return True

    # ------------------------------------------------------------ control

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every trace (and outcome) reported before the call is settled
        (delivered, rejected or dropped); True if that happened within ``timeout``."""
        deadline = time.monotonic() + timeout
        outcomes = self._outcomes
        if outcomes is not None and not outcomes.flush(timeout):
            return False
        return self._flush_own(max(0.0, deadline - time.monotonic()))

    def _flush_own(self, timeout: float) -> bool:
        with self._lock:
            target = self._counts["queued"] + self._counts["recovered"]
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
        """Stop taking traces (and outcomes), send what is queued within ``timeout`` seconds,
        and count the rest in memory as dropped (what is in the spool stays there, for the
        next process). True if nothing had to be dropped. Idempotent."""
        outcomes = self._outcomes
        if outcomes is not None:
            started = time.monotonic()
            outcomes_done = outcomes.close(timeout / 2)
            timeout = max(0.05, timeout - (time.monotonic() - started))
        else:
            outcomes_done = True
        return self._close_own(timeout) and outcomes_done

    def _close_own(self, timeout: float) -> bool:
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
            self._finish("the reporter was closed")
        with self._lock:
            dropped = self._counts["dropped"] - dropped_before
        in_memory = self._queue.qsize() + sum(
            1 for batch in list(self._work) for item in batch if item[2] is None
        )
        return dropped == 0 and in_memory == 0

    def __enter__(self) -> TraceReporter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def pending(self) -> int:
        """Traces queued, spooled and not yet read, or in a batch being sent."""
        spooled = self._spool.unread() if self._spool is not None else 0
        return self._queue.qsize() + sum(len(batch) for batch in list(self._work)) + spooled

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
        result["unauthorized"] = self._unauthorized
        result["spool"] = self._spool_state()
        if self._spool is not None:
            result["spool_error"] = self._spool_error
            result.update({f"spool_{k}": v for k, v in self._spool.info().items()})
        outcomes = self._outcomes.stats() if self._outcomes is not None else None
        if outcomes is not None:
            result["outcomes"] = outcomes
        # Beside the traces' own: a rejected outcome is as visible as a rejected trace.
        for name in ("queued", "delivered", "rejected", "dropped"):
            result[f"outcomes_{name}"] = outcomes[name] if outcomes is not None else 0
        return result

    def status(self) -> dict[str, Any]:
        """For health endpoints: ``state`` is ``ok``, ``unauthorized`` (the console refuses
        the token: fix it; traces wait meanwhile), ``failing`` (the last upload failed),
        ``spool_degraded`` (the spool's disk failed: traces are in memory only) or
        ``closed``; with ``spool`` (``disk``, ``memory`` or ``off``), ``pending``,
        ``dropped``, ``rejected`` and ``outcomes_rejected`` (counts since start) and
        ``last_error``."""
        stats = self.stats()
        if self._closed:
            state = "closed"
        elif self._unauthorized:
            state = "unauthorized"
        elif stats["spool"] == "memory":
            state = "spool_degraded"
        elif self._failures:
            state = "failing"
        else:
            state = "ok"
        return {
            "state": state,
            "healthy": state == "ok",
            "unauthorized": self._unauthorized,
            "spool": stats["spool"],
            "spool_error": self._spool_error,
            "pending": stats["pending"],
            "dropped": stats["dropped"],
            "rejected": stats["rejected"],
            "outcomes_rejected": stats["outcomes_rejected"],
            "last_error": stats["last_error"],
            "last_success_at": stats["last_success_at"],
        }

    def _spool_state(self) -> str:
        if self._spool is None:
            return "off"
        return "disk" if self._spool_ok else "memory"

    def _spool_failed(self, error: OSError) -> None:
        """The disk did not take a write: memory from now on, said loudly once."""
        with self._lock:
            was_ok = self._spool_ok or self._spool_error is None
            self._spool_ok = False
            self._spool_error = f"{type(error).__name__}: {error}"
            self._spool_retry_at = time.monotonic() + _SPOOL_RETRY_SECONDS
        if was_ok:
            reason = "full" if getattr(error, "errno", None) == errno.ENOSPC else "unusable"
            logger.warning(
                "Trace spool %s is %s (%s): traces are kept in memory only (bounded, lost at "
                "a restart) until the disk takes writes again",
                self.spool_dir,
                reason,
                error,
            )

    # ------------------------------------------------------------ sender thread

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                thread = threading.Thread(
                    target=self._run, name=f"context-runtime-{self._PATH}", daemon=True
                )
                thread.start()
                self._thread = thread

    def _sender_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _wake(self) -> None:
        # When the queue is full the sender has plenty to do and looks at the flags soon.
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(_WAKE)
        self._kick.set()

    def _run(self) -> None:
        while True:
            try:
                if self._past_deadline():
                    break
                self._maintain()
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
        self._finish("shutdown: the console could not be reached in time")

    def _finish(self, why: str) -> None:
        self._drop_remaining(why)
        if self._spool is not None:
            self._spool.close()

    def _maintain(self) -> None:
        """The spool's housekeeping, between requests: fsync, adopt what dead processes
        left, delete a delivered active segment, try the disk again after a failure."""
        spool = self._spool
        if spool is None:
            return
        now = time.monotonic()
        if not self._spool_ok:
            if now < self._spool_retry_at:
                return
            try:
                spool.open()
            except OSError as error:
                with self._lock:
                    self._spool_error = f"{type(error).__name__}: {error}"
                    self._spool_retry_at = now + _SPOOL_RETRY_SECONDS
                return
            with self._lock:
                self._spool_ok = True
            logger.warning("Trace spool %s takes writes again", self.spool_dir)
        spool.sync()
        if not self._work:
            spool.seal_if_delivered()
        if now >= self._orphans_at and not self._closing.is_set():
            self._orphans_at = now + _ORPHAN_RESCAN_SECONDS
            found = spool.claim_orphans()
            if found:
                with self._lock:
                    self._counts["recovered"] += found

    def _collect(self) -> list[tuple]:
        """Wait for traces, then take a batch: up to ``batch_size`` traces and
        ``max_batch_bytes``, waiting at most ``flush_interval`` after the first for more (not
        at all when flushing or closing)."""
        if self._spool is not None:
            return self._collect_spooled()
        try:
            if self._closing.is_set():
                item = self._queue.get_nowait()
            else:
                item = self._queue.get(timeout=0.5)
        except queue.Empty:
            return []
        batch: list[tuple[str, bytes]] = []
        size = self._envelope_bytes
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

    def _collect_spooled(self) -> list[tuple]:
        """:meth:`_collect` with the spool: traces the memory queue holds (while the disk
        failed) first, then the spool's, in order."""
        spool = self._spool
        batch: list[tuple] = []
        size = self._envelope_bytes
        urgent = False
        linger_until: float | None = None
        while True:
            while len(batch) < self.batch_size:  # memory first: it is lost at a restart
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _WAKE:
                    urgent = True
                elif self._acceptable(item):
                    if batch and size + len(item[1]) + 1 > self.max_batch_bytes:
                        self._work.append(batch)
                        batch, size = [], self._envelope_bytes
                    batch.append(item)
                    size += len(item[1]) + 1
            room = self.batch_size - len(batch)
            if room > 0 and (self._spool_ok or spool.unread()):
                for item in spool.read(room, self.max_batch_bytes - size, at_least_one=not batch):
                    if self._acceptable(item):
                        batch.append(item)
                        size += len(item[1]) + 1
            now = time.monotonic()
            if batch and linger_until is None:
                linger_until = now + self.flush_interval
            if (
                len(batch) >= self.batch_size
                or (batch and (urgent or self._closing.is_set() or now >= linger_until))
                or (not batch and self._closing.is_set())
            ):
                return batch
            self._kick.clear()
            self._idle = True
            try:
                if not batch:
                    if spool.unread() or not self._queue.empty():
                        continue
                    self._kick.wait(0.5)
                    return []
                self._kick.wait(max(0.0, linger_until - now))
            finally:
                self._idle = False

    def _acceptable(self, item: tuple) -> bool:
        if not self._validate:
            return True
        try:
            self._DECODER.decode(item[1])
        except msgspec.ValidationError as error:
            logger.warning(
                "%s %s is not valid and is not sent: %s", self._WHAT.capitalize(), item[0], error
            )
            self._done([item])
            self._settle(rejected=1)
            return False
        return True

    def _done(self, items: list[tuple]) -> None:
        """These traces are settled for good: their spool records may go."""
        if self._spool is None:
            return
        counts: dict = {}
        for item in items:
            segment = item[2]
            if segment is not None:
                counts[segment] = counts.get(segment, 0) + 1
        for segment, count in counts.items():
            self._spool.settle(segment, count)

    def _send(self, batch: list[tuple]) -> None:
        body = self._ENVELOPE_OPEN + b",".join(item[1] for item in batch) + _ENVELOPE_CLOSE
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
            self._unauthorized = False
            self._done(batch)
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
                self._done(batch)
                self._settle(rejected=1)
        elif response.status in _CONFIG_STATUSES:
            message = response.error_summary()
            if response.status in _AUTH_STATUSES:
                self._unauthorized = True
            if self.drop_on_auth_error:
                self._work.popleft()
                self._note_error(message)
                logger.error("Trace upload refused (%s); %d traces dropped", message, len(batch))
                self._done(batch)
                self._settle(dropped=len(batch))
            else:
                where = "spooled" if self._spool_ok else "kept in memory"
                self._retry_later(
                    f"{message} (traces are {where}; check the runtime token)",
                    batch,
                    delay=self.auth_retry_interval,
                    loud=True,
                )
        else:
            delay = http.retry_after_seconds(response)
            self._retry_later(response.error_summary(), batch, minimum=delay)

    def _committed(self, batch: list[tuple], response: http.Response) -> None:
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
        resent = self._resend_refused_status(batch, rejected)
        self._log_rejections(rejected)
        sent = max(0, len(batch) - duplicates - len(rejected))
        if self._failures:
            logger.info("Console takes traces again after %d failed attempt(s)", self._failures)
        self._failures = 0
        self._last_success_at = time.time()
        self._settle(sent=sent, duplicates=duplicates, rejected=len(rejected) - resent, batches=1)

    def _log_rejections(self, rejected: list) -> None:
        """Each reason once (the first item's words), then at most once a minute with how
        many more it rejected: a flood of one mistake is one line, not one per item."""
        now = time.monotonic()
        for entry in rejected:
            if not isinstance(entry, dict):
                continue
            errors = entry.get("errors")
            reason = _reason_key(errors)
            seen = self._rejection_log.get(reason)
            if seen is None or now - seen[0] >= _REJECTION_LOG_SECONDS:
                more = (
                    f" (and {seen[1]:,} more since the last such line)" if seen and seen[1] else ""
                )
                logger.warning(
                    "Console rejected %s %s: %s%s; not retried",
                    self._WHAT,
                    entry.get("request_id"),
                    _errors_text(errors),
                    more,
                )
                if len(self._rejection_log) >= 1_000:  # distinct reasons are few; bounded
                    self._rejection_log.clear()
                self._rejection_log[reason] = [now, 0]
            else:
                seen[1] += 1

    def _resend_refused_status(self, batch: list[tuple], rejected: list) -> int:
        """A console older than the ``input_refused`` status rejects such a trace at
        ``status``: it is sent again as ``missing_required_data`` (what runtimes said
        before), its ``input_errors`` riding along as a field that console ignores — the
        request keeps a record. Returns how many were queued again (settled then, counted
        under ``downgraded``)."""
        again = 0
        for entry in rejected:
            if not isinstance(entry, dict) or not _rejected_at_status(entry.get("errors")):
                continue
            index = entry.get("index")
            if not isinstance(index, int) or not 0 <= index < len(batch):
                continue
            request_id, data = batch[index][0], batch[index][1]
            if b'"status":"input_refused"' not in data:
                continue
            try:
                fields = _json.decode(data)
                if fields.get("status") != INPUT_REFUSED:
                    continue
                fields["status"] = "missing_required_data"
                downgraded = msgspec.json.encode(fields)
                self._queue.put_nowait((request_id, downgraded, None))
            except (queue.Full, msgspec.DecodeError, ValueError, AttributeError):
                continue
            if not self._downgrade_warned:
                self._downgrade_warned = True
                logger.warning(
                    "The console does not know the trace status input_refused (it is older "
                    "than this SDK): such traces are sent as missing_required_data"
                )
            again += 1
        if again:
            with self._lock:  # the copy settles for the original (not counted as queued)
                self._counts["downgraded"] += again
        return again

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
            "%s upload failed (%s); %d kept, next try in %.1f s (attempt %d)",
            self._WHAT.capitalize(),
            message,
            len(batch),
            delay,
            self._failures,
        )
        with self._lock:
            self._counts["retries"] += 1
        self._sleep(delay)

    def _sleep(self, delay: float) -> None:
        """Sleep, shortened by close() to what its deadline leaves (and waking each second
        for the spool's fsync)."""
        end = time.monotonic() + delay
        while True:
            now = time.monotonic()
            limit = end if self._deadline is None else min(end, self._deadline)
            if now >= limit:
                return
            if not self._closing.is_set():
                self._closing.wait(min(limit - now, 1.0))
                if self._spool is not None and self._spool_ok:
                    self._spool.sync()
            else:  # closing: keep the backoff, cut only at close()'s deadline
                time.sleep(limit - now)
                return

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _drop_remaining(self, why: str) -> None:
        """Count what is in memory as dropped; what came from the spool stays on disk."""
        count = 0
        while self._work:
            for item in self._work.popleft():
                if item[2] is None:
                    count += 1
                else:
                    self._spool.release(item[2])
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


class _OutcomeReporter(TraceReporter):
    """The outcomes of a :class:`TraceReporter` (its :meth:`~TraceReporter.report_outcome`):
    the same delivery — batches, retries, backoff, the auth and split rules, the spool (in
    ``<spool_dir>/outcomes``) — to ``POST outcomes``, closed and flushed with its reporter."""

    _WHAT = "outcome"
    _PATH = "outcomes"
    _ENVELOPE_OPEN = b'{"outcomes":['
    _DECODER = msgspec.json.Decoder(Outcome)
    _MAX_ITEMS = MAX_OUTCOMES_PER_BATCH
    _MAX_BYTES = MAX_OUTCOME_BATCH_BYTES

    def __init__(self, parent: TraceReporter):
        spool_dir = None
        if parent.spool_dir is not None:
            spool_dir = os.path.join(parent.spool_dir, self._PATH)
            with contextlib.suppress(OSError):  # an unusable disk degrades to memory
                os.makedirs(spool_dir, exist_ok=True)
        super().__init__(
            parent._base_url,
            parent._token,
            ingest_url=parent.ingest_url,
            max_queue=parent.max_queue,
            batch_size=min(parent.batch_size, self._MAX_ITEMS),
            flush_interval=parent.flush_interval,
            timeout=parent.timeout,
            backoff_initial=parent.backoff_initial,
            backoff_max=parent.backoff_max,
            auth_retry_interval=parent.auth_retry_interval,
            drop_on_auth_error=parent.drop_on_auth_error,
            validate=parent._validate,
            close_at_exit=False,  # its reporter closes it
            spool_dir=spool_dir,
            spool_max_bytes=max(4 * parent.spool_segment_bytes, parent.spool_max_bytes // 8),
            spool_segment_bytes=parent.spool_segment_bytes,
            spool_fsync_interval=parent.spool_fsync_interval,
        )

    def submit(self, request_id: str, data: bytes) -> bool:
        if self._closed:
            self._count("dropped")
            return False
        if self._thread is None:
            self._start()
        try:
            return self._enqueue(request_id, data)
        except Exception:
            logger.exception("An outcome could not be queued")
            self._count("rejected")
            return False

    def report_outcome(self, *args, **kwargs) -> bool:  # the outcomes' own: not nested
        raise TypeError("report outcomes through the TraceReporter")

    def flush(self, timeout: float = 5.0) -> bool:
        return self._flush_own(timeout)

    def close(self, timeout: float = 5.0) -> bool:
        return self._close_own(timeout)


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


def _agent(trace) -> str | None:
    if isinstance(trace, Trace):
        return trace.agent
    value = trace.get("agent") if isinstance(trace, Mapping) else None
    return value if isinstance(value, str) else None


def _reason_key(errors) -> str:
    """What makes two rejections the same mistake: their findings' paths (without positions:
    ``candidates[3].size`` is ``candidates[].size``) and codes."""
    if not isinstance(errors, list):
        return "?"
    return ";".join(
        f"{_POSITION.sub('[]', str(e.get('path', '')))}:{e.get('code', '')}"
        for e in errors[:5]
        if isinstance(e, dict)
    )


def _rejected_at_status(errors) -> bool:
    return isinstance(errors, list) and any(
        isinstance(e, dict) and e.get("path") == "status" and e.get("code") == "invalid_choice"
        for e in errors
    )


def _errors_text(errors) -> str:
    if not isinstance(errors, list):
        return "no details"
    parts = [
        f"{e.get('path', '')}: {e.get('message') or e.get('code', '')}"
        for e in errors[:5]
        if isinstance(e, dict)
    ]
    return "; ".join(parts) or "no details"
