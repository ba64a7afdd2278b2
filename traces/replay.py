"""Replay one trace's selection on its stored candidates (issue 20, the trace page's Replay).

The engine is deterministic, and a trace with replay fields (its `selection` block, and per
candidate the provider's outcome, bundle and a reason code) stores everything `select()` was
given besides the strategy: so re-running it with the version the trace used must give the
recorded decisions — a difference is itself a finding (a runtime on another engine than the
console's) — and re-running it with what is live now, or with a draft, says what that
version would have decided for this very request. Read-only: nothing is written here (the
views write the access-log row of each replay).

The candidates are rebuilt by `context_runtime.replay.trace_candidates` from the stored rows
in their wire form, so the console maps them exactly as every runtime and the preview do.
"""

from __future__ import annotations

from dataclasses import dataclass

from context_runtime import replay as engine_replay
from context_runtime import wire
from context_runtime.engine import ENGINE, EngineInputError, Selection, Strategy
from context_runtime.replay import NOT_REQUESTED
from django.db import connection

from console.kernel.errors import Conflict, NotFound, ValidationFailed
from console.kernel.policy import check_user_can_replay_trace, user_can_replay_trace
from strategies.documents.models import Document, Version
from strategies.releases.models import Release
from traces.models import Trace
from traces.selectors import trace_candidates

RECORDED = "recorded"  # the version the trace used
LIVE = "live"  # what the trace's environment serves now


class NotReplayable(Conflict):
    """This trace (or this version of its strategy) cannot be replayed: 409."""

    code = "not_replayable"


def not_replayable_reason(trace: Trace) -> str | None:
    """Why the engine cannot re-run this trace at all (None: it can)."""
    if not trace.strategy:
        return (
            "This request used no strategy (its runtime reported the context profile only): "
            "there is no selection to replay."
        )
    if trace.status == "input_refused":
        return (
            "The runtime refused this request's input before the engine decided anything: "
            "there is no selection to replay. The findings above say what was malformed."
        )
    if trace.candidates_truncated:
        return (
            "This trace carries only part of its candidates (the request had more than a trace "
            "holds): the engine cannot re-run "
            "the selection on part of them, and an impact preview counts it as not previewable."
        )
    if not trace.engine:
        return (
            "Recorded by a runtime that sends no replay fields (which engine decided, the "
            "relevance threshold, the fixed input tokens, each candidate's own bundle): the "
            "engine cannot re-run it exactly. The current context_runtime SDK sends them; "
            "older runtimes do not."
        )
    return None


def version_parse(text: str | None) -> str | int:
    """`recorded` (the default), `live`, or a version number; anything else is a 400."""
    text = (text or "").strip().lower() or RECORDED
    if text in (RECORDED, LIVE):
        return text
    if text.isascii() and text.isdigit() and 0 < int(text) <= wire.MAX_INT32:
        return int(text)
    raise ValidationFailed(
        "Choose the version to replay with: recorded, live, or a version number.",
        code="bad_version",
        details=[
            {
                "path": "version",
                "code": "bad_version",
                "message": "must be recorded, live or a version number",
            }
        ],
    )


@dataclass(frozen=True)
class VersionChoice:
    """One version the Replay card offers."""

    number: int
    state: str
    recorded: bool  # the version the trace used
    live: bool  # what the trace's environment serves now

    @property
    def label(self) -> str:
        marks = [
            word
            for word, on in (
                ("recorded", self.recorded),
                ("live now", self.live),
                ("draft", self.state == Version.State.DRAFT),
            )
            if on
        ]
        return f"v{self.number}" + (f" · {', '.join(marks)}" if marks else "")


def _versions_of_strategy(trace: Trace):
    """The trace's strategy's versions (of its agent)."""
    return Version.objects.filter(
        document__agent_id=trace.agent_id,
        document__key=trace.strategy,
        document__kind=Document.Kind.STRATEGY,
    )


