"""The Done-when drill of the SIEM streaming (issue 34 item 3; docs/siem.md): with the syslog
receiver stopped for a while and a real Celery worker (with its beat) killed once, every audit
and access row — and every chain checkpoint — reaches the receiver after it returns, each
exactly once by event id, in chain order per chain.

The receiver is down for SIEM_DRILL_DOWN_SECONDS (8 s by default: eight drains at
SIEM_DRAIN_SECONDS=1; set 300 for the issue's five minutes). The worker is killed with SIGKILL
while it drains the backlog into a slow receiver, so a batch the receiver got may never have
moved the cursor: it is sent again, and the test de-duplicates by id, as a SIEM does."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from console.access import siem
from console.kernel.models import SiemDestination
from tests.conftest import ROOT, WORKER_PROCESSES, celery_worker
from tests.factories import user_with_grants
from tests.integration.test_siem_streaming import expected_ids, received_in_order, some_rows
from tests.siem_receivers import SyslogReceiver

pytestmark = pytest.mark.django_db(transaction=True)
DOWN_SECONDS = float(os.environ.get("SIEM_DRILL_DOWN_SECONDS", "8"))
WORKER_ENV = {
    "WEBHOOK_ALLOW_PRIVATE_TARGETS": "true",  # the receiver is on loopback
    "SIEM_DRAIN_SECONDS": "1",
    "SIEM_BATCH_SIZE": "10",
}


def _wait(condition, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.1)


def _ready(queue: str) -> None:
    log = ROOT / ".data" / f"worker-{queue}.log"
    _wait(lambda: "ready." in log.read_text(), 60, f"the worker did not start: {log}")


def _children(pid: int) -> list[int]:
    """The processes `pid` started (the worker's embedded beat), from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def _kill_with_children(proc) -> None:
    """SIGKILL the worker and its embedded beat at once, as when its machine dies: nothing
    of it gets to finish a batch, advance a cursor or let go of a lock cleanly."""
    children = _children(proc.pid)
    for pid in [proc.pid, *children]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(10)


def _all_received(receiver) -> bool:
    return all(
        received_in_order(receiver.received, chain) == expected_ids(chain)
        for chain in ("audit", "access")
    )


def test_sink_down_and_worker_killed__every_row_once_by_id_in_chain_order(settings, tmp_path):
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    admin = user_with_grants("root", admin=None)
    receiver = SyslogReceiver().start()
    destination = siem.destination_create(
        actor=admin, name="drill", protocol="syslog", url=receiver.url
    )
    try:
        with celery_worker(beat_schedule=tmp_path / "beat-1", **WORKER_ENV) as queue:
            _ready(queue)
            some_rows(15)
            _wait(lambda: _all_received(receiver), 30, "the first rows streamed")

            receiver.stop()  # the sink is down
            down_since = time.monotonic()
            while time.monotonic() - down_since < DOWN_SECONDS:
                some_rows(10)
                time.sleep(1)
            destination.refresh_from_db()
            assert destination.failures > 0 and destination.status == "active"
            behind = sum(b.behind for b in siem.backlog(destination))
            assert behind >= 20 * DOWN_SECONDS // 2

            before = len(receiver.received.events)
            receiver.delay = 0.3  # slow: the worker is busy draining when it is killed
            receiver.start()
            _wait(lambda: len(receiver.received.events) > before, 30, "the sink got events")
            _kill_with_children(WORKER_PROCESSES[queue])
        assert not _all_received(receiver), "the kill came too late to test anything"

        some_rows(5)  # written while no worker runs
        receiver.delay = 0.0
        with celery_worker(beat_schedule=tmp_path / "beat-2", **WORKER_ENV) as queue:
            _ready(queue)
            _wait(lambda: _all_received(receiver), 120, "everything streamed after the restart")

        assert receiver.received.problems == []
        for chain in ("audit", "access"):
            assert received_in_order(receiver.received, chain) == expected_ids(chain)
        ids = receiver.received.ids()
        duplicates = len(ids) - len(set(ids))
        print(f"drill: {len(set(ids))} events, {duplicates} sent twice at the wire")
        assert sum(b.behind for b in siem.backlog(SiemDestination.objects.get())) == 0
    finally:
        receiver.stop()
