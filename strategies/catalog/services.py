"""Writes about what exists: agents and environments (onboarding: create, edit, archive,
delete), and the manifests their runtimes report.

Creating agents and environments and changing environments are console-wide: they need
manage_catalog on all agents. Editing or archiving one agent needs it on that agent (404 when
the agent is out of the actor's scope). Deleting is for a mistake made a moment ago: it is
refused, with every reason, once anything refers to the agent or environment (releases,
traces, frozen versions, tokens, manifests…); archiving hides it and keeps its history.
"""

from __future__ import annotations

import re

from context_runtime import canonical
from context_runtime.findings import blocking
from context_runtime.manifest import validate_manifest
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError
from django.utils import timezone

from console.kernel.audit import AgentRef, AuditAction, actor_label, audit_record
from console.kernel.errors import Conflict, ValidationFailed
from console.kernel.limits import MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS
from console.kernel.models import Grant
from console.kernel.policy import Capability, check_user_can
from console.kernel.reasons import MAX_REASON_CHARS, reason_clean
from console.kernel.sessions import require_recent_authentication
from console.kernel.transactions import service_transaction
from console.kernel.writes import create_or_refuse
from strategies.catalog.dependents import (
    Reference,
    agent_documents,
    environment_archived,
    references_to_agent,
    references_to_environment,
)
from strategies.catalog.models import (
    SNAPSHOT_RETENTION_DAYS_DEFAULT,
    TRACE_RETENTION_DAYS_DEFAULT,
    Agent,
    Environment,
    Manifest,
)
from strategies.catalog.selectors import manifest_wire

# Retention is counted in whole days; ten years is the longest any environment may keep.
MAX_RETENTION_DAYS = 3650
MAX_POSITION = 32767  # the promotion order is a small positive integer

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
    if len(name) > MAX_NAME_CHARS:
        raise ValidationFailed(
            "The name is too long.",
            details=[{"path": "name", "code": "max_length", "message": "At most 200 characters."}],
        )
    return name


def _description_clean(description) -> str:
    description = (description or "").strip()
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise ValidationFailed(
            "The description is too long.",
            details=[
                {
                    "path": "description",
                    "code": "max_length",
                    "message": "At most 2,000 characters.",
                }
            ],
        )
    return description