# Written out: every trace page reads it, and the ORM took about 1 ms of Python to build
# this query against 0.15 ms for the statement (docs/PERFORMANCE.md).
_STRATEGY_VERSIONS = """
SELECT v.number, v.state,
       EXISTS (SELECT 1 FROM strategies_release r
               WHERE r.version_id = v.id AND r.environment_id = %(environment)s)
FROM strategies_version v
JOIN strategies_document d ON d.id = v.document_id
WHERE d.agent_id = %(agent)s AND d.key = %(strategy)s AND d.kind = %(kind)s
ORDER BY v.number DESC
"""


def replay_choices(trace: Trace) -> list[VersionChoice]:
    """The strategy's versions, newest first, drafts included, each marked when live in the
    trace's environment: one query."""
    if not trace.strategy:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            _STRATEGY_VERSIONS,
            {
                "environment": trace.environment_id,
                "agent": trace.agent_id,
                "strategy": trace.strategy,
                "kind": Document.Kind.STRATEGY,
            },
        )
        rows = cursor.fetchall()
    return [
        VersionChoice(
            number=number, state=state, recorded=number == trace.strategy_version, live=is_live
        )
        for number, state, is_live in rows
    ]


@dataclass(frozen=True)
class ReplayCard:
    """What the trace page's Replay card offers before anything is replayed."""

    why_not: str | None  # the trace cannot be replayed at all: why
    allowed: bool  # the user may replay (traces and configuration of the agent)
    choices: tuple[VersionChoice, ...]
    selected: int | None  # the version chosen in the form (the recorded one first)


def replay_card(*, user, trace: Trace, selected=None) -> ReplayCard:
    """The card's state: nothing is run, at most one query (the strategy's versions)."""
    why_not = not_replayable_reason(trace)
    allowed = user_can_replay_trace(user, trace.agent)
    choices = () if why_not or not allowed else tuple(replay_choices(trace))
    return ReplayCard(
        why_not=why_not,
        allowed=allowed,
        choices=choices,
        selected=selected if selected is not None else trace.strategy_version,
    )


def _versions_resolve(trace: Trace, wanted: str | int) -> tuple[Version, str, Version | None]:
    """The Version row `wanted` names, which kind of choice it was, and the version the trace
    used (None when the console has no such version): one query, two for `live`."""
    number = trace.strategy_version if wanted == RECORDED else wanted
    if wanted == LIVE:
        number = (
            Release.objects.filter(
                document__agent_id=trace.agent_id,
                document__key=trace.strategy,
                document__kind=Document.Kind.STRATEGY,
                environment_id=trace.environment_id,
            )
            .values_list("version__number", flat=True)
            .first()
        )
        if number is None:
            raise NotFound(
                f"Nothing of {trace.strategy} is live in {trace.environment.key} now.",
                code="nothing_live",
            )
    found = {
        version.number: version
        for version in _versions_of_strategy(trace).filter(
            number__in={number, trace.strategy_version} - {None}
        )
    }
    chosen = found.get(number)
    if chosen is None:
        raise NotFound(
            f"{trace.strategy} has no version {number}.",
            code="unknown_version",
            details=[{"path": "version", "code": "unknown_version", "message": str(number)}],
        )
    if wanted == LIVE:
        kind = LIVE
    elif number == trace.strategy_version:
        kind = RECORDED
    else:
        kind = "draft" if chosen.is_draft else "version"
    return chosen, kind, found.get(trace.strategy_version)


@dataclass(frozen=True)
class ReplayRow:
    """One candidate: what was recorded, and what the replay decided."""

    position: int
    item_id: str
    source: str
    size: int | None
    recorded_decision: str
    recorded_code: str
    recorded_reason: str
    recorded_required: bool
    recorded_bundle: str
    decision: str
    code: str
    reason: str
    required: bool
    bundle: str

    @property
    def changed(self) -> bool:
        return (self.recorded_decision, self.recorded_code, self.recorded_required) != (
            self.decision,
            self.code,
            self.required,
        ) or self.recorded_bundle != self.bundle


