"""The one write path for the audit log and the access log.

Services call `audit_record(...)` inside their own transaction, so a change and its audit
row commit or roll back together. Rows are hash-chained: a transaction-scoped advisory lock
serialises writers per log, so each row's `prev_hash` is the hash of the row before it (and
rows commit in id order). `chain_head` reads a chain's newest row for the checkpoints that
anchor it; `chain_verify` walks a chain and checks it still reaches them.

The lock order: the chain locks are the last locks a transaction takes. Inside a service
transaction (`console.kernel.transactions.service_transaction`, which opens
`log_rows_appended_last`) a row is only prepared when the service writes it; the rows are
appended — lock, chain head, insert, in the order they were written — as the outermost
service's last step before its commit, the audit log's lock before the access log's. So a
transaction takes its domain rows' locks first and a chain lock last, never the reverse (an
import that took the chain first and a release row later deadlocked a publish that took
them the other way), and it holds the chain lock for the moment between its last insert
and its commit, not while it works (a 3 s import no longer holds back every audited write
in the console). The rows of a nested service that fails go with its savepoint; a row
written outside any service transaction (the Django admin, a refusal logged once its unit
of work is over) is appended at once, in a transaction of its own when there is none.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from console.kernel.models import (
    AccessLogEntry,
    AuditRecord,
    ChainCheckpoint,
    Grant,
    agent_model,
)
from console.kernel.request_context import current_request, ip_normalise
from console.kernel.wording import counted


# --- the actions, one list per log ------------------------------------------------------------
class _LabelledAction(StrEnum):
    """An action as stored (`agent.create`: the row's `action`, covered by its hash, so a
    value never changes) with the words the log filter offers for it."""

    label: str

    def __new__(cls, value: str, label: str):
        member = str.__new__(cls, value)
        member._value_ = value
        member.label = label
        return member

    @property
    def family(self) -> str:
        """What it acts on, as the filter's prefix: "agent." for agent.create."""
        return self.value.partition(".")[0] + "."


