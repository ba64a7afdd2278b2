"""The runtime's live configuration (RUNTIME_API §1): rendered once per release change.

Every release change (publish, approval applied, rollback) calls `payload_refresh` inside
its own transaction: it locks the (agent, environment) payload row, renders the JSON bytes
from the releases as they now stand and stores them, so the stored payload commits together
with the release. After commit the bytes are pushed to Redis. The config endpoint then
answers from Redis alone — no database query and no serializer on a hit.

The ETag is `"r<sum of the release revisions>-<4 hex of the payload hash>"`. Revisions only
grow, so the sum grows with every change of any release of that agent in that environment
and with nothing else; it also orders payloads, so an older payload never overwrites a newer
one in the cache (see `_CACHE_SET_IF_NEWER`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from django.core.cache import cache
from django.db import models, transaction

CACHE_TTL_SECONDS = 7 * 24 * 3600  # a refill from the database is cheap; keep memory bounded


class ConfigPayload(models.Model):
    """The rendered config of one agent in one environment (the durable copy of the cache)."""

    agent = models.ForeignKey("strategies.Agent", on_delete=models.CASCADE, related_name="+")
    environment = models.ForeignKey(
        "strategies.Environment", on_delete=models.CASCADE, related_name="+"
    )
    revision_sum = models.PositiveIntegerField(default=0)
    etag = models.CharField(max_length=40, blank=True)
    body = models.BinaryField(default=b"")
    rendered_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = "strategies"
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "environment"], name="config_payload_unique_target"
            ),
        ]

    def __str__(self) -> str:
        return f"config {self.agent_id}@{self.environment_id} {self.etag}"


@dataclass(frozen=True)
class RenderedConfig:
    revision_sum: int
    etag: str
    body: bytes


def _dumps(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def payload_render(*, agent, environment) -> RenderedConfig:
    """Render the §1 document from the releases of `agent` in `environment` (two queries)."""
    from strategies.models import Document, Release

    releases = list(
        Release.objects.filter(document__agent=agent, environment=environment)
        .select_related("document", "version")
        .order_by("document__key")
    )
    profile = None
    strategies: dict[str, dict] = {}
    for release in releases:
        entry = {"version": release.version.number, "body": release.version.body}
        if release.document.kind == Document.Kind.PROFILE:
            profile = entry
        else:
            strategies[release.document.key] = entry
    revision_sum = sum(r.revision for r in releases)
    document = {
        "agent": agent.key,
        "environment": environment.key,
        "etag": "",
        "profile": profile,
        "strategies": strategies,
        "shadow": {},
    }
    digest = hashlib.sha256(_dumps(document)).hexdigest()
    etag = f'"r{revision_sum}-{digest[:4]}"'
    document["etag"] = etag
    return RenderedConfig(revision_sum=revision_sum, etag=etag, body=_dumps(document))


def payload_refresh(*, agent, environment) -> RenderedConfig:
    """Re-render and store the payload inside the caller's transaction; push it to the
    cache after commit. The row lock serialises concurrent changes of different documents
    of the same agent and environment, so the last writer renders what is really live."""
    ConfigPayload.objects.bulk_create(
        [ConfigPayload(agent=agent, environment=environment)], ignore_conflicts=True
    )
    row = ConfigPayload.objects.select_for_update().get(agent=agent, environment=environment)
    rendered = payload_render(agent=agent, environment=environment)
    row.revision_sum, row.etag, row.body = rendered.revision_sum, rendered.etag, rendered.body
    row.save(update_fields=["revision_sum", "etag", "body", "rendered_at"])
    key = (agent.key, environment.pk)
    transaction.on_commit(lambda: cache_put(*key, rendered))
    return rendered


# --- the Redis side ------------------------------------------------------------------------------
def redis_client():
    """The raw client behind Django's cache (same server, same key prefix via cache_key)."""
    return cache._cache.get_client(write=True)


def cache_key(name: str) -> str:
    return cache.make_key(name)


def _config_key(agent_key: str, environment_id: int) -> str:
    return cache_key(f"rtcfg:{environment_id}:{agent_key}")


# Value layout: b"<revision_sum>|<etag>|<body>". Set only when newer than what is stored.
_CACHE_SET_IF_NEWER = """
local current = redis.call('GET', KEYS[1])
if current then
  local stored = tonumber(string.match(current, '^(%d+)|'))
  if stored and stored > tonumber(ARGV[1]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
return 1
"""


def cache_put(agent_key: str, environment_id: int, rendered: RenderedConfig) -> None:
    value = b"%d|%s|%s" % (rendered.revision_sum, rendered.etag.encode(), rendered.body)
    redis_client().eval(
        _CACHE_SET_IF_NEWER,
        1,
        _config_key(agent_key, environment_id),
        rendered.revision_sum,
        value,
        CACHE_TTL_SECONDS,
    )


def cached_config(agent_key: str, environment_id: int) -> tuple[str, bytes] | None:
    """(etag, body) from Redis, or None on a miss. The hot path: one GET, nothing else."""
    value = redis_client().get(_config_key(agent_key, environment_id))
    if value is None:
        return None
    _, etag, body = value.split(b"|", 2)
    return etag.decode(), body


def config_load(*, agent_key: str, environment) -> tuple[str, bytes] | None:
    """A cache miss: the stored payload (rendered now if it never was), pushed to the cache.
    None when the agent does not exist."""
    from strategies.models import Agent

    agent = Agent.objects.filter(key=agent_key).first()
    if agent is None:
        return None
    row = ConfigPayload.objects.filter(agent=agent, environment=environment).first()
    if row is not None and row.etag:
        rendered = RenderedConfig(row.revision_sum, row.etag, bytes(row.body))
    else:
        with transaction.atomic():
            rendered = payload_refresh(agent=agent, environment=environment)
    cache_put(agent_key, environment.pk, rendered)
    return rendered.etag, rendered.body


def cache_forget(agent_key: str, environment_id: int) -> None:
    redis_client().delete(_config_key(agent_key, environment_id))


def cache_clear_all() -> int:
    """Drop every cached payload and token identity of this console (e.g. after restoring the
    database from a backup, when cached revisions may be ahead of the restored ones)."""
    client = redis_client()
    keys = [
        *client.scan_iter(match=cache_key("rtcfg:*"), count=500),
        *client.scan_iter(match=cache_key("rtid:*"), count=500),
    ]
    return client.delete(*keys) if keys else 0
