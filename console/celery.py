"""The Celery app. Task defaults suit an audit-grade system: late acks, requeue on worker
loss, bounded retries with backoff, explicit task names (see settings.CELERY_*)."""

import os

from celery import Celery, Task
from celery.signals import beat_init, worker_init, worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")


class AuditGradeTask(Task):
    """Default base: retried on transient errors, with exponential backoff, at most 5 times."""

    autoretry_for = (ConnectionError, TimeoutError, OSError)
    retry_backoff = 2
    retry_backoff_max = 300
    retry_jitter = True
    max_retries = 5
    acks_late = True
    reject_on_worker_lost = True


app = Celery("console", task_cls=AuditGradeTask)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
@beat_init.connect
def refuse_privileged_database_role(**kwargs):
    """A production worker or beat never runs as a role that could switch the audit log's
    guards off."""
    # Django is set up only once the worker starts: imported here, not at the top.
    from console.kernel.database_role import refuse_to_start_as_privileged_role

    refuse_to_start_as_privileged_role()


@beat_init.connect  # sent by an embedded beat (`worker -B`) too, before beat_embedded_init
def run_one_beat(**kwargs):
    """Exactly one beat per database: a second one exits (console.health.beat_lock_hold)."""
    from console.health import beat_lock_hold  # Django is set up only once beat starts

    beat_lock_hold()


def _consumed_queues() -> list[str]:
    return sorted(app.amqp.queues.consume_from or [app.conf.task_default_queue])


@worker_ready.connect
def note_worker_alive(**kwargs):
    """/healthz and waiting work know a worker consumes these queues."""
    from console.health import worker_heartbeat_start  # Django is set up only now

    worker_heartbeat_start(_consumed_queues())


@worker_shutdown.connect
def note_worker_gone(**kwargs):
    from console.health import worker_heartbeat_stop  # Django is set up only now

    worker_heartbeat_stop(_consumed_queues())