def _whole_number(value, *, path: str, low: int, high: int, words: str) -> int:
    """An int in [low, high] (not a bool, not text), else 400 naming `path`."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationFailed(
            f"{words} must be a whole number from {low:,} to {high:,}.",
            details=[
                {
                    "path": path,
                    "code": "out_of_range",
                    "message": f"A whole number from {low:,} to {high:,}.",
                }
            ],
        )
    return value


def _retention_clean(trace_days, snapshot_days) -> tuple[int, int]:
    """Positive whole days, at most MAX_RETENTION_DAYS; a snapshot never outlives its trace."""
    trace_days = _whole_number(
        trace_days,
        path="trace_retention_days",
        low=1,
        high=MAX_RETENTION_DAYS,
        words="Trace retention",
    )
    snapshot_days = _whole_number(
        snapshot_days,
        path="snapshot_retention_days",
        low=1,
        high=MAX_RETENTION_DAYS,
        words="Snapshot retention",
    )
    if snapshot_days > trace_days:
        raise ValidationFailed(
            "Snapshots cannot be kept longer than their traces.",
            details=[
                {
                    "path": "snapshot_retention_days",
                    "code": "longer_than_traces",
                    "message": f"At most the trace retention ({trace_days} days): a snapshot "
                    "goes with its trace.",
                }
            ],
        )
    return trace_days, snapshot_days


def _flag(value, *, path: str) -> bool:
    if not isinstance(value, bool):
        raise ValidationFailed(
            f"{path} is true or false.",
            details=[{"path": path, "code": "invalid", "message": "true or false."}],
        )
    return value


def _note(reason) -> str:
    """An optional note for the audit log (archive, delete): trimmed, bounded."""
    return reason.strip()[:MAX_REASON_CHARS] if isinstance(reason, str) else ""


def state_digest(state: dict) -> str:
    """A short fingerprint of an agent's or environment's state: an edit form carries the one
    it was opened with, so a change someone made meanwhile is refused, not overwritten."""
    return canonical.content_hash(state)[:16]


def _check_unchanged(state: dict, loaded: str | None, *, what: str) -> None:
    if loaded and loaded != state_digest(state):
        raise Conflict(
            f"Someone changed {what} since you opened it; nothing was saved. Reload the page to "
            "see their change, then make yours again.",
            code="stale_state",
            extra={"current": state},
        )


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
        "require_preview": environment.require_preview,
        "trace_retention_days": environment.trace_retention_days,
        "snapshot_retention_days": environment.snapshot_retention_days,
        "archived": environment.archived_at is not None,
        "break_glass": break_glass_state(environment),
    }


def break_glass_state(environment: Environment) -> dict | None:
    """The break-glass in force in `environment` (None: none): since when, by whom, why, and
    which approval flags it switched off."""
    if environment.break_glass_at is None:
        return None
    return {
        "since": environment.break_glass_at.isoformat(),
        "by": environment.break_glass_by,
        "reason": environment.break_glass_reason,
        "relaxed": list(environment.break_glass_relaxed or []),
    }


# --- agents ----------------------------------------------------------------------------------------
@service_transaction
def agent_create(
    *, key: str, name: str = "", description: str = "", with_profile: bool = True, actor
) -> Agent:
    """Onboard an agent (needs manage_catalog on all agents), with its context profile (a
    document without versions yet, so the agent's page opens at once; `with_profile=False`
    for a caller that creates the profile itself, e.g. an import). 409 when the key is
    taken."""
    check_user_can(actor, Capability.MANAGE_CATALOG)
    key = _key_clean(key, what="agent")
    agent = create_or_refuse(
        Agent,
        lambda: Conflict(f"An agent named {key} already exists.", code="agent_exists"),
        key=key,
        name=_name_clean(name, default=key),
        description=_description_clean(description),
    )
    audit_record(
        actor=actor,
        action=AuditAction.AGENT_CREATE,
        target=agent,
        agent=agent,
        after=agent_state(agent),
    )
    if with_profile:
        agent_documents().profile_create(agent=agent, actor=actor)
    return agent


def _agent_locked(agent: Agent) -> Agent:
    """The agent's row, locked until the transaction ends: two admins editing it queue."""
    return Agent.objects.select_for_update().get(pk=agent.pk)


@service_transaction(durable=True)
def agent_update(
    *,
    agent: Agent,
    name: str | None = None,
    description: str | None = None,
    archived: bool | None = None,
    reason: str = "",
    loaded: str | None = None,
    actor,
) -> Agent:
    """Change an agent's name or description (its key is what runtimes send: it stays), and
    archive or unarchive it when `archived` is given — in one transaction. Needs
    manage_catalog on the agent. Audited with the fields that changed. With `loaded` (the
    `state_digest` the form was opened with) a change made meanwhile is refused (409)."""
    check_user_can(actor, Capability.MANAGE_CATALOG, agent, target=agent)
    agent = _agent_locked(agent)
    before = agent_state(agent)
    _check_unchanged(before, loaded, what=f"the agent {agent.key}")
    if name is not None:
        agent.name = _name_clean(name, default=agent.key)
    if description is not None:
        agent.description = _description_clean(description)
    after = agent_state(agent)
    if after != before:
        agent.save(update_fields=["name", "description"])
        audit_record(
            actor=actor,
            action=AuditAction.AGENT_UPDATE,
            target=agent,
            agent=agent,
            before=before,
            after=after,
        )
    if archived is not None:
        agent = _agent_archived_set(
            agent, archived=_flag(archived, path="archived"), actor=actor, reason=reason
        )
    return agent


# What archiving (True) and unarchiving (False) each kind of row is called in the audit log.
_ARCHIVE_ACTIONS = {
    Agent: {True: AuditAction.AGENT_ARCHIVE, False: AuditAction.AGENT_UNARCHIVE},
    Environment: {True: AuditAction.ENVIRONMENT_ARCHIVE, False: AuditAction.ENVIRONMENT_UNARCHIVE},
}


