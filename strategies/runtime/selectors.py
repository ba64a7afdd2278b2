"""Reads of runtime tokens."""

from __future__ import annotations

from datetime import datetime

from strategies.catalog.dependents import Reference
from strategies.runtime.auth import last_used_pending
from strategies.runtime.models import RuntimeToken


def tokens_list() -> list[RuntimeToken]:
    """Every token, active first; last use includes what Redis noted but not yet flushed."""

    pending = last_used_pending()
    tokens = list(
        RuntimeToken.objects.select_related("environment")
        .prefetch_related("agents")
        .order_by("revoked_at", "-created_at")
    )
    for token in tokens:
        noted = pending.get(token.pk)
        if noted:
            noted_at = datetime.fromisoformat(noted)
            if token.last_used_at is None or noted_at > token.last_used_at:
                token.last_used_at = noted_at
    return tokens


def references_to_environment(environment) -> list[Reference]:
    """Runtime tokens, revoked ones too, refer to their environment (its delete is refused)."""
    if RuntimeToken.objects.filter(environment=environment).exists():
        return [
            Reference(
                "has_runtime_tokens",
                "it has runtime tokens (revoked ones too: they are its history)",
            )
        ]
    return []
