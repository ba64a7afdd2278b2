"""Reads of runtime tokens and of the runtimes that report what they serve."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from context_runtime.findings import Finding
from django.db.models import Q
from django.utils import timezone

from console.kernel.errors import ValidationFailed
from strategies.catalog.dependents import Reference, agent_has_traces
from strategies.catalog.models import Agent, Environment
from strategies.catalog.selectors import environment_list, latest_manifests
from strategies.delivery.models import ConfigPayload
from strategies.documents.models import Document, Version
from strategies.runtime.auth import last_used_pending, refused_pending
from strategies.runtime.instances import (
    GONE_AFTER_SECONDS,
    LAGGING_AFTER_SECONDS,
    LISTED_FOR_HOURS,
    STOPPED,
    sdk_supported,
)
from strategies.runtime.models import RuntimeInstance, RuntimeToken


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


# --------------------------------------------------------------------------- who serves what
UNAUTHORIZED = "unauthorized"  # the SDK's resolution of a copy the console refuses to confirm


@dataclass
class RuntimeRow:
    """One runtime process serving the agent in an environment, judged against what is live."""

    instance: RuntimeInstance
    current: bool  # serves the live configuration (its ETag)
    lagging: bool  # still on another one LAGGING_AFTER_SECONDS after the change
    gone: bool  # said it stopped, or unheard for GONE_AFTER_SECONDS
    sdk_supported: bool | None
    token_revoked: bool

    @property
    def resolution(self) -> str:
        """What the runtime serves its copy as: its last heartbeat's word, except that a
        runtime whose token is revoked is `unauthorized` from then on — its heartbeats are
        refused, so the console knows it before the runtime can say so."""
        return UNAUTHORIZED if self.token_revoked else self.instance.resolution


@dataclass
class EnvironmentRuntimes:
    environment: Environment
    live_etag: str
    live_since: datetime | None
    live_versions: dict[str, int]
    rows: list[RuntimeRow] = field(default_factory=list)
    revoked_tokens: list[RuntimeToken] = field(default_factory=list)

    @property
    def active(self) -> list[RuntimeRow]:
        return [r for r in self.rows if not r.gone]

    @property
    def serving(self) -> int:
        return sum(1 for r in self.active if r.current)

    @property
    def live_label(self) -> str:
        """`after_sales_consultation v4 · profile v2`, what "serve …" names."""
        return " · ".join(f"{key} v{number}" for key, number in sorted(self.live_versions.items()))

    @property
    def summary(self) -> str:
        active = len(self.active)
        if not active:
            return "No runtime has reported here in the last minutes."
        noun = "runtime serves" if active == 1 and self.serving == 1 else "runtimes serve"
        return f"{self.serving} of {active} {noun} {self.live_label or self.live_etag}"

    @property
    def warnings(self) -> list[RuntimeRow]:
        return [r for r in self.active if r.lagging or r.sdk_supported is False]


def runtimes_of_agent(*, agent: Agent, now: datetime | None = None) -> list[EnvironmentRuntimes]:
    """Per environment (promotion order), the runtimes serving `agent` heard in the last
    LISTED_FOR_HOURS, against the live configuration; and the revoked tokens of that
    environment still being used. Three queries."""
    now = now or timezone.now()
    payloads = {
        p.environment_id: p
        for p in ConfigPayload.objects.filter(agent=agent).only(
            "environment_id", "etag", "body", "rendered_at"
        )
    }
    instances = (
        RuntimeInstance.objects.filter(
            agent=agent, last_seen__gte=now - timedelta(hours=LISTED_FOR_HOURS)
        )
        .select_related("token")
        .order_by("-last_seen")
    )
    by_env: dict[int, list[RuntimeInstance]] = {}
    for item in instances:
        by_env.setdefault(item.environment_id, []).append(item)
    pending = refused_pending()
    revoked = [
        t
        for t in RuntimeToken.objects.filter(revoked_at__isnull=False).filter(
            Q(refused_count__gt=0) | Q(token_hash__in=list(pending))
        )
        if t.all_agents or t.agents.filter(pk=agent.pk).exists()
    ]
    for token in revoked:
        count, at = pending.get(token.token_hash, (0, ""))
        token.refused_count += count
        if at and (
            token.last_refused_at is None or datetime.fromisoformat(at) > token.last_refused_at
        ):
            token.last_refused_at = datetime.fromisoformat(at)
    result = []
    for environment in environment_list():
        payload = payloads.get(environment.pk)
        live_etag = payload.etag if payload else ""
        live_since = payload.rendered_at if payload else None
        versions: dict[str, int] = {}
        if payload is not None and payload.body:
            body = json.loads(bytes(payload.body))
            if body.get("profile"):
                versions["profile"] = body["profile"]["version"]
            versions.update({k: v["version"] for k, v in (body.get("strategies") or {}).items()})
        rows = []
        for item in by_env.get(environment.pk, []):
            current = bool(live_etag) and item.etag == live_etag
            changed_long_ago = live_since is not None and (now - live_since).total_seconds() > (
                LAGGING_AFTER_SECONDS
            )
            rows.append(
                RuntimeRow(
                    instance=item,
                    current=current,
                    lagging=not current and changed_long_ago,
                    gone=item.transport == STOPPED
                    or (now - item.last_seen).total_seconds() > GONE_AFTER_SECONDS,
                    sdk_supported=sdk_supported(item.sdk_version),
                    token_revoked=item.token is not None and item.token.revoked_at is not None,
                )
            )
        env_revoked = [t for t in revoked if t.environment_id == environment.pk]
        if rows or env_revoked or payload is not None:
            result.append(
                EnvironmentRuntimes(
                    environment=environment,
                    live_etag=live_etag,
                    live_since=live_since,
                    live_versions=versions,
                    rows=rows,
                    revoked_tokens=env_revoked,
                )
            )
    return result


def runtime_instances_list(*, agents, environment: Environment | None = None):
    """The operator API's list: runtimes of `agents` (a queryset the caller may see), newest
    heard first."""
    items = RuntimeInstance.objects.filter(agent__in=agents).select_related(
        "agent", "environment", "token"
    )
    if environment is not None:
        items = items.filter(environment=environment)
    return items.order_by("-last_seen", "pk")
