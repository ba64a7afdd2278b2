"""The worker and the beat as the console sees them (issue 31.16, 31.17): exactly one beat
per database (a second one exits), /healthz names a missing worker or beat, and queued work
says why it waits while no worker runs. Real processes: `celery -A console beat` and
`celery -A console worker` on the test database and Redis."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from strategies.catalog.models import Environment
from strategies.documents.models import Document
from tests.conftest import ROOT, celery_worker
from tests.engines import child_env
from tests.runtime_sim import wait_until
from traces.previews import services as previews
from traces.previews.models import Preview

pytestmark = pytest.mark.django_db(transaction=True)


def _beat(schedule, log) -> subprocess.Popen:
    """`celery -A console beat` on the test database, sending to a queue nobody consumes."""
    env = child_env(CELERY_QUEUE=f"beat-{time.monotonic_ns()}")
    command = ["celery", "-A", "console", "beat", "-s", str(schedule), "-l", "INFO"]
    return subprocess.Popen(
        [sys.executable, "-m", *command], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
    )


def _missing(client) -> list[str]:
    response = client.get("/healthz")
    assert response.status_code == 200  # a web process is ready without worker and beat
    return response.json().get("missing", [])


def test_beat__a_second_one_on_the_same_database__exits_and_healthz_names_a_missing_beat(
    tmp_path, client
):
    # Given no beat: /healthz names it
    assert "beat" in _missing(client)
    # When a beat starts, and then a second one on the same database
    with open(tmp_path / "beat1.log", "w+") as log1, open(tmp_path / "beat2.log", "w+") as log2:
        first = _beat(tmp_path / "schedule1", log1)
        try:
            # it holds the lock once /healthz no longer names it
            assert wait_until(lambda: "beat" not in _missing(client), 60), "no beat ran"
            second = _beat(tmp_path / "schedule2", log2)
            try:
                # Then the second exits at once, saying why; the first runs on
                returncode = second.wait(timeout=60)
            finally:
                if second.poll() is None:
                    second.kill()
            said = (tmp_path / "beat2.log").read_text()
            assert returncode != 0 and "another beat already runs on this database" in said
            assert first.poll() is None and "beat" not in _missing(client)
        finally:
            first.terminate()
            first.wait(timeout=30)
    # And once the beat is gone, /healthz names it again
    assert wait_until(lambda: "beat" in _missing(client), timeout=10)


def test_healthz_and_a_queued_preview__no_worker__say_so_until_one_runs(
    demo_world, settings, client
):
    # Given no worker consumes the console's queue, and a preview asked for meanwhile
    settings.CELERY_TASK_DEFAULT_QUEUE = queue = f"idle-{time.monotonic_ns()}"
    ops = get_user_model().objects.get(username="ops")
    document = Document.objects.get(
        agent__key="assistant_professional", key="after_sales_consultation"
    )
    preview, _ = previews.preview_request(
        actor=ops,
        version=document.versions.get(number=3),
        environment=Environment.objects.get(key="sg-test"),
    )
    client.force_login(ops)
    api = reverse("api-preview-detail", args=[preview.pk])
    page = reverse("preview-detail", args=["assistant_professional", preview.pk])

    # Then /healthz names the missing worker, and the preview's API and page say why it waits
    assert "worker" in _missing(client)
    answer = client.get(api).json()
    assert answer["state"] == "queued" and "No worker is running" in answer["waiting"]
    assert 'id="preview-waiting"' in client.get(page).content.decode()

    # When a worker on that queue starts: it is seen, and the preview no longer waits
    with celery_worker(queue=queue):
        assert wait_until(lambda: "worker" not in _missing(client), timeout=60)
        assert wait_until(
            lambda: Preview.objects.get(pk=preview.pk).state != Preview.State.QUEUED, timeout=60
        )
        assert client.get(api).json()["waiting"] == ""
        assert 'id="preview-waiting"' not in client.get(page).content.decode()
