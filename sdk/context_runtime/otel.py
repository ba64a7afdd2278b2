"""OpenTelemetry: one span per context assembly, and the reporter's and client's health as
metrics — only when ``opentelemetry-api`` is installed (the ``otel`` extra:
``pip install "context-console-runtime[otel]"``). Without it every function here does
nothing and costs nothing; nothing fails.

**The span** (:func:`assembly_span`, opened by :class:`context_runtime.adk.ContextAssembly`
around each model call's assembly): named ``assemble_context <ADK agent name>``, a child of
the span that is current when ADK calls the ``before_model_callback``, and ended before the
model is called. Which span that is depends on ADK (``sdk/README.md`` § OpenTelemetry,
pinned by ``sdk/tests/test_otel.py`` and the wheel check): ADK's ``call_llm`` span where ADK
opens it before the callback (google-adk 1.29 to 2.12; 2.13 with
``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1``), else the agent's ``invoke_agent <agent>`` span
(google-adk 1.19 to 1.28; 2.13 by default), where ADK's model-call span (``call_llm``,
``generate_content <model>``) follows it as a sibling. Either way it is in the same
OpenTelemetry trace as ADK's spans, and the trace the runtime reports to the console records
that trace's id and the span's own (:func:`recorded_ids`, the trace's ``otel`` block), so
the console's trace page can link to it.

Attributes follow the OpenTelemetry GenAI semantic conventions where one applies
(``gen_ai.operation.name`` = ``assemble_context``; ``gen_ai.agent.name`` = the ADK agent's
name, as ADK's own spans say it; ``gen_ai.request.model``, ``gen_ai.conversation.id``,
``error.type``) and carry the rest under ``context_console.``: ``agent`` (the console's agent
key), ``request_id`` (the trace's, to find it in the console), ``strategy``,
``strategy.version``, ``profile.version``, ``status``, ``degradation``,
``candidates.selected`` / ``.excluded`` / ``.total`` / ``.truncated``, ``input_tokens`` (the
estimate), ``budget.max_input_tokens``, ``config.resolution``, ``sections.user_context`` /
``sections.query_context`` (section keys), ``input_errors``.
Never an item's contents, a section's value, the question or the principal. A status the
model is not called for (``missing_required_data``, ``budget_exceeded``,
``source_conflict``, ``input_refused``) sets the span's status to ERROR with the reason.

**The metrics** (:func:`instrument`): observable instruments read at each collection, from
``reporter.stats()`` and ``client.status()``:

| instrument | kind | unit |
|---|---|---|
| ``context_console.reporter.pending`` | gauge | ``{trace}`` — queued, spooled unread, in flight |
| ``context_console.reporter.spool.bytes`` | gauge | ``By`` |
| ``context_console.reporter.traces`` | counter, attribute ``outcome`` (sent, duplicates, rejected, dropped, downgraded) | ``{trace}`` |
| ``context_console.reporter.unauthorized`` | gauge (1: the console refuses the token) | ``1`` |
| ``context_console.config.age`` | gauge, attributes ``agent``, ``resolution`` | ``s`` |
| ``context_console.config.usable`` | gauge (1: a configuration is served), attributes ``agent``, ``resolution`` | ``1`` |
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from context_runtime import wire

logger = logging.getLogger("context_runtime.otel")

try:  # the optional extra
    from opentelemetry import metrics as _metrics
    from opentelemetry import trace as _trace
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # pragma: no cover - exercised by the test without the extra
    _trace = _metrics = None  # type: ignore[assignment]

__all__ = [
    "AVAILABLE",
    "OPERATION",
    "AssemblySpan",
    "assembly_span",
    "instrument",
    "recorded_ids",
]

AVAILABLE = _trace is not None
OPERATION = "assemble_context"
_SCOPE = "context_runtime"
_PREFIX = "context_console."
_NOT_CALLED = frozenset(
    {"missing_required_data", "budget_exceeded", "source_conflict", "input_refused"}
)


def _version() -> str:
    from context_runtime import __version__  # a cycle at import time otherwise

    return __version__


class AssemblySpan:
    """What :func:`assembly_span` yields: ``record(...)`` sets the outcome's attributes.
    Without OpenTelemetry it is a do-nothing object."""

    __slots__ = ("_span",)

    def __init__(self, span=None):
        self._span = span

    @property
    def recording(self) -> bool:
        return self._span is not None and self._span.is_recording()

    def set(self, name: str, value: Any) -> None:
        """One attribute; ``None`` values are left out. Names without a ``gen_ai.`` or
        ``error.`` prefix go under ``context_console.``."""
        if value is None or not self.recording:
            return
        if not name.startswith(("gen_ai.", "error.")):
            name = _PREFIX + name
        self._span.set_attribute(name, value)

    def record(self, trace=None, *, status: str | None = None, reason: str = "") -> None:
        """The outcome of the assembly from its trace (a :class:`context_runtime.wire.Trace`):
        versions, status, counts, tokens, sections. Reads only references and numbers."""
        if not self.recording:
            return
        if trace is not None:
            status = status or trace.status
            documents = trace.documents or {}
            if trace.strategy:
                self.set("strategy.version", documents.get(trace.strategy))
            self.set("profile.version", documents.get("profile"))
            self.set("degradation", trace.degradation)
            counts = trace.candidate_counts
            if counts is None:
                counts = {}
                for c in trace.candidates:
                    counts[c.decision] = counts.get(c.decision, 0) + 1
            total = sum(counts.values())
            selected = counts.get("selected", 0)
            self.set("candidates.total", total)
            self.set("candidates.selected", selected)
            self.set("candidates.excluded", total - selected)
            self.set("candidates.truncated", bool(trace.candidates_truncated))
            if trace.input_estimate is not None:
                self.set("input_tokens", int(trace.input_estimate.value))
            if trace.budget is not None:
                self.set("budget.max_input_tokens", trace.budget.max_input_tokens)
            self.set("config.resolution", trace.config_resolution)
            if trace.sections is not None:
                self.set("sections.user_context", list(trace.sections.user_context))
                self.set("sections.query_context", list(trace.sections.query_context))
            if trace.input_errors_total:
                self.set("input_errors", trace.input_errors_total)
        self.set("status", status)
        if status in _NOT_CALLED or status == "error":
            self.set("error.type", status)
            self._span.set_status(Status(StatusCode.ERROR, (reason or status or "")[:200]))


@contextlib.contextmanager
def assembly_span(
    *,
    request_id: str,
    agent: str,
    agent_name: str | None = None,
    strategy: str | None = None,
    model: str | None = None,
    conversation_id: str | None = None,
    tracer_provider=None,
) -> Iterator[AssemblySpan]:
    """A span around one context assembly, current while it runs (so providers' own spans
    nest under it); a do-nothing :class:`AssemblySpan` without OpenTelemetry. An exception
    is recorded on the span and raised again.

    ``agent`` is the console's agent key (``context_console.agent``); ``agent_name`` the
    application's name of the agent (ADK's ``LlmAgent.name``), which ``gen_ai.agent.name``
    and the span's name carry as ADK's own spans do — the key when there is none."""
    if _trace is None:
        yield AssemblySpan()
        return
    tracer = _trace.get_tracer(_SCOPE, _version(), tracer_provider=tracer_provider)
    name = agent_name or agent
    attributes = {
        "gen_ai.operation.name": OPERATION,
        "gen_ai.agent.name": name or "unknown",
        _PREFIX + "request_id": request_id,
    }
    if agent:
        attributes[_PREFIX + "agent"] = agent
    if strategy:
        attributes[_PREFIX + "strategy"] = strategy
    if model:
        attributes["gen_ai.request.model"] = model
    if conversation_id:
        attributes["gen_ai.conversation.id"] = conversation_id
    # GenAI semconv: "{gen_ai.operation.name} {gen_ai.agent.name}".
    with tracer.start_as_current_span(
        f"{OPERATION} {name}" if name else OPERATION,
        kind=_trace.SpanKind.INTERNAL,
        attributes=attributes,
    ) as span:
        yield AssemblySpan(span)


def recorded_ids() -> wire.TraceOtel | None:
    """The current span's trace id and span id as a trace's ``otel`` block — inside
    :func:`assembly_span`, the assembly's — when that span is sampled (it reaches the tracing
    system, so a link to it opens something); ``None`` otherwise and without OpenTelemetry."""
    if _trace is None:
        return None
    context = _trace.get_current_span().get_span_context()
    if not (context.is_valid and context.trace_flags.sampled):
        return None
    return wire.TraceOtel(
        trace_id=_trace.format_trace_id(context.trace_id),
        span_id=_trace.format_span_id(context.span_id),
    )


# ---------------------------------------------------------------- metrics

_OUTCOMES = ("sent", "duplicates", "rejected", "dropped", "downgraded")


def instrument(*, reporter=None, clients: Sequence = (), meter_provider=None) -> bool:
    """Report the health of a :class:`~context_runtime.reporter.TraceReporter` and of
    :class:`~context_runtime.client.ConfigClient` objects as OpenTelemetry metrics (module
    docstring). They are held weakly: a closed, collected reporter simply stops reporting.
    Returns False (and does nothing) without OpenTelemetry."""
    if _metrics is None:
        return False
    meter = _metrics.get_meter(_SCOPE, _version(), meter_provider=meter_provider)
    reporter_ref = weakref.ref(reporter) if reporter is not None else None
    client_refs = [weakref.ref(c) for c in clients]

    def stats() -> dict | None:
        found = reporter_ref() if reporter_ref is not None else None
        if found is None:
            return None
        try:
            return found.stats()
        except Exception:  # never break the exporter
            logger.exception("The reporter's stats could not be read")
            return None

    def gauge(read):
        def callback(options):
            value = read()
            return [] if value is None else [_metrics.Observation(value)]

        return callback

    if reporter_ref is not None:
        meter.create_observable_gauge(
            _PREFIX + "reporter.pending",
            callbacks=[gauge(lambda: (stats() or {}).get("pending"))],
            unit="{trace}",
            description="Traces waiting: queued, spooled and not yet read, or being sent.",
        )
        meter.create_observable_gauge(
            _PREFIX + "reporter.spool.bytes",
            callbacks=[gauge(lambda: (stats() or {}).get("spool_bytes"))],
            unit="By",
            description="Bytes in the reporter's on-disk spool.",
        )
        meter.create_observable_gauge(
            _PREFIX + "reporter.unauthorized",
            callbacks=[gauge(lambda: None if stats() is None else int(stats()["unauthorized"]))],
            unit="1",
            description="1 while the console refuses the runtime's token.",
        )

        def outcomes(options):
            found = stats()
            if found is None:
                return []
            return [
                _metrics.Observation(found.get(name, 0), {"outcome": name}) for name in _OUTCOMES
            ]

        meter.create_observable_counter(
            _PREFIX + "reporter.traces",
            callbacks=[outcomes],
            unit="{trace}",
            description="Traces settled since start, by outcome.",
        )
    if client_refs:

        def statuses():
            for ref in client_refs:
                client = ref()
                if client is None:
                    continue
                try:
                    yield client.status()
                except Exception:
                    logger.exception("A config client's status could not be read")

        def ages(options):
            return [
                _metrics.Observation(
                    s["age_seconds"], {"agent": s.get("agent") or "", "resolution": s["reason"]}
                )
                for s in statuses()
                if s.get("age_seconds") is not None
            ]

        def usable(options):
            return [
                _metrics.Observation(
                    int(bool(s.get("ready"))),
                    {"agent": s.get("agent") or "", "resolution": s.get("reason") or ""},
                )
                for s in statuses()
            ]

        meter.create_observable_gauge(
            _PREFIX + "config.age",
            callbacks=[ages],
            unit="s",
            description="Time since the console last confirmed the configuration served.",
        )
        meter.create_observable_gauge(
            _PREFIX + "config.usable",
            callbacks=[usable],
            unit="1",
            description="1 while a configuration is served; resolution says where it came from.",
        )
    return True