class AuditAction(_LabelledAction):
    """Every change written to the audit log (`audit_record`)."""

    # catalog
    AGENT_CREATE = "agent.create", "Agent created"
    AGENT_UPDATE = "agent.update", "Agent changed"
    AGENT_ARCHIVE = "agent.archive", "Agent archived"
    AGENT_UNARCHIVE = "agent.unarchive", "Agent unarchived"
    AGENT_DELETE = "agent.delete", "Agent deleted"
    ENVIRONMENT_CREATE = "environment.create", "Environment created"
    ENVIRONMENT_UPDATE = "environment.update", "Environment changed"
    ENVIRONMENT_ARCHIVE = "environment.archive", "Environment archived"
    ENVIRONMENT_UNARCHIVE = "environment.unarchive", "Environment unarchived"
    ENVIRONMENT_DELETE = "environment.delete", "Environment deleted"
    # One person switched approvals off (break-glass, with a reason), and their end.
    ENVIRONMENT_BREAK_GLASS = "environment.break_glass", "Break-glass: approvals switched off"
    ENVIRONMENT_BREAK_GLASS_END = (
        "environment.break_glass_end",
        "Break-glass ended: approvals back on",
    )
    DOCUMENT_CREATE = "document.create", "Document created"
    MANIFEST_RECORD = "manifest.record", "Runtime manifest recorded"
    # documents
    DRAFT_CREATE = "draft.create", "Draft started"
    DRAFT_UPDATE = "draft.update", "Draft edited"
    DRAFT_DISCARD = "draft.discard", "Draft discarded"
    VERSION_FREEZE = "version.freeze", "Version frozen"
    # releases and approvals
    RELEASE_PUBLISH = "release.publish", "Published"
    RELEASE_APPROVE = "release.approve", "Approved publish applied"
    RELEASE_ROLLBACK = "release.rollback", "Rolled back"
    RELEASE_PROMOTE = "release.promote", "Promoted"
    APPROVAL_REQUEST = "approval.request", "Approval requested"
    APPROVAL_REJECT = "approval.reject", "Approval rejected"
    APPROVAL_WITHDRAW = "approval.withdraw", "Approval request withdrawn"
    APPROVAL_APPROVE_HELD = (
        "approval.approve_held",
        "Approved; waits for the external change record",
    )
    # external change records (issue 34 item 1, docs/change-approvals.md)
    CHANGE_SYSTEM_UPDATE = "change_system.update", "Change system configured"
    CHANGE_RECORD_REQUEST = "change_record.request", "Change record requested"
    CHANGE_RECORD_DELIVERY_FAIL = "change_record.delivery_fail", "Change request not delivered"
    CHANGE_RECORD_APPROVE = "change_record.approve", "Change record approved"
    CHANGE_RECORD_REJECT = "change_record.reject", "Change record rejected"
    CHANGE_RECORD_EXPIRE = "change_record.expire", "Change record expired"
    CHANGE_RECORD_REFUSE = "change_record.refuse", "Change system answer refused"
    CHANGE_RECORD_USE = "change_record.use", "Change record used by a release"
    CHANGE_RECORD_GO_LIVE_REFUSED = (
        "change_record.go_live_refused",
        "Waiting go-live refused at the change approval",
    )
    SHADOW_START = "shadow.start", "Shadow release started"
    SHADOW_STOP = "shadow.stop", "Shadow release stopped"
    # staged rollouts (issue 23): an operator's action, or a guard's (actor system, guard:<name>)
    ROLLOUT_START = "rollout.start", "Staged rollout started"
    ROLLOUT_APPROVE = "rollout.approve", "Staged rollout plan approved"
    ROLLOUT_PAUSE = "rollout.pause", "Staged rollout paused"
    ROLLOUT_RESUME = "rollout.resume", "Staged rollout resumed"
    ROLLOUT_STEP = "rollout.step", "Staged rollout moved to its next step"
    ROLLOUT_EXTEND = "rollout.extend", "Staged rollout step extended (too little data)"
    ROLLOUT_COMPLETE = "rollout.complete", "Staged rollout completed"
    ROLLOUT_STOP = "rollout.stop", "Staged rollout stopped"
    ROLLOUT_ROLLBACK = "rollout.rollback", "Staged rollout rolled back by a guard"
    ROLLOUT_WATCH_WARN = "rollout.watch_warn", "Paired watch warned of a regression"
    ROLLOUT_WATCH_END = "rollout.watch_end", "Paired watch ended"
    # when changes may go live (issue 34 item 2): freeze windows, change hours, the freeze
    # break-glass, and go-lives scheduled for a time (the fire and the refusal by the system)
    FREEZE_WINDOW_CREATE = "freeze_window.create", "Freeze window added"
    FREEZE_WINDOW_DELETE = "freeze_window.delete", "Freeze window removed"
    CHANGE_HOURS_SET = "change_hours.set", "Change hours set"
    FREEZE_BREAK_GLASS_START = (
        "freeze_break_glass.start",
        "Freeze break-glass: go-lives let through",
    )
    FREEZE_BREAK_GLASS_END = "freeze_break_glass.end", "Freeze break-glass ended"
    SCHEDULE_CREATE = "schedule.create", "Go-live scheduled"
    SCHEDULE_CANCEL = "schedule.cancel", "Scheduled go-live cancelled"
    SCHEDULE_FIRE = "schedule.fire", "Scheduled go-live ran"
    SCHEDULE_REFUSE = "schedule.refuse", "Scheduled go-live refused at its time"
    # configuration as code
    CONFIG_IMPORT = "config.import", "Configuration imported"
    # delivery and runtime
    WEBHOOK_CREATE = "webhook.create", "Webhook created"
    WEBHOOK_DELETE = "webhook.delete", "Webhook deleted"
    RUNTIME_TOKEN_CREATE = "runtime_token.create", "Runtime token created"
    RUNTIME_TOKEN_REVOKE = "runtime_token.revoke", "Runtime token revoked"
    # outcomes: the kinds an environment accepts (traces.outcomes)
    OUTCOME_KIND_DECLARE = "outcome_kind.declare", "Outcome kind declared"
    OUTCOME_KIND_UPDATE = "outcome_kind.update", "Outcome kind changed"
    OUTCOME_KIND_RETIRE = "outcome_kind.retire", "Outcome kind retired"
    OUTCOME_KIND_RESTORE = "outcome_kind.restore", "Outcome kind restored"
    # data protection (issue 34.4): an environment's redaction rules, erasures by principal
    REDACTION_RULE_CREATE = "redaction_rule.create", "Redaction rule added"
    REDACTION_RULE_DELETE = "redaction_rule.delete", "Redaction rule removed"
    PRINCIPAL_ERASE = "principal.erase", "Principal erased from traces"
    # standing alerts on context health (issue 35.4): rules and silences (traces.alerts)
    ALERT_RULE_CREATE = "alert_rule.create", "Alert rule created"
    ALERT_RULE_UPDATE = "alert_rule.update", "Alert rule changed"
    ALERT_SILENCE_CREATE = "alert_silence.create", "Alerts silenced"
    ALERT_SILENCE_LIFT = "alert_silence.lift", "Alert silence lifted"
    # regression sets (issue 35): requests kept with what they must decide from now on
    REGRESSION_SET_CREATE = "regression_set.create", "Regression set created"
    REGRESSION_SET_UPDATE = "regression_set.update", "Regression set changed"
    REGRESSION_SET_DELETE = "regression_set.delete", "Regression set deleted"
    REGRESSION_MEMBER_ADD = "regression_member.add", "Request added to a regression set"
    REGRESSION_MEMBER_REMOVE = "regression_member.remove", "Request removed from a regression set"
    # The daily purge (actor system): members past their set's retention.
    REGRESSION_MEMBER_EXPIRE = "regression_member.expire", "Regression set members expired"
    # access and accounts
    ROLE_CREATE = "role.create", "Role created"
    ROLE_UPDATE = "role.update", "Role changed"
    GRANT_CREATE = "grant.create", "Role granted"
    GRANT_REVOKE = "grant.revoke", "Grant revoked"
    AUTH_UNLOCK = "auth.unlock", "Sign-in unlocked"
    # single sign-on (issue 33): accounts made at a first sign-in, group → role mappings
    SSO_ACCOUNT_CREATE = "sso_account.create", "Account created at first single sign-on"
    GROUP_MAPPING_CREATE = "group_mapping.create", "Group mapped to a role"
    GROUP_MAPPING_DELETE = "group_mapping.delete", "Group mapping removed"
    # A sign-in met a mapping whose role is gone: nothing granted, and said so here.
    GROUP_MAPPING_ROLE_MISSING = (
        "group_mapping.role_missing",
        "Group mapping skipped: its role no longer exists",
    )
    # enforced single sign-on (issue 33 item 4): break-glass accounts, second factors
    BREAK_GLASS_MARK = "break_glass_account.mark", "Account marked break-glass"
    BREAK_GLASS_UNMARK = "break_glass_account.unmark", "Account no longer break-glass"
    SECOND_FACTOR_ENROL = "second_factor.enrol", "Second factor enrolled"
    SECOND_FACTOR_REMOVE = "second_factor.remove", "Second factor removed"
    RECOVERY_CODES_REGENERATE = "second_factor.recovery_codes", "New recovery codes made"
    # the audit and access logs streamed to a SIEM (issue 34): its destinations
    SIEM_DESTINATION_CREATE = "siem_destination.create", "SIEM destination added"
    SIEM_DESTINATION_UPDATE = "siem_destination.update", "SIEM destination changed"
    SIEM_DESTINATION_PAUSE = "siem_destination.pause", "SIEM destination paused"
    SIEM_DESTINATION_RESUME = "siem_destination.resume", "SIEM destination resumed"
    SIEM_DESTINATION_DELETE = "siem_destination.delete", "SIEM destination removed"
    # SCIM provisioning (issue 33): its tokens, and what a provider's SCIM client changed
    # (actor: the system, named "scim:<provider>:<token name>").
    SCIM_TOKEN_CREATE = "scim_token.create", "SCIM token created"
    SCIM_TOKEN_REVOKE = "scim_token.revoke", "SCIM token revoked"
    SCIM_USER_CREATE = "scim_user.create", "SCIM: person provisioned"
    SCIM_USER_UPDATE = "scim_user.update", "SCIM: person changed"
    SCIM_USER_DEACTIVATE = "scim_user.deactivate", "SCIM: person deactivated"
    SCIM_USER_REACTIVATE = "scim_user.reactivate", "SCIM: person reactivated"
    SCIM_USER_DELETE = "scim_user.delete", "SCIM: person deleted (account kept, deactivated)"
    SCIM_USER_LINK = "scim_user.link", "SCIM: person linked at their first single sign-on"
    SCIM_GROUP_CREATE = "scim_group.create", "SCIM: group created"
    SCIM_GROUP_UPDATE = "scim_group.update", "SCIM: group or its members changed"
    SCIM_GROUP_DELETE = "scim_group.delete", "SCIM: group deleted"
    PERSONAL_TOKEN_CREATE = "personal_token.create", "Personal token created"
    PERSONAL_TOKEN_REVOKE = "personal_token.revoke", "Personal token revoked"
    # the Django admin (break glass)
    ADMIN_ADD = "admin.add", "Admin: added"
    ADMIN_CHANGE = "admin.change", "Admin: changed"
    ADMIN_CHANGE_RELATED = "admin.change_related", "Admin: changed related rows"
    ADMIN_DELETE = "admin.delete", "Admin: deleted"
    ADMIN_PASSWORD_CHANGE = "admin.password_change", "Admin: password changed"


