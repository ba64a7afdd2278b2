"""The impact preview's Celery task: a thin wrapper around `services.preview_execute`.

Not retried: a run that fails is shown as failed with what it covered. A worker killed
mid-run leaves the preview running without a heartbeat, which readers show as failed; the
message comes back (late acks, requeue on worker loss) and the next worker marks it failed
instead of starting again."""

from __future__ import annotations

from celery import shared_task

from traces.previews import services


@shared_task(name="previews.run", autoretry_for=(), max_retries=0)
def preview_run(preview_id: int) -> str:
    return services.preview_execute(preview_id)
