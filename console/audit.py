"""The one write path for the audit log and the access log.

Services call `audit_record(...)` inside their own transaction, so a change and its audit
row commit or roll back together. Rows are hash-chained: a transaction-scoped advisory lock
serialises writers per log, so each row's `prev_hash` is the hash of the row before it.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from console.models import AccessLogEntry, AuditRecord, Grant
from console.request_context import current_request

GENESIS = "0" * 64
# Fields covered by the hash, in order. Adding a field means a new chain version.
CHAIN_FIELDS = (
    "occurred_at",
    "actor_type",
    "actor_id",
    "actor_label",
    "actor_roles",
    "action",
    "target_type",
    "target_id",
    "target_label",
    "agent_key",
    "request_id",
    "ip",
)
_EXTRA_HASHED = {
    "AuditRecord": ("before", "after", "changes"),
    "AccessLogEntry": ("outcome", "reason", "detail"),
}
_LOCK_KEYS = {"AuditRecord": 7_201_001, "AccessLogEntry": 7_201_002}


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def record_hash(model_name: str, fields: dict[str, Any], prev_hash: str) -> str:
    names = CHAIN_FIELDS + _EXTRA_HASHED[model_name]
    material = json.dumps(
        [prev_hash, [[n, _jsonable(fields.get(n))] for n in names]],
        sort_keys=True,
        separators=(",", ":"),
        default=str,
        ensure_ascii=False,
    )
    return hashlib.sha256(material.encode()).hexdigest()


def actor_label(actor) -> str:
    """How a release, a version or a token names who made it: a username, a runtime token's
    name, or "system" for automated actions."""
    return getattr(actor, "username", "") or getattr(actor, "name", "") or "system"


def describe_actor(actor) -> dict[str, Any]:
    """Actor columns for a user, a runtime token, or None (the system)."""
    if actor is None:
        return {"actor_type": "system", "actor_id": "", "actor_label": "system", "actor_roles": []}
    if getattr(actor, "is_runtime_token", False):
        return {
            "actor_type": "token",
            "actor_id": str(actor.pk),
            "actor_label": f"token:{actor.name}",
            "actor_roles": list(getattr(actor, "capabilities", [])),
        }
    if not getattr(actor, "is_authenticated", False):
        return {
            "actor_type": "anonymous",
            "actor_id": "",
            "actor_label": "anonymous",
            "actor_roles": [],
        }
    return {
        "actor_type": "user",
        "actor_id": str(actor.pk),
        "actor_label": actor.get_username(),
        "actor_roles": Grant.objects.role_names(actor),
    }


def describe_target(target) -> dict[str, str]:
    if target is None:
        return {"target_type": "", "target_id": "", "target_label": ""}
    if isinstance(target, tuple):  # (type, id, label) for things that are not model rows
        kind, ident, label = target
        return {"target_type": kind, "target_id": str(ident), "target_label": str(label)[:300]}
    return {
        "target_type": target._meta.label_lower,
        "target_id": str(target.pk),
        "target_label": str(target)[:300],
    }


def field_changes(before: Any, after: Any, prefix: str = "") -> list[dict[str, Any]]:
    """Field-level differences between two JSON-like values: [{path, before, after}].
    A created or deleted object (None on one side) is compared field by field too, so a
    creation reads as its fields being added rather than as one opaque value."""
    if before is None and isinstance(after, dict):
        before = {}
    if after is None and isinstance(before, dict):
        after = {}
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[dict[str, Any]] = []
        for key in list(before) + [k for k in after if k not in before]:
            path = f"{prefix}.{key}" if prefix else str(key)
            out.extend(field_changes(before.get(key), after.get(key), path))
        return out
    if before == after:
        return []
    return [{"path": prefix or "(value)", "before": before, "after": after}]


def _append(model, fields: dict[str, Any]):
    name = model.__name__
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEYS[name]])
        last = model.objects.order_by("-id").values_list("hash", flat=True).first()
        prev = last or GENESIS
        fields["prev_hash"] = prev
        fields["hash"] = record_hash(name, fields, prev)
        return model.objects.create(**fields)


def _context_fields(actor, target, agent) -> dict[str, Any]:
    ctx = current_request.get()
    agent_key = getattr(agent, "key", agent) or ""
    return {
        "occurred_at": timezone.now(),
        **describe_actor(actor),
        **describe_target(target),
        "agent_key": agent_key,
        "request_id": ctx.request_id,
        "ip": ctx.ip,
    }


def audit_record(
    *, actor, action: str, target=None, agent=None, before: Any = None, after: Any = None
):
    """Write one audit row for a change. Call inside the service's transaction."""
    fields = _context_fields(actor, target, agent)
    fields.update(action=action, before=before, after=after, changes=field_changes(before, after))
    return _append(AuditRecord, fields)


def access_record(
    *,
    actor,
    action: str,
    target=None,
    agent=None,
    outcome: str = "allowed",
    reason: str = "",
    detail: dict | None = None,
):
    """Write one access-log row: a look at traces/snapshots, a search, an export, a refusal."""
    fields = _context_fields(actor, target, agent)
    fields.update(action=action, outcome=outcome, reason=reason, detail=detail or {})
    return _append(AccessLogEntry, fields)


def chain_verify(model) -> tuple[int, Any]:
    """Walk a log's chain in id order. Returns (rows checked, first broken row or None)."""
    name = model.__name__
    prev = GENESIS
    checked = 0
    for row in model.objects.order_by("id").iterator(chunk_size=2000):
        fields = {n: getattr(row, n) for n in CHAIN_FIELDS + _EXTRA_HASHED[name]}
        if row.prev_hash != prev or record_hash(name, fields, prev) != row.hash:
            return checked, row
        prev = row.hash
        checked += 1
    return checked, None