@dataclass(frozen=True)
class TraceReplay:
    """A trace replayed with one version of its strategy: recorded against replayed."""

    trace: Trace
    version: int
    version_state: str
    kind: str  # recorded, live, draft or version
    recorded_engine: str
    console_engine: str
    recorded_status: str
    recorded_degradation: str
    status: str
    degradation: str
    recorded_input_tokens: int | None
    input_tokens: int
    rows: tuple[ReplayRow, ...]
    # With the version the trace used (however it was asked for): whether the console's
    # engine reproduces every recorded decision (status, degradation, per candidate
    # decision, reason code, group, required); None with any other version.
    reproduces: bool | None
    # Sources this version reads that the recorded one did not (never asked: not previewable).
    never_requested: tuple[str, ...] = ()

    @property
    def changed_rows(self) -> int:
        return sum(1 for row in self.rows if row.changed)

    @property
    def status_changed(self) -> bool:
        return (self.recorded_status, self.recorded_degradation) != (
            self.status,
            self.degradation,
        )

    @property
    def same_engine(self) -> bool:
        return self.recorded_engine == self.console_engine


def selection_info(trace: Trace) -> wire.SelectionInfo:
    """The trace's `selection` block, as stored."""
    return wire.SelectionInfo(
        engine=trace.engine,
        fixed_input_tokens=trace.fixed_input_tokens or 0,
        relevance_threshold=trace.relevance_threshold
        if trace.relevance_threshold is not None
        else 0.0,
        context_window=trace.selection_context_window,
        max_input_tokens=trace.selection_max_input_tokens,
    )


def _replayed(trace: Trace, version: Version, items) -> Selection:
    try:
        return engine_replay.replay(Strategy.from_body(version.body), items, selection_info(trace))
    except EngineInputError as exc:
        shown = "; ".join(f"{f.path}: {f.message}" for f in exc.findings[:3])
        raise NotReplayable(
            f"v{version.number} of {trace.strategy} cannot be replayed on this trace's "
            f"candidates: {shown}",
            details=exc.findings[:20],
        ) from exc


def _never_requested(chosen: Version, recorded: Version | None) -> tuple[str, ...]:
    """Sources `chosen` reads that the recorded version did not: the runtime never asked
    their providers, so this replay cannot know what they would have returned."""
    if recorded is None or chosen.number == recorded.number:
        return ()
    try:
        return engine_replay.sources_never_requested(recorded.body, chosen.body)
    except EngineInputError:
        return ()


