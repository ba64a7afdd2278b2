"""The runtime's side of talking to the console.

- :class:`ConfigClient`: the agent's live configuration (RUNTIME_API §1), polled and pushed,
  validated, kept in memory and on disk, read without I/O (built in the internal ``_config``;
  one request with a timeout and the bearer token, and backoff with jitter, in ``_http``)

The trace reporter (§3) is :mod:`context_runtime.reporter`, the manifest (§2)
:mod:`context_runtime.manifest_report`, webhook signatures (§4) :mod:`context_runtime.webhook`.
"""

from context_runtime.client._config import (
    BOOTSTRAP,
    CACHED,
    ERROR,
    FRESH,
    REASONS,
    STALE,
    TOLERATED_CODES,
    UNAUTHORIZED,
    ConfigClient,
    ConfigSnapshot,
    Document,
    Resolution,
    Rollout,
    validate_config_payload,
)

__all__ = [
    "BOOTSTRAP",
    "CACHED",
    "ERROR",
    "FRESH",
    "REASONS",
    "STALE",
    "TOLERATED_CODES",
    "UNAUTHORIZED",
    "ConfigClient",
    "ConfigSnapshot",
    "Document",
    "Resolution",
    "Rollout",
    "validate_config_payload",
]
