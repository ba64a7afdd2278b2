"""The manifest reporter (RUNTIME_API §2): declare at start what the runtime implements, from
what it registered in code.

A provider registered means its source key is declared, a tool registered means the tool is
declared, and so on, so the manifest cannot claim what the code does not have::

    registry = Registry()

    @registry.provider("order_delivery")
    def fetch_order(request): ...

    registry.register_tool("lookup_order", lookup_order)
    registry.register_handler("general_policy_only", general_policy_only)
    registry.register_section("high_level_profile", "user_context")
    registry.register_switch("temporalAnchor.enabled")

    report_manifest(CONSOLE_URL, TOKEN, registry, "bank-assistant 2026.11.3")

:func:`report_manifest` retries transient failures and, unless asked, never raises into the
runtime's start-up: a runtime that cannot reach the console still starts (and the console
refuses publishes to an environment whose runtime never reported, so nothing unsupported can
go live meanwhile).

In a long-running runtime use :class:`ManifestReporter` (or
:func:`report_manifest_in_background`, which starts one): a background thread that retries
until the manifest lands (backoff with jitter, capped at ``backoff_max``; a refused token
waits longer; a manifest the console refuses — invalid, or 409 ``manifest_breaks_live``
because this runtime could not serve what is live in the token's environment — is logged as
an ERROR with each finding and waits for the registry to change) and sends it again
whenever the registry changes::

    reporter = ManifestReporter(CONSOLE_URL, TOKEN, registry, "bank-assistant 2026.11.3")
    reporter.start()
    reporter.status()   # {"reported": True, "version": 4, ...}
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from context_runtime import _json, _names
from context_runtime.client import _http as http
from context_runtime.client._http import TransportError
from context_runtime.findings import blocking
from context_runtime.manifest import FEATURES, Manifest, validate_manifest
from context_runtime.vocabulary import BLOCKS, KNOWN_SENSITIVE_SECTIONS

__all__ = [
    "ManifestReportError",
    "ManifestReporter",
    "ManifestResult",
    "Registry",
    "report_manifest",
    "report_manifest_in_background",
]

logger = logging.getLogger("context_runtime.manifest")


class Registry:
    """What this runtime implements, registered by the code that implements it.

    Each ``register_*`` returns what it was given, so it also works as a decorator
    (``@registry.provider("task_state")``). Registering the same name twice with the same
    function is harmless; with a different one it is a mistake and raises ``ValueError``.

    ``features``: what the runtime declares beyond serving the live configuration; by default
    what this SDK implements (:data:`~context_runtime.manifest.FEATURES`: ``shadow`` and
    ``split``, since ``ContextAssembly`` runs the payload's shadow versions and applies its
    rollouts). A runtime that selects context without the SDK's assembly passes what it
    really does (``features=()``: none; ``("shadow", "split")`` when it calls
    :func:`context_runtime.rollouts.serve` and runs its shadow), so the console refuses a
    shadow release or a staged rollout it would not run.
    """

    def __init__(self, *, features: tuple[str, ...] | list[str] = FEATURES) -> None:
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self.revision = 0  # grows with every change of what the manifest declares
        self._providers: dict[str, Callable | None] = {}
        self._tools: dict[str, Callable | None] = {}
        self._handlers: dict[str, Callable | None] = {}
        self._sections: dict[str, tuple[str, bool]] = {}
        self._switches: dict[str, None] = {}
        for feature in features:
            _check_name(feature, "feature name")
        self.features: tuple[str, ...] = tuple(sorted(set(features)))

    # ------------------------------------------------------------ registering

    def register_provider(self, source_key: str, fn: Callable | None = None):
        """Declare the source ``source_key``, fetched by ``fn``."""
        return self._register(self._providers, "provider", source_key, fn)

    def register_tool(self, name: str, fn: Callable | None = None):
        return self._register(self._tools, "tool", name, fn)

    def register_handler(self, name: str, fn: Callable | None = None):
        """Declare the ``on_missing`` handler ``name``."""
        return self._register(self._handlers, "handler", name, fn)

    def provider(self, source_key: str):
        """Decorator form of :meth:`register_provider`."""
        return lambda fn: self.register_provider(source_key, fn)

    def tool(self, name: str):
        return lambda fn: self.register_tool(name, fn)

    def handler(self, name: str):
        return lambda fn: self.register_handler(name, fn)

    def register_section(self, key: str, block: str, sensitive: bool | None = None) -> None:
        """Declare a context section of ``block`` (``user_context`` or ``query_context``).
        ``sensitive`` defaults to the known sensitive sections (docs/background.md § Context
        sections); a known sensitive section stays sensitive (the console never lets a manifest
        declassify one)."""
        _check_name(key, "section key")
        if block not in BLOCKS:
            raise ValueError(f"block must be one of {', '.join(BLOCKS)}, not {block!r}")
        known = key in KNOWN_SENSITIVE_SECTIONS
        if sensitive is None:
            sensitive = known
        elif not isinstance(sensitive, bool):
            raise ValueError(f"sensitive must be True or False, not {sensitive!r}")
        elif known and not sensitive:
            logger.warning("Section %s is sensitive by document 000; declared sensitive", key)
            sensitive = True
        with self._lock:
            existing = self._sections.get(key)
            if existing is not None and existing != (block, sensitive):
                raise ValueError(
                    f"section {key} is already registered as {existing[0]}"
                    f"{' (sensitive)' if existing[1] else ''}"
                )
            changed = existing is None
            self._sections[key] = (block, sensitive)
        if changed:
            self._changed()

    def register_switch(self, name: str) -> None:
        """Declare a pipeline switch the runtime reads."""
        _check_name(name, "switch name")
        with self._lock:
            changed = name not in self._switches
            self._switches[name] = None
        if changed:
            self._changed()

    def _register(self, table: dict, what: str, name: str, fn: Callable | None):
        _check_name(name, f"{what} name")
        if fn is not None and not callable(fn):
            raise TypeError(f"the {what} {name} must be callable, not {fn!r}")
        with self._lock:
            existing = table.get(name)
            if existing is not None and fn is not None and existing is not fn:
                raise ValueError(f"{what} {name} is already registered to {existing!r}")
            changed = name not in table
            table[name] = fn if fn is not None else existing
        if changed:
            self._changed()
        return fn

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every change of what the manifest declares (a new
        provider, tool, handler, section or switch), in the registering thread."""
        with self._lock:
            self._listeners.append(listener)

    def _changed(self) -> None:
        with self._lock:
            self.revision += 1
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener()
            except Exception:
                logger.exception("A registry listener failed")

    # ------------------------------------------------------------ reading

    def get_provider(self, source_key: str) -> Callable | None:
        return self._providers.get(source_key)

    def get_tool(self, name: str) -> Callable | None:
        return self._tools.get(name)

    def get_handler(self, name: str) -> Callable | None:
        return self._handlers.get(name)

    def manifest_body(self, runtime: str) -> dict[str, Any]:
        """The §2 body, names sorted (the console ignores order), checked with
        :func:`~context_runtime.manifest.validate_manifest`; ``ValueError`` if it fails."""
        with self._lock:
            body = {
                "runtime": runtime,
                "providers": sorted(self._providers),
                "tools": sorted(self._tools),
                "handlers": sorted(self._handlers),
                "sections": [
                    {"key": key, "block": block, "sensitive": sensitive}
                    for key, (block, sensitive) in sorted(self._sections.items())
                ],
                "switches": sorted(self._switches),
            }
            if self.features:
                body["features"] = list(self.features)
        problems = blocking(validate_manifest(body))
        if problems:
            raise ValueError("Invalid manifest: " + " ".join(p.message for p in problems))
        return body

    def manifest(self, runtime: str = "") -> Manifest:
        """The same as a :class:`~context_runtime.manifest.Manifest`, e.g. to check strategy
        bodies against this runtime with ``validate_document``."""
        return Manifest.from_dict(self.manifest_body(runtime), name=runtime)