def _archived_set(row, *, archived: bool, actor, reason: str, state, agent=None):
    """Archive or unarchive a locked agent or environment row; audited when it changes (an
    agent or environment already so changes nothing and records nothing)."""
    if (row.archived_at is not None) == archived:
        return row
    before = state(row)
    row.archived_at = timezone.now() if archived else None
    row.save(update_fields=["archived_at"])
    note = _note(reason)
    audit_record(
        actor=actor,
        action=_ARCHIVE_ACTIONS[type(row)][archived],
        target=row,
        agent=agent,
        before=before,
        after=state(row) | ({"reason": note} if note else {}),
    )
    return row


def _agent_archived_set(agent: Agent, *, archived: bool, actor, reason: str) -> Agent:
    check_user_can(actor, Capability.MANAGE_CATALOG, agent, target=agent)
    agent = _agent_locked(agent)
    return _archived_set(
        agent, archived=archived, actor=actor, reason=reason, state=agent_state, agent=agent
    )


@service_transaction(durable=True)
def agent_archive(*, agent: Agent, actor, reason: str = "") -> Agent:
    """Hide an agent from lists, the dashboard and pickers; its pages, history, releases and
    its runtime's config stay as they are. Needs manage_catalog on the agent."""
    return _agent_archived_set(agent, archived=True, actor=actor, reason=reason)


@service_transaction(durable=True)
def agent_unarchive(*, agent: Agent, actor, reason: str = "") -> Agent:
    return _agent_archived_set(agent, archived=False, actor=actor, reason=reason)


def agent_delete_refusals(agent: Agent) -> list[dict]:
    """Why the agent cannot be deleted (empty: it can): what other jobs keep that refers to
    it (releases, traces, frozen versions, approval requests), asked of each of them."""
    return _details(references_to_agent(agent))


def _details(references: list[Reference]) -> list[dict]:
    """The refusal details of what refers to an agent or environment."""
    return [reference.as_detail() for reference in references]


def _in_use(what: str, refusals: list[dict]) -> Conflict:
    reasons = "; ".join(r["message"] for r in refusals)
    return Conflict(
        f"{what} cannot be deleted: {reasons}. Archive it instead: it disappears from lists "
        "and pickers and keeps its history.",
        code="in_use",
        details=refusals,
    )


@service_transaction(durable=True)
def agent_delete(*, agent: Agent, actor, reason: str = "") -> None:
    """Delete an agent made by mistake, with its profile, drafts and grants. Needs
    manage_catalog on all agents (creating one does). Refused (409, every reason) once it has
    releases, traces, frozen versions or approval requests: archive it instead; or while
    active tokens are scoped to it, named: revoke them first."""
    check_user_can(actor, Capability.MANAGE_CATALOG, agent, target=agent)
    check_user_can(
        actor,
        Capability.MANAGE_CATALOG,
        target=agent,
        message="Deleting an agent needs the permission to manage agents on all agents.",
    )
    agent = _agent_locked(agent)
    refusals = agent_delete_refusals(agent)
    if refusals:
        raise _in_use(f"The agent {agent.key}", refusals)
    before = agent_state(agent) | {
        "documents": sorted(agent.documents.values_list("key", flat=True)),
        "grants": Grant.objects.filter(agent=agent).count(),
    }
    target = ("strategies.agent", agent.pk, agent.key)
    try:
        with transaction.atomic():
            agent_documents().delete_with_agent(agent=agent)
            agent.delete()  # its grants, token scopes and config payloads go with it (CASCADE)
    except (ProtectedError, IntegrityError):
        # Something started referring to it meanwhile (a publish, a trace): say what.
        raise _in_use(
            f"The agent {agent.key}", agent_delete_refusals(agent) or _racing_refusal()
        ) from None
    audit_record(
        actor=actor,
        action=AuditAction.AGENT_DELETE,
        target=target,
        agent=AgentRef(before["key"], target[1]),  # the id it had: the row stays its own
        before=before,
        after={"reason": _note(reason)} if _note(reason) else None,
    )


def _racing_refusal() -> list[dict]:
    return [{"path": "", "code": "in_use", "message": "something refers to it now"}]


