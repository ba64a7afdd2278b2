"""The demo world's saved impact preview (issue 32 item 12): ops' waiting request for v3 in prod
comes with its preview, replayed by the previews' own services when the world is loaded — also
when a worker is already running (`manage.py load_demo` beside a running `make run`), which
must not take the preview's shards from the loader and fail it."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from strategies.releases.models import ApprovalRequest
from traces.models import Trace
from traces.previews.models import Preview

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_load_demo__beside_a_running_worker__prod_request_has_a_complete_preview(
    celery_worker_process, settings
):
    settings.CELERY_TASK_DEFAULT_QUEUE = celery_worker_process  # the worker reads this queue

    out = io.StringIO()
    call_command("load_demo", "--quiet-logins", stdout=out)

    [waiting] = ApprovalRequest.objects.filter(status="pending", environment__key="prod")
    [preview] = Preview.objects.all()
    assert (preview.version_id, preview.environment_id) == (
        waiting.version_id,
        waiting.environment_id,
    )
    assert preview.requested_by.username == "ops"
    assert preview.state == Preview.State.COMPLETE, preview.failure
    prod_traces = Trace.objects.filter(environment__key="prod").count()
    assert 0 < preview.report["traces_read"] <= prod_traces
    assert "Demo impact preview of v3 in prod (ops' pending request): complete." in out.getvalue()

    # A second load runs nothing again.
    call_command("load_demo", "--quiet-logins", stdout=io.StringIO())
    assert Preview.objects.count() == 1