class AccessAction(_LabelledAction):
    """Every look, export, sign-in and refusal written to the access log (`access_record`)."""

    TRACE_VIEW = "trace.view", "Trace viewed"
    TRACE_SEARCH = "trace.search", "Trace searched"
    TRACE_LIST = "trace.list", "Trace list viewed"
    TRACE_EXPORT = "trace.export", "Trace exported"
    # The engine re-run on a trace's stored candidates (its version, what is live, a draft).
    TRACE_REPLAY = "trace.replay", "Trace replayed"
    # Impact previews replay a window of retained traces: requesting one and reading its
    # report (request ids, decisions) are looks at traces.
    PREVIEW_REQUEST = "preview.request", "Impact preview requested"
    PREVIEW_VIEW = "preview.view", "Impact preview viewed"
    PREVIEW_CANCEL = "preview.cancel", "Impact preview cancelled"
    SNAPSHOT_VIEW = "snapshot.view", "Snapshot revealed"
    # A regression set's members are kept requests: reading them, or checking a version
    # against them (their decisions), is a look at traces.
    REGRESSION_SET_VIEW = "regression_set.view", "Regression set viewed"
    REGRESSION_SET_CHECK = "regression_set.check", "Regression sets checked"
    # The outcomes reported for a request (operator API; the trace page's are its view's).
    OUTCOME_VIEW = "outcome.view", "Outcomes viewed"
    AUDIT_EXPORT = "audit.export", "Audit log exported"
    CONFIG_EXPORT = "config.export", "Configuration exported"
    AUTH_LOGIN = "auth.login", "Sign-in"
    # A session ended by the console (console.kernel.sessions): `why` idle or absolute.
    AUTH_SESSION_EXPIRE = "auth.session_expire", "Signed out: session expired"
    # A password confirmed (or not) before a dangerous action: `why`, the action's words.
    AUTH_REAUTHENTICATE = "auth.reauthenticate", "Password confirmed for a sensitive action"
    # A second factor at sign-in or re-authentication: `kind`, and `why` when refused.
    AUTH_SECOND_FACTOR = "auth.second_factor", "Second factor checked"
    ACCESS_DENIED = "access.denied", "Access refused"
    # A runtime's manifest report refused because it breaks live (issue 32): nothing changed,
    # so not an audit row; kept so the runtimes page can say which runtime tried what.
    MANIFEST_REFUSE = "manifest.refuse", "Manifest report refused"


