"""Runtime tokens: a runtime's credential for one environment."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models

from strategies.catalog.models import Agent, Environment


class RuntimeToken(models.Model):
    """A runtime's credential: one environment, every agent or some, some capabilities.
    Only the SHA-256 of the secret is stored; the secret is shown once at creation."""

    # outcomes:write: outcomes only (the application's token); traces:write may report them too.
    CAPABILITIES = ("config:read", "manifest:write", "traces:write", "outcomes:write")
    is_runtime_token = True  # lets the audit log tell a token from a user

    name = models.CharField(max_length=200)
    environment = models.ForeignKey(
        Environment, on_delete=models.PROTECT, related_name="runtime_tokens"
    )
    # "Every agent" is this flag, never an empty set: a token whose agents are all gone
    # covers no agent, it does not widen to all of them.
    all_agents = models.BooleanField(default=False, help_text="Every agent, now and later.")
    agents = models.ManyToManyField(
        Agent,
        blank=True,
        related_name="runtime_tokens",
        help_text="The agents it covers when not all agents (none: no agent).",
    )
    capabilities = ArrayField(models.CharField(max_length=30), default=list)
    prefix = models.CharField(max_length=16, help_text="First characters, to recognise a token.")
    token_hash = models.CharField(max_length=64, unique=True)
    created_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # Requests refused with 401 after the token was revoked (a runtime still using it),
    # counted in Redis and added here by beat (strategies.runtime.auth.refused_flush).
    refused_count = models.PositiveBigIntegerField(default=0)
    last_refused_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["environment__position", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.environment.key}, {self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class RuntimeInstance(models.Model):
    """One runtime process serving one agent in one environment, as it last reported itself
    (`POST /api/v1/runtime/heartbeat`): which SDK, over which transport, which configuration
    (ETag and document versions) it serves, with which token, and when it was last heard."""

    environment = models.ForeignKey(
        Environment, on_delete=models.CASCADE, related_name="runtime_instances"
    )
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="runtime_instances")
    instance = models.CharField(max_length=200, help_text="The runtime's own id (host, pid…).")
    token = models.ForeignKey(
        RuntimeToken, on_delete=models.SET_NULL, null=True, related_name="instances"
    )
    sdk_version = models.CharField(max_length=50, blank=True)
    runtime = models.CharField(max_length=200, blank=True, help_text="Runtime build, free text.")
    transport = models.CharField(max_length=10, blank=True)  # stream | poll
    resolution = models.CharField(max_length=20, blank=True)  # fresh, stale, unauthorized…
    etag = models.CharField(max_length=100, blank=True)
    documents = models.JSONField(default=dict, blank=True)  # {"profile": 7, "<strategy>": 3}
    serving_since = models.DateTimeField(help_text="When it started serving this ETag.")
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["environment", "agent", "instance"], name="runtime_instance_once"
            )
        ]
        indexes = [models.Index(fields=["environment", "agent", "-last_seen"])]

    def __str__(self) -> str:
        return f"{self.instance} ({self.agent_id}@{self.environment_id})"