def _check_name(name, what: str) -> None:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a {what} must be non-empty text, not {name!r}")


# ---------------------------------------------------------------- reporting


@dataclass(frozen=True)
class ManifestResult:
    """The console's answer: the manifest ``version`` and the live releases that no longer
    validate against it (``warnings``, as the console sends them)."""

    version: int | None
    warnings: list[dict] = field(default_factory=list)


class ManifestReportError(Exception):
    def __init__(self, message: str, status: int | None = None, code: str = ""):
        super().__init__(message)
        self.status, self.code = status, code


def report_manifest(
    base_url: str,
    token: str,
    registry: Registry | dict,
    runtime_name: str,
    *,
    timeout: float = 5.0,
    attempts: int = 5,
    backoff_initial: float = 0.5,
    backoff_max: float = 10.0,
    raise_on_failure: bool = False,
    instance_id: str | None = None,
) -> ManifestResult | None:
    """``PUT /api/v1/runtime/manifest`` with what ``registry`` holds.

    Connection errors, timeouts, 408, 429 and 5xx are retried up to ``attempts`` tries in all
    with backoff and jitter; a refused manifest (400, or 409 ``manifest_breaks_live``: this
    runtime could not serve what is live in the token's environment) or token (401, 403) is
    not. Returns the console's answer, or ``None`` after logging why it failed (a refusal at
    ERROR with each finding); with ``raise_on_failure`` raises :class:`ManifestReportError`
    (or ``ValueError`` for an invalid registry) instead. Every warning the console returns is
    logged. ``instance_id`` (default ``<host>:<pid>``, as ``ConfigClient``'s) tells the console
    which process reported, so its pages can say so.
    """
    try:
        if isinstance(registry, Registry):
            body = registry.manifest_body(runtime_name)
        else:
            body = {"runtime": runtime_name, **registry}
            problems = blocking(validate_manifest(body))
            if problems:
                raise ValueError("Invalid manifest: " + " ".join(p.message for p in problems))
    except ValueError as error:
        logger.error("Manifest not reported: %s", error)
        if raise_on_failure:
            raise
        return None
    _names.remember(token, runtime_name)  # the heartbeat's name (ConfigClient.runtime_name)
    data = msgspec.json.encode(body)
    url = http.runtime_url(base_url, "manifest")
    headers = _instance_header(instance_id)
    error: ManifestReportError | None = None
    for attempt in range(1, max(1, attempts) + 1):
        try:
            response = http.request(
                "PUT", url, token=token, timeout=timeout, body=data, headers=headers
            )
        except TransportError as failure:
            error = ManifestReportError(str(failure))
        else:
            if response.ok:
                return _accepted(response, body)
            code, _ = http.error_of(response.body)
            error = ManifestReportError(_refusal_text(response), response.status, code)
            if not (response.status in (408, 429) or response.status >= 500):
                break  # the console will not change its mind on a retry
        if attempt < attempts:
            delay = http.backoff_delay(attempt, backoff_initial, backoff_max)
            logger.warning(
                "Manifest not reported yet (%s); try %d of %d in %.1f s",
                error,
                attempt + 1,
                attempts,
                delay,
            )
            time.sleep(delay)
    logger.error("Manifest of %s not reported: %s", runtime_name, error)
    if raise_on_failure and error is not None:
        raise error
    return None