def _member(actions: type[_LabelledAction], action) -> _LabelledAction:
    """`action` if it is a member of its log's list, else TypeError at once: a plain string
    (even one that is a member's value), another log's member or anything else is refused,
    so every action written is one the audit page's filter offers."""
    if not isinstance(action, actions):
        raise TypeError(f"{actions.__name__} expected, got {action!r}")
    return action


def action_filter_choices(actions: type[_LabelledAction]) -> list:
    """The log filter's choices, grouped by family: the family as a prefix ("every agent
    action") when it has several members, then each member by its label."""
    families: dict[str, list[_LabelledAction]] = {}
    for member in actions:
        families.setdefault(member.family, []).append(member)
    groups = []
    for family, members in families.items():
        every = f"Every {family[:-1].replace('_', ' ')} action ({family}*)"
        options = [(family, every)] if len(members) > 1 else []
        options += [(m.value, f"{m.label} ({m.value})") for m in members]
        groups.append((family, options))
    return groups


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
# Hashed only when non-empty (after the fields above), so rows written before they existed
# keep their hash: the personal token a user acted through, the id of the row's agent.
OPTIONAL_HASHED = ("actor_token_id", "actor_token_label", "agent_id")
AUDIT_HASHED = ("before", "after", "changes")
_EXTRA_HASHED = {
    "AuditRecord": AUDIT_HASHED,
    "AccessLogEntry": ("outcome", "reason", "detail"),
}
_LOCK_KEYS = {"AuditRecord": 7_201_001, "AccessLogEntry": 7_201_002}
# The chained logs by their name in checkpoints (and in `audit_verify --anchor`).
CHAIN_LOGS = {ChainCheckpoint.Log.AUDIT: AuditRecord, ChainCheckpoint.Log.ACCESS: AccessLogEntry}


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def hashed_fields(model_name: str) -> tuple[str, ...]:
    """Every field a row's hash may cover (the optional ones only count when set)."""
    return CHAIN_FIELDS + _EXTRA_HASHED[model_name] + OPTIONAL_HASHED


