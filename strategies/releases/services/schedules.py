"""Go-lives scheduled for a time: a publish or a rollout start asked now for later.

At creation the schedule is refused (a field error, nothing saved) when its time is past,
falls in a freeze or outside the change hours, or the judgement already refuses it for a
reason time will not fix (no right, a runtime that cannot serve it). At its time the beat
task (`strategies.schedules_run_due`) claims it and asks the go-live judgement again, as the
requester, through the normal service: it goes live (or becomes an approval request / a plan
waiting for approval where the environment is protected) or ends refused with the reason.
Both are audited and notified (`schedule.ended`).

Never twice: a claim (state `running`, a fresh token) is taken with `SKIP LOCKED`, so two
workers never claim one schedule; the go-live and the schedule's end commit in one
transaction holding the row's lock, by the claim's holder only. A worker that died after
claiming left a `running` row whose go-live rolled back with it: after
SCHEDULES_CLAIM_TIMEOUT_SECONDS another claim takes it over."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from context_runtime.findings import blocking
from django.conf import settings
from django.db import transaction
from django.db.models import Q

from console.kernel import clock
from console.kernel.audit import AuditAction, SystemActor, audit_record
from console.kernel.errors import (
    ApplicationError,
    Conflict,
    ReauthenticationRequired,
    ValidationFailed,
)
from console.kernel.policy import (
    Capability,
    check_user_can,
    check_user_can_cancel_schedule,
    refuse_publish,
    rollout_refusal,
)
from console.kernel.reasons import MAX_REASON_CHARS
from console.kernel.transactions import service_transaction
from strategies.catalog.models import Environment
from strategies.documents.models import Version
from strategies.releases.models import ReleaseEvent, ScheduledGoLive
from strategies.releases.plans import INVALID_PLAN
from strategies.releases.selectors import publish_refusals, rollout_refusals
from strategies.releases.selectors.calendar import calendar_refusals
from strategies.releases.selectors.refusals import (
    INVALID_UNIT,
    NOT_A_STRATEGY,
    NOT_ALLOWED,
    NOT_FOUND,
    SENSITIVE_SECTION,
    is_runtime_finding,
)
from strategies.releases.services.notifications import _schedule_notify
from strategies.releases.services.publish import release_publish
from strategies.releases.services.rollout import rollout_start_nested

SCHEDULER = SystemActor("scheduler")
# What the judgement refuses now that waiting will not fix (besides the target runtime's
# findings): no right, a sensitive section the requester may not switch on, not a version a
# rollout can run, a plan or unit that is wrong. A freeze now, a preview still to be made, a
# request waiting, are judged again at the time.
TIMELESS = (NOT_FOUND, NOT_ALLOWED, SENSITIVE_SECTION, NOT_A_STRATEGY, INVALID_PLAN, INVALID_UNIT)


def schedule_state(schedule: ScheduledGoLive) -> dict:
    """A scheduled go-live as the API and the audit show it."""
    return {
        "id": schedule.pk,
        "agent": schedule.document.agent.key,
        "document": schedule.document.key,
        "environment": schedule.environment.key,
        "version": schedule.version.number,
        "kind": schedule.kind,
        "plan": schedule.plan,
        "unit": schedule.unit or None,
        "run_at": schedule.run_at.isoformat(),
        "reason": schedule.reason,
        "requested_by": str(schedule.requested_by),
        "state": schedule.state,
        "outcome_code": schedule.outcome_code,
        "outcome": schedule.outcome,
        "finished_at": schedule.finished_at.isoformat() if schedule.finished_at else None,
        "cancelled_by": schedule.cancelled_by,
        "release_event": schedule.release_event_id,
        "approval": schedule.approval_id,
        "rollout": schedule.rollout.key if schedule.rollout_id else None,
    }


def _run_at_error(message: str, code: str) -> ValidationFailed:
    return ValidationFailed(
        message, code=code, details=[{"path": "run_at", "code": code, "message": message}]
    )


def _refuse_timeless(refusals, *, version: Version, environment: Environment, actor, kind: str):
    """Raise what the judgement refuses now that waiting will not fix: 404/403 for rights,
    else 400 with every such reason at its field."""
    refused = blocking(refusals)
    codes = {finding.code for finding in refused}
    agent = version.document.agent
    if NOT_FOUND in codes or NOT_ALLOWED in codes:
        refuse_publish(
            rollout_refusal(actor, environment, agent)
            if kind == ScheduledGoLive.Kind.ROLLOUT_START
            else next(f for f in refused if f.code in (NOT_FOUND, NOT_ALLOWED)),
            user=actor,
            environment=environment,
            agent=agent,
            target=version.document,
        )
    lasting = [f for f in refused if f.code in TIMELESS or is_runtime_finding(f)]
    if lasting:
        raise ValidationFailed(
            f"{version.document.key} v{version.number} could not go live in {environment.key} "
            "at any time as things are: " + " ".join(f.message for f in lasting),
            code="not_schedulable",
            details=[f.as_dict() for f in lasting],
        )


@service_transaction(durable=True)
def scheduled_golive_create(
    *,
    version: Version,
    environment: Environment,
    actor,
    run_at: datetime,
    kind: str = ScheduledGoLive.Kind.PUBLISH,
    plan=None,
    unit: str = "task",
    reason: str = "",
) -> ScheduledGoLive:
    """Schedule a publish (or a rollout start by `plan` and `unit`) of `version` in
    `environment` at `run_at`. Refused, nothing saved: `run_at` past (400 `in_the_past`), in a
    freeze (400 `frozen`) or outside the change hours (400 `outside_change_hours`) then; what
    the judgement refuses now that time will not fix (403/404 rights, 400 `not_schedulable`)."""
    document = version.document
    check_user_can(actor, Capability.VIEW_CONFIG, document.agent, target=document)
    if kind not in ScheduledGoLive.Kind.values:
        raise ValidationFailed(
            "A scheduled go-live is a publish or a rollout start.",
            details=[
                {"path": "kind", "code": "invalid_choice", "message": "publish or rollout_start"}
            ],
        )
    if not isinstance(run_at, datetime) or run_at.tzinfo is None:
        raise _run_at_error("Give a date and time with its time zone.", "invalid")
    if run_at <= clock.now():
        raise _run_at_error(
            "That time has passed: schedule a go-live for a time ahead, or publish now.",
            "in_the_past",
        )
    held = calendar_refusals(environment, run_at)
    if held:
        raise _run_at_error(" ".join(f.message for f in held), held[0].code)
    if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
        raise ValidationFailed(
            "The reason is too long.",
            details=[{"path": "reason", "code": "too_long", "message": "Too long."}],
        )
    if kind == ScheduledGoLive.Kind.ROLLOUT_START:
        refusals = rollout_refusals(
            version=version, environment=environment, actor=actor, plan=plan, unit=unit
        )
    else:
        refusals = publish_refusals(version=version, environment=environment, actor=actor)
    _refuse_timeless(refusals, version=version, environment=environment, actor=actor, kind=kind)
    schedule = ScheduledGoLive.objects.create(
        environment=environment,
        document=document,
        version=version,
        kind=kind,
        plan=plan if kind == ScheduledGoLive.Kind.ROLLOUT_START else None,
        unit=unit if kind == ScheduledGoLive.Kind.ROLLOUT_START else "",
        reason=reason.strip(),
        run_at=run_at,
        requested_by=actor,
        created_at=clock.now(),
    )
    audit_record(
        actor=actor,
        action=AuditAction.SCHEDULE_CREATE,
        target=schedule,
        agent=document.agent,
        after=schedule_state(schedule),
    )
    return schedule


@service_transaction(durable=True)
def scheduled_golive_cancel(
    *, schedule: ScheduledGoLive, actor, reason: str = ""
) -> ScheduledGoLive:
    """Cancel a schedule not yet run, by its requester or an admin (409 once it runs or ran)."""
    check_user_can_cancel_schedule(actor, schedule)
    schedule = ScheduledGoLive.objects.select_for_update().get(pk=schedule.pk)
    if schedule.state != ScheduledGoLive.State.SCHEDULED:
        raise Conflict(
            f"This go-live is {schedule.get_state_display().lower()}: only a scheduled one can "
            "be cancelled.",
            code="not_scheduled",
            extra={"current": schedule_state(schedule)},
        )
    before = schedule_state(schedule)
    schedule.state = ScheduledGoLive.State.CANCELLED
    schedule.cancelled_by = str(actor)
    schedule.finished_at = clock.now()
    schedule.outcome = reason.strip()[:MAX_REASON_CHARS] if isinstance(reason, str) else ""
    schedule.save(update_fields=["state", "cancelled_by", "finished_at", "outcome"])
    audit_record(
        actor=actor,
        action=AuditAction.SCHEDULE_CANCEL,
        target=schedule,
        agent=schedule.document.agent,
        before=before,
        after=schedule_state(schedule),
    )
    return schedule


def schedules_claim_due(*, limit: int = 20) -> list[tuple[int, str]]:
    """Claim the schedules due now (and the ones whose claim timed out: their worker died),
    each with a fresh token, skipping rows another worker holds. Returns (id, claim) pairs."""
    now = clock.now()
    stale = now - timedelta(seconds=settings.SCHEDULES_CLAIM_TIMEOUT_SECONDS)
    claimed = []
    with transaction.atomic(durable=True):
        due = (
            ScheduledGoLive.objects.select_for_update(skip_locked=True)
            .filter(
                Q(state=ScheduledGoLive.State.SCHEDULED, run_at__lte=now)
                | Q(state=ScheduledGoLive.State.RUNNING, claimed_at__lt=stale)
            )
            .order_by("run_at", "id")[:limit]
        )
        for schedule in due:
            token = uuid.uuid4().hex
            ScheduledGoLive.objects.filter(pk=schedule.pk).update(
                state=ScheduledGoLive.State.RUNNING, claim=token, claimed_at=now
            )
            claimed.append((schedule.pk, token))
    return claimed


def _go_live(schedule: ScheduledGoLive) -> tuple[str, dict]:
    """The go-live through the normal service, as the requester (it asks the judgement again):
    the outcome's words and what it produced."""
    actor = schedule.requested_by
    if schedule.kind == ScheduledGoLive.Kind.ROLLOUT_START:
        rollout = rollout_start_nested(
            version=schedule.version,
            environment=schedule.environment,
            actor=actor,
            plan=schedule.plan,
            unit=schedule.unit or "task",
            reason=schedule.reason,
        )
        words = (
            f"Rollout {rollout.key} started."
            if rollout.state != rollout.State.AWAITING_APPROVAL
            else f"Rollout {rollout.key} waits for a second person's approval of its plan."
        )
        return words, {"rollout": rollout}
    outcome = release_publish(
        version=schedule.version,
        environment=schedule.environment,
        actor=actor,
        reason=schedule.reason,
    )
    if outcome.approval is not None:
        return "An approval request was created (the environment is protected).", {
            "approval": outcome.approval
        }
    if outcome.change_record is not None:
        # The environment requires an external change record: the request went to the change
        # system, and the publish goes live when it approves (docs/change-approvals.md).
        record = outcome.change_record
        return (
            f"Change record {record.public_id} was sent to the change system: v"
            f"{schedule.version.number} goes live in {schedule.environment.key} once it approves."
        ), {"change_record": record}
    event = ReleaseEvent.objects.filter(release=outcome.release).order_by("-revision").first()
    return f"v{schedule.version.number} is live in {schedule.environment.key}.", {
        "release_event": event
    }


