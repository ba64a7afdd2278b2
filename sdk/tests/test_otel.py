"""OpenTelemetry (issue 21.9, issue 32.4): one span per context assembly, a child of the span
ADK has current for the callback (where that is, per google-adk release: otel_parentage.py),
with references and counts but never contents; the trace records the span's trace and span
id; the reporter's and client's health as metrics; and without ``opentelemetry-api`` nothing
changes and nothing fails."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import google.adk
import pytest

pytest.importorskip("opentelemetry.sdk", reason="the test extra brings opentelemetry-sdk")
pytest.importorskip("google.adk", reason="google-adk is not installed (the sdk's [adk] extra)")

from context_runtime import otel  # noqa: E402
from context_runtime.client import ConfigClient  # noqa: E402
from context_runtime.reporter import TraceReporter  # noqa: E402
from fake_console import AGENT, TOKEN  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF  # noqa: E402
from otel_parentage import SCHEMA_OPT_IN, documented_parent, parentage  # noqa: E402
from test_adk import (  # noqa: E402
    CONSOLE_PAYLOAD,  # noqa: F401  (the fake console serves the consultation's profile)
    ORDER_TEXT,
    SECTION_TEXT,
    make_agent,
    make_registry,
    stored_trace,
)
from test_every_request import agent_with, nan_dialogue  # noqa: E402

EXPORTER = InMemorySpanExporter()


@pytest.fixture
def client(console):
    config = ConfigClient(console.url, TOKEN, AGENT, poll_interval=30.0, timeout=2.0)
    assert config.start(wait=5.0)
    yield config
    config.stop()


@pytest.fixture
def reporter(console):
    sender = TraceReporter(console.url, TOKEN, flush_interval=0.02, close_at_exit=False)
    yield sender
    sender.close(timeout=1.0)


@pytest.fixture(scope="module", autouse=True)
def tracer_provider():
    """The global provider (ADK's tracer and ours resolve through it), set once."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    yield provider


@pytest.fixture(autouse=True)
def spans():
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


def assembly_spans(exporter):
    return [s for s in exporter.get_finished_spans() if s.name.startswith(otel.OPERATION)]


def test_adk_request__one_assembly_span_in_adk_s_trace__references_and_counts_only(
    client, reporter, spans
):
    agent = make_agent(client, reporter)

    _, invocation = agent.ask()

    (span,) = assembly_spans(spans)
    attributes = dict(span.attributes)
    # Named as the GenAI conventions name agent spans, with the ADK agent's name as ADK's own
    # spans say it; the console's agent key beside it.
    assert span.name == "assemble_context assistant"
    assert attributes["gen_ai.operation.name"] == "assemble_context"
    assert attributes["gen_ai.agent.name"] == "assistant"
    assert attributes["context_console.agent"] == "assistant_professional"
    assert attributes["gen_ai.request.model"] == "stub-model"
    assert attributes["context_console.request_id"] == invocation
    assert attributes["context_console.strategy"] == "after_sales_consultation"
    assert attributes["context_console.strategy.version"] == 3
    assert attributes["context_console.status"] == "ready"
    assert attributes["context_console.candidates.selected"] == 4
    assert attributes["context_console.candidates.excluded"] == 1
    assert attributes["context_console.input_tokens"] > 0
    assert attributes["context_console.sections.user_context"] == (
        "high_level_profile",
        "communication_style",
    )
    assert span.status.is_ok
    adk_agent_spans = [s for s in spans.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert [dict(s.attributes)["gen_ai.agent.name"] for s in adk_agent_spans] == ["assistant"]
    # Never contents: no section value, no item text, no question.
    text = str(attributes)
    assert ORDER_TEXT not in text and SECTION_TEXT["high_level_profile"] not in text
    assert "kettle" not in text


@pytest.mark.parametrize("schema", ["", "1"], ids=["adk-default-telemetry", "adk-schema-1"])
def test_adk_request__assembly_span_s_parent__as_the_docs_state_for_this_adk(
    client, reporter, spans, monkeypatch, schema
):
    """The parent sdk/README.md § OpenTelemetry states for the installed google-adk (2.13:
    ``invoke_agent`` by default, ``call_llm`` with ADK's legacy telemetry schema 1); the
    wheel check asserts the same with the lowest supported release."""
    monkeypatch.setenv(SCHEMA_OPT_IN, schema)
    agent = make_agent(client, reporter)

    agent.ask()

    (found,) = parentage(spans.get_finished_spans())
    assert found.problems(google.adk.__version__) == []
    assert found.parent_kind == documented_parent(google.adk.__version__)


def test_adk_request__the_trace_records_the_assembly_span_s_ids(client, reporter, console, spans):
    agent = make_agent(client, reporter)

    _, invocation = agent.ask()

    (span,) = assembly_spans(spans)
    stored = stored_trace(console, reporter, invocation)
    assert stored["otel"] == {
        "trace_id": trace.format_trace_id(span.context.trace_id),
        "span_id": trace.format_span_id(span.context.span_id),
    }
    # The trace ADK's own spans are in: the link opens the whole request.
    adk_spans = [s for s in spans.get_finished_spans() if s is not span]
    assert {s.context.trace_id for s in adk_spans} == {span.context.trace_id}


def test_recorded_ids__span_not_sampled__none_so_no_link_to_nothing():
    provider = TracerProvider(sampler=ALWAYS_OFF)

    with otel.assembly_span(request_id="r-1", agent="a", tracer_provider=provider) as span:
        ids = otel.recorded_ids()

    assert span.recording is False
    assert ids is None
    assert otel.recorded_ids() is None  # outside any span


def test_adk_refused_input__span_status_error_with_the_reason(client, reporter, spans):
    agent = agent_with(client, reporter, nan_dialogue(make_registry()))

    agent.ask()

    (span,) = assembly_spans(spans)
    assert span.attributes["context_console.status"] == "input_refused"
    assert span.attributes["error.type"] == "input_refused"
    assert span.attributes["context_console.input_errors"] == 1
    assert not span.status.is_ok and "malformed" in span.status.description


def test_metrics__reporter_and_client_health__read_at_collection(client, reporter, console):
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    assert otel.instrument(reporter=reporter, clients=[client], meter_provider=provider)
    console.fail_next["traces"] = [503] * 50  # the console refuses: traces wait
    agent = make_agent(client, reporter)
    agent.ask()
    time.sleep(0.3)  # the sender has taken the trace into a batch (counted from then on)

    points = {}
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    points[(metric.name, tuple(sorted(point.attributes.items())))] = point.value

    assert points[("context_console.reporter.pending", ())] >= 1
    assert points[("context_console.reporter.unauthorized", ())] == 0
    assert ("context_console.reporter.traces", (("outcome", "dropped"),)) in points
    usable = [v for (name, attrs), v in points.items() if name == "context_console.config.usable"]
    assert usable == [1]
    ages = [k for k in points if k[0] == "context_console.config.age"]
    assert ages and dict(ages[0][1])["resolution"] == "fresh"


def test_without_opentelemetry__assembly_and_instrument_do_nothing_and_never_fail(tmp_path):
    """A fresh interpreter where ``import opentelemetry`` fails, as without the extra."""
    script = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ImportError("no opentelemetry here")
        sys.meta_path.insert(0, Block())
        from context_runtime import otel
        assert otel.AVAILABLE is False
        assert otel.instrument(reporter=object()) is False
        with otel.assembly_span(request_id="r", agent="a") as span:
            span.record(None, status="ready")
            span.set("x", 1)
        assert span.recording is False
        import context_runtime.reporter, context_runtime.engine  # everything else imports
        print("ok")
        """
    )
    sdk = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=sdk, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
