"""Writes of impact previews: request (validated, reused for the same inputs), cancel, and
the run the Celery task drives (`preview_execute`: progress, heartbeat, the report)."""

from __future__ import annotations

from datetime import datetime, timedelta

from celery import current_app
from context_runtime.engine import Strategy
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console.kernel.audit import AccessAction, access_record, actor_label
from console.kernel.errors import Conflict, ValidationFailed
from console.kernel.policy import check_user_can_preview
from console.kernel.transactions import service_transaction
from strategies.catalog.models import Environment
from strategies.documents.models import Document, Version
from strategies.releases.selectors import live_release, runtime_refusals
from traces.previews import report, selectors
from traces.previews.models import Preview

CLOCK_SKEW = timedelta(minutes=5)


def default_window(now: datetime | None = None) -> tuple[datetime, datetime]:
    """The last 7 days, to the minute: two requests in the same minute are the same inputs."""
    end = (now or timezone.now()).replace(second=0, microsecond=0) + timedelta(minutes=1)
    return end - selectors.DEFAULT_WINDOW, end


def _window_refusal(environment: Environment, start, end, now) -> None:
    if start >= end:
        raise ValidationFailed(
            "The window must start before it ends.",
            code="invalid_window",
            details=[
                {"path": "window_start", "code": "invalid_window", "message": "after the end"}
            ],
        )
    if end > now + CLOCK_SKEW:
        raise ValidationFailed(
            "The window ends in the future.",
            code="invalid_window",
            details=[{"path": "window_end", "code": "invalid_window", "message": "in the future"}],
        )
    oldest = now - timedelta(days=environment.trace_retention_days)
    if start < oldest:
        raise ValidationFailed(
            f"{environment.key} keeps traces for {environment.trace_retention_days} days: the "
            f"window cannot start before {oldest:%Y-%m-%d %H:%M} UTC.",
            code="window_beyond_retention",
            details=[
                {
                    "path": "window_start",
                    "code": "window_beyond_retention",
                    "message": f"older than the {environment.trace_retention_days}-day retention",
                }
            ],
        )


