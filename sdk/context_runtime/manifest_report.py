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
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from context_runtime import _json
from context_runtime.client import _http as http
from context_runtime.client._http import TransportError
from context_runtime.findings import blocking
from context_runtime.manifest import Manifest, validate_manifest
from context_runtime.vocabulary import BLOCKS, KNOWN_SENSITIVE_SECTIONS

__all__ = [
    "ManifestReportError",
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
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._providers: dict[str, Callable | None] = {}
        self._tools: dict[str, Callable | None] = {}
        self._handlers: dict[str, Callable | None] = {}
        self._sections: dict[str, tuple[str, bool]] = {}
        self._switches: dict[str, None] = {}

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
            self._sections[key] = (block, sensitive)

    def register_switch(self, name: str) -> None:
        """Declare a pipeline switch the runtime reads."""
        _check_name(name, "switch name")
        with self._lock:
            self._switches[name] = None

    def _register(self, table: dict, what: str, name: str, fn: Callable | None):
        _check_name(name, f"{what} name")
        if fn is not None and not callable(fn):
            raise TypeError(f"the {what} {name} must be callable, not {fn!r}")
        with self._lock:
            existing = table.get(name)
            if existing is not None and fn is not None and existing is not fn:
                raise ValueError(f"{what} {name} is already registered to {existing!r}")
            table[name] = fn if fn is not None else existing
        return fn

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
) -> ManifestResult | None:
    """``PUT /api/v1/runtime/manifest`` with what ``registry`` holds.

    Connection errors, timeouts, 408, 429 and 5xx are retried up to ``attempts`` tries in all
    with backoff and jitter; a refused manifest (400) or token (401, 403) is not. Returns the
    console's answer, or ``None`` after logging why it failed; with ``raise_on_failure``
    raises :class:`ManifestReportError` (or ``ValueError`` for an invalid registry) instead.
    Every warning the console returns is logged.
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
    data = msgspec.json.encode(body)
    url = http.runtime_url(base_url, "manifest")
    error: ManifestReportError | None = None
    for attempt in range(1, max(1, attempts) + 1):
        try:
            response = http.request("PUT", url, token=token, timeout=timeout, body=data)
        except TransportError as failure:
            error = ManifestReportError(str(failure))
        else:
            if response.ok:
                return _accepted(response, body)
            code, _ = http.error_of(response.body)
            error = ManifestReportError(response.error_summary(), response.status, code)
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


def report_manifest_in_background(*args, **kwargs) -> threading.Thread:
    """:func:`report_manifest` in a daemon thread, so start-up does not wait for it."""
    kwargs["raise_on_failure"] = False
    thread = threading.Thread(
        target=report_manifest, args=args, kwargs=kwargs, name="context-runtime-manifest"
    )
    thread.daemon = True
    thread.start()
    return thread


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
