"""The runtime contract's examples (sdk/tests/contract/*.json, docs/runtime-contract.md),
answered by the real console. The SDK's fake console answers the same files
(sdk/tests/test_contract_examples.py), so neither can drift from the contract unnoticed."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
from pathlib import Path

import pytest

from strategies.releases.services import release_publish
from strategies.runtime.stream import StreamApplication
from tests.engines import run_apart
from tests.factories import release_setup, runtime_token
from tests.factories.outcomes import outcome_kinds

SDK_TESTS = Path(__file__).resolve().parents[2] / "sdk" / "tests"

# The runner lives with the fixtures in the SDK's tests (which cannot import the console).
_spec = importlib.util.spec_from_file_location(
    "contract_examples", SDK_TESTS / "contract_examples.py"
)
contract_examples = importlib.util.module_from_spec(_spec)
sys.modules["contract_examples"] = contract_examples  # dataclasses look their module up
_spec.loader.exec_module(contract_examples)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sg_test_token():
    """sg-test serves assistant_professional's profile v1 and after_sales_consultation v3."""
    world = release_setup()
    sg_test = world.envs["sg-test"]
    release_publish(version=world.profile[1], environment=sg_test, actor=world.ops)
    release_publish(version=world.strategy[3], environment=sg_test, actor=world.ops)
    outcome_kinds(sg_test)  # the demo's: task_completed, escalated, rating, resolution
    return runtime_token(sg_test)


@pytest.mark.parametrize("example", contract_examples.example_names())
def test_contract_example__real_console__answers_as_the_example_says(
    client, sg_test_token, example
):
    def send(method, path, headers, body, stream=False):
        if path.startswith("/api/v1/runtime/stream/"):
            return _stream_server_answer(path, headers, stream)
        extra = {
            "HTTP_" + name.upper().replace("-", "_"): value
            for name, value in headers.items()
            if name.lower() != "content-type"
        }
        content_type = headers.get("Content-Type", "application/json")
        response = client.generic(method, path, data=body, content_type=content_type, **extra)
        return contract_examples.Answer(
            status=response.status_code,
            headers={name.lower(): value for name, value in response.headers.items()},
            body=response.content,
        )

    variables = {"token": sg_test_token, "environment": "sg-test", "profile_version": 1}
    contract_examples.run_example(example, send, variables)


def _stream_server_answer(path: str, headers, stream: bool):
    """The stream path is the stream server's (an ASGI application beside the web server):
    asked in this process, read for STREAM_READ_SECONDS (or until its first event), then
    disconnected as a runtime would."""

    async def ask():
        app = StreamApplication()
        messages: list[dict] = []
        gone = asyncio.Event()
        asked = False

        async def receive():
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            messages.append(message)

        scope = {
            "type": "http",
            "method": "GET",
            "path": path,
            "query_string": b"",
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        }
        task = asyncio.ensure_future(app(scope, receive, send))
        # STREAM_READ_SECONDS counts from the response's head (the first event is written
        # with it): on a loaded machine the application may take longer than that to
        # authenticate and answer at all, which is not "no event" (up to 10 s for the head).
        started = time.monotonic()
        deadline = None
        while not task.done() and time.monotonic() < started + 10:
            if deadline is None and any(m["type"] == "http.response.start" for m in messages):
                deadline = time.monotonic() + contract_examples.STREAM_READ_SECONDS
            if deadline is not None and time.monotonic() >= deadline:
                break
            body = b"".join(m.get("body", b"") for m in messages)
            if b"event: config" in body and body.endswith(b"\n\n"):
                break
            await asyncio.sleep(0.02)
        gone.set()
        await asyncio.wait_for(task, 5)
        await app.hub.stop()
        start = next(m for m in messages if m["type"] == "http.response.start")
        return contract_examples.Answer(
            status=start["status"],
            headers={k.decode().lower(): v.decode() for k, v in start["headers"]},
            body=b"".join(
                m.get("body", b"") for m in messages if m["type"] == "http.response.body"
            ),
        )

    return run_apart(ask())


def test_contract_examples__all_files_found():
    # An empty parametrization would pass unnoticed: a path that moved must fail here.
    assert contract_examples.example_names() == [
        "config",
        "config_not_modified",
        "config_refused",
        "heartbeat",
        "outcomes_batch",
        "stream",
        "traces_batch",
        "traces_batch_refused",
        "traces_otel",
        "traces_rejected_one_by_one",
        "traces_rollout",
    ]
