"""Writes of impact previews: request (validated, reused for the same inputs), cancel, and
the run the shard tasks drive (`preview_shard_execute`: progress, heartbeat, the merge and
the report by the last shard)."""

from __future__ import annotations

from datetime import datetime, timedelta

from celery import current_app
from context_runtime.engine import Strategy
from django.conf import settings
from django.db import transaction
from django.db.models import Min, Q, Sum
from django.utils import timezone

from console.kernel.audit import AccessAction, access_record, actor_label
from console.kernel.errors import Conflict, ValidationFailed
from console.kernel.policy import check_user_can_preview
from console.kernel.standby import reads_from_standby
from console.kernel.transactions import service_transaction
from strategies.catalog.models import Environment
from strategies.documents.models import Document, Version
from strategies.releases.selectors import live_release, runtime_refusals
from traces.previews import report, selectors
from traces.previews.models import Preview, PreviewShard

CLOCK_SKEW = timedelta(minutes=5)


def default_window(now: datetime | None = None) -> tuple[datetime, datetime]:
    """The last 7 days, to the minute that began last: two requests in the same minute name
    the same window, and it never ends after the request (a window reaching into the future
    would name traces the preview cannot have replayed)."""
    end = (now or timezone.now()).replace(second=0, microsecond=0)
    return end - selectors.DEFAULT_WINDOW, end


