"""Reads of runtime tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from context_runtime.findings import Finding

from console.kernel.errors import ValidationFailed
from strategies.catalog.dependents import Reference
from strategies.catalog.models import Agent, Environment
from strategies.catalog.selectors import environment_list, latest_manifests
from strategies.documents.models import Document, Version
from strategies.runtime.auth import last_used_pending
from strategies.runtime.models import RuntimeToken
from traces.selectors import agent_has_traces


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


def agents_named(keys) -> list[Agent]:
    """The agents of these keys, in key order; 400 naming any that does not exist (deleted
    since the form was shown): never fewer agents than asked for, which could read as none."""
    keys = sorted(set(keys))
    agents = list(Agent.objects.filter(key__in=keys).order_by("key"))
    unknown = sorted(set(keys) - {a.key for a in agents})
    if unknown:
        raise ValidationFailed(
            "Unknown agent " + ", ".join(unknown) + ".",
            details=[Finding("agents", "unknown_agent", f"Unknown agent {k}.") for k in unknown],
        )
    return agents


def references_to_agent(agent) -> list[Reference]:
    """Active runtime tokens naming the agent refuse its delete (named, to revoke first):
    without it they would cover no agent, and revoking is for a person to decide."""
    names = list(
        RuntimeToken.objects.filter(agents=agent, revoked_at__isnull=True)
        .order_by("name")
        .values_list("name", flat=True)
    )
    if not names:
        return []
    return [
        Reference(
            "has_runtime_tokens",
            "runtime tokens are scoped to it ("
            + ", ".join(f"“{name}”" for name in names)
            + "): revoke them first",
        )
    ]


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


# --------------------------------------------------------------------------- a new agent's next steps (documents, manifests, traces: what connecting a runtime still needs)
@dataclass
class Onboarding:
    """What a new agent still lacks, in the order a team does it: a strategy (or a profile
    version), a runtime that reported its manifest in each environment, a first trace."""

    agent: Agent
    has_documents: bool
    environments_without_manifest: list[Environment] = field(default_factory=list)
    environments: list[Environment] = field(default_factory=list)
    has_traces: bool = False

    @property
    def done(self) -> bool:
        return self.has_documents and not self.environments_without_manifest and self.has_traces


def agent_onboarding(*, agent: Agent) -> Onboarding:
    """Four small queries (the agent's versions and strategies, the latest manifests, one
    trace of the agent's through its index)."""
    environments = environment_list()
    reported = latest_manifests()
    return Onboarding(
        agent=agent,
        has_documents=Version.objects.filter(document__agent=agent).exists()
        or Document.objects.filter(agent=agent, kind=Document.Kind.STRATEGY).exists(),
        environments_without_manifest=[e for e in environments if e.pk not in reported],
        environments=environments,
        has_traces=agent_has_traces(agent),
    )
