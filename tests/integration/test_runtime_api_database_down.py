"""Issue 31, item 21: with its database down, the console answers runtimes in the API's JSON
error shape — never Django's debug page — even with DEBUG on (as `make run` has it). A real
console process (granian) on a PostgreSQL of this test's own, which the test stops."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.engines import child_env, own_postgres
from tests.factories import release_setup_serving, runtime_token, trace_payload
from tests.runtime_sim import AGENT, ConsoleServer, runtime_call

pytestmark = pytest.mark.django_db(transaction=True)


def test_runtime_api__database_down_with_debug_on__answers_the_json_error_shape(
    transactional_db, tmp_path
):
    # Given a console with DEBUG on, on a database of its own, and a runtime it knows
    world = release_setup_serving()
    token = runtime_token(world.sg, capabilities=("config:read", "traces:write"))
    with own_postgres(tmp_path / "postgres") as (database, url):
        env = child_env(
            DATABASE_URL=url, DEBUG="true", CACHE_PREFIX=f"outage-{uuid.uuid4().hex[:8]}"
        )
        console = ConsoleServer(env, log_path=tmp_path / "web.log").start()
        try:
            base = f"{console.url}/api/v1/runtime"
            status, _, _ = runtime_call(f"{base}/config/{AGENT}", token)
            assert status == 200

            # When its database stops
            database.cleanup()

            # Then what needs the database is refused as unavailable, in the error shape,
            # with Retry-After; an unknown address gets a JSON 404; never the debug page
            batch = {"traces": [trace_payload(request_id="during-outage")]}
            heartbeat = {"instance": "host-1:1", "sdk_version": "0.2.0", "agents": {}}
            answers = {
                "traces": runtime_call(f"{base}/traces", token, "POST", batch),
                "heartbeat": runtime_call(f"{base}/heartbeat", token, "POST", heartbeat),
                "unknown address": runtime_call(f"{base}/nowhere", token),
            }
            for what, (_, headers, body) in answers.items():
                assert headers["Content-Type"].startswith("application/json"), (what, body[:300])
                error = json.loads(body)["error"]
                assert set(error) >= {"code", "message", "details"}, what
                assert b"Traceback" not in body and b"SECRET_KEY" not in body, what
            status, headers, body = answers["traces"]
            assert status == 503 and json.loads(body)["error"]["code"] == "database_unavailable"
            assert headers["Retry-After"].isdigit()
            assert answers["heartbeat"][0] == 503
            assert answers["unknown address"][0] == 404
        finally:
            console.stop()
