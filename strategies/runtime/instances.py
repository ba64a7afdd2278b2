"""Who serves what: the runtimes' heartbeats (`POST /api/v1/runtime/heartbeat`,
docs/runtime-contract.md §2a), one row per runtime process × agent (`RuntimeInstance`).

A heartbeat is the runtime's own report, not a change anyone made: it is bookkeeping like a
token's last use, written with one upsert per agent and no audit row. It comes every
`HEARTBEAT_SECONDS` and at once after the runtime took a new configuration, so the releases
page can say "3 of 3 runtimes serve v4" a moment after a publish.

Being the runtime's word, it may only speak for itself: an instance row belongs to the token
that reported it (another token's heartbeat for it is refused, 409 `instance_taken`, until
that row is stopped, gone or its token revoked), and a token has at most
`RUNTIME_INSTANCES_PER_TOKEN` live instances (one more: 429 `too_many_instances`) — so a token
cannot rewrite or stop what another runtime said, nor fill the page with runtimes.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

from context_runtime.text import unstorable_strings
from django.conf import settings
from django.db import connection
from django.utils import timezone

from console.kernel.errors import Conflict, NotFound, TooManyRequests, ValidationFailed
from console.kernel.transactions import service_transaction
from strategies.catalog.dependents import runtime_report_guarded
from strategies.catalog.models import Agent
from strategies.runtime.auth import RuntimeIdentity, check_agent_scope
from strategies.runtime.models import RuntimeInstance

# The oldest SDK the console still supports: an older one is flagged on the releases page
# (0.2.0: the first with the spool, `unauthorized`, the manifest retries and the stream).
MINIMUM_SDK_VERSION = "0.2.0"
HEARTBEAT_SECONDS = 60  # what the SDK is told; a runtime unheard for 3 of them is "gone"
GONE_AFTER_SECONDS = 3 * HEARTBEAT_SECONDS
# A runtime still serving another configuration this long after the change is a warning.
LAGGING_AFTER_SECONDS = 60
LISTED_FOR_HOURS = 24  # runtimes unheard longer leave the page (rows purged after 7 days)
MAX_AGENTS = 100
# `stopped`: the last heartbeat of a process shutting down cleanly — gone at once.
TRANSPORTS = ("stream", "poll", "stopped")
STOPPED = "stopped"
_INSTANCE = re.compile(r"^[\x21-\x7e][\x20-\x7e]{0,199}$")


def instance_named(value) -> str:
    """A process id the runtime gave in a header (`X-Runtime-Instance` on a manifest report),
    as the heartbeat would accept it; "" for none or one it would refuse (a label only)."""
    return value if isinstance(value, str) and _INSTANCE.match(value) else ""


def sdk_supported(version: str) -> bool | None:
    """Whether `version` is at least MINIMUM_SDK_VERSION (None: not a version we can read)."""
    parsed = _parse(version)
    return None if parsed is None else parsed >= _parse(MINIMUM_SDK_VERSION)


def _parse(version: str) -> tuple[int, ...] | None:
    match = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    return None if match is None else tuple(int(p or 0) for p in match.groups())


def _text(body: dict, name: str, limit: int, *, required: bool = False) -> str:
    value = body.get(name, "")
    if value is None:
        value = ""
    if not isinstance(value, str) or len(value) > limit or "\x00" in value:
        raise ValidationFailed(
            f"{name} must be text of at most {limit} characters.",
            details=[{"path": name, "code": "invalid", "message": f"at most {limit} characters"}],
        )
    if required and not value:
        raise ValidationFailed(
            f"{name} is required.", details=[{"path": name, "code": "required", "message": ""}]
        )
    return value


def _parsed(body) -> tuple[dict, dict[str, dict]]:
    if not isinstance(body, dict):
        raise ValidationFailed("The heartbeat must be a JSON object.")
    # A NUL or a lone surrogate anywhere (agent keys included) is no text PostgreSQL keeps:
    # refused with its path, never a 500 at the insert.
    unstorable = [f.as_dict() for f in unstorable_strings(body, what="The heartbeat")]
    if unstorable:
        raise ValidationFailed(unstorable[0]["message"], details=unstorable)
    fields = {
        "instance": _text(body, "instance", 200, required=True),
        "sdk_version": _text(body, "sdk_version", 50),
        "runtime": _text(body, "runtime", 200),
        "transport": _text(body, "transport", 10),
    }
    if not _INSTANCE.match(fields["instance"]):
        raise ValidationFailed(
            "instance must be printable ASCII.",
            details=[{"path": "instance", "code": "invalid_format", "message": "printable ASCII"}],
        )
    if fields["transport"] and fields["transport"] not in TRANSPORTS:
        raise ValidationFailed(
            "transport must be stream, poll or stopped.",
            details=[
                {"path": "transport", "code": "invalid_choice", "message": ", ".join(TRANSPORTS)}
            ],
        )
    agents = body.get("agents")
    if not isinstance(agents, dict) or not agents or len(agents) > MAX_AGENTS:
        raise ValidationFailed(
            f"agents must map 1 to {MAX_AGENTS} agent keys to what is served.",
            details=[{"path": "agents", "code": "invalid", "message": "an object"}],
        )
    served = {}
    for key, entry in agents.items():
        if not isinstance(entry, dict):
            raise ValidationFailed(
                "Each agent maps to {etag, documents, resolution}.",
                details=[{"path": f"agents.{key}", "code": "invalid_type", "message": ""}],
            )
        documents = entry.get("documents") or {}
        if (
            not isinstance(documents, dict)
            or len(documents) > 200
            or not all(
                isinstance(k, str) and len(k) <= 100 and type(v) is int and 0 <= v < 2**31
                for k, v in documents.items()
            )
        ):
            raise ValidationFailed(
                "documents maps document keys to version numbers.",
                details=[{"path": f"agents.{key}.documents", "code": "invalid", "message": ""}],
            )
        served[key] = {
            "etag": _text(entry, "etag", 100),
            "resolution": _text(entry, "resolution", 20),
            "documents": documents,
        }
    return fields, served


# The row is this token's, or was left behind (stopped, unheard, its token revoked): only
# then does the update happen; no row returned means another runtime's, and nothing is written.
_UPSERT = """
INSERT INTO strategies_runtimeinstance AS t
    (environment_id, agent_id, instance, token_id, sdk_version, runtime, transport,
     resolution, etag, documents, serving_since, first_seen, last_seen)
