"""The one validator per document kind, pure Python.

The console's editor, API, freeze, publish and import, and the runtime's config client all call
these functions, so a finding reads the same wherever it appears.  A finding names the exact
place in the body (``path``), a machine ``code`` and a sentence a person understands.
Structural checks always run; checks against what a runtime implements run only when a
:class:`~context_runtime.manifest.Manifest` is given.

The validators never raise on JSON-like input: ``None``, lists, strings or nested garbage all
come back as findings, ordered by where their path sits in the document."""

from __future__ import annotations

from context_runtime.documents._profile import (
    is_sensitive,
    sensitive_sections_enabled,
    validate_profile,
)
from context_runtime.documents._strategy import normalize_legacy_strategy, validate_strategy
from context_runtime.findings import Finding
from context_runtime.manifest import Manifest
from context_runtime.vocabulary import KINDS, PROFILE, STRATEGY

__all__ = [
    "is_sensitive",
    "normalize_legacy_strategy",
    "sensitive_sections_enabled",
    "validate_document",
    "validate_profile",
    "validate_strategy",
]


def validate_document(
    kind: str,
    body,
    manifest: Manifest | None = None,
    *,
    agent_keys: frozenset[str] | None = None,
    sensitive: frozenset[str] = frozenset(),
) -> list[Finding]:
    """Dispatch to the validator of ``kind``; ``agent_keys`` and ``sensitive`` are used by
    profiles only."""
    if kind == STRATEGY:
        return validate_strategy(body, manifest)
    if kind == PROFILE:
        return validate_profile(body, manifest, agent_keys, sensitive)
    raise ValueError(f"Unknown document kind {kind!r}; expected one of {', '.join(KINDS)}.")
