"""Issue 36, item 2: runtime ingest apart from config reads. Real processes (granian): the
ingest server (console.ingest_wsgi) takes a trace batch and the trace is readable; it serves
nothing else; the main web server bounds ingest requests — one more than its bound gets 503,
Retry-After and the error shape (`ingest_busy`) at once, config reads still answer — and the
SDK's reporter, sent there, retries until the batch is stored."""

from __future__ import annotations

import json
import threading
import time

import psycopg
import pytest
from context_runtime.reporter import TraceReporter

from tests.engines import console_env, database_url
from tests.factories import release_setup_serving, runtime_token, trace_payload
from tests.factories.traces import candidates_of
from tests.runtime_sim import AGENT, ConsoleServer, runtime_call, wait_until
from traces.models import Trace

pytestmark = pytest.mark.django_db(transaction=True)


def test_ingest_server__batch_accepted_and_readable__nothing_else_served(tmp_path):
    # Given the ingest server of a console, and a runtime's token
    world = release_setup_serving()
    token = runtime_token(world.sg, capabilities=("config:read", "traces:write"))
    ingest = ConsoleServer(
        console_env(), app="console.ingest_wsgi:application", log_path=tmp_path / "ingest.log"
    ).start()
    try:
        base = f"{ingest.url}/api/v1/runtime"
        # When a runtime posts a batch there
        batch = {"traces": [trace_payload(request_id="apart-1"), trace_payload("apart-2")]}
        status, _, body = runtime_call(f"{base}/traces", token, "POST", batch)

        # Then it is stored, candidates and all, and readable
        assert status == 200, body[:300]
        assert json.loads(body)["accepted"] == 2
        stored = Trace.objects.get(request_id="apart-1")
        assert len(candidates_of(stored)) == 3
        # And the ingest server serves nothing but ingest: a config read is a JSON 404 that
        # says where it is served; its /healthz says which server answered
        status, headers, body = runtime_call(f"{base}/config/{AGENT}", token)
        assert status == 404 and headers["Content-Type"] == "application/json"
        assert "ingest server" in json.loads(body)["error"]["message"]
        status, _, body = runtime_call(f"{ingest.url}/healthz", token)
        assert status == 200 and json.loads(body)["ingest"] == {"server": "ingest"}
    finally:
        ingest.stop()


def _waiting_on_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        return bool(conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0])


def test_web_server__ingest_bound_full__503_retry_after_config_reads_answer_reporter_retries(
    tmp_path,
):
    # Given the main web server with a bound of one ingest request per process, an ingest
    # server it names, and one batch holding the bound (its insert waits on a lock)
    world = release_setup_serving()
    token = runtime_token(world.sg, capabilities=("config:read", "traces:write"))
    ingest_url = "http://127.0.0.1:9"  # named in the refusal; not needed to be up here
    web = ConsoleServer(
        console_env(INGEST_ON_WEB_CONCURRENCY="1", INGEST_URL=ingest_url),
        log_path=tmp_path / "web.log",
    ).start()
    base = f"{web.url}/api/v1/runtime"
    holder = psycopg.connect(database_url())
    reporter = None
    try:
        holder.execute("LOCK TABLE traces_request_key IN ACCESS EXCLUSIVE MODE")
        first: list = []
        slow = threading.Thread(
            target=lambda: first.append(
                runtime_call(f"{base}/traces", token, "POST", {"traces": [trace_payload("held")]})
            )
        )
        slow.start()
        assert wait_until(lambda: _waiting_on_lock(database_url()), timeout=30)

        # When another batch comes
        started = time.monotonic()
        status, headers, body = runtime_call(
            f"{base}/traces", token, "POST", {"traces": [trace_payload("refused")]}
        )

        # Then it is refused at once, retryable, in the error shape naming the ingest server
        assert time.monotonic() - started < 5
        assert status == 503, body[:300]
        assert headers["Retry-After"] == "1"
        error = json.loads(body)["error"]
        assert error["code"] == "ingest_busy" and error["ingest_url"] == ingest_url
        assert set(error) >= {"code", "message", "details"}
        assert not Trace.objects.filter(request_id="refused").exists()
        # And a runtime's config read still answers meanwhile; /healthz names the ingest
        # server (down here: reported, not a failure; its address only for signed-in users)
        assert runtime_call(f"{base}/config/{AGENT}", token)[0] == 200
        status, _, body = runtime_call(f"{web.url}/healthz", token)
        assert json.loads(body)["ingest"] == {
            "server": "web", "apart": True, "bound_on_web": 1, "answers": False
        }  # fmt: skip

        # And the SDK's reporter, sent there, is refused, retries, and gets its trace stored
        # once the bound frees
        reporter = TraceReporter(
            web.url,
            token,
            spool_dir=None,
            flush_interval=0.05,
            backoff_initial=0.05,
            backoff_max=0.5,
            close_at_exit=False,
        )
        reporter.report(trace_payload("via-reporter"))
        assert wait_until(lambda: reporter.stats()["retries"] >= 1, timeout=30)
        assert "ingest_busy" in reporter.stats()["last_error"]
        holder.rollback()  # the lock goes: the held batch completes, the bound frees
        slow.join(timeout=60)
        assert first and first[0][0] == 200
        assert reporter.flush(timeout=30)
        assert Trace.objects.filter(request_id__in=["held", "via-reporter"]).count() == 2
    finally:
        holder.close()
        if reporter is not None:
            reporter.close(timeout=1)
        web.stop()