VALUES (%(environment)s, %(agent)s, %(instance)s, %(token)s, %(sdk_version)s, %(runtime)s,
        %(transport)s, %(resolution)s, %(etag)s, %(documents)s::jsonb, %(now)s, %(now)s, %(now)s)
ON CONFLICT (environment_id, agent_id, instance) DO UPDATE SET
    token_id = EXCLUDED.token_id, sdk_version = EXCLUDED.sdk_version,
    runtime = EXCLUDED.runtime, transport = EXCLUDED.transport,
    resolution = EXCLUDED.resolution, documents = EXCLUDED.documents,
    serving_since = CASE WHEN t.etag = EXCLUDED.etag THEN t.serving_since
                         ELSE EXCLUDED.serving_since END,
    etag = EXCLUDED.etag, last_seen = EXCLUDED.last_seen
WHERE t.token_id = EXCLUDED.token_id
   OR t.token_id IS NULL
   OR t.transport = 'stopped'
   OR t.last_seen < %(gone_before)s
   OR EXISTS (SELECT 1 FROM strategies_runtimetoken r
              WHERE r.id = t.token_id AND r.revoked_at IS NOT NULL)
RETURNING 1
"""

# A process's last word (`stopped`) only ever updates its own token's row: it never creates one,
# and never stops another runtime.
_STOP = """
UPDATE strategies_runtimeinstance SET
    sdk_version = %(sdk_version)s, runtime = %(runtime)s, transport = %(transport)s,
    resolution = %(resolution)s, documents = %(documents)s::jsonb,
    serving_since = CASE WHEN etag = %(etag)s THEN serving_since ELSE %(now)s END,
    etag = %(etag)s, last_seen = %(now)s
