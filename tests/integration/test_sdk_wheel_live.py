"""The SDK's wheel against a live console (issue 21's third "Done when"): the wheel is built
from sdk/, installed into clean virtual environments with the lowest and the newest
google-adk the `adk` extra allows, and `sdk/examples/adk_agent.py` runs there against a real
console process (granian web server and stream server on this test's PostgreSQL and Redis);
the manifest it reports and the trace of its model call are then stored. The check runs the
example once more with OpenTelemetry's SDK (issue 32.4): that trace records the assembly
span's trace id, and the trace page's link to the tracing system carries it.

Needs the package index (pip's cache keeps a run to about two minutes); marked `wheel`, so
`pytest -m "not wheel"` leaves it out. scripts/test.sh runs it with the rest.
"""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from strategies.catalog.models import Manifest
from strategies.releases.services import release_publish
from tests.engines import console_env
from tests.factories import release_setup, runtime_token
from tests.runtime_sim import AGENT, ConsoleServer, stream_server
from traces.models import Trace

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.wheel]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "sdk_wheel_check.sh"
# The SDK's own two versions (its tests cannot import the console, so we read theirs).
_spec = importlib.util.spec_from_file_location("sdk_test_wheel", ROOT / "sdk/tests/test_wheel.py")
_sdk_wheel = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_sdk_wheel)
ADK_NEWEST, adk_lowest = _sdk_wheel.ADK_NEWEST, _sdk_wheel.adk_lowest


@pytest.fixture
def live_console(settings, tmp_path):
    world = release_setup()
    sg = world.envs["sg-test"]
    release_publish(version=world.profile[1], environment=sg, actor=world.ops)
    release_publish(version=world.strategy[3], environment=sg, actor=world.ops)
    env = console_env()
    stream = stream_server(env, log_path=tmp_path / "stream.log").start()
    web = ConsoleServer(
        {**env, "STREAM_URL": f":{stream.port}"}, log_path=tmp_path / "web.log"
    ).start()
    try:
        yield sg, web.url, runtime_token(sg)
    finally:
        web.stop()
        stream.stop()


@pytest.mark.parametrize("adk_version", [adk_lowest(), ADK_NEWEST], ids=["lowest", "newest"])
def test_wheel__clean_venv_with_adk__example_runs_against_a_live_console_and_its_trace_is_stored(
    live_console, adk_version, tmp_path, client, make_user, settings
):
    environment, url, token = live_console
    before = set(Trace.objects.filter(environment=environment).values_list("request_id", flat=True))

    # When the wheel is installed with this google-adk and the example asks its question
    result = subprocess.run(
        ["bash", str(SCRIPT), adk_version],
        capture_output=True,
        text=True,
        timeout=900,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("CONSOLE_")},
            "WHEEL_CHECK_DIR": str(tmp_path / "wheel"),
            "PYTHON": sys.executable,
            "CONSOLE_URL": url,
            "CONSOLE_TOKEN": token,
            "CONSOLE_AGENT": AGENT,
        },
    )

    # Then it answers with the installed SDK and this google-adk...
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"google-adk {adk_version}" in result.stdout
    assert "OK context-console-runtime 0.4.0" in result.stdout
    # ...the console holds the manifest it reported and the trace of each model call: the
    # example's, and the one run with OpenTelemetry's SDK, which records its span's ids
    assert Manifest.objects.filter(environment=environment).exists()
    new = Trace.objects.filter(environment=environment).exclude(request_id__in=before)
    assert [(t.agent.key, t.status, t.strategy) for t in new] == [
        (AGENT, "ready", "after_sales_consultation")
    ] * 2, list(new.values())
    found = re.search(
        r"OK otel: .* request (\S+) trace ([0-9a-f]{32}) span ([0-9a-f]{16})", (result.stdout)
    )
    assert found, result.stdout[-3000:]
    request_id, trace_id, span_id = found.groups()
    traced = new.get(request_id=request_id)
    assert (traced.otel_trace_id, traced.otel_span_id) == (trace_id, span_id)
    # ...and the trace page links to that trace in the tracing system
    settings.TRACE_LINK_URL_TEMPLATE = "https://grafana.example/explore?traceId={trace_id}"
    client.force_login(make_user("sup", support=AGENT))
    page = html.unescape(client.get(f"/traces/{request_id}/?environment=sg-test").content.decode())
    assert f'href="https://grafana.example/explore?traceId={trace_id}"' in page