# --- environments ----------------------------------------------------------------------------------
@service_transaction(durable=True)
def environment_create(
    *,
    key: str,
    name: str = "",
    position: int | None = None,
    protected: bool = False,
    rollback_needs_approval: bool = False,
    require_preview: bool = False,
    trace_retention_days: int = TRACE_RETENTION_DAYS_DEFAULT,
    snapshot_retention_days: int = SNAPSHOT_RETENTION_DAYS_DEFAULT,
    actor,
) -> Environment:
    """Add an environment (needs manage_catalog on all agents). Without a position it goes
    last in the promotion order. 409 when the key is taken."""
    check_user_can(actor, Capability.MANAGE_CATALOG)
    key = _key_clean(key, what="environment")
    if position is None:
        last = Environment.objects.order_by("-position").values_list("position", flat=True)
        position = min((last.first() or 0) + 10, MAX_POSITION)
    position = _whole_number(
        position, path="position", low=0, high=MAX_POSITION, words="The position"
    )
    trace_days, snapshot_days = _retention_clean(trace_retention_days, snapshot_retention_days)
    environment = create_or_refuse(
        Environment,
        lambda: Conflict(f"An environment named {key} already exists.", code="environment_exists"),
        key=key,
        name=_name_clean(name, default=key),
        position=position,
        protected=_flag(protected, path="protected"),
        rollback_needs_approval=_flag(rollback_needs_approval, path="rollback_needs_approval"),
        require_preview=_flag(require_preview, path="require_preview"),
        trace_retention_days=trace_days,
        snapshot_retention_days=snapshot_days,
    )
    audit_record(
        actor=actor,
        action=AuditAction.ENVIRONMENT_CREATE,
        target=environment,
        after=environment_state(environment),
    )
    return environment


ENVIRONMENT_SETTINGS = (
    "name",
    "position",
    "protected",
    "rollback_needs_approval",
    "require_preview",
    "trace_retention_days",
    "snapshot_retention_days",
)
# The flags that ask a second person: switching one off lets one person put a version live
# (or roll back) alone, so doing that is itself guarded (`_approvals_relaxed`).
APPROVAL_FLAGS = ("protected", "rollback_needs_approval")
# The protections that follow the same rule where the environment is protected: there,
# switching the required preview off is one person lowering the bar alone, too.
PROTECTED_FLAGS = ("require_preview",)
BREAK_GLASS_FIELDS = (
    "break_glass_at",
    "break_glass_by",
    "break_glass_reason",
    "break_glass_relaxed",
)
APPROVAL_FLAG_WORDS = {
    "protected": "publishing needs a second person's approval",
    "rollback_needs_approval": "rollbacks need a second person's approval",
    "require_preview": "a publish needs a recent impact preview",
}


def relaxed_flags(environment: Environment, before: dict) -> list[str]:
    """The protections this change switches off: an approval flag anywhere, the required
    preview where the environment was protected."""
    relaxed = [f for f in APPROVAL_FLAGS if before[f] and not getattr(environment, f)]
    if before["protected"]:
        relaxed += [f for f in PROTECTED_FLAGS if before[f] and not getattr(environment, f)]
    return relaxed


def break_glass_required(environment: Environment, relaxed: list[str]) -> Conflict:
    """The refusal of switching approvals off in `environment` without a break-glass reason."""
    return Conflict(
        f"Switching off approvals in {environment.key} would let one person put a version live "
        "there alone (or lower the bar a version must pass), so nobody does it alone without "
        "saying so. Give a break-glass reason to do "
        f"it anyway: the change is flagged in the audit log, {environment.key} shows a banner "
        "until approvals are on again, and every version that goes live there meanwhile is "
        "marked unreviewed and is never offered as a rollback target. Nothing was saved.",
        code="break_glass_required",
        details=[
            {
                "path": flag,
                "code": "break_glass_required",
                "message": f"Switching this off ({APPROVAL_FLAG_WORDS[flag]}) alone is a "
                "break-glass: give a break-glass reason.",
            }
            for flag in relaxed
        ],
    )


