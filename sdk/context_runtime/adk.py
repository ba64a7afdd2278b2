"""Google ADK integration: the context module (docs/background.md § Five components) as an ADK
``before_model_callback``.

Install the optional extra (``pip install "context-console-runtime[adk]"``); this is the only
module of the package that imports ``google.adk``, so everything else works without it::

    from google.adk.agents import LlmAgent
    from context_runtime.adk import ContextAssembly

    assembly = ContextAssembly(
        client=config_client,          # ConfigClient, or anything with .snapshot()
        registry=registry,             # providers and on_missing handlers (manifest_report)
        strategy_for="after_sales_consultation",  # or a callable(callback_context, llm_request)
        reporter=trace_reporter,       # TraceReporter.for_client(config_client), or None
        sections=section_values,       # the contextSections' values (see below)
    )
    agent = LlmAgent(
        name="assistant", model=..., before_model_callback=assembly.before_model_callback
    )

On every model call, :meth:`ContextAssembly.before_model_callback`:

1. reads the live configuration (``client.snapshot()``, a memory read): the strategy of the
   call (``strategy_for``) and the profile;
2. asks every provider the strategy names (``Registry.register_provider``) for its candidate
   items, concurrently and each within ``provider_timeout``; a provider that fails, times out
   or is not registered counts as ``not_fetched`` — the engine decides what that means;
3. runs the selection engine (:func:`context_runtime.engine.select`) with the whole request as
   it stands (system instruction, tools, history, rendered sections) as fixed input, so the
   budget check covers the final structure;
4. on ``ready``, or ``degraded`` when the handler the strategy names is registered
   (``Registry.register_handler``; it returns the note telling the model what it may no
   longer judge), puts ``<user-context>`` (the enabled user_context sections) at the head of
   ``llm_request.contents`` as a new user turn followed by a fixed model acknowledgement, and
   prepends ``<query-context>`` (the enabled query_context sections, the handler's note, the
   selected items) to the first text part of the current user turn — docs/background.md §
   The assembled context;
5. on ``missing_required_data``, ``budget_exceeded`` or ``source_conflict`` returns an
   :class:`~google.adk.models.LlmResponse` with an explicit text ("I can't answer this
   reliably yet: ...") so the model is not called (docs/background.md § The context package): a
   failure is never an empty package handed to the model as if the task could be done;
6. reports the trace (:class:`context_runtime.wire.Trace`) to the reporter: never blocking,
   never raising into the agent.

ADK builds ``llm_request.contents`` from the session events before it calls the callback
(step 11, ``content_normalization``: docs/background.md § The pipeline), so the edits come after
the history rebuild; they change this request only, never the stored session, so the next turn is
assembled afresh ("context engineering happens every turn").  Nothing here ever raises into
the agent: an unexpected error is logged and answered with the explicit refusal (never with a
model call that lacks its required evidence).

Providers are ``fn(request: ProviderRequest)`` (sync — run in a worker thread — or async)
returning :class:`~context_runtime.engine.CandidateItem` objects (one, an iterable, or
``None``); mappings with the same fields are accepted too.  Handlers are
``fn(request, selection)`` returning the note (text) for the model, or ``None`` for the
default note.  ``sections`` is either ``fn(request, keys) -> {key: text}`` or a mapping
``{key: fn(request) -> text}``; only sections the profile switches on are ever rendered,
whatever the function returns.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

import msgspec
from google.adk.models import LlmRequest, LlmResponse
from google.genai import types

from context_runtime import otel, rollouts, wire
from context_runtime.engine import (
    BUDGET_EXCEEDED,
    DEFAULT_ESTIMATOR,
    DEFAULT_RELEVANCE_THRESHOLD,
    DEGRADED,
    INPUT_REFUSED,
    MISSING_REQUIRED_DATA,
    NOT_FETCHED,
    OVER_BUDGET,
    READY,
    SELECTED,
    SOURCE_CONFLICT,
    CandidateItem,
    EngineInputError,
    Estimator,
    Selection,
    Strategy,
    context_sections,
    select,
)
from context_runtime.manifest_report import Registry

__all__ = [
    "ADAPTER",
    "PREAMBLE_ACK",
    "REFUSAL_PREFIX",
    "AssemblyResult",
    "ContextAssembly",
    "ProviderRequest",
    "Route",
    "refusal_text",
    "render_query_context",
    "render_user_context",
]

logger = logging.getLogger("context_runtime.adk")

ADAPTER = "google-adk"
# docs/background.md § The assembled context: the preamble is followed by a fixed
# acknowledgement of the model, which also keeps the turns alternating.
PREAMBLE_ACK = "Understood. I will use this context."
REFUSAL_PREFIX = "I can't answer this reliably yet"
USER_CONTEXT_TAG = "user-context"
QUERY_CONTEXT_TAG = "query-context"
# Structural tags of the rendered blocks; a value that contains one of their closing tags
# would end the block early, so it is neutralised in the text.
_STRUCTURE_TAGS = (USER_CONTEXT_TAG, QUERY_CONTEXT_TAG, "evidence", "item", "degradation")
_DECISION_WORDS = {
    "selected": "selected",
    "not_fetched": "not available",
    "no_access": "access could not be confirmed",
    "not_applicable": "does not apply",
    "over_budget": "too large for the input budget",
    "dependency_missing": "depends on something missing",
    "irrelevant": "irrelevant",
    "conflict": "in conflict",
}
_MAX_LABEL = 200  # principal, task id (wire.Label)
_MAX_NOTE = wire.MAX_REASON_CHARS
_MAX_LINKS = wire.MAX_LINKS
_REQUEST_COUNTS = 4096  # invocations remembered for per-call request ids


# ---------------------------------------------------------------- what providers receive


@dataclass(frozen=True, kw_only=True)
class ProviderRequest:
    """The request context a provider, a handler and the section function receive.

    ``principal`` is ADK's ``user_id`` unless ``strategy_for`` gave one (the application
    sets it from a trusted identity, never from the client's words); ``task_id`` and
    ``task_revision`` come from ``strategy_for`` or the session state's ``task_id`` /
    ``task_revision``; ``question`` is the user's text of this turn.  ``state`` is a read-only
    view of the session state.
    """

    request_id: str
    agent: str
    strategy: str
    principal: str
    task_id: str | None
    task_revision: int | None
    question: str
    session_id: str | None = None
    invocation_id: str | None = None
    state: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, kw_only=True)
class Route:
    """What ``strategy_for`` may return instead of a plain strategy key."""

    strategy: str
    task_id: str | None = None
    task_revision: int | None = None
    principal: str | None = None


@dataclass(frozen=True, kw_only=True)
class AssemblyResult:
    """What one :meth:`ContextAssembly.assemble` did.

    ``status`` is the trace's status (``None`` when ``strategy_for`` chose no strategy and the
    request went through untouched); ``response`` the explicit answer returned instead of the
    model call (``None`` when the model is called); ``injected`` whether the request was
    edited; ``trace`` what was reported (``None`` when nothing was); ``reason`` one sentence
    on the outcome.
    """

    request_id: str
    strategy: str | None
    status: str | None
    degradation: str | None = None
    reason: str = ""
    selection: Selection | None = None
    response: LlmResponse | None = None
    injected: bool = False
    trace: wire.Trace | None = None


# ---------------------------------------------------------------- rendering


def _guard(text: str) -> str:
    """Neutralise closing tags of the blocks' own structure inside a value."""
    if "</" not in text:
        return text
    for tag in _STRUCTURE_TAGS:
        text = text.replace(f"</{tag}", f"&lt;/{tag}")
    return text