def _window_checked(environment: Environment, start, end, now) -> datetime:
    """The window's end as the preview will name it, or the refusal of the window. Within the
    clock skew allowed, an end after now is now: nothing after it has occurred yet."""
    if end > now + CLOCK_SKEW:
        raise ValidationFailed(
            "The window ends in the future.",
            code="invalid_window",
            details=[{"path": "window_end", "code": "invalid_window", "message": "in the future"}],
        )
    end = min(end, now)
    if start >= end:
        raise ValidationFailed(
            "The window must start before it ends.",
            code="invalid_window",
            details=[
                {"path": "window_start", "code": "invalid_window", "message": "after the end"}
            ],
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
    return end


@service_transaction(durable=True)
def preview_request(
    *,
    actor,
    version: Version,
    environment: Environment,
    window_start: datetime | None = None,
    window_end: datetime | None = None,
    queue: bool = True,
) -> tuple[Preview, bool]:
    """Ask for an impact preview of `version` in `environment` over the window (default: the
    last 7 days). Refused: someone who may not see the agent's traces and configuration
    (logged), a profile, an archived environment, nothing live there, a body the
    environment's runtime cannot serve (with its findings), a window beyond the retention,
    no traces in the window. The same inputs as a complete or running preview: that one is
    returned (reused, True). `queue=False`: no shard task is sent — the caller runs the
    preview in its own process (`preview_execute`), where a worker must not race it for the
    shards (the demo loader, which may run beside a running worker)."""
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
    window_end = _window_checked(environment, window_start, window_end, now)
    # The preview covers the window's traces stored by now (its `requested_at`), counted once
    # here; the replay reads exactly those, and a trace stored in the window later makes a
    # new request a new preview.
    counts = selectors.window_counts(
        agent_id=agent.pk,
        environment_id=environment.pk,
        strategy=document.key,
        start=window_start,
        end=window_end,
        stored_by=now,
    )
    reused = selectors.reusable_preview(
        document=document,
        environment=environment,
        content=version.content_hash,
        live_content=live.version.content_hash,
        window_start=window_start,
        window_end=window_end,
        engine=report.CONSOLE_ENGINE,
        counts=counts,
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
    if not counts:
        raise ValidationFailed(
            f"No traces of {document.key} in {environment.key} between "
            f"{window_start:%Y-%m-%d %H:%M} and {window_end:%Y-%m-%d %H:%M} UTC: there is "
            "nothing to replay. Pick a longer window, or wait for traffic.",
            code="no_traces",
        )
    shards = settings.PREVIEW_SHARDS
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
        requested_at=now,
        traces_total=sum(report.stratified_quotas(counts).values()),
        shard_count=shards,
        window_by_status=counts,
    )
    PreviewShard.objects.bulk_create(
        PreviewShard(preview=preview, index=index) for index in range(shards)
    )
    access_record(
        actor=actor,
        action=AccessAction.PREVIEW_REQUEST,
        target=selectors.preview_target(preview),
        agent=agent,
        detail={"reused": False, "version": version.number, "environment": environment.key},
    )
    if queue:
        transaction.on_commit(lambda: preview_queue(preview.pk, shards))
    return preview, False


SHARD_TASK = "previews.run_shard"


def preview_queue(preview_id: int, shards: int) -> None:
    """Queue one task per shard (the task is named, so this module needs no task import); the
    queue is read at send time, so a test can point it at its own worker."""
    queue = getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", None)
    for index in range(shards):
        current_app.send_task(SHARD_TASK, args=(preview_id, index), queue=queue)


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


# --- the run (the shard tasks' bodies) ----------------------------------------------------------
# Every write of a run locks the preview row first (then its shards): the shards of one
# preview take turns on it, so sums are exact and exactly one shard sees itself last.
WORKER_LOST = "The worker running it stopped (killed or lost) before the end."


def _locked(preview_id: int) -> Preview | None:
    return Preview.objects.select_for_update().filter(pk=preview_id).first()


def _shard_of(preview: Preview, index: int) -> PreviewShard:
    # get_or_create: a preview queued before shards existed has no shard row yet.
    shard, _ = PreviewShard.objects.get_or_create(preview=preview, index=index)
    return shard


def _totals(preview: Preview) -> list[str]:
    """The preview's progress from its shards': traces done (summed), covered until (the
    earliest shard's last trace) and the heartbeat (the oldest running shard's, so one dead
    shard makes the preview stale even while another still writes)."""
    totals = preview.shards.aggregate(
        done=Sum("done"),
        covered=Min("covered_until"),
        beat=Min("heartbeat_at", filter=Q(state=PreviewShard.State.RUNNING)),
    )
    preview.traces_done = min(totals["done"] or 0, preview.traces_total)
    preview.covered_until = totals["covered"]
    preview.heartbeat_at = totals["beat"]
    return ["traces_done", "covered_until", "heartbeat_at"]


def _fail(preview: Preview, failure: str, now) -> list[str]:
    preview.state = Preview.State.FAILED
    preview.failure = failure[:500]
    preview.finished_at = now
    return ["state", "failure", "finished_at"]


@service_transaction
def _shard_start(preview_id: int, index: int) -> Preview | None:
    """Mark the shard (and the preview) running. None: nothing to run — the preview is
    finished or cancelled, the shard already finished (a redelivered message), or the shard
    was already started: its worker was lost and this is the message coming back, so the
    preview fails with what it covered (a part replayed twice would count twice)."""
    preview = _locked(preview_id)
    if preview is None:
        return None
    shard = _shard_of(preview, index)
    now = timezone.now()
    fields: list[str] = []
    if shard.state == PreviewShard.State.RUNNING or (
        shard.state == PreviewShard.State.QUEUED and selectors.is_stale(preview, now=now)
    ):
        shard.state, shard.finished_at = PreviewShard.State.FAILED, now
        shard.save(update_fields=["state", "finished_at"])
        if preview.state == Preview.State.RUNNING:
            fields = _fail(preview, WORKER_LOST, now)
        preview.save(update_fields=[*fields, *_totals(preview)])
        return None
    if shard.state != PreviewShard.State.QUEUED:
        return None  # finished, stopped or failed: a redelivery changes nothing
    if preview.state not in (Preview.State.QUEUED, Preview.State.RUNNING) or (
        preview.state == Preview.State.RUNNING and preview.cancel_requested
    ):  # cancelled, or asked while this shard waited for a worker
        shard.state, shard.finished_at = PreviewShard.State.STOPPED, now
        shard.save(update_fields=["state", "finished_at"])
        if preview.state == Preview.State.RUNNING:
            preview.state, preview.finished_at = Preview.State.CANCELLED, now
            preview.save(update_fields=["state", "finished_at", *_totals(preview)])
        return None
    if preview.state == Preview.State.QUEUED:
        preview.state, preview.started_at = Preview.State.RUNNING, now
        # Counted again as the first shard starts: a batch the ingest stamped before the
        # request but committed after its count is in by now, so the shards sample, and the
        # report states, the very traces the replay reads.
        preview.window_by_status = selectors.window_counts(**_window(preview))
        preview.traces_total = sum(report.stratified_quotas(preview.window_by_status).values())
        fields = ["state", "started_at", "window_by_status", "traces_total"]
    if not preview.window_by_status:  # requested before the counts were kept
        preview.window_by_status = selectors.window_counts(**_window(preview))
        fields.append("window_by_status")
    shard.state = PreviewShard.State.RUNNING
    shard.started_at = shard.heartbeat_at = now
    shard.save(update_fields=["state", "started_at", "heartbeat_at"])
    preview.save(update_fields=[*fields, *_totals(preview)])
    return preview


@service_transaction
def _shard_progress(preview_id: int, index: int, *, done: int, covered_until) -> bool:
    """Record the shard's progress and heartbeat; False when it must stop: a cancel was asked
    for (then the preview is cancelled, with what its shards covered) or the preview failed
    in another shard."""
    preview = _locked(preview_id)
    shard = _shard_of(preview, index)
    now = timezone.now()
    shard.done, shard.covered_until, shard.heartbeat_at = done, covered_until, now
    go_on = preview.state == Preview.State.RUNNING and not preview.cancel_requested
    fields = ["done", "covered_until", "heartbeat_at"]
    if not go_on:
        shard.state, shard.finished_at = PreviewShard.State.STOPPED, now
        fields += ["state", "finished_at"]
    shard.save(update_fields=fields)
    fields = _totals(preview)
    if preview.state == Preview.State.RUNNING and preview.cancel_requested:
        preview.state, preview.finished_at = Preview.State.CANCELLED, now
        fields += ["state", "finished_at"]
    preview.save(update_fields=fields)
    return go_on


@service_transaction
def _shard_failed(preview_id: int, index: int, failure: str) -> None:
    preview = _locked(preview_id)
    shard = _shard_of(preview, index)
    now = timezone.now()
    shard.state, shard.finished_at = PreviewShard.State.FAILED, now
    shard.save(update_fields=["state", "finished_at"])
    fields = _fail(preview, failure, now) if preview.state == Preview.State.RUNNING else []
    preview.save(update_fields=[*fields, *_totals(preview)])


@service_transaction
def _shard_finish(preview_id: int, index: int, run: report.Replay) -> str:
    """The shard replayed all its traces. Under the preview's lock: when every other shard is
    done, this one is the last — it merges their parts into its own run and writes the report
    (exactly one shard does, even when two finish at once); else it leaves its part for the
    last. Returns the preview's state, or "shard_done"."""
    preview = _locked(preview_id)
    shard = _shard_of(preview, index)
    now = timezone.now()
    shard.state, shard.finished_at, shard.done = PreviewShard.State.DONE, now, run.read
    others = list(preview.shards.exclude(pk=shard.pk))
    last = len(others) == preview.shard_count - 1 and all(
        other.state == PreviewShard.State.DONE for other in others
    )
    if preview.state != Preview.State.RUNNING or not last:
        # Cancelled or failed meanwhile: its state stands; else the last shard merges this.
        if preview.state == Preview.State.RUNNING:
            shard.partial = run.state()
        shard.save(update_fields=["state", "finished_at", "done", "partial"])
        preview.save(update_fields=_totals(preview))
        return preview.state if preview.state != Preview.State.RUNNING else "shard_done"
    for other in others:
        run.merge(other.partial)
    result = run.report()
    counts = preview.window_by_status
    result["window"] = {
        "start": preview.window_start.isoformat(),
        "end": preview.window_end.isoformat(),
        "stored_by": preview.requested_at.isoformat(),
        "in_window": sum(counts.values()),
        "by_status": counts,
        "quotas": report.stratified_quotas(counts),
    }
    shard.save(update_fields=["state", "finished_at", "done"])
    preview.shards.update(partial=None)  # merged: the parts are no longer needed
    fields = _totals(preview)
    preview.state, preview.report, preview.finished_at = Preview.State.COMPLETE, result, now
    preview.traces_done = preview.traces_total = result["traces_read"]
    preview.save(update_fields=[*fields, "state", "report", "finished_at", "traces_total"])
    return Preview.State.COMPLETE


def _window(preview: Preview) -> dict:
    return {
        "agent_id": preview.agent_id,
        "environment_id": preview.environment_id,
        "strategy": preview.document.key,
        "start": preview.window_start,
        "end": preview.window_end,
        "stored_by": preview.requested_at,
    }


def preview_shard_execute(preview_id: int, index: int) -> str:
    """Replay the traces of one shard of the preview's window batch by batch (the same
    sampling as every shard: thresholds from the counts taken at request), writing progress
    and the heartbeat after each one and stopping at a cancel; the last shard to finish
    writes the report. Returns the preview's state, "shard_done", "stopped" or "skipped"."""
    preview = _shard_start(preview_id, index)
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
        counts = preview.window_by_status
        quotas = report.stratified_quotas(counts)
        thresholds = selectors.sampling_thresholds(counts, quotas)
        weights = {
            status: counts[status] / quotas[status] for status in thresholds if quotas[status]
        }
        run = report.Replay(versions, weights=weights)
        shard = (index, preview.shard_count) if preview.shard_count > 1 else None
        done = 0
        batches = selectors.window_batches(**_window(preview), thresholds=thresholds, shard=shard)
        for batch in _from_standby(batches):
            for trace, candidates, at in batch:
                run.add(trace, candidates, at)
            done += len(batch)
            if not _shard_progress(preview_id, index, done=done, covered_until=batch[-1][2]):
                return "stopped"
    except Exception as exc:
        _shard_failed(preview_id, index, f"{type(exc).__name__}: {exc}")
        raise
    return _shard_finish(preview_id, index, run)


def _from_standby(batches):
    """The window's batches read from the standby when there is one that has replayed the
    preview's window (the progress written between batches goes to the primary)."""
    iterator = iter(batches)
    while True:
        with reads_from_standby():
            batch = next(iterator, None)
        if batch is None:
            return
        yield batch


def preview_execute(preview_id: int) -> str:
    """Every shard of the preview in this process, one after the other (what a worker with
    one process does with the shard tasks). Returns the preview's final state, or "skipped"
    when no shard had anything to run."""
    preview = Preview.objects.filter(pk=preview_id).only("shard_count").first()
    if preview is None:
        return "skipped"
    outcomes = [preview_shard_execute(preview_id, k) for k in range(preview.shard_count)]
    if all(outcome == "skipped" for outcome in outcomes):
        return "skipped"
    return Preview.objects.values_list("state", flat=True).get(pk=preview_id)
