"""Runtime token authentication for /api/v1/runtime/ (docs/runtime-contract.md "Authentication").

`Authorization: Bearer <token>`. Missing/unknown/revoked → 401; valid without the capability
→ 403; agent outside the token's scope or unknown → 404 (the same answer for both).
Tokens are looked up by the SHA-256 of the secret; the secret itself is never stored.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F, Q
from django.utils import timezone

from console.kernel.credentials import bearer_value, secret_hash, secret_new
from console.kernel.errors import Forbidden, NotAuthenticated, NotFound
from strategies.delivery.config import (
    REDIS_UNAVAILABLE,
    cache_key,
    invalidate,
    mirror,
    redis_call,
    redis_client,
)
from strategies.runtime.models import RuntimeToken

TOKEN_PREFIX = "cc_rt_"


@dataclass(frozen=True)
class RuntimeIdentity:
    """What a request's token allows: a plain value, cheap to cache (see runtime API)."""

    token_id: int
    name: str
    environment_id: int
    environment_key: str
    all_agents: bool  # every agent, now and later; otherwise only agent_keys
    agent_keys: frozenset[str]  # none (all deleted): no agent
    capabilities: frozenset[str]
    is_runtime_token = True

    @property
    def pk(self) -> int:
        return self.token_id

    def covers_agent(self, agent_key: str) -> bool:
        return self.all_agents or agent_key in self.agent_keys


def token_hash(secret: str) -> str:
    return secret_hash(secret)


def new_secret() -> str:
    return secret_new(TOKEN_PREFIX)


def bearer_secret(request) -> str:
    return bearer_secret_of(request.META.get("HTTP_AUTHORIZATION", ""))


def bearer_secret_of(header: str) -> str:
    """The secret of an `Authorization: Bearer <token>` header value (401 otherwise)."""
    secret = bearer_value(header)
    if secret is None:
        raise NotAuthenticated("Send the runtime token as 'Authorization: Bearer <token>'.")
    return secret


def identity_for_secret(secret: str) -> RuntimeIdentity | None:
    """Database lookup of an active token (callers may cache the result by hash)."""

    token = (
        RuntimeToken.objects.select_related("environment")
        .prefetch_related("agents")
        .filter(token_hash=token_hash(secret), revoked_at__isnull=True)
        .first()
    )
    if token is None:
        return None
    return RuntimeIdentity(
        token_id=token.pk,
        name=token.name,
        environment_id=token.environment_id,
        environment_key=token.environment.key,
        all_agents=token.all_agents,
        agent_keys=frozenset(a.key for a in token.agents.all()),
        capabilities=frozenset(token.capabilities),
    )


def active_token_ids(token_ids) -> set[int]:
    """Which of these tokens are not revoked (the stream server asks for its open streams)."""
    return set(
        RuntimeToken.objects.filter(pk__in=token_ids, revoked_at__isnull=True).values_list(
            "pk", flat=True
        )
    )


def authorize_runtime(
    identity: RuntimeIdentity, capability: str | tuple[str, ...], *, database: bool = True
) -> RuntimeIdentity:
    """403 without the capability (a tuple: without any of them); otherwise note the use
    (for `last_used_at`; `database`: see `note_use`)."""
    wanted = (capability,) if isinstance(capability, str) else capability
    if identity.capabilities.isdisjoint(wanted):
        raise Forbidden(
            f"This runtime token lacks the '{wanted[0]}' capability"
            + "".join(f" (or '{other}')" for other in wanted[1:])
            + "."
        )
    note_use(identity, database=database)
    return identity


def check_agent_scope(identity: RuntimeIdentity, agent_key: str) -> None:
    """404 for an agent outside the token's scope — the same answer as an unknown agent."""
    if not identity.covers_agent(agent_key):
        raise NotFound(f"Unknown agent '{agent_key}'.")


# --- cached identities (the config endpoint's hot path makes no database query) ------------
# Redis holds the identity per token hash: JSON for an active token, "-" for an unknown or
# revoked one. Fills use SET NX, revocation overwrites with "-": a fill racing a revocation
# can never resurrect the token. The revocation in PostgreSQL is the truth: without Redis
# every lookup reads the database, and `revocations_reconcile` (beat) writes the tombstone a
# failed push did not.
IDENTITY_TTL_SECONDS = 3600
UNKNOWN_TTL_SECONDS = 60
REVOKED_TTL_SECONDS = 24 * 3600
LAST_USED_KEY = "rt-last-used"
LAST_USED_EVERY_SECONDS = 30.0  # per process: at most one Redis write per token this often
_last_noted: dict[int, float] = {}


