"""The name a runtime gave its manifest report, per token, for its heartbeat: a runtime that
named itself once (``report_manifest(..., "checkout-agent 1.4")``) shows that name on the
console's Runtimes card without naming it again (``ConfigClient(runtime_name=...)`` wins
when given). Per token, so two runtimes in one process (each with its token) keep theirs."""

from __future__ import annotations

import hashlib
import threading

_lock = threading.Lock()
_by_token: dict[str, str] = {}


def _key(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def remember(token: str, name: str) -> None:
    if isinstance(name, str) and name.strip():
        with _lock:
            _by_token[_key(token)] = name.strip()


def reported(token: str) -> str | None:
    with _lock:
        return _by_token.get(_key(token))
