"""Where the assembly span sits among ADK's spans: the rule ``sdk/README.md`` § OpenTelemetry
states, and the spans a real ADK run finished with, read the same way by ``test_otel.py``
(the installed google-adk) and by the wheel check (``wheel_check.py``: a clean virtual
environment with the lowest and the newest google-adk the ``adk`` extra allows).

ADK runs ``before_model_callback`` — and so the assembly — in whatever span it has current
at that moment; the assembly span is that span's child. Which span it is was found per
release (2026-12-06): the model-call code of 1.19.0, 1.24.0, 1.27.1, 1.27.5, 1.28.0, 1.28.1,
1.29.0, 2.0.0, 2.6.0, 2.10.0, 2.12.0 and 2.13.0 read, and 1.19.0, 1.39.1 and 2.13.0 (both
telemetry schemas) run:

| google-adk | ADK's model-call span opened | the assembly span's parent |
|---|---|---|
| 1.19 – 1.28 | ``call_llm``, after the callback | ``invoke_agent <agent>`` (``call_llm`` is its next sibling) |
| 1.29 – 2.12 | ``call_llm``, before the callback | ``call_llm`` |
| 2.13 (telemetry schema 2, ADK's default) | none; ``generate_content <model>`` after the callback | ``invoke_agent <agent>`` (``generate_content`` is its next sibling) |
| 2.13 with ``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1`` | ``call_llm``, before the callback | ``call_llm`` |
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

CALL_LLM = "call_llm"
INVOKE_AGENT = "invoke_agent"
SCHEMA_OPT_IN = "ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN"
_LEGACY_SCHEMA = ("1", "otel_semconv_1_36")
_ADK_SCOPE = "gcp.vertex.agent"
_ASSEMBLY = "assemble_context"


def _release(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def documented_parent(adk_version: str, environ: Mapping[str, str] = os.environ) -> str:
    """The parent the docs state for this google-adk version (the table above):
    ``"call_llm"`` or ``"invoke_agent"``."""
    release = _release(adk_version)
    if release < (1, 29):
        return INVOKE_AGENT
    if release < (2, 13):
        return CALL_LLM
    legacy = environ.get(SCHEMA_OPT_IN, "").strip() in _LEGACY_SCHEMA
    return CALL_LLM if legacy else INVOKE_AGENT


@dataclass(frozen=True)
class Parentage:
    """One assembly span and its neighbours among ADK's finished spans."""

    assembly: object
    parent: object
    # ADK's span of the model call this assembly prepared: the first call_llm or
    # generate_content span that started after the assembly did.
    model_call: object

    @property
    def parent_kind(self) -> str:
        """``call_llm`` or ``invoke_agent`` (ADK names the latter ``invoke_agent <agent>``)."""
        return self.parent.name.split(" ", 1)[0]

    def problems(self, adk_version: str, environ: Mapping[str, str] = os.environ) -> list[str]:
        """What differs from the documented rule (empty: as documented)."""
        wanted = documented_parent(adk_version, environ)
        found: list[str] = []
        if self.parent.instrumentation_scope.name != _ADK_SCOPE:
            found.append(f"the parent {self.parent.name!r} is not ADK's span")
        if self.parent_kind != wanted:
            found.append(f"the parent is {self.parent.name!r}, documented: {wanted}")
        if self.model_call is None:
            found.append("no ADK model-call span after the assembly")
            return found
        if self.model_call.context.trace_id != self.assembly.context.trace_id:
            found.append("ADK's model-call span is in another trace")
        if wanted == INVOKE_AGENT:
            if self.model_call.parent is None or (
                self.model_call.parent.span_id != self.parent.context.span_id
            ):
                found.append(f"{self.model_call.name!r} is not the assembly's sibling")
            if self.model_call.start_time < self.assembly.end_time:
                found.append(f"{self.model_call.name!r} started before the assembly ended")
        return found


def parentage(spans: Sequence) -> list[Parentage]:
    """Each assembly span among ``spans`` (an in-memory exporter's finished spans), with its
    parent and ADK's model-call span that followed it."""
    by_id = {s.context.span_id: s for s in spans}
    model_calls = sorted(
        (
            s
            for s in spans
            if s.instrumentation_scope.name == _ADK_SCOPE
            and (s.name == CALL_LLM or s.name.startswith("generate_content"))
        ),
        key=lambda s: s.start_time,
    )
    found = []
    for span in sorted(spans, key=lambda s: s.start_time):
        if not span.name.startswith(_ASSEMBLY):
            continue
        parent = by_id.get(span.parent.span_id) if span.parent is not None else None
        if parent is None:
            raise AssertionError(f"{span.name!r} has no finished parent span")
        after = [
            s
            for s in model_calls
            if s.start_time >= span.start_time and s.context.span_id != parent.context.span_id
        ]
        found.append(Parentage(span, parent, after[0] if after else None))
    return found