def _attr(value: str) -> str:
    return (
        value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")
    )


def _sections_text(keys: Sequence[str], values: Mapping[str, str]) -> list[str]:
    lines = []
    for key in keys:
        value = values.get(key)
        if isinstance(value, str) and value.strip():
            lines.append(f"<{key}>\n{_guard(value.strip())}\n</{key}>")
    return lines


def render_user_context(keys: Sequence[str], values: Mapping[str, str]) -> str | None:
    """``<user-context>`` with the sections of ``keys`` (in that order) that have a value;
    ``None`` when none has."""
    lines = _sections_text(keys, values)
    if not lines:
        return None
    return "\n".join([f"<{USER_CONTEXT_TAG}>", *lines, f"</{USER_CONTEXT_TAG}>"])


def render_query_context(
    keys: Sequence[str],
    values: Mapping[str, str],
    items: Sequence[CandidateItem] = (),
    *,
    degradation: str | None = None,
    note: str | None = None,
    missing: Sequence[str] = (),
) -> str | None:
    """``<query-context>``: the degradation (the handler's note and what is missing) when a
    handler took over, the sections of ``keys`` that have a value, then the selected items as
    ``<evidence>``; ``None`` when all are empty."""
    lines = []
    if degradation is not None:
        lines.append(f'<degradation handler="{_attr(degradation)}">')
        if note:
            lines.append(_guard(note.strip()))
        if missing:
            lines.append(_guard("Missing: " + ", ".join(missing) + "."))
        lines.append("</degradation>")
    lines += _sections_text(keys, values)
    if items:
        lines.append("<evidence>")
        for item in items:
            attrs = f'id="{_attr(item.id)}" source="{_attr(item.source)}"'
            if item.version:
                attrs += f' version="{_attr(item.version)}"'
            text = (item.text or "").strip()
            lines.append(f"<item {attrs}>\n{_guard(text)}\n</item>" if text else f"<item {attrs}/>")
        lines.append("</evidence>")
    if not lines:
        return None
    return "\n".join([f"<{QUERY_CONTEXT_TAG}>", *lines, f"</{QUERY_CONTEXT_TAG}>"])