def record_hash(model_name: str, fields: dict[str, Any], prev_hash: str) -> str:
    names = CHAIN_FIELDS + _EXTRA_HASHED[model_name]
    names += tuple(n for n in OPTIONAL_HASHED if fields.get(n))
    material = json.dumps(
        [prev_hash, [[n, _jsonable(fields.get(n))] for n in names]],
        sort_keys=True,
        separators=(",", ":"),
        default=str,
        ensure_ascii=False,
    )
    return hashlib.sha256(material.encode()).hexdigest()


# The attribute console.accounts.authentication sets on the user of a request made with a personal
# API token (console.kernel.policy narrows the user's grants to its scope; the logs name it).
PERSONAL_TOKEN_ATTR = "personal_token"


def acting_token(actor):
    """The personal token a user acts through in this request, or None."""
    return getattr(actor, PERSONAL_TOKEN_ATTR, None)


@dataclass(frozen=True)
class SystemActor:
    """The console acting by itself (a periodic task, a guard of a staged rollout): audited
    as actor type `system`, named by `name` ("system", "guard:paired")."""

    name: str = "system"
    is_system = True
    is_authenticated = False
    is_active = False
    pk = None

    def __str__(self) -> str:
        return self.name


def actor_label(actor) -> str:
    """How a release, a version or a token names who made it: a username ("alice (token
    ci-deploy)" through a personal token), a runtime token's name, or "system"."""
    label = getattr(actor, "username", "") or getattr(actor, "name", "") or "system"
    token = acting_token(actor)
    return f"{label} (token {token.name})" if token is not None else label