def _approvals_relaxed(
    environment: Environment, before: dict, *, reason: str, actor
) -> AuditAction:
    """Judge the protections `environment` now holds against `before` (`relaxed_flags`):
    switching one off needs a break-glass reason (else 409 `break_glass_required`) and starts
    or widens the break-glass; switching back on every flag it relaxed ends it. Returns the
    audit action the change is recorded under."""
    relaxed = relaxed_flags(environment, before)
    if relaxed:
        if not (isinstance(reason, str) and reason.strip()):
            raise break_glass_required(environment, relaxed)
        require_recent_authentication(actor, action="switch approvals off (break-glass)")
        environment.break_glass_reason = reason_clean(
            reason,
            ask="Say why approvals must be off (recorded in the audit log and on the banner).",
            path="break_glass_reason",
        )
        environment.break_glass_at = environment.break_glass_at or timezone.now()
        environment.break_glass_by = actor_label(actor)
        environment.break_glass_relaxed = sorted(
            set(environment.break_glass_relaxed or []) | set(relaxed)
        )
        return AuditAction.ENVIRONMENT_BREAK_GLASS
    if environment.break_glass_at is None:
        return AuditAction.ENVIRONMENT_UPDATE
    still_off = [f for f in environment.break_glass_relaxed or [] if not getattr(environment, f)]
    environment.break_glass_relaxed = still_off
    if still_off:
        return AuditAction.ENVIRONMENT_UPDATE
    environment.break_glass_at = None
    environment.break_glass_by = environment.break_glass_reason = ""
    return AuditAction.ENVIRONMENT_BREAK_GLASS_END


def _environment_locked(environment: Environment) -> Environment:
    return Environment.objects.select_for_update().get(pk=environment.pk)


@service_transaction(durable=True)
def environment_update(
    *,
    environment: Environment,
    actor,
    archived: bool | None = None,
    reason: str = "",
    loaded: str | None = None,
    break_glass_reason: str = "",
    **changes,
) -> Environment:
    """Change an environment's settings (any of ENVIRONMENT_SETTINGS; its key stays: tokens
    and runtimes name it), and archive or unarchive it when `archived` is given, in one
    transaction. Needs manage_catalog on all agents. The row is locked, so two admins'
    changes apply one after the other, each audited with the fields it changed. Retention
    changes take effect at the next purge (traces.services). With `loaded` (the
    `state_digest` the form was opened with) a change made meanwhile is refused (409).

    Switching approvals off (`protected` or `rollback_needs_approval` true → false, or
    `require_preview` where the environment was protected) is
    refused (409 `break_glass_required`, nothing saved) unless `break_glass_reason` says why:
    then it is a break-glass, audited as such, that lasts until those flags are on again.
    Switching approvals on is always allowed; `break_glass_reason` is not read then."""
    check_user_can(actor, Capability.MANAGE_CATALOG, target=environment)
    unknown = sorted(set(changes) - set(ENVIRONMENT_SETTINGS))
    if unknown:
        raise ValidationFailed(
            "Unknown environment settings.",
            details=[{"path": n, "code": "unknown_field", "message": "Unknown."} for n in unknown],
        )
    environment = _environment_locked(environment)
    before = environment_state(environment)
    _check_unchanged(before, loaded, what=f"the environment {environment.key}")
    if changes.get("name") is not None:
        environment.name = _name_clean(changes["name"], default=environment.key)
    if changes.get("position") is not None:
        environment.position = _whole_number(
            changes["position"], path="position", low=0, high=MAX_POSITION, words="The position"
        )
    for flag in ("protected", "rollback_needs_approval", "require_preview"):
        if changes.get(flag) is not None:
            setattr(environment, flag, _flag(changes[flag], path=flag))
    trace_days = changes.get("trace_retention_days")
    snapshot_days = changes.get("snapshot_retention_days")
    environment.trace_retention_days, environment.snapshot_retention_days = _retention_clean(
        environment.trace_retention_days if trace_days is None else trace_days,
        environment.snapshot_retention_days if snapshot_days is None else snapshot_days,
    )
    action = _approvals_relaxed(environment, before, reason=break_glass_reason, actor=actor)
    after = environment_state(environment)
    if after != before:
        environment.save(update_fields=[*ENVIRONMENT_SETTINGS, *BREAK_GLASS_FIELDS])
        audit_record(
            actor=actor,
            action=action,
            target=environment,
            before=before,
            after=after,
        )
    if archived is not None:
        environment = _environment_archived_set(
            environment, archived=_flag(archived, path="archived"), actor=actor, reason=reason
        )
    return environment