def report_manifest_in_background(
    base_url: str, token: str, registry: Registry, runtime_name: str, **options
) -> ManifestReporter:
    """Start a :class:`ManifestReporter` (start-up does not wait for it) and return it;
    ``join(timeout)`` waits for its first outcome. ``attempts`` (optional) gives up after
    that many tries; by default it retries until the manifest lands."""
    options.pop("raise_on_failure", None)
    return ManifestReporter(base_url, token, registry, runtime_name, **options).start()


class ManifestReporter:
    """Keeps the console's manifest of this runtime current, in a daemon thread.

    Sends ``registry``'s manifest at :meth:`start` and again ``debounce`` seconds after the
    registry last changed (:meth:`Registry.add_listener`; an unchanged body is not sent
    again). A failed try is retried until it lands: connection errors, timeouts, 408, 429
    and 5xx after ``backoff_initial`` doubling up to ``backoff_max`` seconds with jitter (or
    the console's ``Retry-After``); 401/403 likewise from ``auth_backoff_initial``, logged as
    an ERROR each time (the token may be fixed while the runtime runs); a manifest the console
    refuses (400, or 409 ``manifest_breaks_live``) is logged as an ERROR with each finding
    and waits for the registry to change — never retried as it is. ``attempts`` bounds the
    tries per change (``None``: no bound). ``instance_id``: as :func:`report_manifest`.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        registry: Registry,
        runtime_name: str,
        *,
        timeout: float = 5.0,
        backoff_initial: float = 1.0,
        backoff_max: float = 300.0,
        auth_backoff_initial: float = 60.0,
        debounce: float = 0.5,
        attempts: int | None = None,
        instance_id: str | None = None,
    ):
        if not isinstance(registry, Registry):
            raise TypeError("registry must be a context_runtime.manifest_report.Registry")
        self._url = http.runtime_url(base_url, "manifest")
        self._token = token
        self.registry = registry
        self.runtime_name = runtime_name
        _names.remember(token, runtime_name)  # the heartbeat's name (ConfigClient.runtime_name)
        self.timeout = timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = max(backoff_max, backoff_initial)
        self.auth_backoff_initial = auth_backoff_initial
        self.debounce = debounce
        self.attempts = attempts
        self._headers = _instance_header(instance_id)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._outcome = threading.Event()  # the current body landed or was given up on
        self._thread: threading.Thread | None = None
        self._sent_body: dict | None = None
        self.result: ManifestResult | None = None
        self._failures = 0
        self._tries = 0
        self._last_error: str | None = None
        self._last_success_at: float | None = None
        self._refused = False
        self._unauthorized = False
        registry.add_listener(self._registry_changed)

    def start(self) -> ManifestReporter:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._wake.set()
            self._thread = threading.Thread(
                target=self._run, name="context-runtime-manifest", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the current manifest landed (or was refused or given up on)."""
        return self._outcome.wait(timeout)

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def status(self) -> dict[str, Any]:
        """``reported`` (the console holds the registry's current manifest), ``version``,
        ``pending`` (a change not yet landed), ``unauthorized``, ``refused``, ``failures``
        in a row, ``last_error``, ``last_success_at``."""
        current = self._sent_body is not None and self._body_or_none() == self._sent_body
        return {
            "reported": current,
            "version": self.result.version if self.result is not None else None,
            "pending": not current,
            "unauthorized": self._unauthorized,
            "refused": self._refused,
            "failures": self._failures,
            "last_error": self._last_error,
            "last_success_at": self._last_success_at,
            "running": self.is_alive(),
        }

    def _registry_changed(self) -> None:
        self._outcome.clear()
        self._wake.set()

    def _body_or_none(self) -> dict | None:
        try:
            return self.registry.manifest_body(self.runtime_name)
        except ValueError:
            return None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            if self._stop.is_set():
                return
            # Registrations come in bursts at start-up: send once they settle.
            while self._wake.is_set() and not self._stop.is_set():
                self._wake.clear()
                self._stop.wait(self.debounce)
            try:
                self._send_until_landed()
            except Exception:  # the thread must survive anything
                logger.exception("The manifest reporter failed unexpectedly")
                self._wake.set()
                self._stop.wait(self.backoff_max)

    def _send_until_landed(self) -> None:
        self._tries = 0
        while not self._stop.is_set():
            try:
                body = self.registry.manifest_body(self.runtime_name)
            except ValueError as error:
                self._give_up(f"the registry does not make a valid manifest: {error}")
                return
            if body == self._sent_body:
                self._outcome.set()
                return
            delay = self._try(body)
            if delay is None:
                return
            self._tries += 1
            if self.attempts is not None and self._tries >= self.attempts:
                self._give_up(f"{self._tries} tries failed; last: {self._last_error}")
                return
            # A registry change meanwhile restarts the wait with the new body.
            if self._wake.wait(delay) or self._stop.is_set():
                return

    def _try(self, body: dict) -> float | None:
        """One PUT; ``None`` when there is nothing more to do for this body, else the delay
        before the next try."""
        data = msgspec.json.encode(body)
        try:
            response = http.request(
                "PUT",
                self._url,
                token=self._token,
                timeout=self.timeout,
                body=data,
                headers=self._headers,
            )
        except TransportError as failure:
            return self._failed(str(failure))
        if response.ok:
            self.result = _accepted(response, body)
            self._sent_body = body
            self._failures = 0
            self._unauthorized = self._refused = False
            self._last_error = None
            self._last_success_at = time.time()
            self._outcome.set()
            return None
        summary = response.error_summary()
        if response.status in (401, 403):
            self._unauthorized = True
            self._failures += 1
            self._last_error = summary
            delay = http.backoff_delay(
                self._failures,
                max(self.auth_backoff_initial, self.backoff_initial),
                self.backoff_max,
            )
            logger.error(
                "Manifest of %s refused: the console refuses the runtime token (%s); next "
                "try in %.0f s",
                self.runtime_name,
                summary,
                delay,
            )
            return delay
        if response.status in (408, 429) or response.status >= 500:
            return self._failed(summary, minimum=http.retry_after_seconds(response))
        self._refused = True
        self._give_up(
            f"the console refused it ({_refusal_text(response)}); not retried, sent again when "
            "the registry changes"
        )
        return None

    def _failed(self, message: str, minimum: float | None = None) -> float:
        self._failures += 1
        self._last_error = message
        delay = http.backoff_delay(self._failures, self.backoff_initial, self.backoff_max)
        if minimum is not None:
            delay = min(max(delay, minimum), self.backoff_max)
        level = logging.WARNING if self._failures <= 3 else logging.DEBUG
        if self._failures in (10, 100) or self._failures % 1000 == 0:
            level = logging.WARNING
        logger.log(
            level,
            "Manifest of %s not reported yet (%s); next try in %.1f s (try %d)",
            self.runtime_name,
            message,
            delay,
            self._failures,
        )
        return delay

    def _give_up(self, why: str) -> None:
        self._last_error = why
        logger.error("Manifest of %s not reported: %s", self.runtime_name, why)
        self._outcome.set()


