"""Releases, shadows and approval requests as the API, the audit and the 409s show them, and
the current release of a document in an environment."""

from __future__ import annotations

from datetime import timedelta

from console.kernel.audit import AccessAction, access_record
from console.kernel.errors import Conflict
from console.kernel.policy import Capability, user_can
from strategies.catalog.models import Environment
from strategies.documents.models import Document
from strategies.releases.models import ApprovalRequest, Release, Rollout, ShadowRelease
from strategies.releases.selectors.rollouts import rollout_request_ids, without_request_ids
from strategies.releases.transitions import rollout_operator_actions, shadow_actions


def _release_state(release: Release | None) -> dict | None:
    if release is None:
        return None
    return {
        "document": release.document.key,
        "environment": release.environment.key,
        "version": release.version.number,
        "revision": release.revision,
        "updated_by": release.updated_by,
        "updated_at": release.updated_at.isoformat() if release.updated_at else None,
        "unreviewed": release.unreviewed,
    }


def release_state(release: Release | None) -> dict | None:
    """A release as the API and the audit show it (None: nothing live)."""
    return _release_state(release)


def shadow_state(shadow: ShadowRelease | None, *, document=None, environment=None) -> dict:
    """A shadow as the API and the audit show it: `version` null when none runs; `revision`
    (0: never started here) is what a start or stop sends back as `expected_revision`."""
    actions = shadow_actions(shadow)  # what its state allows now: the one state table
    if shadow is None or not shadow.running:
        return {
            "document": (shadow.document if shadow else document).key,
            "environment": (shadow.environment if shadow else environment).key,
            "version": None,
            "revision": shadow.revision if shadow else 0,
            "started_by": "",
            "started_at": None,
            "actions": actions,
        }
    return {
        "document": shadow.document.key,
        "environment": shadow.environment.key,
        "version": shadow.version.number,
        "revision": shadow.revision,
        "started_by": shadow.started_by,
        "started_at": shadow.started_at.isoformat() if shadow.started_at else None,
        "actions": actions,
    }


def _shadow_current(document, environment) -> ShadowRelease | None:
    return (
        ShadowRelease.objects.select_related("document", "environment", "version")
        .filter(document=document, environment=environment)
        .first()
    )


def shadow_conflict(document, environment, message: str, *, code: str) -> Conflict:
    """409 with the shadow as it now stands (`current`)."""
    return Conflict(
        message,
        code=code,
        extra={
            "current": shadow_state(
                _shadow_current(document, environment), document=document, environment=environment
            )
        },
    )


def approval_state(approval: ApprovalRequest) -> dict:
    return {
        "id": approval.pk,
        "kind": approval.kind,
        "agent": approval.document.agent.key,
        "document": approval.document.key,
        "environment": approval.environment.key,
        "version": approval.version.number,
        "content_hash": approval.content_hash,
        "base_revision": approval.base_revision,
        "status": approval.status,
        "requested_by": str(approval.requested_by),
        "requested_at": approval.requested_at.isoformat() if approval.requested_at else None,
        "reason": approval.reason,
        "decided_by": str(approval.decided_by) if approval.decided_by_id else None,
        "decided_at": approval.decided_at.isoformat() if approval.decided_at else None,
        "decision_note": approval.decision_note,
        "rollout": approval.rollout.key if approval.rollout_id else None,
    }


def _current(document: Document, environment: Environment) -> Release | None:
    return (
        Release.objects.select_related("document", "environment", "version")
        .filter(document=document, environment=environment)
        .first()
    )


def _stale(document, environment, message: str) -> Conflict:
    return Conflict(
        message,
        code="stale_revision",
        extra={"current": _release_state(_current(document, environment))},
    )


def rollout_state(rollout: Rollout, *, request_ids: bool = False) -> dict:
    """A staged rollout as the API, the audit, the webhooks and the 409s show it. The
    request ids its evidence names only with `request_ids`: the audit row keeps them; a
    reader gets them when `rollout_evidence_look` says so (the right to see traces, and the
    look in the access log)."""
    started = rollout.step_started_at
    bake_ends = (
        started + timedelta(seconds=rollout.bake_seconds)
        if started is not None and rollout.state in Rollout.SERVED_STATES
        else None
    )
    approval = rollout.approvals.order_by("-id").first() if rollout.pk else None
    shown = (lambda facts: facts) if request_ids else without_request_ids
    return {
        "id": rollout.key,
        "agent": rollout.document.agent.key,
        "document": rollout.document.key,
        "environment": rollout.environment.key,
        "version": rollout.version.number,
        "control_version": rollout.control_version.number,
        "plan_name": rollout.plan_name,
        "plan": rollout.plan,
        "unit": rollout.unit,
        "state": rollout.state,
        "step": rollout.step,
        "share": rollout.share,
        "bake_seconds": rollout.bake_seconds,
        "step_started_at": _iso(started),
        "step_extended": rollout.step_extended,
        "bake_ends_at": _iso(bake_ends),
        "guards": shown(rollout.guards),
        "guards_at": _iso(rollout.guards_at),
        "evidence": shown(rollout.evidence),
        "reason": rollout.reason,
        "end_reason": rollout.end_reason,
        "started_by": rollout.started_by,
        "started_at": _iso(rollout.started_at),
        "ended_by": rollout.ended_by,
        "ended_at": _iso(rollout.ended_at),
        "revision": rollout.revision,
        "approval": approval.pk if approval else None,
        # What its state allows an operator to do now: the one state table.
        "actions": rollout_operator_actions(rollout),
        "watch": {
            "active": rollout.watching,
            "until": _iso(rollout.watch_until),
            "share": rollout.watch_share,
            "step": rollout.watch_step,
            "ended_at": _iso(rollout.watch_ended_at),
            "warning": shown(rollout.watch_warning) or None,
        }
        if rollout.watch_until is not None
        else None,
    }


def rollout_evidence_look(*, user, agent, rollouts) -> bool:
    """Whether `user` may read the request ids the evidence of `rollouts` (of `agent`) names:
    only with the right to see its traces. When so, and they name any, the look is written
    to the access log like every other list of request ids (one row per response that shows
    them). Pages and the API ask this, then show `rollout_state(…, request_ids=…)`."""
    if not user_can(user, Capability.VIEW_TRACES, agent):
        return False
    named = {rollout.key: rollout_request_ids(rollout) for rollout in rollouts}
    named = {key: ids for key, ids in named.items() if ids}
    if named:
        access_record(
            actor=user,
            action=AccessAction.TRACE_LIST,
            agent=agent,
            detail={
                "rollout_evidence": named,
                "shown": sum(len(ids) for ids in named.values()),
            },
        )
    return True


def _iso(moment) -> str | None:
    return moment.isoformat() if moment else None


def rollout_conflict(rollout: Rollout, message: str, *, code: str) -> Conflict:
    """409 with the rollout as it now stands (`current`)."""
    return Conflict(message, code=code, extra={"current": rollout_state(rollout)})