WHERE environment_id = %(environment)s AND agent_id = %(agent)s AND instance = %(instance)s
  AND token_id = %(token)s
RETURNING 1
"""

# pg_advisory_xact_lock(namespace, token id): one token's new instances are counted one at a time.
_ROOM_LOCK = 0x52_49  # "RI"


def instances_per_token() -> int:
    """How many live instances one token may have (`RUNTIME_INSTANCES_PER_TOKEN`)."""
    return int(getattr(settings, "RUNTIME_INSTANCES_PER_TOKEN", 256))


def _check_room(*, identity: RuntimeIdentity, instance: str, now) -> None:
    """429 when `instance` would be one more live instance than the token may have. Counted
    under a per-token lock, so concurrent new instances cannot overshoot the bound."""
    live = RuntimeInstance.objects.filter(
        token_id=identity.token_id, last_seen__gte=now - timedelta(seconds=GONE_AFTER_SECONDS)
    ).exclude(transport=STOPPED)
    if live.filter(instance=instance).exists():
        return  # already counted
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_ROOM_LOCK, identity.token_id])
    limit = instances_per_token()
    if live.values("instance").distinct().count() >= limit:
        refused = TooManyRequests(
            f"This token has {limit} live runtime instances already "
            "(RUNTIME_INSTANCES_PER_TOKEN): stop one, wait until one is gone, or give this "
            "runtime its own token.",
            code="too_many_instances",
        )
        # Room comes back when one stops (at once) or goes quiet (GONE_AFTER_SECONDS)
        refused.retry_after_seconds = HEARTBEAT_SECONDS
        raise refused


def _reported(row: dict) -> bool:
    return RuntimeInstance.objects.filter(
        environment_id=row["environment"], agent_id=row["agent"], instance=row["instance"]
    ).exists()


@service_transaction
def runtime_heartbeat(*, identity: RuntimeIdentity, body) -> dict:
    """Record what a runtime process serves, per agent (404 for an agent outside the
    token's scope or unknown, 400 for a malformed body, 409 for an instance another token
    reports, 429 past the token's live instances; nothing written then). The environment's
    redaction rules run first (docs/data-protection.md)."""
    body = runtime_report_guarded(identity.environment_id, body)
    fields, served = _parsed(body)
    for key in served:
        check_agent_scope(identity, key)
    agents = dict(Agent.objects.filter(key__in=served).values_list("key", "pk"))
    unknown = sorted(set(served) - set(agents))
    if unknown:
        raise NotFound(f"Unknown agent '{unknown[0]}'.")
    now = timezone.now()
    stopping = fields["transport"] == STOPPED
    if not stopping:
        _check_room(identity=identity, instance=fields["instance"], now=now)
    recorded = 0
    with connection.cursor() as cursor:
        for key, entry in sorted(served.items()):
            row = {
                **fields,
                **entry,
                "documents": json.dumps(entry["documents"]),
                "environment": identity.environment_id,
                "agent": agents[key],
                "token": identity.token_id,
                "now": now,
                "gone_before": now - timedelta(seconds=GONE_AFTER_SECONDS),
            }
            cursor.execute(_STOP if stopping else _UPSERT, row)
            if cursor.fetchone() is not None:
                recorded += 1
            elif not stopping or _reported(row):  # another token's (a stop of nothing: no-op)
                # Rolled back with the rest: a heartbeat is recorded whole or not at all.
                raise Conflict(
                    f"Instance '{fields['instance']}' of agent '{key}' is reported with another "
                    "runtime token: each runtime process needs its own instance id.",
                    code="instance_taken",
                )
    return {
        "recorded": recorded,
        "heartbeat_seconds": HEARTBEAT_SECONDS,
        "minimum_sdk_version": MINIMUM_SDK_VERSION,
        "sdk_supported": sdk_supported(fields["sdk_version"]),
    }


def instances_purge(days: int = 7) -> int:
    """Forget runtimes unheard for `days` (beat, with the token flush)."""
    cutoff = timezone.now() - timedelta(days=days)
    return RuntimeInstance.objects.filter(last_seen__lt=cutoff).delete()[0]