def _missing_words(selection: Selection, strategy: Strategy | None) -> list[str]:
    """The sources that are not usable, each with what happened, in the strategy's order:
    required ones not selected, and any that could not be fetched."""
    seen: dict[str, str] = {}
    for d in selection.decisions:
        if d.source in seen:
            continue
        if d.required and d.decision != SELECTED or d.decision == NOT_FETCHED:
            seen[d.source] = _DECISION_WORDS.get(d.decision, d.decision)
    if strategy is not None:
        present = {d.source for d in selection.decisions}
        for source in strategy.required_sources:
            if source not in present:
                seen.setdefault(source, "nothing found")
        order = {s: i for i, s in enumerate([*strategy.required_sources, *strategy.optional])}
        return [f"{s} ({w})" for s, w in sorted(seen.items(), key=lambda p: order.get(p[0], 1e9))]
    return [f"{s} ({w})" for s, w in seen.items()]


def refusal_text(
    status: str, selection: Selection | None = None, strategy: Strategy | None = None, why=""
) -> str:
    """The explicit answer given instead of a model call, naming what is missing or why.

    It names sources and what happened to them, never item contents or permission
    internals.
    """
    if selection is None:
        detail = why or "the context for this request could not be prepared"
    elif status == SOURCE_CONFLICT:
        sides: dict[str, list[str]] = {}
        for d in selection.decisions:
            if d.decision == "conflict":
                sides.setdefault(d.source, []).append(f"{d.id} {d.version}".strip())
        pairs = "; ".join(f"{source}: {' and '.join(named)}" for source, named in sides.items())
        detail = f"the sources disagree ({pairs}), so this needs to be verified first"
    elif status == BUDGET_EXCEEDED:
        needed = sum(
            d.size or 0 for d in selection.decisions if d.required and d.decision == OVER_BUDGET
        )
        detail = (
            "the information this question requires does not fit the model's input budget ("
            + (f"it needs {needed:,} tokens, " if needed else "")
            + f"{selection.available_tokens:,} are available)"
        )
    else:
        missing = _missing_words(selection, strategy)
        detail = "required information is missing: " + (
            ", ".join(missing) if missing else (why or "see the trace")
        )
        if why and missing:
            detail += f"; {why}"
    return f"{REFUSAL_PREFIX}: {detail}."


# ---------------------------------------------------------------- helpers


def _text_of(content) -> str:
    if content is None:
        return ""
    parts = getattr(content, "parts", None) or ()
    return "\n".join(
        p.text for p in parts if getattr(p, "text", None) and not getattr(p, "thought", False)
    )


def _is_user_turn(content) -> bool:
    """A user content with the user's own words (not a tool result)."""
    if getattr(content, "role", None) != "user":
        return False
    parts = content.parts or ()
    if any(getattr(p, "function_response", None) is not None for p in parts):
        return False
    return any(getattr(p, "text", None) is not None for p in parts)


def _current_user_turn(contents: Sequence) -> int | None:
    for i in range(len(contents) - 1, -1, -1):
        if _is_user_turn(contents[i]):
            return i
    return None


def _instruction_text(instruction) -> str:
    if instruction is None:
        return ""
    if isinstance(instruction, str):
        return instruction
    if isinstance(instruction, list | tuple):
        return "\n".join(_instruction_text(i) for i in instruction)
    text = getattr(instruction, "text", None)
    if isinstance(text, str):
        return text
    return _text_of(instruction)


def _request_text(llm_request: LlmRequest) -> str:
    """Everything of the request that is text the model reads, for the fixed estimate."""
    pieces = []
    config = llm_request.config
    if config is not None:
        pieces.append(_instruction_text(config.system_instruction))
        for tool in config.tools or ():
            try:
                pieces.append(tool.model_dump_json(exclude_none=True))
            except Exception:  # a tool object of another kind: its repr is a fair stand-in
                pieces.append(repr(tool))
    for content in llm_request.contents:
        pieces.append(_text_of(content))
        for part in content.parts or ():
            for name in ("function_call", "function_response"):
                value = getattr(part, name, None)
                if value is not None:
                    pieces.append(value.model_dump_json(exclude_none=True))
    return "\n".join(p for p in pieces if p)


def _is_async(fn) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


async def _call(fn, *args, timeout: float | None):
    """Call a sync (in a worker thread) or async function within ``timeout`` seconds."""

    async def run():
        if _is_async(fn):
            return await fn(*args)
        result = await asyncio.to_thread(fn, *args)
        if inspect.isawaitable(result):
            result = await result
        return result

    if timeout is None:
        return await run()
    return await asyncio.wait_for(run(), timeout)