def _instance_header(instance_id: str | None) -> dict[str, str]:
    return {"X-Runtime-Instance": instance_id or http.default_instance_id()}


def _refusal_text(response: http.Response) -> str:
    """The console's refusal in one log line: its summary, then each finding it names (a
    409 ``manifest_breaks_live`` names every live version this runtime could not serve)."""
    summary = response.error_summary()
    try:
        answer = _json.decode(response.body)
    except (msgspec.DecodeError, ValueError):
        return summary
    error = answer.get("error") if isinstance(answer, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    lines = [
        f"{d.get('path') or '-'}: {d.get('message')}"
        for d in details or []
        if isinstance(d, dict) and d.get("message")
    ]
    return summary + "".join(f"\n  - {line}" for line in lines[:50])


def _accepted(response: http.Response, body: dict) -> ManifestResult:
    try:
        answer = _json.decode(response.body)
    except (msgspec.DecodeError, ValueError):
        answer = {}
    answer = answer if isinstance(answer, dict) else {}
    version = answer.get("version")
    version = version if isinstance(version, int) and not isinstance(version, bool) else None
    warnings = [w for w in answer.get("warnings") or [] if isinstance(w, dict)]
    logger.info(
        "Manifest of %s reported: version %s (%d providers, %d tools, %d handlers)",
        body.get("runtime"),
        version,
        len(body["providers"]),
        len(body["tools"]),
        len(body["handlers"]),
    )
    for warning in warnings:
        logger.warning(
            "Live release no longer supported by this runtime: %s %s v%s: %s",
            warning.get("agent", ""),
            warning.get("document"),
            warning.get("version"),
            warning.get("errors"),
        )
    return ManifestResult(version=version, warnings=warnings)
