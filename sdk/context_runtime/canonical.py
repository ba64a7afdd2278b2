"""Canonical JSON and content hashing: equal bytes exactly when documents are equal."""

from __future__ import annotations

import hashlib
import json

__all__ = [
    "canonical_json",
    "content_hash",
]


def canonical_json(body) -> bytes:
    """The body as bytes that are equal exactly when the documents are equal."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def content_hash(body) -> str:
    """sha256 hex of :func:`canonical_json`: the version's content hash."""
    return hashlib.sha256(canonical_json(body)).hexdigest()
