"""The impact preview's Celery tasks: thin wrappers around the services.

`previews.run_shard` replays one shard of a preview's window; the request queues one per
shard (settings.PREVIEW_SHARDS) and the last to finish writes the report. Not retried: a run
that fails is shown as failed with what it covered. A worker killed mid-shard leaves the
shard running without a heartbeat, which readers show as failed; the message comes back
(late acks, requeue on worker loss) and the next worker marks the preview failed instead of
starting the shard again. `previews.run` (every shard, one after the other) serves messages
queued before shards existed."""

from __future__ import annotations

from celery import shared_task

from traces.previews import services


@shared_task(name="previews.run_shard", autoretry_for=(), max_retries=0)
def preview_run_shard(preview_id: int, index: int) -> str:
    return services.preview_shard_execute(preview_id, index)


@shared_task(name="previews.run", autoretry_for=(), max_retries=0)
def preview_run(preview_id: int) -> str:
    return services.preview_execute(preview_id)