def _identity_key(hash_hex: str) -> str:
    # rtid2: the identity says all_agents; an older cached identity (without it) is never read
    return cache_key(f"rtid2:{hash_hex}")


def _identity_dump(identity: RuntimeIdentity) -> bytes:
    return json.dumps(
        [
            identity.token_id,
            identity.name,
            identity.environment_id,
            identity.environment_key,
            identity.all_agents,
            sorted(identity.agent_keys),
            sorted(identity.capabilities),
        ]
    ).encode()


def _identity_load(raw: bytes) -> RuntimeIdentity:
    token_id, name, env_id, env_key, all_agents, agents, caps = json.loads(raw)
    return RuntimeIdentity(
        token_id, name, env_id, env_key, all_agents is True, frozenset(agents), frozenset(caps)
    )


def mirrored_identity(secret: str) -> tuple[RuntimeIdentity, float] | None:
    """(the identity of an active token, expires_at on the mirror's clock) from this
    process's mirror only, or None (no I/O)."""
    return mirror.entry(_identity_key(token_hash(secret)))


def cached_identity(secret: str) -> RuntimeIdentity | None:
    """`identity_for_secret` behind Redis: one GET on a hit, the database only on a miss or
    while Redis is unavailable."""

    key = _identity_key(token_hash(secret))
    identity = mirror.get(key)
    if identity is not None:
        return identity
    generation = mirror.generation
    raw = redis_call(lambda client: client.get(key), default=REDIS_UNAVAILABLE)
    if raw is REDIS_UNAVAILABLE:
        return identity_for_secret(secret)
    if raw is None:
        identity = identity_for_secret(secret)
        value, ttl = (
            (b"-", UNKNOWN_TTL_SECONDS)
            if identity is None
            else (_identity_dump(identity), IDENTITY_TTL_SECONDS)
        )
        redis_call(lambda client: client.set(key, value, ex=ttl, nx=True))
        return identity
    if raw == b"-":
        return None
    identity = _identity_load(raw)
    mirror.remember(key, identity, generation)  # only active tokens: unknown ones are unbounded
    return identity


def identity_forget(hash_hex: str, *, revoked: bool) -> None:
    """After commit of a revocation (tombstone) or a creation (drop a stale 'unknown').
    Never raises: this process forgets the identity at once; if Redis fails, the reconcile
    task writes the tombstone (a creation needs nothing: an 'unknown' expires in a minute)."""

    key = _identity_key(hash_hex)
    mirror.forget(key)
    if revoked:
        done = redis_call(
            lambda client: client.set(key, b"-", ex=REVOKED_TTL_SECONDS), REDIS_UNAVAILABLE
        )
    else:
        done = redis_call(lambda client: client.delete(key), REDIS_UNAVAILABLE)
    if done is not REDIS_UNAVAILABLE:
        invalidate(key)


def revocations_reconcile(batch: int = 500) -> int:
    """Write the tombstone of every token revoked recently enough for Redis to still hold its
    identity (a fill expires IDENTITY_TTL_SECONDS after it was made, and no fill happens after
    the revocation committed) where Redis still holds an active identity; each is invalidated
    in every mirror. Returns how many were repaired. Run by beat; fails loudly without Redis."""
    since = timezone.now() - timedelta(seconds=IDENTITY_TTL_SECONDS + 600)
    hashes = list(
        RuntimeToken.objects.filter(revoked_at__gte=since)
        .order_by("pk")
        .values_list("token_hash", flat=True)
    )
    client = redis_client()
    repaired = 0
    for start in range(0, len(hashes), batch):
        keys = [_identity_key(h) for h in hashes[start : start + batch]]
        for key, raw in zip(keys, client.mget(keys), strict=True):
            if raw is not None and raw != b"-":
                client.set(key, b"-", ex=REVOKED_TTL_SECONDS)
                invalidate(key)
                repaired += 1
    return repaired


def note_use(identity: RuntimeIdentity, *, database: bool = True) -> None:
    """Remember that the token was used; a periodic task copies this to `last_used_at`.
    Without Redis the use is written to the database directly (unless `database` is False:
    callers outside Django's request cycle, which manages connections, skip it)."""

    now = time.monotonic()
    if now - _last_noted.get(identity.token_id, -1e9) < LAST_USED_EVERY_SECONDS:
        return
    _last_noted[identity.token_id] = now
    used_at = timezone.now()
    noted = redis_call(
        lambda client: client.hset(
            cache_key(LAST_USED_KEY), str(identity.token_id), used_at.isoformat()
        ),
        default=REDIS_UNAVAILABLE,
    )
    if noted is REDIS_UNAVAILABLE and database:
        RuntimeToken.objects.filter(pk=identity.token_id).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lt=used_at)
        ).update(last_used_at=used_at)


