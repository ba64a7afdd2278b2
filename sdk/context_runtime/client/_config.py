"""The config client: the agent's live configuration (RUNTIME_API §1), always readable.

A background thread polls ``GET config/{agent}`` with ``If-None-Match`` and refreshes at once
when the console's webhook says a release changed (:meth:`ConfigClient.handle_webhook`).
Every payload is checked with the same validator the console uses before it replaces the
last good copy; the last good copy is kept in memory and in a file (written atomically), so a
restart while the console is down starts from it, or from a bootstrap file shipped with the
runtime.

Reading is a memory read: :meth:`ConfigClient.snapshot` returns the current immutable
:class:`ConfigSnapshot` (one attribute read, no lock, no I/O). The background thread builds
a new snapshot and swaps the reference; a reader holds a consistent snapshot for as long as it
keeps it. Every snapshot says where its value came from (:class:`Resolution`, after
OpenFeature's resolution reasons), and the trace carries it
(:meth:`Resolution.trace_fields`).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import logging
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

import msgspec

import context_runtime.client._http as http
from context_runtime import __version__, _json, _names
from context_runtime.client._http import TransportError
from context_runtime.client._stream import StreamListener, stream_url
from context_runtime.documents import validate_document
from context_runtime.findings import Finding, blocking
from context_runtime.vocabulary import PROFILE, STRATEGY
from context_runtime.webhook import (
    DeliveryLog,
    WebhookRefused,
    WebhookResult,
    read_delivery,
)
from context_runtime.wire import RESOLUTIONS as WIRE_RESOLUTIONS
from context_runtime.wire import Rollout as WireRollout

logger = logging.getLogger("context_runtime.client")

# ---------------------------------------------------------------- resolution reasons

FRESH = "fresh"  # confirmed by the console at the last attempt, within ``stale_after``
CACHED = "cached"  # the disk copy of an earlier run; the console not reached since start
STALE = "stale"  # from the console, but the latest attempts failed (or it is too old)
BOOTSTRAP = "bootstrap"  # the bootstrap file; the console never reached
ERROR = "error"  # no good copy at all: nothing to serve, readers get defaults
# The console refuses the token (401/403): the last good copy is served, nothing new arrives
# until the token is fixed.
UNAUTHORIZED = "unauthorized"
REASONS = (FRESH, CACHED, STALE, BOOTSTRAP, ERROR, UNAUTHORIZED)
_AUTH_STATUSES = (401, 403)

# Health states (ConfigClient.health, on_health_change).
HEALTH_OK = "ok"
HEALTH_DEGRADED = "degraded"  # serving a fallback copy (stale, cached, bootstrap)
HEALTH_UNAUTHORIZED = "unauthorized"
HEALTH_NO_CONFIG = "no_config"

# How changes reach the client (``status()["transport"]``): the console's event stream, or
# polling alone (no stream advertised, refused, or not connected right now).
TRANSPORT_STREAM = "stream"
TRANSPORT_POLL = "poll"
TRANSPORT_STOPPED = "stopped"  # the last heartbeat of a process that stops
STREAM_HEADER = "X-Config-Stream"

# Where the served bytes came from (``ConfigSnapshot.source``).
SOURCE_CONSOLE = "console"
SOURCE_DISK = "disk"
SOURCE_BOOTSTRAP = "bootstrap"

# Findings the runtime side does not act on. The contract: "unknown fields are refused by the
# console's validator and ignored by runtimes". Sections and switches are judged without a
# manifest here, against the known list (docs/background.md § Context sections), so a section
# or switch the runtime declared itself (and the console checked against that manifest) must
# not make the runtime refuse it.
TOLERATED_CODES = frozenset({"unknown_field", "unknown_section", "unknown_switch"})

CACHE_FORMAT = "context_runtime.config_cache/1"


class Resolution(NamedTuple):
    """Where a read's value came from.

    ``reason`` is one of ``fresh``, ``cached``, ``stale``, ``bootstrap``, ``error``,
    ``unauthorized`` (the console refuses the token: the last good copy is served);
    ``age_seconds`` is the time since the console last confirmed the value (``None`` for a
    bootstrap file or no value); ``fallback`` is the contract's ``config_fallback``: true for
    everything but ``fresh``.
    """

    reason: str
    age_seconds: float | None
    fallback: bool

    def trace_fields(self) -> dict[str, Any]:
        """The trace fields: ``config_fallback`` (the contract's boolean) and the proposed
        optional ``config_resolution`` and ``config_age_seconds``. A reason the wire does not
        know goes as ``stale``: a copy the console no longer confirms."""
        age = None if self.age_seconds is None else round(self.age_seconds, 3)
        reason = self.reason if self.reason in WIRE_RESOLUTIONS else STALE
        return {
            "config_fallback": self.fallback,
            "config_resolution": reason,
            "config_age_seconds": age,
        }


# ---------------------------------------------------------------- read-only bodies

_READ_ONLY = (
    "configuration bodies are shared by every request and read-only; "
    "use copy.deepcopy(body) for a mutable copy"
)


def _refuse(self, *args, **kwargs):
    raise TypeError(_READ_ONLY)


class FrozenDict(dict):
    """A ``dict`` that refuses changes (still ``isinstance(x, dict)``, still JSON)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict:
        return dict(self)

    def __deepcopy__(self, memo) -> dict:
        return {key: copy.deepcopy(value, memo) for key, value in self.items()}

    def __reduce__(self):
        return (dict, (dict(self),))


class FrozenList(list):
    """A ``list`` that refuses changes (still ``isinstance(x, list)``, still JSON)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = reverse = sort = clear = _refuse

    def __copy__(self) -> list:
        return list(self)

    def __deepcopy__(self, memo) -> list:
        return [copy.deepcopy(value, memo) for value in self]

    def __reduce__(self):
        return (list, (list(self),))


def freeze(value):
    """A deep read-only copy of a JSON-like value."""
    if isinstance(value, dict):
        return FrozenDict({key: freeze(item) for key, item in value.items()})
    if isinstance(value, list):
        return FrozenList(freeze(item) for item in value)
    return value


# ---------------------------------------------------------------- snapshot


@dataclass(frozen=True, slots=True)
class Document:
    """One released document as the runtime serves it: its key (``"profile"`` or the strategy
    key), its version number and its read-only body."""

    key: str
    version: int
    body: Mapping[str, Any]


_NO_DOCUMENTS: Mapping[str, Document] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Rollout:
    """A staged rollout of one strategy key as the payload's ``rollouts`` carries it
    (docs/runtime-contract.md §1): ``id`` the rollout's public id, ``document`` the new
    version (the control version is the snapshot's ``strategy(key)``), ``share`` the share of
    units served the new one, ``unit`` (``task`` or ``principal``) and the plan ``step``.
    ``phase`` ``watch``: the paired watch after a completed rollout — ``document`` is the
    previous version, run as shadow on ``share`` of the units. Which arm a request is in:
    :func:`context_runtime.rollouts.serve`."""

    id: str
    document: Document
    share: float
    unit: str
    step: int
    phase: str = "rollout"

    @property
    def key(self) -> str:
        return self.document.key

    @property
    def version(self) -> int:
        return self.document.version


_NO_ROLLOUTS: Mapping[str, Rollout] = MappingProxyType({})


class ConfigSnapshot:
    """One consistent configuration of the agent, immutable.

    ``strategy(key)``, ``shadow(key)``, ``rollout(key)``, ``profile``, ``etag`` read the
    configuration;
    ``resolution`` says where it came from, with its age measured when it is read.
    A snapshot without configuration (``has_config`` false) answers ``None`` everywhere.
    """

    __slots__ = (
        "agent",
        "environment",
        "etag",
        "profile",
        "strategies",
        "shadows",
        "rollouts",
        "source",
        "_state",
        "_confirmed",
        "_stale_after",
        "_payload",
    )

    def __init__(
        self,
        *,
        agent: str,
        environment: str | None = None,
        etag: str | None = None,
        profile: Document | None = None,
        strategies: Mapping[str, Document] = _NO_DOCUMENTS,
        shadows: Mapping[str, Document] = _NO_DOCUMENTS,
        rollouts: Mapping[str, Rollout] = _NO_ROLLOUTS,
        source: str | None = None,
        state: str = ERROR,
        confirmed: float | None = None,
        stale_after: float = float("inf"),
        payload: Mapping | None = None,
    ):
        setter = object.__setattr__
        setter(self, "agent", agent)
        setter(self, "environment", environment)
        setter(self, "etag", etag)
        setter(self, "profile", profile)
        setter(self, "strategies", strategies)
        setter(self, "shadows", shadows)
        setter(self, "rollouts", rollouts)
        setter(self, "source", source)
        setter(self, "_state", state)
        setter(self, "_confirmed", confirmed)  # time.monotonic() of the last confirmation
        setter(self, "_stale_after", stale_after)
        setter(self, "_payload", payload)

    @classmethod
    def from_payload(cls, payload, *, agent: str | None = None) -> ConfigSnapshot:
        """The snapshot of a §1 payload held in hand (a test, a simulator, a runtime that
        fetches its configuration itself), read as fresh; checked as the config client checks
        it (``ValueError`` naming the findings when unusable). ``agent``: the payload's own
        when not given."""
        if agent is None:
            agent = payload.get("agent") if isinstance(payload, dict) else None
        snapshot, problems = build_snapshot(payload, agent=agent or "")
        if snapshot is None:
            raise ValueError(f"The configuration cannot be served: {_summary(problems)}")
        return snapshot

    def __setattr__(self, name, value):
        raise AttributeError("a ConfigSnapshot is immutable")

    __delattr__ = __setattr__

    def strategy(self, key: str) -> Document | None:
        return self.strategies.get(key)

    def shadow(self, key: str) -> Document | None:
        return self.shadows.get(key)

    def rollout(self, key: str) -> Rollout | None:
        """The staged rollout running for ``key`` (``None`` when none runs, or the payload's
        entry was malformed and ignored)."""
        return self.rollouts.get(key)

    @property
    def has_config(self) -> bool:
        return self.source is not None

    @property
    def documents(self) -> dict[str, int]:
        """The trace's ``documents`` field: profile and strategy versions served."""
        versions = {key: doc.version for key, doc in self.strategies.items()}
        if self.profile is not None:
            versions[PROFILE] = self.profile.version
        return versions

    @property
    def payload(self) -> Mapping | None:
        """The §1 payload this snapshot was built from (read-only)."""
        return self._payload

    @property
    def resolution(self) -> Resolution:
        state, confirmed = self._state, self._confirmed
        if confirmed is None:
            return Resolution(state, None, state != FRESH)
        age = max(0.0, time.monotonic() - confirmed)
        if state == FRESH:
            if age <= self._stale_after:
                return Resolution(FRESH, age, False)
            state = STALE
        return Resolution(state, age, True)

    def _with(self, *, state: str, confirmed: float | None) -> ConfigSnapshot:
        return ConfigSnapshot(
            agent=self.agent,
            environment=self.environment,
            etag=self.etag,
            profile=self.profile,
            strategies=self.strategies,
            shadows=self.shadows,
            rollouts=self.rollouts,
            source=self.source,
            state=state,
            confirmed=confirmed,
            stale_after=self._stale_after,
            payload=self._payload,
        )

    def __repr__(self) -> str:
        res = self.resolution
        return (
            f"<ConfigSnapshot {self.agent} etag={self.etag} source={self.source} "
            f"reason={res.reason} strategies={sorted(self.strategies)}>"
        )


# ---------------------------------------------------------------- payload validation


def validate_config_payload(
    payload,
    *,
    agent: str | None = None,
    environment: str | None = None,
    tolerated: Iterable[str] = TOLERATED_CODES,
) -> list[Finding]:
    """The findings that make a §1 payload unusable, paths from the payload's root
    (``strategies.after_sales.body.budget.max_input_tokens``).

    Checks the envelope (``agent``, ``environment``, ``etag``, ``profile``, ``strategies``,
    ``shadow``) and every body with :func:`~context_runtime.documents.validate_document`
    without a manifest; findings whose code is in ``tolerated`` and non-blocking ones (flags)
    are left out. Unknown envelope fields are ignored.
    """
    tolerated = frozenset(tolerated)
    if not isinstance(payload, dict):
        return [_finding("", "invalid_type", "The configuration must be a JSON object.")]
    # First, before anything walks it: a value nested this deep is no configuration, and the
    # checks and the freezing below recurse.
    if _json.deeper_than(payload, _json.MAX_DEPTH):
        return [
            _finding(
                "", "too_deep", f"The configuration nests deeper than {_json.MAX_DEPTH} levels."
            )
        ]
    problems: list[Finding] = []
    for field in ("agent", "etag"):
        value = payload.get(field)
        if not isinstance(value, str) or not value:
            problems.append(_finding(field, "required", f"{field} must be non-empty text."))
    if agent is not None and isinstance(payload.get("agent"), str) and payload["agent"] != agent:
        problems.append(
            _finding("agent", "wrong_agent", f"This is the configuration of {payload['agent']}.")
        )
    env = payload.get("environment")
    if env is not None and not isinstance(env, str):
        problems.append(_finding("environment", "invalid_type", "environment must be text."))
    elif environment is not None and env != environment:
        problems.append(
            _finding(
                "environment",
                "wrong_environment",
                f"This configuration is for environment {env}, not {environment}.",
            )
        )
    if "profile" not in payload:
        problems.append(_finding("profile", "required", "profile is required (null if none)."))
    elif payload["profile"] is not None:
        problems += _released("profile", payload["profile"], PROFILE, tolerated)
    for field, required in (("strategies", True), ("shadow", False)):
        if field not in payload:
            if required:
                problems.append(_finding(field, "required", f"{field} is required."))
            continue
        entries = payload[field]
        if not isinstance(entries, dict):
            problems.append(
                _finding(field, "invalid_type", f"{field} must map strategy keys to versions.")
            )
            continue
        for key, entry in entries.items():
            if not isinstance(key, str) or not key.strip():
                problems.append(_finding(field, "empty", f"{field} has an empty strategy key."))
                continue
            problems += _released(f"{field}.{key}", entry, STRATEGY, tolerated)
    return problems


def _released(path: str, entry, kind: str, tolerated: frozenset[str]) -> list[Finding]:
    if not isinstance(entry, dict):
        return [_finding(path, "invalid_type", f"{path} must be {{version, body}}.")]
    problems = []
    version = entry.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        problems.append(
            _finding(f"{path}.version", "invalid_type", f"{path}.version must be a whole number.")
        )
    if "body" not in entry:
        return [*problems, _finding(f"{path}.body", "required", f"{path}.body is required.")]
    for finding in blocking(validate_document(kind, entry["body"])):
        if finding.code in tolerated:
            continue
        where = f"{path}.body.{finding.path}" if finding.path else f"{path}.body"
        problems.append(Finding(where, finding.code, finding.message, finding.severity))
    return problems


def _finding(path: str, code: str, message: str) -> Finding:
    return Finding(path=path, code=code, message=message)


def _summary(findings: list[Finding], limit: int = 5) -> str:
    parts = [f"{f.path or '(root)'}: {f.message}" for f in findings[:limit]]
    more = len(findings) - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _served(payload: Mapping | None) -> tuple | None:
    """What a payload makes the runtime serve (its envelope's other fields aside)."""
    if payload is None:
        return None
    fields = ("environment", "profile", "strategies", "shadow", "rollouts")
    return tuple(payload.get(field) for field in fields)


def _documents(entries: Mapping) -> Mapping[str, Document]:
    return MappingProxyType(
        {
            key: Document(key=key, version=entry["version"], body=entry["body"])
            for key, entry in entries.items()
        }
    )


def _rollouts(
    entries, strategies: Mapping[str, Document], tolerated: frozenset[str], agent: str
) -> Mapping[str, Rollout]:
    """The payload's ``rollouts`` the runtime applies. An entry it cannot apply (a share out
    of [0, 1], an unknown unit, no body, a body the validator refuses, no live version to
    compare with) is left out with a warning: that key serves its live version, as an older
    console's payload would have it — one bad entry never costs the whole configuration."""
    if not entries:  # absent (an older console), null or {}
        return _NO_ROLLOUTS
    if not isinstance(entries, dict):
        logger.warning("Config of %s: rollouts is not a map; no rollout applied", agent)
        return _NO_ROLLOUTS
    applied = {}
    for key, entry in entries.items():
        problem = _rollout_problem(key, entry, strategies, tolerated)
        if problem is not None:
            logger.warning(
                "Config of %s: rollouts.%s is ignored (%s); serving the live version",
                agent,
                key,
                problem,
            )
            continue
        applied[key] = Rollout(
            id=entry["id"],
            document=Document(key=key, version=entry["version"], body=entry["body"]),
            share=float(entry["share"]),
            unit=entry.get("unit", "task"),
            step=entry.get("step", 0),
            phase=entry.get("phase", "rollout"),
        )
    return MappingProxyType(applied) if applied else _NO_ROLLOUTS


def _rollout_problem(
    key, entry, strategies: Mapping[str, Document], tolerated: frozenset[str]
) -> str | None:
    if not isinstance(key, str) or key not in strategies:
        return "no live version of this strategy to roll out from"
    try:
        msgspec.convert(entry, WireRollout)  # the wire's types and bounds, in one place
    except msgspec.ValidationError as error:
        return str(error)
    problems = _released(f"rollouts.{key}", entry, STRATEGY, tolerated)
    return _summary(problems) if problems else None


def build_snapshot(
    payload,
    *,
    agent: str,
    environment: str | None = None,
    tolerated: Iterable[str] = TOLERATED_CODES,
    source: str = SOURCE_CONSOLE,
    state: str = FRESH,
    confirmed: float | None = None,
    stale_after: float = float("inf"),
) -> tuple[ConfigSnapshot | None, list[Finding]]:
    """The snapshot a §1 payload makes (its bodies frozen), or ``None`` and the findings that
    make it unusable (:func:`validate_config_payload`). What the config client serves, and
    what :meth:`ConfigSnapshot.from_payload` gives a runtime or a test holding a payload."""
    tolerated = frozenset(tolerated)
    problems = validate_config_payload(
        payload, agent=agent, environment=environment, tolerated=tolerated
    )
    if problems:
        return None, problems
    payload = freeze(payload)  # bodies are shared by every reader: make them read-only
    profile = payload.get("profile")
    strategies = _documents(payload["strategies"])
    rollouts = _rollouts(payload.get("rollouts"), strategies, tolerated, agent)
    shadows = payload.get("shadow") or {}
    if any(key in shadows for key in rollouts):
        # A rollout runs its other arm as the shadow itself (the console sends no shadow
        # for such a key; a payload that does is not served twice).
        shadows = {key: entry for key, entry in shadows.items() if key not in rollouts}
    snapshot = ConfigSnapshot(
        agent=agent,
        environment=payload.get("environment") or environment,
        etag=payload["etag"],
        profile=(
            Document(key=PROFILE, version=profile["version"], body=profile["body"])
            if profile is not None
            else None
        ),
        strategies=strategies,
        shadows=_documents(shadows),
        rollouts=rollouts,
        source=source,
        state=state,
        confirmed=confirmed,
        stale_after=stale_after,
        payload=payload,
    )
    return snapshot, []


# ---------------------------------------------------------------- the client


class ConfigClient:
    """Keeps the live configuration of one agent (RUNTIME_API §1) in memory.

    >>> client = ConfigClient("https://console", token, "assistant_professional",
    ...                       cache_path="/var/lib/app/config.json")
    >>> client.start(wait=2.0)            # background polling; wait for a first answer
    >>> snap = client.snapshot()           # on the request path: a memory read
    >>> snap.strategy("after_sales_consultation"), snap.resolution.reason

    ``poll_interval`` seconds between polls while all is well; after failures the wait grows
    from ``backoff_initial`` to ``backoff_max`` (doubling, with jitter). ``timeout`` bounds
    every network call. A copy not confirmed for ``stale_after`` seconds (default: two poll
    intervals plus the timeout) reads as ``stale``. ``webhook_secret`` (one secret, or several
    during a rotation) enables :meth:`handle_webhook`. ``on_change(snapshot)`` is called in
    the background thread after a new configuration was taken.

    A 401 or 403 (a revoked or expired token) is loud: the last good copy is still served but
    reads as ``unauthorized``, every refused attempt is logged as an ERROR, the next attempts
    back off from ``auth_backoff_initial`` seconds (doubling, with jitter, up to
    ``backoff_max``), :meth:`status` and :meth:`health` say so, and ``on_health_change(health)``
    (called in the background thread whenever :meth:`health`'s ``state`` changes) lets the
    runtime alert or fail its readiness check.

    **Stream** (``stream=True``, the default): when the console advertises its config stream
    (the ``X-Config-Stream`` header of the config answer) or ``stream_url`` names one, a
    second thread holds that connection and the client refetches within a moment of every
    publish or rollback; it reconnects with jittered backoff and polling every
    ``poll_interval`` stays on as the safety net. The backoff doubles up to ``backoff_max``
    only while the console does not answer polls either; while it does, the wait is at most
    ``stream_reconnect_max`` (8 s), and a poll answered after an outage cuts a longer wait
    to that, so the stream is back within about 10 s of its server answering again. An
    event larger than ``max_response_bytes`` drops the stream (logged; polled meanwhile,
    the stream tried again after 5 minutes). ``status()["transport"]`` is ``stream`` while
    connected, else ``poll``.

    **Heartbeat** (``heartbeat_interval``, default 60 s; ``None`` turns it off): the client
    tells the console which configuration this process serves (``POST heartbeat``: its
    ``instance_id`` — default ``<host>:<pid>`` —, the SDK version, the transport, the ETag and
    document versions), every interval and at once after a change, so the releases page can
    say how many runtimes serve what is live.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        agent: str,
        *,
        environment: str | None = None,
        poll_interval: float = 30.0,
        timeout: float = 5.0,
        cache_path: str | os.PathLike | None = None,
        bootstrap_path: str | os.PathLike | None = None,
        webhook_secret: str | bytes | Iterable[str | bytes] | None = None,
        stale_after: float | None = None,
        backoff_initial: float = 1.0,
        backoff_max: float = 120.0,
        max_response_bytes: int = http.DEFAULT_MAX_RESPONSE_BYTES,
        tolerated_codes: Iterable[str] = TOLERATED_CODES,
        on_change: Callable[[ConfigSnapshot], None] | None = None,
        auth_backoff_initial: float = 10.0,
        on_health_change: Callable[[dict[str, Any]], None] | None = None,
        stream: bool = True,
        stream_url: str | None = None,
        stream_reconnect_max: float = 8.0,
        heartbeat_interval: float | None = 60.0,
        instance_id: str | None = None,
        runtime_name: str | None = None,
    ):
        if poll_interval <= 0 or timeout <= 0:
            raise ValueError("poll_interval and timeout must be positive")
        self.agent = agent
        self.environment = environment
        self._url = http.runtime_url(base_url, "config/" + http.quote_segment(agent))
        self._token = token
        self.poll_interval = poll_interval
        self.timeout = timeout
        self.stale_after = stale_after if stale_after is not None else 2 * poll_interval + timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = max(backoff_max, backoff_initial)
        self._max_response_bytes = max_response_bytes
        self._tolerated = frozenset(tolerated_codes)
        self._on_change = on_change
        self.auth_backoff_initial = auth_backoff_initial
        self._on_health_change = on_health_change
        self._health_state: str | None = None
        self._unauthorized = False
        self.cache_path = Path(cache_path) if cache_path is not None else None
        self.bootstrap_path = Path(bootstrap_path) if bootstrap_path is not None else None
        self._webhook_secrets = _secrets(webhook_secret)
        self._deliveries = DeliveryLog()

        self._snapshot = ConfigSnapshot(agent=agent, environment=environment)
        self._fetch_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._first_attempt = threading.Event()
        self._thread: threading.Thread | None = None
        self._wanted_etag: str | None = None  # announced by a webhook, not yet seen

        # Status, written by the background thread only (plain values; read without a lock).
        self._last_error: str | None = None
        self._last_error_at: float | None = None
        self._last_success_at: float | None = None
        self._consecutive_failures = 0
        self._polls = 0
        self._rejected_payloads = 0
        self._etag_conflicts = 0  # answers whose content changed under an unchanged ETag
        # The last rejected answer, by its bytes: the same ETag may come back with other content.
        self._rejected_digest: bytes | None = None
        self._rejected_reason = ""
        self._last_disk_error: str | None = None
        self._disk_confirmed_at = 0.0

        # The stream and the heartbeat.
        self._base_url = base_url
        self.instance_id = instance_id or http.default_instance_id()
        self.runtime_name = runtime_name
        self._explicit_stream = stream_url
        self._advertised_stream: str | None = None
        self._stream: StreamListener | None = None
        if stream:
            self._stream = StreamListener(
                url=self._stream_url,
                token=token,
                headers={"X-Runtime-Instance": self.instance_id},
                current_etag=lambda: self._snapshot.etag,
                on_etag=self._stream_said,
                on_state=self._transport_changed,
                connect_timeout=timeout,
                reconnect_max=max(backoff_max, 1.0),
                reachable_reconnect_max=stream_reconnect_max,
                console_reachable=self._console_reachable,
                max_event_bytes=max_response_bytes,
                name=f"context-runtime-stream-{agent}",
            )
        self.heartbeat_interval = heartbeat_interval
        self._heartbeat_url = http.runtime_url(base_url, "heartbeat")
        self._heartbeat_wake = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        self._heartbeats = 0
        self._heartbeat_error: str | None = None
        self._heartbeat_refused = False  # 404/405: an older console without the endpoint
        self._stream_events = 0

        self._load_initial()

    # ------------------------------------------------------------ reading (request path)

    @property
    def base_url(self) -> str:
        """The console this client reads (the reporter of the same runtime sends there)."""
        return self._base_url

    @property
    def token(self) -> str:
        """The runtime token this client reads with."""
        return self._token

    def snapshot(self) -> ConfigSnapshot:
        """The current configuration: a memory read, never blocks, never raises."""
        return self._snapshot

    @property
    def ready(self) -> bool:
        """True once a good copy exists (from the console, the disk copy or bootstrap)."""
        return self._snapshot.source is not None

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    def status(self) -> dict[str, Any]:
        """For readiness and health endpoints: ``ready``, ``reason``, ``age_seconds``,
        ``fallback``, ``source``, ``etag``, ``last_error`` and counters."""
        snap = self._snapshot
        res = snap.resolution
        return {
            "agent": self.agent,
            "environment": snap.environment or self.environment,
            "ready": snap.has_config,
            "reason": res.reason,
            "age_seconds": res.age_seconds,
            "fallback": res.fallback,
            "source": snap.source,
            "etag": snap.etag,
            "last_error": self._last_error,
            "last_error_at": self._last_error_at,
            "last_success_at": self._last_success_at,
            "consecutive_failures": self._consecutive_failures,
            "polls": self._polls,
            "rejected_payloads": self._rejected_payloads,
            "etag_conflicts": self._etag_conflicts,
            "last_disk_error": self._last_disk_error,
            "running": self._thread is not None and self._thread.is_alive(),
            "unauthorized": self._unauthorized,
            "transport": self.transport,
            "stream_url": self._stream.url if self._stream is not None else None,
            "stream_connects": self._stream.connects if self._stream is not None else 0,
            "stream_events": self._stream_events,
            "stream_error": self._stream.last_error if self._stream is not None else None,
            "instance_id": self.instance_id,
            "heartbeats": self._heartbeats,
            "heartbeat_error": self._heartbeat_error,
        }

    @property
    def transport(self) -> str:
        """``stream`` while the console's event stream is connected, else ``poll``."""
        stream = self._stream
        return TRANSPORT_STREAM if stream is not None and stream.connected else TRANSPORT_POLL

    def health(self) -> dict[str, Any]:
        """For a health or readiness endpoint: ``state`` is ``ok`` (fresh), ``degraded``
        (serving a stale, cached or bootstrap copy), ``unauthorized`` (the console refuses
        the token: fix it; the last good copy is served meanwhile) or ``no_config``;
        ``healthy`` is true only for ``ok``; with ``reason``, ``etag`` and ``last_error``."""
        snap = self._snapshot
        reason = snap.resolution.reason
        if self._unauthorized:
            state = HEALTH_UNAUTHORIZED
        elif not snap.has_config:
            state = HEALTH_NO_CONFIG
        elif reason == FRESH:
            state = HEALTH_OK
        else:
            state = HEALTH_DEGRADED
        return {
            "state": state,
            "healthy": state == HEALTH_OK,
            "reason": reason,
            "etag": snap.etag,
            "last_error": self._last_error if state != HEALTH_OK else None,
            "transport": self.transport,
        }

    def _health_changed(self) -> None:
        health = self.health()
        if health["state"] == self._health_state:
            return
        self._health_state = health["state"]
        if self._on_health_change is None:
            return
        try:
            self._on_health_change(health)
        except Exception:
            logger.exception("on_health_change callback failed")

    # ------------------------------------------------------------ lifecycle

    def start(self, wait: float | None = None) -> bool:
        """Start the background thread (idempotent). With ``wait``, wait up to that many
        seconds for the first answer of the console (or failure); returns :attr:`ready`."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name=f"context-runtime-config-{self.agent}", daemon=True
            )
            self._thread.start()
        if self._stream is not None:
            self._stream.start()
        if self.heartbeat_interval and (
            self._heartbeat_thread is None or not self._heartbeat_thread.is_alive()
        ):
            self._heartbeat_thread = threading.Thread(
                target=self._heartbeat_run,
                name=f"context-runtime-heartbeat-{self.agent}",
                daemon=True,
            )
            self._heartbeat_thread.start()
        if wait:
            self._first_attempt.wait(wait)
        return self.ready

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._wake.set()
        self._heartbeat_wake.set()
        if self._stream is not None:
            self._stream.stop(timeout)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._say_stopped(timeout)

    def _say_stopped(self, timeout: float) -> None:
        """One last heartbeat, `transport: stopped`, so the console counts this process out
        at once instead of after three missed heartbeats ("2 of 3 runtimes serve" during a
        rolling restart). Best effort and short: stopping must not wait on the console."""
        if not self.heartbeat_interval or self._heartbeats == 0 or self._heartbeat_refused:
            return
        with contextlib.suppress(Exception):
            self.send_heartbeat(timeout=min(self.timeout, timeout, 1.0), stopped=True)

    def __enter__(self) -> ConfigClient:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def request_refresh(self) -> None:
        """Ask the background thread to poll now (returns at once)."""
        self._wake.set()

    def refresh_now(self) -> bool:
        """Poll once in the calling thread (for scripts and tests; never on the request
        path). True if the console answered with a good configuration or a 304."""
        return self._refresh_once()

    # ------------------------------------------------------------ webhook

    def handle_webhook(self, headers: Mapping[str, str], body: bytes) -> WebhookResult:
        """Check a console webhook delivery (RUNTIME_API §4) and, for a ``release.changed``
        of this agent, wake the background thread to refresh. Returns at once with the HTTP
        status to answer (202 refresh scheduled, 200 nothing to do, 401/400 refused, 503
        when the client is not started, so the console retries);
        never raises and never touches the network."""
        try:
            delivery = read_delivery(self._webhook_secrets, headers, body)
        except WebhookRefused as refused:
            logger.warning("Webhook refused (%s): %s", refused.outcome, refused.message)
            return refused.result()
        except Exception:  # a webhook must never break the runtime's web server
            logger.exception("Webhook could not be read")
            return WebhookResult(400, "malformed", "The delivery could not be read.")
        if delivery.event != "release.changed":
            return WebhookResult(200, "ignored_event", f"{delivery.event} is not acted on.")
        if delivery.agent != self.agent:
            return WebhookResult(200, "ignored_agent", f"This runtime serves {self.agent}.")
        environment = self._snapshot.environment or self.environment
        if environment is not None and delivery.environment not in (None, environment):
            return WebhookResult(
                200, "ignored_environment", f"This runtime serves environment {environment}."
            )
        if not self._deliveries.first_time(delivery.delivery):
            return WebhookResult(200, "duplicate", "This delivery was handled already.")
        if delivery.etag is not None and delivery.etag == self._snapshot.etag:
            return WebhookResult(200, "already_current", "This configuration is served already.")
        if self._thread is None or not self._thread.is_alive():
            # Nobody would refresh: say so, and the console retries the delivery later.
            self._deliveries.forget(delivery.delivery)
            return WebhookResult(503, "not_running", "The config client is not started.")
        self._wanted_etag = delivery.etag
        self._wake.set()
        logger.info(
            "Webhook %s: %s %s → refreshing", delivery.delivery, delivery.action, delivery.etag
        )
        return WebhookResult(202, "refresh_scheduled", "The configuration is being refreshed.")

    # ------------------------------------------------------------ stream and heartbeat

    def _stream_url(self) -> str | None:
        if self._explicit_stream:
            return http.runtime_url(
                self._explicit_stream, "stream/" + http.quote_segment(self.agent)
            )
        return stream_url(self._base_url, self._advertised_stream, self.agent)

    def _console_reachable(self) -> bool:
        """The last poll was answered (so a stream that fails now is worth trying again
        soon: see ``stream_reconnect_max``)."""
        return self._last_success_at is not None and not self._consecutive_failures

    def _note_advertised(self, value: str | None) -> None:
        if value != self._advertised_stream:
            self._advertised_stream = value
            if self._stream is not None and value:
                self._stream.poke()

    def _stream_said(self, etag: str) -> None:
        """A ``config`` event: refetch unless this ETag is served already."""
        self._stream_events += 1
        if etag != self._snapshot.etag:
            self._wanted_etag = etag
            self._wake.set()

    def _transport_changed(self) -> None:
        logger.info("Config of %s: transport %s", self.agent, self.transport)
        self._heartbeat_wake.set()

    def heartbeat_body(self, *, stopped: bool = False) -> dict[str, Any]:
        """What :meth:`send_heartbeat` sends (RUNTIME_API §2a)."""
        snap = self._snapshot
        body: dict[str, Any] = {
            "instance": self.instance_id,
            "sdk_version": __version__,
            "transport": TRANSPORT_STOPPED if stopped else self.transport,
            "agents": {
                self.agent: {
                    "etag": snap.etag or "",
                    "documents": dict(snap.documents),
                    "resolution": snap.resolution.reason,
                }
            },
        }
        # Its own name, else the one the runtime gave its manifest report with this token.
        name = self.runtime_name or _names.reported(self._token)
        if name:
            body["runtime"] = name
        return body

    def send_heartbeat(self, *, timeout: float | None = None, stopped: bool = False) -> bool:
        """Tell the console what this process serves, once (the background thread does it
        every ``heartbeat_interval``; :meth:`stop` sends a last one with ``stopped``). True
        when the console recorded it."""
        try:
            response = http.request(
                "POST",
                self._heartbeat_url,
                token=self._token,
                timeout=self.timeout if timeout is None else timeout,
                body=msgspec.json.encode(self.heartbeat_body(stopped=stopped)),
            )
        except TransportError as error:
            self._heartbeat_error = str(error)
            return False
        # 404/405: an older console without the endpoint (or the agent unknown there).
        self._heartbeat_refused = response.status in (404, 405)
        if not response.ok:
            self._heartbeat_error = response.error_summary()
            return False
        self._heartbeats += 1
        self._heartbeat_error = None
        return True

    def _heartbeat_run(self) -> None:
        failures = 0
        self._first_attempt.wait(self.timeout * 2)
        while not self._stop.is_set():
            self._heartbeat_wake.clear()
            try:
                ok = self.send_heartbeat()
            except Exception as error:  # the heartbeat must never break the runtime
                logger.exception("Heartbeat failed unexpectedly")
                self._heartbeat_error = f"unexpected {type(error).__name__}: {error}"
                ok = False
            failures = 0 if ok else failures + 1
            delay = self.heartbeat_interval or 60.0
            if self._heartbeat_refused:  # an older console: ask again rarely
                delay = max(delay, 300.0)
            elif not ok:
                delay = min(delay, http.backoff_delay(failures, self.backoff_initial, delay))
            self._heartbeat_wake.wait(delay * (random.uniform(0.9, 1.1) if ok else 1.0))

    # ------------------------------------------------------------ background thread

    def _run(self) -> None:
        quick_rechecks = 0
        while not self._stop.is_set():
            self._wake.clear()
            wanted = self._wanted_etag
            try:
                ok = self._refresh_once()
            except Exception as error:  # the poller must survive anything
                logger.exception("Config refresh failed unexpectedly")
                self._note_failure(f"unexpected {type(error).__name__}: {error}")
                ok = False
            self._first_attempt.set()
            self._health_changed()
            if ok:
                delay = self.poll_interval * random.uniform(0.9, 1.1)
                # A webhook announced an etag the console did not serve yet (its caches may
                # lag by a moment): look again soon, a few times.
                # 0.1, 0.2, 0.4, 0.8, 1.6 s: the stream announces a change at commit, a moment
                # before the console's caches serve it.
                if wanted is not None and self._snapshot.etag != wanted and quick_rechecks < 5:
                    quick_rechecks += 1
                    delay = min(delay, 0.1 * 2 ** (quick_rechecks - 1))
                else:
                    quick_rechecks = 0
                    if self._wanted_etag == wanted:
                        self._wanted_etag = None
            else:
                initial = self.backoff_initial
                if self._unauthorized:  # a token is not fixed in a second: no hot retries
                    initial = max(initial, self.auth_backoff_initial)
                delay = http.backoff_delay(self._consecutive_failures, initial, self.backoff_max)
            self._wake.wait(delay)

    def _refresh_once(self) -> bool:
        with self._fetch_lock:
            self._polls += 1
            current = self._snapshot
            headers = {"If-None-Match": current.etag} if current.etag else {}
            try:
                response = http.request(
                    "GET",
                    self._url,
                    token=self._token,
                    timeout=self.timeout,
                    headers=headers,
                    max_response_bytes=self._max_response_bytes,
                )
            except TransportError as error:
                self._note_failure(str(error))
                return False
            if response.status in (200, 304):
                self._note_advertised(response.header(STREAM_HEADER))
            if response.status == 304 and current.has_config:
                self._confirm(current)
                return True
            if response.status in _AUTH_STATUSES:
                self._note_unauthorized(response.error_summary())
                return False
            if response.status != 200:
                self._note_failure(response.error_summary())
                return False
            return self._take(response)

    def _take(self, response: http.Response) -> bool:
        try:
            payload = _json.decode(response.body)
        except (msgspec.DecodeError, ValueError) as error:
            self._note_failure(f"the console answered with invalid JSON: {error}")
            return False
        etag = payload.get("etag") if isinstance(payload, dict) else None
        digest = hashlib.sha256(response.body).digest()
        if digest == self._rejected_digest:
            self._note_failure(f"configuration {etag} was rejected: {self._rejected_reason}")
            return False
        try:
            snapshot, problems = self._build(payload, SOURCE_CONSOLE, FRESH, time.monotonic())
        except Exception as error:  # a shape the checks did not foresee is a bad payload too
            logger.exception("Config of %s: the payload broke the checks", self.agent)
            snapshot = None
            problems = [_finding("", "unreadable", f"{type(error).__name__}: {error}")]
        if snapshot is None:
            self._rejected_payloads += 1
            self._rejected_digest = digest
            self._rejected_reason = _summary(problems)
            self._note_failure(f"rejected configuration {etag}: {self._rejected_reason}")
            return False
        header_etag = response.header("ETag")
        if header_etag and header_etag not in (snapshot.etag, f"W/{snapshot.etag}"):
            logger.warning(
                "Config of %s: ETag header %s differs from the payload's etag %s; using the "
                "payload's",
                self.agent,
                header_etag,
                snapshot.etag,
            )
        previous = self._snapshot
        content_changed = _served(previous.payload) != _served(payload)
        if previous.etag == snapshot.etag and content_changed:
            # The console's ETag changes with every release change, so this is never a real
            # change: a console or a cache in front of it is inconsistent. The console's
            # latest answer is served (a refusal would be "confirmed" by the next 304 while
            # serving what the console no longer serves), on_change fires, and it is counted.
            self._etag_conflicts += 1
            logger.warning(
                "Config of %s: the console served other content under the same ETag %s "
                "(was %s); serving the new content (%s)",
                self.agent,
                snapshot.etag,
                previous.source,
                _versions(snapshot),
            )
        self._snapshot = snapshot
        self._ready.set()
        self._note_success()
        self._write_cache(payload)
        if previous.etag != snapshot.etag or content_changed:
            logger.info(
                "Config of %s: now %s (was %s, %s)",
                self.agent,
                snapshot.etag,
                previous.etag,
                _versions(snapshot),
            )
            self._changed(snapshot)
            self._heartbeat_wake.set()  # tell the console at once what this process serves
        return True

    def _confirm(self, current: ConfigSnapshot) -> None:
        now = time.monotonic()
        self._snapshot = current._with(state=FRESH, confirmed=now)
        self._note_success()
        # Keep the disk copy's confirmation time roughly current, so a restart knows its age,
        # without rewriting the file on every poll.
        if self.cache_path is not None and time.time() - self._disk_confirmed_at > max(
            60.0, self.poll_interval
        ):
            payload = current.payload
            if payload is not None:
                self._write_cache(payload)

    def _note_success(self) -> None:
        if self._consecutive_failures:
            logger.info(
                "Config of %s: console reachable again after %d failed attempt(s)",
                self.agent,
                self._consecutive_failures,
            )
        self._consecutive_failures = 0
        self._last_success_at = time.time()
        if self._stream is not None:
            self._stream.console_answered()
        if self._unauthorized:
            self._unauthorized = False
            logger.warning("Config of %s: the console takes the token again", self.agent)

    def _note_unauthorized(self, message: str) -> None:
        """401/403: keep serving the last good copy, read as ``unauthorized``, loudly."""
        self._unauthorized = True
        self._consecutive_failures += 1
        self._last_error = message
        self._last_error_at = time.time()
        current = self._snapshot
        if current._state != UNAUTHORIZED:
            self._snapshot = current._with(state=UNAUTHORIZED, confirmed=current._confirmed)
        logger.error(
            "Config of %s: the console refuses the runtime token (%s); serving the last good "
            "copy %s until the token is fixed (attempt %d)",
            self.agent,
            message,
            f"{current.etag} ({current.source})" if current.has_config else "(none)",
            self._consecutive_failures,
        )

    def _note_failure(self, message: str) -> None:
        self._consecutive_failures += 1
        repeated = message == self._last_error
        self._last_error = message
        self._last_error_at = time.time()
        current = self._snapshot
        if current._state == FRESH:
            self._snapshot = current._with(state=STALE, confirmed=current._confirmed)
        level = logging.DEBUG if repeated and self._consecutive_failures > 1 else logging.WARNING
        logger.log(
            level,
            "Config of %s: %s; serving %s (attempt %d)",
            self.agent,
            message,
            f"{current.etag} ({current.source})" if current.has_config else "nothing",
            self._consecutive_failures,
        )

    def _changed(self, snapshot: ConfigSnapshot) -> None:
        if self._on_change is None:
            return
        try:
            self._on_change(snapshot)
        except Exception:
            logger.exception("on_change callback failed")

    def _build(
        self, payload, source: str, state: str, confirmed: float | None
    ) -> tuple[ConfigSnapshot | None, list[Finding]]:
        return build_snapshot(
            payload,
            agent=self.agent,
            environment=self.environment,
            tolerated=self._tolerated,
            source=source,
            state=state,
            confirmed=confirmed,
            stale_after=self.stale_after,
        )

    # ------------------------------------------------------------ disk copy and bootstrap

    def _load_initial(self) -> None:
        for path, source in ((self.cache_path, SOURCE_DISK), (self.bootstrap_path, BOOTSTRAP)):
            if path is None:
                continue
            snapshot = self._load_file(path, source)
            if snapshot is not None:
                self._snapshot = snapshot
                self._ready.set()
                logger.info(
                    "Config of %s: starting from %s %s (%s)",
                    self.agent,
                    "the disk copy" if source == SOURCE_DISK else "the bootstrap file",
                    snapshot.etag,
                    path,
                )
                return

    def _load_file(self, path: Path, source: str) -> ConfigSnapshot | None:
        try:
            data = _json.decode(path.read_bytes())
        except FileNotFoundError:
            if source == BOOTSTRAP:
                logger.warning("Config bootstrap file %s does not exist", path)
            return None
        except (OSError, msgspec.DecodeError, ValueError) as error:
            logger.warning("Config file %s cannot be read: %s", path, error)
            return None
        confirmed_wall = None
        if isinstance(data, dict) and data.get("format") == CACHE_FORMAT:
            confirmed_wall = data.get("confirmed_at")
            data = data.get("payload")
        state, confirmed = (CACHED if source == SOURCE_DISK else BOOTSTRAP), None
        if source == SOURCE_DISK and isinstance(confirmed_wall, int | float):
            # Age survives the restart: seconds since the console last confirmed this copy.
            confirmed = time.monotonic() - max(0.0, time.time() - confirmed_wall)
        snapshot, problems = self._build(data, source, state, confirmed)
        if snapshot is None:
            logger.warning("Config file %s is not usable: %s", path, _summary(problems))
        return snapshot

    def _write_cache(self, payload) -> None:
        if self.cache_path is None:
            return
        now = time.time()
        document = {"format": CACHE_FORMAT, "agent": self.agent, "confirmed_at": now}
        document["payload"] = payload
        try:
            write_atomically(self.cache_path, msgspec.json.encode(document))
        except (OSError, TypeError, ValueError) as error:
            self._last_disk_error = f"{type(error).__name__}: {error}"
            logger.warning("Config of %s: cannot write %s: %s", self.agent, self.cache_path, error)
            return
        self._disk_confirmed_at = now
        self._last_disk_error = None


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader (or a crash) sees the old file or the new
    one, never a half: a temporary file in the same directory, fsync, rename, fsync the
    directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _secrets(secret) -> tuple[bytes, ...]:
    if secret is None:
        return ()
    if isinstance(secret, str | bytes):
        secret = [secret]
    return tuple(s.encode() if isinstance(s, str) else bytes(s) for s in secret if s)


def _versions(snapshot: ConfigSnapshot) -> str:
    return ", ".join(f"{key} v{version}" for key, version in snapshot.documents.items()) or "empty"
