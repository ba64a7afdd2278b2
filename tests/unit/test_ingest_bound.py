"""The web server's bound on ingest requests (console.ingest_server.IngestBound): it holds only
where an ingest server runs apart. A console without one (no INGEST_URL) keeps taking every
batch on its web server, however many arrive at once — as before issue 36."""

from __future__ import annotations

import threading

import orjson
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


@pytest.mark.parametrize(
    ("configured", "reached_at", "told"),
    [
        (":8002", "https://console.bank.example", "https://console.bank.example:8002"),
        (":8002", "http://10.1.2.3:8000", "http://10.1.2.3:8002"),
        (":8002", "http://[fd00::7]:8000", "http://[fd00::7]:8002"),
        ("https://ingest.bank.example", "http://10.1.2.3:8000", "https://ingest.bank.example"),
        ("", "http://10.1.2.3:8000", ""),
    ],
)
def test_ingest_url__this_host_that_port__as_each_client_reached_the_console(
    settings, configured, reached_at, told
):
    """`make run` with HOST=0.0.0.0 sets INGEST_URL=:8002: a runtime on another machine is
    told the host it reached the console by, never this machine's loopback address."""
    from console.ingest_server import ingest_url_seen_from

    settings.INGEST_URL = configured
    assert ingest_url_seen_from(reached_at) == told


def test_ingest_busy__relative_ingest_url__names_the_host_the_runtime_used(settings):
    settings.INGEST_URL, settings.INGEST_ON_WEB_CONCURRENCY = ":8002", 1
    release, entered, answers = threading.Event(), [], []
    bound = IngestBound(_held_app(release, entered))
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": reverse("runtime-traces-ingest"),
        "HTTP_HOST": "console.bank.example:8000",
        "wsgi.url_scheme": "https",
    }
    holder = threading.Thread(target=bound, args=(dict(environ), lambda *a: None))
    holder.start()
    for _ in range(100):
        if entered:
            break
        threading.Event().wait(0.02)
    body = b"".join(bound(dict(environ), lambda status, headers: answers.append(status)))
    release.set()
    holder.join(5)

    assert answers == ["503 Service Unavailable"]
    error = orjson.loads(body)["error"]
    assert error["code"] == "ingest_busy"
    assert error["ingest_url"] == "https://console.bank.example:8002"
    assert "https://console.bank.example:8002" in error["message"]


@pytest.mark.parametrize("host", ["", "0.0.0.0", "127.0.0.1"])
def test_healthz__relative_ingest_url__asks_the_ingest_server_on_this_machine(
    settings, monkeypatch, host
):
    """/healthz asks the ingest server's own /healthz: on this machine, at the address the
    servers were given (HOST), loopback for every address."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from console import ingest_server

    asked = []

    class Healthz(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Healthz)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings.INGEST_URL = f":{server.server_address[1]}"
        monkeypatch.setenv("HOST", host)
        section = ingest_server.health_section()
    finally:
        server.shutdown()
        server.server_close()
    assert asked == ["/healthz"]
    assert section["url"] == settings.INGEST_URL and section["answers"] is True