def trace_replay(*, user, trace: Trace, version: str | None = RECORDED) -> TraceReplay:
    """Re-run the engine on the trace's stored candidates with `version` of its strategy:
    `recorded` (must reproduce the record), `live` (what its environment serves now), or a
    version number (a draft included). Read-only.

    Refused like the trace itself when the user may not see it; 403 without the right to
    read the agent's configuration (a draft's body). 400 for a malformed version, 404 for an
    unknown one, 409 when the trace cannot be replayed (no strategy, no replay fields) or
    the version cannot run on its candidates."""
    check_user_can_replay_trace(
        user, trace.agent, target=("trace", trace.request_id, trace.request_id)
    )
    wanted = version_parse(version)
    reason = not_replayable_reason(trace)
    if reason is not None:
        raise NotReplayable(reason)
    chosen, kind, recorded_version = _versions_resolve(trace, wanted)
    candidates = list(trace_candidates(trace))
    recorded = [c.wire for c in candidates]
    try:
        items = engine_replay.trace_candidates(recorded, truncated=trace.candidates_truncated)
    except engine_replay.NotReplayable as exc:  # a selection block, yet a bare candidate
        raise NotReplayable(
            f"This trace cannot be replayed exactly: {exc}. Its runtime sent the selection "
            "block but not every candidate's replay fields."
        ) from exc
    selection = _replayed(trace, chosen, items)
    # The engine leaves out candidates of sources the version does not read (the runtime
    # would not have asked those providers): matched back to the candidates by identity.
    decided = {
        id(item): decision
        for item, decision in zip(selection.candidates, selection.decisions, strict=True)
    }
    rows = []
    for c, item in zip(candidates, items, strict=True):
        d = decided.get(id(item))
        rows.append(
            ReplayRow(
                position=c.position,
                item_id=c.item_id,
                source=c.source,
                size=c.size,
                recorded_decision=c.decision,
                recorded_code=c.reason_code,
                recorded_reason=c.reason,
                recorded_required=c.required,
                recorded_bundle=c.bundle,
                decision=d.decision if d else NOT_REQUESTED.decision,
                code=d.reason_code if d else NOT_REQUESTED.reason_code,
                reason=d.reason
                if d
                else f"v{chosen.number} does not read {c.source}: its provider is not asked",
                required=d.required if d else False,
                bundle=(d.bundle or "") if d else "",
            )
        )
    reproduces = None
    if chosen.number == trace.strategy_version:  # asked as "recorded", "live" or its number
        reproduces = engine_replay.facts(selection, of=items) == engine_replay.Facts.recorded(
            trace.status, trace.degradation, recorded
        )
    return TraceReplay(
        trace=trace,
        version=chosen.number,
        version_state=chosen.state,
        kind=kind,
        recorded_engine=trace.engine,
        console_engine=ENGINE,
        recorded_status=trace.status,
        recorded_degradation=trace.degradation,
        status=selection.status,
        degradation=selection.degradation or "",
        recorded_input_tokens=None if trace.input_estimate is None else int(trace.input_estimate),
        input_tokens=selection.input_estimate,
        rows=tuple(rows),
        reproduces=reproduces,
        never_requested=_never_requested(chosen, recorded_version),
    )


def replay_detail(result: TraceReplay) -> dict:
    """What the access-log row of a replay says: which version, and what came out."""
    return {
        "version": result.version,
        "kind": result.kind,
        "state": result.version_state,
        "reproduces": result.reproduces,
        "changed": result.changed_rows,
        "status": result.status,
    }


def replay_export(result: TraceReplay) -> dict:
    """The replay as the operator API answers it (traces.api.ReplayOut)."""

    def side(decision, code, reason, required, bundle) -> dict:
        return {
            "decision": decision,
            "reason_code": code or None,
            "reason": reason,
            "required": required,
            "bundle": bundle or None,
        }

    trace = result.trace
    return {
        "request_id": trace.request_id,
        "environment": trace.environment.key,
        "strategy": trace.strategy,
        "version": result.version,
        "version_state": result.version_state,
        "version_kind": result.kind,
        "reproduces": result.reproduces,
        "recorded_engine": result.recorded_engine,
        "console_engine": result.console_engine,
        "recorded": {
            "status": result.recorded_status,
            "degradation": result.recorded_degradation or None,
            "input_tokens": result.recorded_input_tokens,
        },
        "replayed": {
            "status": result.status,
            "degradation": result.degradation or None,
            "input_tokens": result.input_tokens,
        },
        "status_changed": result.status_changed,
        "changed": result.changed_rows,
        "never_requested": list(result.never_requested),
        "candidates": [
            {
                "position": row.position,
                "id": row.item_id,
                "source": row.source,
                "size": row.size,
                "recorded": side(
                    row.recorded_decision,
                    row.recorded_code,
                    row.recorded_reason,
                    row.recorded_required,
                    row.recorded_bundle,
                ),
                "replayed": side(row.decision, row.code, row.reason, row.required, row.bundle),
                "changed": row.changed,
            }
            for row in result.rows
        ],
    }
