"""The webhooks a release change or a new approval request sends: outbox rows written in the
change's transaction, queued once it commits."""

from __future__ import annotations

import json

from django.conf import settings
from django.db import transaction
from django.urls import reverse

from console.kernel.audit import describe_actor
from strategies.catalog.models import Environment
from strategies.delivery import webhooks
from strategies.delivery.models import (
    APPROVAL_REQUESTED_EVENT,
    SCHEDULE_ENDED_EVENT,
    SHADOW_CHANGED_EVENT,
    WEBHOOK_EVENT,
)
from strategies.releases.models import ApprovalRequest, Release, Rollout, ShadowRelease


def _actor_context(actor) -> dict:
    """Who made a change, as webhooks name them: {type: user|token|system, name, token}."""
    described = describe_actor(actor)
    return {
        "type": described["actor_type"],
        "name": described["actor_label"],
        "token": described.get("actor_token_label") or None,
    }


def _approval_context(approval: ApprovalRequest | None) -> dict | None:
    if approval is None:
        return None
    return {
        "id": approval.pk,
        "requester": str(approval.requested_by),
        "approver": str(approval.decided_by) if approval.decided_by_id else None,
    }


def _event_send(*, environment: Environment, event: str, body: dict) -> None:
    """Outbox rows for the environment's webhooks that hear `event` (in this transaction),
    queued once it commits."""
    payload = json.dumps(body, separators=(",", ":")).encode()
    ids = webhooks.deliveries_create(environment=environment, payload=payload, event=event)
    if ids:
        # Robust: a broker error cannot fail the committed change; the outbox rows stay
        # pending and the relay task (strategies.relay_webhook_deliveries) queues them.
        transaction.on_commit(lambda: webhooks.deliveries_send(ids), robust=True)


def _when(moment) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _notify(
    release: Release, before: Release | None, action: str, etag: str, when, *, actor, approval
) -> None:
    _event_send(
        environment=release.environment,
        event=WEBHOOK_EVENT,
        body={
            "event": WEBHOOK_EVENT,
            "agent": release.document.agent.key,
            "environment": release.environment.key,
            "document": release.document.key,
            "action": action,
            "from_version": before.version.number if before else None,
            "to_version": release.version.number,
            "etag": etag,
            "occurred_at": _when(when),
            "actor": _actor_context(actor),
            "approval": _approval_context(approval),
        },
    )


def _notify_shadow(
    shadow: ShadowRelease,
    *,
    action: str,
    version: int,
    live_version: int,
    etag: str,
    when,
    actor,
) -> None:
    _event_send(
        environment=shadow.environment,
        event=SHADOW_CHANGED_EVENT,
        body={
            "event": SHADOW_CHANGED_EVENT,
            "agent": shadow.document.agent.key,
            "environment": shadow.environment.key,
            "document": shadow.document.key,
            "action": action,
            "version": version,
            "live_version": live_version,
            "etag": etag,
            "occurred_at": _when(when),
            "actor": _actor_context(actor),
        },
    )


def _notify_rollout(
    rollout: Rollout, *, action: str, etag: str, when, actor, evidence: dict | None
) -> None:
    """A staged rollout changed what runtimes apply (or how it stands): `release.changed`
    with action `rollout_<action>`, the rollout, and a guard's evidence when a guard acted."""
    _event_send(
        environment=rollout.environment,
        event=WEBHOOK_EVENT,
        body={
            "event": WEBHOOK_EVENT,
            "agent": rollout.document.agent.key,
            "environment": rollout.environment.key,
            "document": rollout.document.key,
            "action": f"rollout_{action}",
            "from_version": rollout.control_version.number,
            "to_version": rollout.version.number,
            "etag": etag,
            "occurred_at": _when(when),
            "actor": _actor_context(actor),
            "approval": None,
            "rollout": {
                "id": rollout.key,
                "state": rollout.state,
                "step": rollout.step,
                "share": rollout.share,
                "unit": rollout.unit,
            },
            "evidence": evidence or None,
        },
    )


def approval_url(approval: ApprovalRequest) -> str:
    """The approval page: absolute when the console knows its public address
    (settings.CONSOLE_PUBLIC_URL), else the path."""
    path = reverse("approval-detail", args=[approval.document.agent.key, approval.pk])
    base = settings.CONSOLE_PUBLIC_URL.rstrip("/")
    return f"{base}{path}"


def _notify_requested(approval: ApprovalRequest) -> None:
    _event_send(
        environment=approval.environment,
        event=APPROVAL_REQUESTED_EVENT,
        body={
            "event": APPROVAL_REQUESTED_EVENT,
            "agent": approval.document.agent.key,
            "environment": approval.environment.key,
            "document": approval.document.key,
            "kind": approval.kind,
            "version": approval.version.number,
            "requested_by": str(approval.requested_by),
            "reason": approval.reason,
            "approval_id": approval.pk,
            "url": approval_url(approval),
            "occurred_at": _when(approval.requested_at),
        },
    )


def _schedule_notify(schedule) -> None:
    """A scheduled go-live ran: went live, became a request, or was refused — and why."""
    _event_send(
        environment=schedule.environment,
        event=SCHEDULE_ENDED_EVENT,
        body={
            "event": SCHEDULE_ENDED_EVENT,
            "schedule": schedule.pk,
            "agent": schedule.document.agent.key,
            "document": schedule.document.key,
            "environment": schedule.environment.key,
            "version": schedule.version.number,
            "kind": schedule.kind,
            "run_at": _when(schedule.run_at),
            "state": schedule.state,
            "code": schedule.outcome_code,
            "reason": schedule.outcome,
            "requested_by": str(schedule.requested_by),
        },
    )