def last_used_pending() -> dict[int, str]:
    """Uses noted in Redis and not yet copied to the database: {token id: ISO time}; none
    while Redis is unavailable (the page shows the database's)."""

    raw = redis_call(lambda client: client.hgetall(cache_key(LAST_USED_KEY)), default={})
    return {int(k): v.decode() for k, v in raw.items()}


def last_used_flush() -> int:
    """Move the noted uses into `RuntimeToken.last_used_at` (never moving it backwards)."""

    key = cache_key(LAST_USED_KEY)
    pipe = redis_client().pipeline(transaction=True)
    pipe.hgetall(key)
    pipe.delete(key)
    raw, _ = pipe.execute()
    for token_id, when in raw.items():
        used_at = datetime.fromisoformat(when.decode())
        RuntimeToken.objects.filter(pk=int(token_id)).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lt=used_at)
        ).update(last_used_at=used_at)
    return len(raw)


# --- refused attempts (a runtime that keeps calling with a revoked token) --------------------
# One HINCRBY in Redis per refused request (no database write); the beat task
# `strategies.flush_refused_tokens` adds them to the revoked token's row every minute. Only
# secrets that look like runtime tokens count; the hash is emptied at every flush, and one
# that grew past REFUSED_MAX_ENTRIES (random secrets) stops counting until then.
REFUSED_KEY = "rt-refused"
REFUSED_AT_KEY = "rt-refused-at"
REFUSED_MAX_ENTRIES = 10_000


def note_refused(secret: str) -> None:
    """Count a request refused with 401 by the hash of its secret (never raises)."""
    if not secret.startswith(TOKEN_PREFIX):
        return
    hash_hex = token_hash(secret)
    now = timezone.now().isoformat()

    def count(client):
        key = cache_key(REFUSED_KEY)
        if client.hlen(key) >= REFUSED_MAX_ENTRIES and not client.hexists(key, hash_hex):
            return
        pipe = client.pipeline(transaction=False)
        pipe.hincrby(key, hash_hex, 1)
        pipe.hset(cache_key(REFUSED_AT_KEY), hash_hex, now)
        pipe.execute()

    redis_call(count)


def refused_flush() -> int:
    """Add the counted refusals to the tokens they belong to (`refused_count`,
    `last_refused_at`); refusals of secrets no token has are dropped. Returns how many tokens
    were updated. Run by beat; fails loudly without Redis."""
    pipe = redis_client().pipeline(transaction=True)
    pipe.hgetall(cache_key(REFUSED_KEY))
    pipe.hgetall(cache_key(REFUSED_AT_KEY))
    pipe.delete(cache_key(REFUSED_KEY), cache_key(REFUSED_AT_KEY))
    counts, times, _ = pipe.execute()
    if not counts:
        return 0
    tokens = dict(
        RuntimeToken.objects.filter(token_hash__in=[h.decode() for h in counts]).values_list(
            "token_hash", "pk"
        )
    )
    updated = 0
    for hash_raw, count in counts.items():
        pk = tokens.get(hash_raw.decode())
        if pk is None:
            continue
        at = times.get(hash_raw)
        refused_at = datetime.fromisoformat(at.decode()) if at else timezone.now()
        RuntimeToken.objects.filter(pk=pk).update(refused_count=F("refused_count") + int(count))
        RuntimeToken.objects.filter(pk=pk).filter(
            Q(last_refused_at__isnull=True) | Q(last_refused_at__lt=refused_at)
        ).update(last_refused_at=refused_at)
        updated += 1
    return updated


def refused_pending() -> dict[str, tuple[int, str]]:
    """Refusals counted in Redis and not flushed yet: {token hash: (count, ISO time)}."""

    def read(client):
        pipe = client.pipeline(transaction=True)
        pipe.hgetall(cache_key(REFUSED_KEY))
        pipe.hgetall(cache_key(REFUSED_AT_KEY))
        return pipe.execute()

    counts, times = redis_call(read, default=({}, {}))
    return {h.decode(): (int(n), (times.get(h) or b"").decode()) for h, n in counts.items()}