@service_transaction(durable=True)
def scheduled_golive_fire(*, schedule_id: int, claim: str) -> ScheduledGoLive | None:
    """Run a claimed schedule: judged again at this moment as its requester, it goes live or
    ends refused with the reason, audited and notified, in one transaction holding its row.
    None when the claim is no longer this one's (taken over, or the schedule ended)."""
    schedule = (
        ScheduledGoLive.objects.select_for_update()
        .select_related("document__agent", "environment", "version", "requested_by")
        .filter(pk=schedule_id, state=ScheduledGoLive.State.RUNNING, claim=claim)
        .first()
    )
    if schedule is None:
        return None
    try:
        with transaction.atomic():
            words, produced = _go_live(schedule)
    except (ApplicationError, ReauthenticationRequired) as refused:
        # The judgement (or the service) said no at this moment: the schedule ends refused,
        # saying why; nothing of the go-live was written (its savepoint rolled back).
        schedule.state = ScheduledGoLive.State.REFUSED
        schedule.outcome_code = refused.code
        schedule.outcome = f"Refused at its time: {getattr(refused, 'message', str(refused))}"
        action = AuditAction.SCHEDULE_REFUSE
    else:
        schedule.state = ScheduledGoLive.State.DONE
        schedule.outcome_code = "approval_required" if "approval" in produced else "live"
        if "rollout" in produced:
            schedule.outcome_code = "rollout_started"
        if produced.pop("change_record", None) is not None:
            schedule.outcome_code = "change_record_requested"
        schedule.outcome = words
        for field, value in produced.items():
            setattr(schedule, field, value)
        action = AuditAction.SCHEDULE_FIRE
    schedule.finished_at = clock.now()
    schedule.save()
    audit_record(
        actor=SCHEDULER,
        action=action,
        target=schedule,
        agent=schedule.document.agent,
        after=schedule_state(schedule),
    )
    _schedule_notify(schedule)
    return schedule


def schedules_run_due() -> int:
    """Claim the due schedules and run each; returns how many ran (went live or refused)."""
    ran = 0
    for schedule_id, claim in schedules_claim_due():
        if scheduled_golive_fire(schedule_id=schedule_id, claim=claim) is not None:
            ran += 1
    return ran