def _short(text: str, limit: int = _MAX_NOTE) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _unavailable(source: str, note: str) -> CandidateItem:
    return CandidateItem(
        id=f"{source}:unavailable", source=source, outcome=NOT_FETCHED, note=_short(note)
    )


def _as_items(result, source: str) -> list[CandidateItem]:
    if result is None:
        return []
    if isinstance(result, CandidateItem | Mapping):
        result = [result]
    items = []
    for item in result:
        if isinstance(item, Mapping):
            item = msgspec.convert(dict(item), CandidateItem)
        elif not isinstance(item, CandidateItem):
            raise TypeError(f"the {source} provider returned {type(item).__name__}")
        items.append(item)
    return items


# ---------------------------------------------------------------- the assembly


class ContextAssembly:
    """Assembles the context of every model call of an ADK agent (module docstring).

    - ``client``: a :class:`~context_runtime.client.ConfigClient`, or any object with a
      ``snapshot()`` returning a :class:`~context_runtime.client.ConfigSnapshot`.
    - ``registry``: the :class:`~context_runtime.manifest_report.Registry` holding the
      providers (by source key) and the ``on_missing`` handlers.
    - ``strategy_for``: the strategy key of the call, or ``fn(callback_context, llm_request)``
      returning a key, a :class:`Route`, or ``None`` (no assembly: the request goes on
      untouched and no trace is reported).
    - ``reporter``: a :class:`~context_runtime.reporter.TraceReporter` (or anything with
      ``report(trace, resolution=..., strategy=...)``), or ``None`` (no traces).
      ``TraceReporter.for_client(client)`` is durable by default: it spools beside the
      client's config cache, so traces survive restarts during console outages, and it
      names the agent of each request's outcomes (``report_outcome(invocation_id, ...)``).
    - ``sections``: the contextSections' values (module docstring), or ``None``.
    - ``estimator``: sizes items without a size and the request's fixed part.
    - ``context_window``: the model's window, chosen by the application (lowers the budget).
    - ``fixed_input_tokens``: ``fn(llm_request) -> int`` to count the request's fixed part
      yourself; by default the estimator counts its system instruction, tools and contents
      plus the rendered sections.
    - ``provider_timeout``: seconds each provider (and the section function, and a handler)
      may take; past it the source counts as ``not_fetched``.
    - ``refusal``: ``fn(status, selection, strategy, why) -> str`` for the explicit answer
      (default :func:`refusal_text`).
    - ``preamble_ack``: the model turn after the preamble (``None``: no acknowledgement turn).
    """

    def __init__(
        self,
        *,
        client,
        registry: Registry,
        strategy_for: str | Callable,
        reporter=None,
        sections: Callable | Mapping[str, Callable] | None = None,
        estimator: Estimator | None = None,
        context_window: int | None = None,
        fixed_input_tokens: Callable[[LlmRequest], int] | None = None,
        relevance_threshold: float = DEFAULT_RELEVANCE_THRESHOLD,
        provider_timeout: float | None = 5.0,
        refusal: Callable[..., str] | None = None,
        preamble_ack: str | None = PREAMBLE_ACK,
    ):
        if not callable(getattr(client, "snapshot", None)):
            raise TypeError("client must have a snapshot() method (a ConfigClient)")
        if not isinstance(registry, Registry):
            raise TypeError("registry must be a context_runtime.manifest_report.Registry")
        if not (isinstance(strategy_for, str) and strategy_for) and not callable(strategy_for):
            raise TypeError("strategy_for must be a strategy key or a callable")
        if sections is not None and not callable(sections) and not isinstance(sections, Mapping):
            raise TypeError("sections must be a callable or a mapping of section callables")
        self.client = client
        self.registry = registry
        self.reporter = reporter
        if reporter is None:  # said, not silently traceless
            logger.warning(
                "ContextAssembly has no reporter: its requests leave no trace in the console "
                "(pass reporter=TraceReporter.for_client(client))"
            )
        self._strategy_for = strategy_for
        self._sections = sections
        self._estimator = estimator if estimator is not None else DEFAULT_ESTIMATOR
        self._context_window = context_window
        self._fixed_input_tokens = fixed_input_tokens
        self._relevance_threshold = relevance_threshold
        self._timeout = provider_timeout
        self._refusal = refusal or refusal_text
        self._ack = preamble_ack
        self._lock = threading.Lock()
        self._strategies: dict[tuple[str, int], tuple[Mapping, Strategy]] = {}
        self._calls: collections.OrderedDict[str, int] = collections.OrderedDict()

    # ------------------------------------------------------------ the ADK callback

    async def before_model_callback(self, callback_context, llm_request: LlmRequest):
        """ADK's ``before_model_callback``: edit the request and return ``None`` (the model
        is called), or return the explicit :class:`LlmResponse` (it is not)."""
        result = await self.assemble(callback_context, llm_request)
        return result.response

    async def assemble(self, callback_context, llm_request: LlmRequest) -> AssemblyResult:
        """Everything :meth:`before_model_callback` does, returning what happened.

        With OpenTelemetry installed (the ``otel`` extra) the assembly is one span, a child of
        the span ADK has current for the callback, and the trace records its ids
        (:mod:`context_runtime.otel`)."""
        request_id = self._request_id(callback_context)
        with otel.assembly_span(
            request_id=request_id,
            agent=getattr(self.client, "agent", None) or "",
            agent_name=getattr(callback_context, "agent_name", None),
            model=getattr(llm_request, "model", None),
            conversation_id=_session_id(callback_context),
        ) as span:
            result = await self._assemble_safely(request_id, callback_context, llm_request)
            if span.recording:
                span.set("strategy", result.strategy)
                span.record(result.trace, status=result.status, reason=result.reason)
            return result

    async def _assemble_safely(self, request_id, callback_context, llm_request):
        try:
            return await self._assemble(request_id, callback_context, llm_request)
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            raise
        except Exception as error:
            logger.exception("Context assembly of %s failed; answering explicitly", request_id)
            why = "the context for this request could not be prepared"
            text = self._refusal_text(MISSING_REQUIRED_DATA, None, None, why)
            return AssemblyResult(
                request_id=request_id,
                strategy=None,
                status=MISSING_REQUIRED_DATA,
                reason=f"{type(error).__name__}: {error}",
                response=_response(text, request_id, MISSING_REQUIRED_DATA),
            )

    # ------------------------------------------------------------ the steps

    async def _assemble(self, request_id, callback_context, llm_request) -> AssemblyResult:
        snapshot = self.client.snapshot()
        route = await self._route(callback_context, llm_request)
        if route is None:
            return AssemblyResult(request_id=request_id, strategy=None, status=None)
        key = route.strategy
        request = self._provider_request(request_id, snapshot, route, callback_context, llm_request)
        # The version this request serves (a rollout's arm, else the live one) and the one
        # that runs as its shadow; the trace's unit values, as the console reads them. Without
        # them the unit is the invocation (not the call's `<id>#2`): the model calls of one
        # invocation are served one version.
        serving = rollouts.serve(
            snapshot,
            key,
            request_id=request.invocation_id or request_id,
            task_id=None if request.task_id is None else request.task_id[:_MAX_LABEL],
            principal=request.principal[:_MAX_LABEL],
        )
        document = serving.document
        if document is None:
            why = f"no live configuration for {key} ({snapshot.resolution.reason})"
            return self._fail(request, snapshot, serving, None, None, why, llm_request)
        try:
            strategy = self._strategy(key, document)
        except EngineInputError as error:
            logger.error("The strategy %s v%s cannot be used: %s", key, document.version, error)
            why = f"the configuration of {key} cannot be used"
            return self._fail(
                request,
                snapshot,
                serving,
                None,
                None,
                why,
                llm_request,
                status=INPUT_REFUSED,
                extra=error.trace_fields(),
            )
        profile = snapshot.profile
        enabled = context_sections(profile.body) if profile is not None else {}
        user_keys = enabled.get("user_context", [])
        query_keys = enabled.get("query_context", [])

        candidates, values = await asyncio.gather(
            self._candidates(strategy, request),
            self._section_values(request, user_keys, query_keys),
        )
        user_block = render_user_context(user_keys, values)
        sections_only = render_query_context(query_keys, values)
        fixed = self._fixed(llm_request, user_block, sections_only)
        try:
            selection = select(
                strategy=strategy,
                candidates=candidates,
                context_window=self._context_window,
                fixed_input_tokens=fixed,
                relevance_threshold=self._relevance_threshold,
                estimator=self._estimator,
            )
        except EngineInputError as error:  # a provider's item is malformed
            logger.error("The candidates of %s cannot be selected from: %s", request_id, error)
            why = "the information found for this request is malformed"
            # Its own status, with the engine's findings (which provider, which field): the
            # model is not called, and the trace says the runtime refused its input.
            return self._fail(
                request,
                snapshot,
                serving,
                strategy,
                None,
                why,
                llm_request,
                status=INPUT_REFUSED,
                extra=error.trace_fields(candidates),
            )
        status, degradation, note = selection.status, selection.degradation, None
        if status == DEGRADED:
            note, problem = await self._handle(degradation, request, selection)
            if problem is not None:
                return self._fail(
                    request,
                    snapshot,
                    serving,
                    strategy,
                    selection,
                    problem,
                    llm_request,
                )
        if status not in (READY, DEGRADED):
            return self._fail(
                request,
                snapshot,
                serving,
                strategy,
                selection,
                "",
                llm_request,
                status=status,
            )

        query_block = render_query_context(
            query_keys,
            values,
            selection.selected,
            degradation=degradation,
            note=note,
            missing=_missing_words(selection, strategy) if degradation is not None else (),
        )
        _inject(llm_request, user_block, query_block, self._ack)
        rendered = wire.Sections(
            user_context=_rendered(user_keys, values) if user_block else (),
            query_context=_rendered(query_keys, values) if query_block else (),
        )
        trace = self._report(
            request,
            snapshot,
            serving,
            status,
            degradation,
            selection,
            llm_request,
            extra={"sections": rendered},
        )
        return AssemblyResult(
            request_id=request_id,
            strategy=key,
            status=status,
            degradation=degradation,
            reason=selection.reason,
            selection=selection,
            injected=True,
            trace=trace,
        )

    def _fail(
        self,
        request: ProviderRequest,
        snapshot,
        serving: rollouts.Serving,
        strategy: Strategy | None,
        selection: Selection | None,
        why: str,
        llm_request,
        *,
        status: str = MISSING_REQUIRED_DATA,
        extra: Mapping[str, Any] | None = None,
    ) -> AssemblyResult:
        """The explicit answer instead of the model call, and its trace."""
        text = self._refusal_text(status, selection, strategy, why)
        trace = self._report(
            request,
            snapshot,
            serving,
            status,
            None,
            selection,
            llm_request,
            extra=extra,
        )
        return AssemblyResult(
            request_id=request.request_id,
            strategy=request.strategy,
            status=status,
            reason=why or (selection.reason if selection is not None else ""),
            selection=selection,
            response=_response(text, request.request_id, status),
            trace=trace,
        )

    def _refusal_text(self, status, selection, strategy, why) -> str:
        try:
            return self._refusal(status, selection, strategy, why)
        except Exception:
            logger.exception("The refusal function failed; using the default text")
            return refusal_text(status, selection, strategy, why)

    async def _route(self, callback_context, llm_request) -> Route | None:
        chosen = self._strategy_for
        if callable(chosen):
            chosen = chosen(callback_context, llm_request)
            if inspect.isawaitable(chosen):
                chosen = await chosen
        if chosen is None or isinstance(chosen, Route):
            return chosen
        if isinstance(chosen, str) and chosen:
            return Route(strategy=chosen)
        raise TypeError(f"strategy_for returned {chosen!r}, not a strategy key or a Route")

    def _provider_request(self, request_id, snapshot, route: Route, callback_context, llm_request):
        state = _state_of(callback_context)
        task_id = route.task_id if route.task_id is not None else state.get("task_id")
        revision = route.task_revision
        if revision is None:
            revision = state.get("task_revision")
        principal = route.principal or getattr(callback_context, "user_id", None) or ""
        return ProviderRequest(
            request_id=request_id,
            agent=getattr(snapshot, "agent", None) or "",
            strategy=route.strategy,
            principal=str(principal),
            task_id=None if task_id is None else str(task_id),
            task_revision=revision if isinstance(revision, int) and revision >= 0 else None,
            question=_question(callback_context, llm_request),
            session_id=_session_id(callback_context),
            invocation_id=getattr(callback_context, "invocation_id", None),
            state=MappingProxyType(dict(state)),
        )

    def _strategy(self, key: str, document) -> Strategy:
        """The strategy read once per released version (the body is validated then)."""
        cache_key = (key, document.version)
        with self._lock:
            cached = self._strategies.get(cache_key)
        if cached is not None and cached[0] is document.body:
            return cached[1]
        strategy = Strategy.from_body(document.body)
        with self._lock:
            if len(self._strategies) > 64:
                self._strategies.clear()
            self._strategies[cache_key] = (document.body, strategy)
        return strategy

    async def _candidates(self, strategy: Strategy, request: ProviderRequest):
        sources = [*strategy.required_sources, *strategy.optional]
        sources = list(dict.fromkeys(sources))
        fetched = await asyncio.gather(*(self._fetch(source, request) for source in sources))
        # An item of a source the strategy does not read goes to the engine too: it decides
        # it not_requested (not weighed), so the trace shows it rather than losing it.
        return [item for found in fetched for item in found]

    async def _fetch(self, source: str, request: ProviderRequest) -> list[CandidateItem]:
        provider = self.registry.get_provider(source)
        if provider is None:
            return [_unavailable(source, f"no {source} provider is registered in this runtime")]
        try:
            result = await _call(provider, request, timeout=self._timeout)
            return _as_items(result, source)
        except TimeoutError:
            logger.warning("The %s provider timed out for %s", source, request.request_id)
            return [
                _unavailable(source, f"the {source} provider timed out after {self._timeout} s")
            ]
        except Exception as error:
            logger.exception("The %s provider failed for %s", source, request.request_id)
            return [_unavailable(source, f"the {source} provider failed ({type(error).__name__})")]

    async def _section_values(self, request, user_keys, query_keys) -> dict[str, str]:
        keys = [*user_keys, *query_keys]
        if self._sections is None or not keys:
            return {}
        if isinstance(self._sections, Mapping):
            found = await asyncio.gather(
                *(self._one_section(key, request) for key in keys if key in self._sections)
            )
            values = dict(found)
        else:
            try:
                values = await _call(self._sections, request, tuple(keys), timeout=self._timeout)
            except Exception:
                logger.exception("The section values for %s failed", request.request_id)
                return {}
        if not isinstance(values, Mapping):
            logger.error("The section values must be a mapping, not %s", type(values).__name__)
            return {}
        # Only what the profile switches on, whatever was returned: a disabled (possibly
        # sensitive) section is never rendered.
        return {k: v for k, v in values.items() if k in keys and isinstance(v, str)}

    async def _one_section(self, key, request) -> tuple[str, str | None]:
        try:
            return key, await _call(self._sections[key], request, timeout=self._timeout)
        except Exception:
            logger.exception("The section %s failed for %s; left out", key, request.request_id)
            return key, None

    async def _handle(self, name, request, selection) -> tuple[str | None, str | None]:
        """Run the ``on_missing`` handler: (note, None), or (None, problem) when it cannot
        take over — then the request stops, order-level conclusions never go on."""
        handler = self.registry.get_handler(name)
        if handler is None:
            return None, f"the {name} handler is not implemented in this runtime"
        try:
            note = await _call(handler, request, selection, timeout=self._timeout)
        except Exception:
            logger.exception("The %s handler failed for %s", name, request.request_id)
            return None, f"the {name} fallback failed"
        if note is None:
            note = _default_note(selection)
        elif not isinstance(note, str):
            return None, f"the {name} handler returned {type(note).__name__}, not a note"
        return note, None

    def _fixed(self, llm_request, user_block, sections_block) -> int:
        if self._fixed_input_tokens is not None:
            value = self._fixed_input_tokens(llm_request)
            extra = "\n".join(self._added(user_block, sections_block))
            return int(value) + (self._estimator.estimate(extra) if extra else 0)
        text = "\n".join([_request_text(llm_request), *self._added(user_block, sections_block)])
        return self._estimator.estimate(text)

    def _added(self, user_block, sections_block) -> list[str]:
        """What the assembly adds besides the items (the items are the engine's to count)."""
        added = [b for b in (user_block, sections_block) if b]
        if user_block and self._ack:
            added.append(self._ack)
        return added

    def _request_id(self, callback_context) -> str:
        """The invocation id, and ``<id>#2``, ``#3``... for later model calls of the same
        invocation (tool rounds), so each call's trace is its own."""
        invocation = getattr(callback_context, "invocation_id", None)
        if not isinstance(invocation, str) or not invocation:
            return f"req-{uuid.uuid4().hex}"
        with self._lock:
            n = self._calls.pop(invocation, 0) + 1
            self._calls[invocation] = n
            while len(self._calls) > _REQUEST_COUNTS:
                self._calls.popitem(last=False)
        rid = invocation if n == 1 else f"{invocation}#{n}"
        return rid[:200]

    # ------------------------------------------------------------ the trace

    def _report(
        self,
        request,
        snapshot,
        serving: rollouts.Serving,
        status,
        degradation,
        selection,
        llm_request,
        extra: Mapping[str, Any] | None = None,
    ) -> wire.Trace | None:
        try:
            trace = self._trace(
                request, snapshot, serving, status, degradation, selection, llm_request
            )
            if extra:
                trace = msgspec.structs.replace(trace, **extra)
        except Exception:
            logger.exception("The trace of %s could not be built", request.request_id)
            return None
        if self.reporter is not None:
            try:
                self.reporter.report(trace, resolution=snapshot, strategy=serving.document)
            except Exception:
                logger.exception("The trace of %s could not be reported", request.request_id)
        return trace

    def _trace(
        self, request, snapshot, serving, status, degradation, selection, llm_request
    ) -> wire.Trace:
        document = serving.document
        documents = {}
        profile = getattr(snapshot, "profile", None)
        if profile is not None:
            documents["profile"] = profile.version
        if document is not None:
            documents[request.strategy] = document.version
        fields: dict[str, Any] = {}
        if selection is not None:
            fields = selection.trace_fields()
            fields["sources"] = [
                wire.SourceRef(id=item.id, version=item.version) for item in selection.selected
            ]
            shadow = self._shadow(serving, selection)
            if shadow is not None:
                fields["shadow"] = _as_runtime_ran_it(shadow, selection, status)
        elif document is not None:
            budget = document.body.get("budget") if isinstance(document.body, Mapping) else None
            if isinstance(budget, Mapping):
                fields["budget"] = wire.Budget(
                    max_input_tokens=budget.get("max_input_tokens"),
                    reserve_output_tokens=budget.get("reserve_output_tokens"),
                )
        fields["status"] = status
        fields["degradation"] = degradation
        fields["rollout"] = serving.rollout
        fields["otel"] = otel.recorded_ids()  # built inside the assembly's span
        resolution = getattr(snapshot, "resolution", None)
        if resolution is not None:
            fields.update(resolution.trace_fields())
        task = None
        if request.task_id is not None:
            task = wire.Task(id=request.task_id[:_MAX_LABEL], revision=request.task_revision)
        return wire.Trace(
            request_id=request.request_id,
            agent=request.agent or "unknown",
            occurred_at=datetime.now(UTC),
            environment=getattr(snapshot, "environment", None) or None,
            documents=documents,
            strategy=request.strategy[:100],
            task=task,
            principal=request.principal[:_MAX_LABEL],
            model=wire.ModelInfo(
                name=(llm_request.model or "")[:_MAX_LABEL],
                adapter=ADAPTER,
                context_window=self._context_window,
            ),
            **fields,
        )

    def _shadow(self, serving: rollouts.Serving, live: Selection) -> wire.ShadowResult | None:
        """The shadow version's selection — the rollout's other arm, or a shadow release —
        on live's candidates with live's fixed input, window, threshold and estimator
        (``replay.shadow_run``), so it never asks a provider, the model or a tool, and an
        identical version agrees."""
        try:
            return serving.run_shadow(live, estimator=self._estimator, strategy_of=self._strategy)
        except Exception:
            shadow = serving.shadow
            logger.exception(
                "The shadow version %s of %s could not run", shadow and shadow.version, serving.key
            )
            return None


