"""Writes about what exists: agents and environments (onboarding), and the manifests their
runtimes report."""

from __future__ import annotations

import re

from context_runtime import canonical
from context_runtime.findings import blocking
from context_runtime.manifest import Manifest as RuntimeManifest
from context_runtime.manifest import validate_manifest

from console.audit import audit_record
from console.errors import Conflict, ValidationFailed
from console.policy import Capability, check_user_can, service_transaction
from console.writes import create_or_refuse
from strategies.catalog.models import Agent, Environment, Manifest

# Keys of agents and environments: what runtimes send and URLs carry.
CATALOG_KEY = re.compile(r"[a-z0-9][a-z0-9_-]{0,99}")


def _key_clean(key: str, *, what: str) -> str:
    key = (key or "").strip()
    if not CATALOG_KEY.fullmatch(key):
        raise ValidationFailed(
            f"That key cannot name an {what}.",
            details=[
                {
                    "path": "key",
                    "code": "invalid",
                    "message": "Use lowercase letters, digits, '-' and '_' (at most 100), "
                    "starting with a letter or digit, e.g. bank-uat.",
                }
            ],
        )
    return key


def _name_clean(name: str, *, default: str) -> str:
    name = (name or "").strip() or default
    if len(name) > 200:
        raise ValidationFailed(
            "The name is too long.",
            details=[{"path": "name", "code": "max_length", "message": "At most 200 characters."}],
        )
    return name


def agent_state(agent: Agent) -> dict:
    return {
        "key": agent.key,
        "name": agent.name,
        "description": agent.description,
        "archived": agent.archived_at is not None,
    }


def environment_state(environment: Environment) -> dict:
    return {
        "key": environment.key,
        "name": environment.name,
        "position": environment.position,
        "protected": environment.protected,
        "rollback_needs_approval": environment.rollback_needs_approval,
        "trace_retention_days": environment.trace_retention_days,
        "snapshot_retention_days": environment.snapshot_retention_days,
        "archived": environment.archived_at is not None,
    }


@service_transaction
def agent_create(*, key: str, name: str = "", description: str = "", actor) -> Agent:
    """Onboard an agent (needs manage_catalog on all agents). 409 when the key is taken."""
    check_user_can(actor, Capability.MANAGE_CATALOG)
    key = _key_clean(key, what="agent")
    agent = create_or_refuse(
        Agent,
        lambda: Conflict(f"An agent named {key} already exists.", code="agent_exists"),
        key=key,
        name=_name_clean(name, default=key),
        description=(description or "").strip(),
    )
    audit_record(
        actor=actor, action="agent.create", target=agent, agent=agent, after=agent_state(agent)
    )
    return agent


@service_transaction
def environment_create(
    *,
    key: str,
    name: str = "",
    position: int | None = None,
    protected: bool = False,
    rollback_needs_approval: bool = False,
    trace_retention_days: int = 30,
    snapshot_retention_days: int = 7,
    actor,
) -> Environment:
    """Add an environment (needs manage_catalog on all agents). Without a position it goes
    last in the promotion order. 409 when the key is taken."""
    check_user_can(actor, Capability.MANAGE_CATALOG)
    key = _key_clean(key, what="environment")
    if position is None:
        last = Environment.objects.order_by("-position").values_list("position", flat=True)
        position = (last.first() or 0) + 10
    environment = create_or_refuse(
        Environment,
        lambda: Conflict(f"An environment named {key} already exists.", code="environment_exists"),
        key=key,
        name=_name_clean(name, default=key),
        position=position,
        protected=protected,
        rollback_needs_approval=rollback_needs_approval,
        trace_retention_days=trace_retention_days,
        snapshot_retention_days=snapshot_retention_days,
    )
    audit_record(
        actor=actor,
        action="environment.create",
        target=environment,
        after=environment_state(environment),
    )
    return environment


@service_transaction
def manifest_record(
    *, environment: Environment, body: dict, runtime: str = "", reported_by: str = "", actor=None
) -> tuple[Manifest, bool]:
    """Store what the runtime of `environment` implements. An identical body (same content
    hash as the latest version) creates nothing: returns (latest, False)."""
    problems = blocking(validate_manifest(body))
    if problems:
        raise ValidationFailed("The manifest is not valid.", details=problems)
    # Lock the environment row: concurrent reports get consecutive version numbers.
    Environment.objects.select_for_update().filter(pk=environment.pk).first()
    # Normalised wire form: the order of names does not make a manifest different.
    wire = RuntimeManifest.from_dict(body, name=environment.key).to_dict()
    digest = canonical.content_hash(wire)
    latest = environment.manifests.order_by("-version").first()
    if latest is not None and latest.content_hash == digest:
        return latest, False
    manifest = Manifest.objects.create(
        environment=environment,
        version=(latest.version + 1) if latest else 1,
        runtime=runtime or str(body.get("runtime", ""))[:200],
        body=wire,
        content_hash=digest,
        reported_by=reported_by[:200],
    )
    audit_record(
        actor=actor,
        action="manifest.record",
        target=manifest,
        before={"version": latest.version, "body": latest.body} if latest else None,
        after={"version": manifest.version, "runtime": manifest.runtime, "body": wire},
    )
    return manifest, True
