"""Runtime tokens: a runtime's credential for one environment."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models

from strategies.catalog.models import Agent, Environment


class RuntimeToken(models.Model):
    """A runtime's credential: one environment, every agent or some, some capabilities.
    Only the SHA-256 of the secret is stored; the secret is shown once at creation."""

    CAPABILITIES = ("config:read", "manifest:write", "traces:write")
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

    class Meta:
        ordering = ["environment__position", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.environment.key}, {self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