def _as_runtime_ran_it(shadow: wire.ShadowResult, live: Selection, status: str):
    """The shadow as this runtime would have served it. The shadow never runs a handler (no
    extra call); when live's handler failed (the engine said degraded, the request ended
    missing its data) a shadow degrading to the same handler would have failed alike: a
    runtime fault is not a difference between versions, so the A/A test still agrees."""
    if (
        live.status == "degraded"
        and status != "degraded"
        and shadow.status == "degraded"
        and shadow.degradation == live.degradation
    ):
        return msgspec.structs.replace(shadow, status=status, degradation=None)
    return shadow


# ---------------------------------------------------------------- request edits


def _rendered(keys: Sequence[str], values: Mapping[str, str]) -> tuple[str, ...]:
    """The section keys that went into a block: switched on and with a value (as
    :func:`_sections_text` renders them), at most the wire's number per block."""
    found = [k for k in keys if isinstance(values.get(k), str) and values[k].strip()]
    return tuple(k[:100] for k in found[: wire.MAX_SECTIONS_PER_BLOCK])


def _inject(llm_request: LlmRequest, user_block, query_block, ack) -> None:
    """The preamble as the first user turn (and the acknowledgement), the query context in
    front of the current user turn's first text part.  Contents are replaced, never changed
    in place, so the session's own events stay as they were."""
    contents = llm_request.contents
    if query_block:
        index = _current_user_turn(contents)
        if index is None:
            contents.append(types.Content(role="user", parts=[types.Part(text=query_block)]))
        else:
            original = contents[index]
            parts = list(original.parts or ())
            for j, part in enumerate(parts):
                if part.text is not None and not part.thought:
                    parts[j] = part.model_copy(update={"text": f"{query_block}\n\n{part.text}"})
                    break
            else:
                parts.insert(0, types.Part(text=query_block))
            contents[index] = original.model_copy(update={"parts": parts})
    if user_block:
        head = [types.Content(role="user", parts=[types.Part(text=user_block)])]
        if ack:
            head.append(types.Content(role="model", parts=[types.Part(text=ack)]))
        contents[0:0] = head


def _response(text: str, request_id: str, status: str) -> LlmResponse:
    return LlmResponse(
        content=types.Content(role="model", parts=[types.Part(text=text)]),
        custom_metadata={"context_runtime": {"request_id": request_id, "status": status}},
    )


def _default_note(selection: Selection) -> str:
    return (
        f"The {selection.degradation} fallback applies: some information could not be read. "
        "Answer only in general terms, make no statement that depends on the missing "
        "information, and tell the user what is missing."
    )


def _state_of(callback_context) -> Mapping:
    state = getattr(callback_context, "state", None)
    if state is None:
        return {}
    try:
        return state.to_dict() if callable(getattr(state, "to_dict", None)) else dict(state)
    except Exception:
        return {}


def _question(callback_context, llm_request) -> str:
    """The user's words of this turn: the invocation's message, else the current user turn."""
    text = _text_of(getattr(callback_context, "user_content", None))
    if text:
        return text
    index = _current_user_turn(llm_request.contents)
    return _text_of(llm_request.contents[index]) if index is not None else ""


def _session_id(callback_context) -> str | None:
    session = getattr(callback_context, "session", None)
    return getattr(session, "id", None)