def describe_actor(actor) -> dict[str, Any]:
    """Actor columns for a user (and the personal token they act through, if any), a
    runtime token, or None (the system). `actor_token_label` is "" without a token."""
    no_token = {"actor_token_id": "", "actor_token_label": ""}
    if actor is None or getattr(actor, "is_system", False):
        return {
            "actor_type": "system",
            "actor_id": "",
            "actor_label": getattr(actor, "name", "system"),
            "actor_roles": [],
            **no_token,
        }
    if getattr(actor, "is_runtime_token", False):
        return {
            "actor_type": "token",
            "actor_id": str(actor.pk),
            "actor_label": f"token:{actor.name}",
            "actor_roles": list(getattr(actor, "capabilities", [])),
            **no_token,
        }
    if not getattr(actor, "is_authenticated", False):
        return {
            "actor_type": "anonymous",
            "actor_id": "",
            "actor_label": "anonymous",
            "actor_roles": [],
            **no_token,
        }
    token = acting_token(actor)
    return {
        "actor_type": "user",
        "actor_id": str(actor.pk),
        "actor_label": actor.get_username(),
        "actor_roles": Grant.objects.role_names(actor),
        "actor_token_id": str(token.pk) if token is not None else "",
        "actor_token_label": token.name if token is not None else "",
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


def _append(model, rows: list[dict[str, Any]]) -> list:
    """Append `rows` to `model`'s chain, in order: its lock (held until the transaction
    commits), then the head, then the inserts."""
    name = model.__name__
    with transaction.atomic():
        # One round trip for the transaction's start, the lock and the chain head: pipelined,
        # yet two statements, so the head's snapshot is taken once the lock is held (one
        # statement would read the head as it was before waiting for the lock).
        with connection.cursor() as lock, connection.cursor() as head:
            with connection.wrap_database_errors, connection.connection.pipeline():
                # The address is hashed as PostgreSQL hands it back (`host(inet)`), so the
                # hash covers exactly what audit_verify reads, whatever form it arrived in.
                lock.execute(
                    "SELECT pg_advisory_xact_lock(%s), ARRAY(SELECT host(ip::inet) FROM "
                    "unnest(%s::text[]) WITH ORDINALITY AS given(ip, n) ORDER BY n)",
                    [_LOCK_KEYS[name], [fields["ip"] for fields in rows]],
                )
                head.execute(
                    f"SELECT hash FROM {model._meta.db_table} ORDER BY id DESC LIMIT 1"  # noqa: S608 - the model's table
                )
            ips = lock.fetchone()[1]
            newest = head.fetchone()
        prev = newest[0] if newest else GENESIS
        written = []
        for fields, ip in zip(rows, ips, strict=True):
            fields.update(ip=ip, prev_hash=prev)
            fields["hash"] = prev = record_hash(name, fields, prev)
            written.append(model.objects.create(**fields))
        return written


# The rows prepared inside the current service transaction, waiting for its end (None
# outside any): (model, fields) in the order they were written.
_pending_rows: ContextVar[list | None] = ContextVar("pending_log_rows", default=None)


@contextmanager
def log_rows_appended_last() -> Iterator[None]:
    """Inside a transaction (a service's): the audit and access rows written in the block
    are appended when it ends — by the outermost block, as its last step before the commit;
    a nested block that succeeds hands them to the one around it, one that fails drops them
    (its savepoint rolls back what they describe). A plain `transaction.atomic()` inside a
    service is no such boundary: a service writes its row after such a block, once it held
    (as `agent_delete` does)."""
    outer = _pending_rows.get()
    rows: list = []
    token = _pending_rows.set(rows)
    try:
        yield
    finally:
        _pending_rows.reset(token)
    if outer is not None:
        outer.extend(rows)
        return
    for model in CHAIN_LOGS.values():  # one lock order: the audit log's, then the access log's
        mine = [fields for row_model, fields in rows if row_model is model]
        if mine:
            _append(model, mine)


def _write(model, fields: dict[str, Any]):
    """The row, appended at once — or, inside a service transaction, when it ends (None)."""
    pending = _pending_rows.get()
    if pending is None:
        return _append(model, [fields])[0]
    pending.append((model, fields))
    return None


@dataclass(frozen=True)
class AgentRef:
    """An agent as a log row names it, for one that is gone by the time the row is written
    (`agent.delete`): its key and the id it had."""

    key: str
    pk: int | None


def describe_agent(agent) -> dict[str, Any]:
    """The agent columns: its key, and its id — what the row is scoped by, so the row stays
    with the agent it was written for, not with a later agent that takes the key. `agent`
    is an Agent, an AgentRef, a key (its agent's id looked up, none if there is no such
    agent) or None (a console-wide row)."""
    if not agent:
        return {"agent_key": "", "agent_id": None}
    if isinstance(agent, str):
        return {
            "agent_key": agent,
            "agent_id": agent_model()
            .objects.filter(key=agent)
            .values_list("pk", flat=True)
            .first(),
        }
    return {"agent_key": agent.key, "agent_id": agent.pk}


def _context_fields(actor, target, agent) -> dict[str, Any]:
    ctx = current_request.get()
    return {
        "occurred_at": timezone.now(),
        **describe_actor(actor),
        **describe_target(target),
        **describe_agent(agent),
        "request_id": ctx.request_id,
        "ip": ip_normalise(ctx.ip),  # None for anything that is not an address
    }


def audit_record(
    *, actor, action: AuditAction, target=None, agent=None, before: Any = None, after: Any = None
):
    """Write one audit row for a change. Call inside the service's transaction: the row is
    appended as that transaction's last step (None is returned then; the row itself outside
    any service transaction)."""
    action = _member(AuditAction, action)
    fields = _context_fields(actor, target, agent)
    fields.update(
        action=action.value, before=before, after=after, changes=field_changes(before, after)
    )
    return _write(AuditRecord, fields)


def access_record(
    *,
    actor,
    action: AccessAction,
    target=None,
    agent=None,
    outcome: str = "allowed",
    reason: str = "",
    detail: dict | None = None,
):
    """Write one access-log row: a look at traces/snapshots, a search, an export, a refusal."""
    action = _member(AccessAction, action)
    fields = _context_fields(actor, target, agent)
    fields.update(action=action.value, outcome=outcome, reason=reason, detail=detail or {})
    return _write(AccessLogEntry, fields)


def chain_head(model) -> tuple[int, str, int]:
    """(id, hash, rows up to it) of a log's newest row; (0, GENESIS, 0) for an empty log.
    Rows commit in id order (the writers' lock), so no row below the head can appear later."""
    head = model.objects.order_by("-id").values_list("id", "hash").first()
    if head is None:
        return 0, GENESIS, 0
    return head[0], head[1], model.objects.filter(id__lte=head[0]).count()


@dataclass
class ChainBreak:
    """One broken row: "content" (its hash does not match it) or "link" (its prev_hash is not
    the hash of the row before it: that row is missing or was altered)."""

    row: Any
    kind: str


REPORT_KEEPS = 100  # broken rows and problems kept per report (all are counted)


@dataclass
class ChainReport:
    """What `chain_verify` found in one log."""

    checked: int = 0  # rows walked
    intact_before: int = 0  # rows before the first break
    last_id: int = 0
    broken: int = 0  # broken rows; the first REPORT_KEEPS are in `breaks`
    breaks: list[ChainBreak] = field(default_factory=list)
    unreached: int = 0  # checkpoints and anchors not reached; the first in `problems`
    problems: list[str] = field(default_factory=list)
    reached: ChainCheckpoint | None = None  # the newest checkpoint the chain reaches
    anchors_matched: list[int] = field(default_factory=list)

    @property
    def intact(self) -> bool:
        return not self.broken and not self.unreached

    def add_break(self, row, kind: str) -> None:
        self.broken += 1
        if len(self.breaks) < REPORT_KEEPS:
            self.breaks.append(ChainBreak(row, kind))

    def add_problem(self, text: str) -> None:
        self.unreached += 1
        if len(self.problems) < REPORT_KEEPS:
            self.problems.append(text)


def _checkpoint_words(checkpoint: ChainCheckpoint) -> str:
    return (
        f"checkpoint #{checkpoint.pk} of {checkpoint.created_at:%Y-%m-%d %H:%M:%S} UTC recorded "
        f"{counted(checkpoint.row_count, 'record')} up to #{checkpoint.last_id}"
    )


def chain_verify(model, anchors: Iterable[tuple[int, str]] = ()) -> ChainReport:
    """Walk a log's chain in id order and check it against its checkpoints (and `anchors`,
    (id, hash) pairs taken from the application log).

    Gaps are found by the hashes, not the ids (a rolled-back insert skips an id): each row's
    `prev_hash` must be the hash of the row before it — a deleted or rewritten row breaks
    that link — and its own hash must match its content. The tail is found by the
    checkpoints: each checkpointed row must still exist with its hash and the same number of
    rows up to it, so deleting the newest rows (or rewriting the chain) no longer goes
    unnoticed. The walk goes on after a break, so one report shows everything."""
    name = model.__name__
    log = next(key for key, chained in CHAIN_LOGS.items() if chained is model)
    # Checkpoints first: the rows they name committed before them, so the walk (a later
    # snapshot) sees every one that still exists.
    checkpoints = list(ChainCheckpoint.objects.filter(log=log, last_id__gt=0).order_by("id"))
    expected: dict[int, list] = {}
    for checkpoint in checkpoints:
        expected.setdefault(checkpoint.last_id, []).append(checkpoint)
    anchored = dict(anchors)
    report = ChainReport()
    prev = GENESIS
    for row in model.objects.order_by("id").iterator(chunk_size=2000):
        report.checked += 1
        report.last_id = row.pk
        fields = {n: getattr(row, n) for n in hashed_fields(name)}
        if row.prev_hash != prev:
            report.add_break(row, "link")
        elif record_hash(name, fields, row.prev_hash) != row.hash:
            report.add_break(row, "content")
        elif not report.broken:
            report.intact_before += 1
        prev = row.hash
        for checkpoint in expected.pop(row.pk, []):
            if checkpoint.last_hash != row.hash:
                report.add_problem(
                    f"{_checkpoint_words(checkpoint)} (hash {checkpoint.last_hash[:16]}…), but "
                    f"record #{row.pk} no longer has the checkpointed hash"
                )
            elif checkpoint.row_count != report.checked:
                report.add_problem(
                    f"{_checkpoint_words(checkpoint)}, but the log now has {report.checked} "
                    "records up to it: records were removed or added before it"
                )
            else:
                report.reached = checkpoint
        if row.pk in anchored:
            if anchored.pop(row.pk) != row.hash:
                report.add_problem(f"record #{row.pk} no longer has the anchored hash")
            else:
                report.anchors_matched.append(row.pk)
    for last_id, missing in sorted(expected.items()):
        where = "TAIL MISSING: " if last_id > report.last_id else ""
        ends = f"#{report.last_id}" if report.checked else "nothing"
        for checkpoint in missing:
            report.add_problem(
                f"{where}{_checkpoint_words(checkpoint)}, but record #{last_id} is gone; the "
                f"chain now ends at {ends} after {counted(report.checked, 'record')}"
            )
    for last_id in sorted(anchored):
        report.add_problem(f"record #{last_id} (anchored) is gone")
    return report
