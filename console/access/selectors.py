"""Reads of the console's own records: what a user may see of the audit and access logs."""

from __future__ import annotations

import json
from dataclasses import dataclass

from axes.helpers import get_cool_off, get_failure_limit
from axes.models import AccessAttempt
from django.db.models import Exists, Max, OuterRef, Q, Sum
from django.utils import timezone

from console.kernel.audit import AuditAction
from console.kernel.models import AuditRecord
from console.kernel.policy import Capability, agents_where, user_can


def logs_visible_to(user, model):
    """Rows of a log the user may read. VIEW_AUDIT on all agents: every row, console-wide
    ones and those of agents deleted since. Otherwise the rows of the agents where they hold
    VIEW_AUDIT, by the agent id the row was written with — a new agent that takes a deleted
    agent's key does not inherit its rows. Rows written before rows kept that id go by the
    key, from the agent's creation on. Deny by default."""
    if user_can(user, Capability.VIEW_AUDIT):
        return model.objects.all()
    audited = agents_where(user, Capability.VIEW_AUDIT)
    keyed_only = Exists(
        audited.filter(key=OuterRef("agent_key"), created_at__lte=OuterRef("occurred_at"))
    )
    return model.objects.filter(
        Q(agent_id__in=audited.values("pk")) | Q(keyed_only, agent_id__isnull=True)
    )


def log_agent_keys(user) -> list[str]:
    """The agent filter's keys: the agents where the user holds VIEW_AUDIT, and for those
    who audit all agents the keys of agents deleted since (their `agent.delete` rows)."""
    keys = set(agents_where(user, Capability.VIEW_AUDIT).values_list("key", flat=True))
    if user_can(user, Capability.VIEW_AUDIT):
        deleted = AuditRecord.objects.filter(action=AuditAction.AGENT_DELETE.value)
        keys |= set(deleted.values_list("agent_key", flat=True).distinct())
    return sorted(keys - {""})


def logs_filter(
    queryset,
    *,
    agent="",
    actor="",
    action="",
    target="",
    token="",
    outcome="",
    since=None,
    until=None,
):
    """The list filters of the audit and access-log pages and API (all optional, AND-ed).
    `action` is one action ("grant.revoke"), or a family when it ends with a dot ("grant."
    finds grant.create and grant.revoke); `target`
    matches the target's label or id (e.g. "assistant_professional/profile"); `token` the
    name or id of the personal token a row was made with."""
    if agent:
        queryset = queryset.filter(agent_key=agent)
    if actor:
        queryset = queryset.filter(actor_label__iexact=actor)
    if action.endswith("."):
        queryset = queryset.filter(action__startswith=action)
    elif action:
        queryset = queryset.filter(action=action)
    if target:
        queryset = queryset.filter(Q(target_label__icontains=target) | Q(target_id=target))
    if token:
        queryset = queryset.filter(Q(actor_token_label__iexact=token) | Q(actor_token_id=token))
    if outcome:  # access log only: allowed | denied
        queryset = queryset.filter(outcome=outcome)
    if since:
        queryset = queryset.filter(occurred_at__gte=since)
    if until:
        queryset = queryset.filter(occurred_at__lt=until)
    return queryset.order_by("-occurred_at", "-id")


def change_rows(changes: list[dict]) -> list[dict]:
    """Field-level changes ready to show: path, kind (added/removed/changed) and both
    values as compact JSON text (so `false`, `null` and strings read unambiguously)."""

    def text(value):
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)

    rows = []
    for change in changes or []:
        before, after = change.get("before"), change.get("after")
        kind = "added" if before is None else "removed" if after is None else "changed"
        rows.append(
            {
                "path": change.get("path", ""),
                "kind": kind,
                "before": text(before),
                "after": text(after),
            }
        )
    return rows


def login_locks_current() -> list[dict]:
    """Username and address pairs locked out of sign-in now (django-axes' failures within the
    cool-off reached the limit), newest first: username, ip_address, failures, since (the
    failure that set the lock) and until (when it lifts by itself at the latest)."""
    cool_off = get_cool_off()
    locks = (
        AccessAttempt.objects.filter(attempt_time__gte=timezone.now() - cool_off)
        .values("username", "ip_address")
        .annotate(failures=Sum("failures_since_start"), since=Max("attempt_time"))
        .filter(failures__gte=get_failure_limit(None, None))
        .order_by("-since", "username")
    )
    return [{**lock, "until": lock["since"] + cool_off} for lock in locks]


@dataclass(frozen=True)
class LoginLockRule:
    failure_limit: int
    cool_off_minutes: int  # the window failures are counted in, and how long a lock lasts


def login_lock_rule() -> LoginLockRule:
    """The lockout rule as django-axes applies it (settings AXES_FAILURE_LIMIT and
    AXES_COOLOFF_TIME), for the pages and messages that state it."""
    return LoginLockRule(
        failure_limit=get_failure_limit(None, None),
        cool_off_minutes=int(get_cool_off().total_seconds() // 60),
    )
