"""The web server's bound on ingest requests (console.ingest_server.IngestBound): it holds only
where an ingest server runs apart. A console without one (no INGEST_URL) keeps taking every
batch on its web server, however many arrive at once — as before issue 36."""

from __future__ import annotations

import threading

import pytest
from django.urls import reverse

from console.ingest_server import IngestBound


def _held_app(release: threading.Event, entered: list):
    def app(environ, start_response):
        entered.append(environ["PATH_INFO"])
        release.wait(5)
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b"{}"]

    return app


def _post_at_once(bound: IngestBound, n: int):
    statuses: list[str] = []
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": reverse("runtime-traces-ingest")}

    def one():
        bound(dict(environ), lambda status, headers: statuses.append(status))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for thread in threads:
        thread.start()
    return statuses, threads


@pytest.mark.parametrize(
    ("ingest_url", "limit", "busy"),
    [("", None, 0), ("http://127.0.0.1:8002", 1, 2)],
    ids=["no ingest server apart: every batch taken", "ingest server apart: bound of 1"],
)
def test_ingest_bound__three_batches_at_once(settings, ingest_url, limit, busy):
    settings.INGEST_URL, settings.INGEST_ON_WEB_CONCURRENCY = ingest_url, limit
    release, entered = threading.Event(), []
    bound = IngestBound(_held_app(release, entered))

    statuses, threads = _post_at_once(bound, 3)
    for _ in range(100):  # the refused answer at once; the taken ones wait in the app
        if len(entered) + len(statuses) >= 3:
            break
        threading.Event().wait(0.02)
    release.set()
    for thread in threads:
        thread.join(5)

    assert [s for s in statuses if s.startswith("503")] == ["503 Service Unavailable"] * busy
    assert len(entered) == 3 - busy