@service_transaction(durable=True)
def preview_request(
    *,
    actor,
    version: Version,
    environment: Environment,
    window_start: datetime | None = None,
    window_end: datetime | None = None,
) -> tuple[Preview, bool]:
    """Ask for an impact preview of `version` in `environment` over the window (default: the
    last 7 days). Refused: someone who may not see the agent's traces and configuration
    (logged), a profile, an archived environment, nothing live there, a body the
    environment's runtime cannot serve (with its findings), a window beyond the retention,
    no traces in the window. The same inputs as a complete or running preview: that one is
    returned (reused, True)."""
    document = version.document
    agent = document.agent
    check_user_can_preview(actor, agent, target=("document", document.key, document.key))
    if document.kind != Document.Kind.STRATEGY:
        raise ValidationFailed(
            "Only strategies can be previewed: a profile changes no selection.",
            code="not_a_strategy",
        )
    if environment.archived_at is not None:
        raise ValidationFailed(f"{environment.key} is archived.", code="environment_archived")
    live = live_release(document=document, environment=environment)
    if live is None:
        raise ValidationFailed(
            f"Nothing of {document.key} is live in {environment.key}, so there is no traffic "
            "to compare with: publish a first version there instead.",
            code="no_live_version",
        )
    findings = runtime_refusals(kind=document.kind, body=version.body, environment=environment)
    if findings:
        raise ValidationFailed(
            f"{document.key} v{version.number} cannot run in {environment.key}: "
            + " ".join(f.message for f in findings),
            code="not_publishable",
            details=findings,
        )
    now = timezone.now()
    if window_start is None and window_end is None:
        window_start, window_end = default_window(now)
    elif window_end is None:
        window_end = default_window(now)[1]
    elif window_start is None:
        window_start = window_end - selectors.DEFAULT_WINDOW
    _window_refusal(environment, window_start, window_end, now)
    reused = selectors.reusable_preview(
        document=document,
        environment=environment,
        content=version.content_hash,
        live_content=live.version.content_hash,
        window_start=window_start,
        window_end=window_end,
        engine=report.CONSOLE_ENGINE,
    )
    if reused is not None:
        access_record(
            actor=actor,
            action=AccessAction.PREVIEW_REQUEST,
            target=selectors.preview_target(reused),
            agent=agent,
            detail={"reused": True, "version": version.number, "environment": environment.key},
        )
        return reused, True
    counts = selectors.window_counts(
        agent_id=agent.pk,
        environment_id=environment.pk,
        strategy=document.key,
        start=window_start,
        end=window_end,
    )
    if not counts:
        raise ValidationFailed(
            f"No traces of {document.key} in {environment.key} between "
            f"{window_start:%Y-%m-%d %H:%M} and {window_end:%Y-%m-%d %H:%M} UTC: there is "
            "nothing to replay. Pick a longer window, or wait for traffic.",
            code="no_traces",
        )
    preview = Preview.objects.create(
        agent=agent,
        environment=environment,
        document=document,
        version=version,
        version_number=version.number,
        content_hash=version.content_hash,
        body=version.body,
        live_version_number=live.version.number,
        live_content_hash=live.version.content_hash,
        window_start=window_start,
        window_end=window_end,
        engine=report.CONSOLE_ENGINE,
        requested_by=actor,
        requested_by_label=actor_label(actor),
        traces_total=sum(report.stratified_quotas(counts).values()),
    )
    access_record(
        actor=actor,
        action=AccessAction.PREVIEW_REQUEST,
        target=selectors.preview_target(preview),
        agent=agent,
        detail={"reused": False, "version": version.number, "environment": environment.key},
    )
    transaction.on_commit(lambda: preview_queue(preview.pk))
    return preview, False


RUN_TASK = "previews.run"


def preview_queue(preview_id: int) -> None:
    """Queue the run (the task is named, so this module needs no task import); the queue is
    read at send time, so a test can point it at its own worker."""
    queue = getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", None)
    current_app.send_task(RUN_TASK, args=(preview_id,), queue=queue)


@service_transaction(durable=True)
def preview_cancel(*, actor, preview: Preview) -> Preview:
    """Stop a queued or running preview: a queued one is cancelled at once, a running one at
    its next batch (the task checks the flag). A finished one: 409."""
    check_user_can_preview(actor, preview.agent, target=selectors.preview_target(preview))
    preview = Preview.objects.select_for_update().get(pk=preview.pk)
    if selectors.is_finished(preview):
        raise Conflict(
            f"This preview is already {selectors.effective_state(preview)}.",
            code="preview_finished",
        )
    if preview.state == Preview.State.QUEUED:
        preview.state = Preview.State.CANCELLED
        preview.finished_at = timezone.now()
    preview.cancel_requested = True
    preview.save(update_fields=["state", "finished_at", "cancel_requested"])
    access_record(
        actor=actor,
        action=AccessAction.PREVIEW_CANCEL,
        target=selectors.preview_target(preview),
        agent=preview.agent,
    )
    return preview


def preview_viewed(*, actor, preview: Preview, detail: dict | None = None) -> None:
    """The access-log row of a look at a preview (its report names request ids)."""
    access_record(
        actor=actor,
        action=AccessAction.PREVIEW_VIEW,
        target=selectors.preview_target(preview),
        agent=preview.agent,
        detail=detail or {},
    )