def _environment_archived_set(environment, *, archived: bool, actor, reason: str):
    """Archive or unarchive; archiving stops what runs there beside the live versions (each
    job's part, `dependents.environment_archived`), in the same transaction."""
    check_user_can(actor, Capability.MANAGE_CATALOG, target=environment)
    environment = _environment_locked(environment)
    was_archived = environment.archived_at is not None
    environment = _archived_set(
        environment,
        archived=archived,
        actor=actor,
        reason=reason,
        state=environment_state,
    )
    if archived and not was_archived:
        environment_archived(environment, actor=actor, reason=reason)
    return environment


@service_transaction(durable=True)
def environment_archive(*, environment: Environment, actor, reason: str = "") -> Environment:
    """Hide an environment from the grids and pickers; nothing new can be published there
    (catalog.selectors.body_findings says so). What is live stays live, its runtime keeps
    reading its config and sending traces."""
    return _environment_archived_set(environment, archived=True, actor=actor, reason=reason)


@service_transaction(durable=True)
def environment_unarchive(*, environment: Environment, actor, reason: str = "") -> Environment:
    return _environment_archived_set(environment, archived=False, actor=actor, reason=reason)


def environment_delete_refusals(environment: Environment) -> list[dict]:
    """Why the environment cannot be deleted (empty: it can): what refers to it (releases,
    traces, runtime tokens, manifests, approval requests, webhooks), asked of each job."""
    return _details(references_to_environment(environment))


@service_transaction(durable=True)
def environment_delete(*, environment: Environment, actor, reason: str = "") -> None:
    """Delete an environment added by mistake. Needs manage_catalog on all agents. Refused
    (409, every reason) once it has releases, traces, runtime tokens, manifests, approval
    requests or webhooks: archive it instead."""
    check_user_can(actor, Capability.MANAGE_CATALOG, target=environment)
    environment = _environment_locked(environment)
    refusals = environment_delete_refusals(environment)
    if refusals:
        raise _in_use(f"The environment {environment.key}", refusals)
    before = environment_state(environment)
    target = ("strategies.environment", environment.pk, environment.key)
    try:
        with transaction.atomic():
            environment.delete()  # its config payloads go with it (CASCADE)
    except (ProtectedError, IntegrityError):
        raise _in_use(
            f"The environment {environment.key}",
            environment_delete_refusals(environment) or _racing_refusal(),
        ) from None
    audit_record(
        actor=actor,
        action=AuditAction.ENVIRONMENT_DELETE,
        target=target,
        before=before,
        after={"reason": _note(reason)} if _note(reason) else None,
    )


@service_transaction
def manifest_record(
    *,
    environment: Environment,
    body: dict,
    runtime: str = "",
    reported_by: str = "",
    instance: str = "",
    actor=None,
) -> tuple[Manifest, bool]:
    """Store what the runtime of `environment` implements. An identical body (same content
    hash as the latest version) creates nothing: returns (latest, False)."""
    problems = blocking(validate_manifest(body))
    if problems:
        raise ValidationFailed("The manifest is not valid.", details=problems)
    # Lock the environment row: concurrent reports get consecutive version numbers.
    Environment.objects.select_for_update().filter(pk=environment.pk).first()
    wire, digest = manifest_wire(environment=environment, body=body)
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
        instance=instance[:200],
    )
    audit_record(
        actor=actor,
        action=AuditAction.MANIFEST_RECORD,
        target=manifest,
        before={"version": latest.version, "body": latest.body} if latest else None,
        after={
            "version": manifest.version,
            "runtime": manifest.runtime,
            "instance": manifest.instance,
            "body": wire,
        },
    )
    return manifest, True