# --- the run (the Celery task's body) ----------------------------------------------------------
@service_transaction
def _preview_start(preview_id: int) -> Preview | None:
    """Mark the preview running, or — when a worker already started it (this is a redelivery
    after that worker was lost) — failed with what it covered. None: nothing to run."""
    preview = Preview.objects.select_for_update().filter(pk=preview_id).first()
    if preview is None or preview.state != Preview.State.QUEUED:
        if preview is not None and preview.state == Preview.State.RUNNING:
            preview.state = Preview.State.FAILED
            preview.failure = "The worker running it stopped (killed or lost) before the end."
            preview.finished_at = timezone.now()
            preview.save(update_fields=["state", "failure", "finished_at"])
        return None
    now = timezone.now()
    preview.state = Preview.State.RUNNING
    preview.started_at = preview.heartbeat_at = now
    preview.save(update_fields=["state", "started_at", "heartbeat_at"])
    return preview


@service_transaction
def _preview_progress(preview_id: int, *, done: int, covered_until) -> bool:
    """Record progress and the heartbeat; False when a cancel was asked for (then the
    preview is cancelled, with what it covered)."""
    preview = Preview.objects.select_for_update().get(pk=preview_id)
    preview.traces_done = min(done, preview.traces_total)
    preview.covered_until = covered_until
    preview.heartbeat_at = timezone.now()
    fields = ["traces_done", "covered_until", "heartbeat_at"]
    if preview.cancel_requested:
        preview.state = Preview.State.CANCELLED
        preview.finished_at = preview.heartbeat_at
        fields += ["state", "finished_at"]
    preview.save(update_fields=fields)
    return not preview.cancel_requested


@service_transaction
def _preview_finish(preview_id: int, *, state: str, result=None, failure: str = "") -> None:
    preview = Preview.objects.select_for_update().get(pk=preview_id)
    if preview.state != Preview.State.RUNNING:
        return  # cancelled meanwhile: its state stands
    preview.state = state
    preview.report = result
    preview.failure = failure[:500]
    preview.finished_at = timezone.now()
    if state == Preview.State.COMPLETE:
        preview.traces_done = preview.traces_total = result["traces_read"]
    preview.save(
        update_fields=["state", "report", "failure", "finished_at", "traces_done", "traces_total"]
    )


def preview_execute(preview_id: int) -> str:
    """Replay the preview's window batch by batch, writing progress (and the heartbeat)
    after each one and stopping at a cancel; the report at the end. Returns the final state."""
    preview = _preview_start(preview_id)
    if preview is None:
        return "skipped"
    try:
        strategies = selectors.recorded_strategies(preview.document)
        live = strategies.get(preview.live_version_number)
        if live is None:
            raise ValueError(f"the live version v{preview.live_version_number} cannot be read")
        versions = report.Versions(
            recorded=strategies,
            live_number=preview.live_version_number,
            live=live,
            candidate=Strategy.from_body(preview.body),
            candidate_number=preview.version_number,
        )
        window = {
            "agent_id": preview.agent_id,
            "environment_id": preview.environment_id,
            "strategy": preview.document.key,
            "start": preview.window_start,
            "end": preview.window_end,
        }
        counts = selectors.window_counts(**window)
        quotas = report.stratified_quotas(counts)
        thresholds = selectors.sampling_thresholds(counts, quotas)
        weights = {
            status: counts[status] / quotas[status] for status in thresholds if quotas[status]
        }
        run = report.Replay(versions, weights=weights)
        done = 0
        for batch in selectors.window_batches(**window, thresholds=thresholds):
            for trace, candidates, _ in batch:
                run.add(trace, candidates)
            done += len(batch)
            if not _preview_progress(preview_id, done=done, covered_until=batch[-1][2]):
                return Preview.State.CANCELLED
        result = run.report()
        result["window"] = {
            "start": preview.window_start.isoformat(),
            "end": preview.window_end.isoformat(),
            "in_window": sum(counts.values()),
            "by_status": counts,
            "quotas": quotas,
        }
    except Exception as exc:
        _preview_finish(
            preview_id, state=Preview.State.FAILED, failure=f"{type(exc).__name__}: {exc}"
        )
        raise
    _preview_finish(preview_id, state=Preview.State.COMPLETE, result=result)
    return Preview.State.COMPLETE
