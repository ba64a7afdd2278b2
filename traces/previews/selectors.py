"""Reads of impact previews: a preview as its reader may see it, the saved preview of a
version for the publish and approval pages, the window's traces streamed for the replay, one
trace side by side, and the publish judgement's question (`preview_publish_finding`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg
from context_runtime.canonical import content_hash
from context_runtime.engine import EngineInputError, Strategy
from context_runtime.findings import FLAG, Finding
from django.db import connections
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from console.kernel.errors import NotFound
from console.kernel.policy import check_user_can_preview, user_can_preview
from console.kernel.standby import read_alias
from strategies.catalog.models import Environment
from strategies.documents.models import Document, Version
from strategies.releases.selectors import live_release
from traces import diagnosis
from traces.previews import report
from traces.previews.models import Preview
from traces.stored import wire_candidates

BATCH_TRACES = 1_000
# A running preview whose worker has not written for this long stopped (killed, lost): it
# is shown as failed with what it covered, never as complete.
STALE_AFTER = timedelta(seconds=60)
DEFAULT_WINDOW = timedelta(days=7)
# A publish where the environment requires a preview: a complete preview of the same content,
# at most this old, over at least this many traces or every trace of the last 7 days.
REQUIRED_FRESHNESS = timedelta(hours=24)
REQUIRED_TRACES = 1_000
PREVIEW_REQUIRED = "preview_required"
PREVIEW_FEW_TRACES = "preview_few_traces"


# --- what a reader sees -------------------------------------------------------------------------
def is_stale(preview: Preview, *, now: datetime | None = None) -> bool:
    """A running preview with a shard whose worker stopped writing: shown as failed. The
    preview's heartbeat is its oldest running shard's (none while only queued shards wait
    for a worker, as a queued preview waits)."""
    now = now or timezone.now()
    beat = preview.heartbeat_at
    return preview.state == Preview.State.RUNNING and beat is not None and now - beat > STALE_AFTER


def effective_state(preview: Preview) -> str:
    """The state a reader is told: a running preview whose worker stopped is failed."""
    return Preview.State.FAILED if is_stale(preview) else preview.state


def is_finished(preview: Preview) -> bool:
    return effective_state(preview) in (
        Preview.State.COMPLETE,
        Preview.State.CANCELLED,
        Preview.State.FAILED,
    )


def failure_words(preview: Preview) -> str:
    if is_stale(preview) and not preview.failure:
        return "The worker running it stopped responding (killed or lost)."
    return preview.failure


def coverage_words(preview: Preview) -> str:
    """What a cancelled or failed preview covered."""
    until = f", up to {preview.covered_until:%Y-%m-%d %H:%M} UTC" if preview.covered_until else ""
    return f"It covered {preview.traces_done:,} of {preview.traces_total:,} traces{until}."


def progress_percent(preview: Preview) -> int:
    if not preview.traces_total:
        return 100 if is_finished(preview) else 0
    return min(100, round(100 * preview.traces_done / preview.traces_total))


def preview_get(*, user, pk: int) -> Preview:
    """The preview with this id when `user` may see it (traces and configuration of its
    agent); unknown or out of scope: 404, refusals logged."""
    preview = (
        Preview.objects.select_related("agent", "environment", "document", "version")
        .filter(pk=pk)
        .first()
    )
    if preview is None:
        raise NotFound("No such preview.")
    check_user_can_preview(user, preview.agent, target=_target(preview))
    return preview


def _target(preview: Preview):
    return ("preview", str(preview.pk), f"preview {preview.pk}")


def preview_target(preview: Preview):
    """How the access log names a preview."""
    return _target(preview)


def saved_preview(*, version: Version, environment: Environment) -> Preview | None:
    """The newest preview of this version's content in `environment` (complete first, else
    the newest still running) — what the publish and approval pages show."""
    previews = Preview.objects.filter(
        document_id=version.document_id,
        environment=environment,
        content_hash=version.content_hash,
    ).select_related("environment", "document")
    complete = previews.filter(state=Preview.State.COMPLETE).order_by("-finished_at").first()
    if complete is not None:
        return complete
    return previews.order_by("-requested_at").first()


def reusable_preview(
    *,
    document: Document,
    environment: Environment,
    content: str,
    live_content: str,
    window_start: datetime,
    window_end: datetime,
    engine: str,
    counts: dict[str, int],
) -> Preview | None:
    """A preview of the same inputs that is complete, or still running, and whose window
    still holds the traces it counted (`counts`: the window's now): the second request
    reuses it. A trace stored in the window since (a late report), or purged, makes the
    window another one, so it gets a new preview."""
    for preview in Preview.objects.filter(
        document=document,
        environment=environment,
        content_hash=content,
        live_content_hash=live_content,
        window_start=window_start,
        window_end=window_end,
        engine=engine,
        state__in=[Preview.State.COMPLETE, Preview.State.RUNNING, Preview.State.QUEUED],
    ).order_by("-requested_at"):
        if not is_stale(preview) and preview.window_by_status == counts:
            return preview
    return None


# --- the window's traces ------------------------------------------------------------------------
def window_counts(
    *,
    agent_id: int,
    environment_id: int,
    strategy: str,
    start: datetime,
    end: datetime,
    stored_by: datetime,
) -> dict[str, int]:
    """{status: traces} of the strategy in the environment over the window, stored by
    `stored_by` (a preview's request: what it replays, however late more traces arrive)."""
    with connections[read_alias(as_of=stored_by)].cursor() as cursor:
        cursor.execute(
            "SELECT status, count(*) FROM traces_trace WHERE agent_id = %s AND environment_id = %s"
            " AND strategy = %s AND occurred_at >= %s AND occurred_at < %s AND received_at <= %s"
            " GROUP BY status",
            [agent_id, environment_id, strategy, start, end, stored_by],
        )
        return dict(cursor.fetchall())


def sampling_thresholds(counts: dict[str, int], quotas: dict[str, int]) -> dict[str, int]:
    """Per sampled status, the bound under which a trace's hash keeps it (out of 2³¹)."""
    return {
        status: int(quotas[status] / count * 2**31)
        for status, count in counts.items()
        if quotas.get(status, 0) < count
    }


_TRACE_SELECT = ", ".join(f"t.{column}" for column in report.TRACE_COLUMNS)


def candidate_rows(trace_id: int, packed) -> list[tuple]:
    """A trace's stored candidates as report rows (`report.CANDIDATE_COLUMNS` order)."""
    return [
        (
            trace_id, c.id, c.source, c.version, c.size, c.required, c.bundle,
            c.provider_bundle, c.decision, c.reason_code, c.outcome, c.relevance,
            c.depends_on, c.conflicts_with, c.note,
        )
        for c in wire_candidates(packed)
    ]  # fmt: skip


def window_batches(
    *,
    agent_id: int,
    environment_id: int,
    strategy: str,
    start: datetime,
    end: datetime,
    stored_by: datetime,
    thresholds: dict[str, int] | None = None,
    batch: int | None = None,
    shard: tuple[int, int] | None = None,
) -> Iterator[list[tuple[tuple, list[tuple], datetime]]]:
    """The window's traces stored by `stored_by` (those `window_counts` counted) in trace
    order (occurred_at, id), `batch` at a time, each with its candidates in position order
    (decoded from the trace's row) and its time: one query per batch, by keyset. Nothing is
    held between batches: memory is one batch."""
    batch = batch or BATCH_TRACES  # read at call time, so a test can make batches small
    sample_sql, sample_args = "", []
    if thresholds:
        cases = " ".join("WHEN %s THEN (hashint8(t.id) & 2147483647) < %s" for _ in thresholds)
        sample_sql = f" AND CASE t.status {cases} ELSE true END"
        for status, bound in thresholds.items():
            sample_args += [status, bound]
    if shard is not None:  # (index, count): the traces whose id is index modulo count
        sample_sql += " AND t.id %% %s = %s"
        sample_args += [shard[1], shard[0]]
    after_time, after_id = start, 0
    first = True
    # One server for the whole scan: the standby once it has replayed what `stored_by` holds.
    connection = connections[read_alias(as_of=stored_by)]
    while True:
        # psycopg's own cursor, binary rows: the server sends 500,000 candidate rows a
        # 10,000-trace preview without printing their numbers as text, and psycopg's C
        # loaders read them without parsing any (Django's cursors are client-side, text).
        connection.ensure_connection()
        with psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(
                f"SELECT {_TRACE_SELECT}, t.packed_candidates, t.occurred_at FROM traces_trace t"
                " WHERE t.agent_id = %s AND t.environment_id = %s AND t.strategy = %s"
                " AND t.received_at <= %s AND t.occurred_at < %s AND "
                + ("t.occurred_at >= %s" if first else "(t.occurred_at, t.id) > (%s, %s)")
                + sample_sql
                + " ORDER BY t.occurred_at, t.id LIMIT %s",
                [agent_id, environment_id, strategy, stored_by, end]
                + ([after_time] if first else [after_time, after_id])
                + sample_args
                + [batch],
                binary=True,
            )
            traces = cursor.fetchall()
            if not traces:
                return
        yield [(row[:-2], candidate_rows(row[report.T_ID], row[-2]), row[-1]) for row in traces]
        first = False
        after_time, after_id = traces[-1][-1], traces[-1][report.T_ID]
        if len(traces) < batch:
            return


def recorded_strategies(document: Document) -> dict[int, Strategy]:
    """Every frozen version of the strategy, read once (a body the engine refuses is left
    out: its traces are counted as of an unknown version)."""
    strategies = {}
    for number, body in Version.objects.filter(
        document=document, state=Version.State.FROZEN
    ).values_list("number", "body"):
        try:
            strategies[number] = Strategy.from_body(body)
        except EngineInputError:
            continue
    return strategies


# --- one trace, side by side ------------------------------------------------------------------------
@dataclass
class SideBySide:
    request_id: str
    trace_status: str
    old: object  # Selection
    new: object
    rows: list  # (item, old decision, new decision)


def preview_side_by_side(*, preview: Preview, request_id: str) -> SideBySide:
    """One trace of the preview's window replayed with the live version and the previewed
    one, decision by decision (404 for a trace that is not in the window, or was stored
    after the preview was asked for: not one it replayed)."""
    with connections[read_alias(as_of=preview.requested_at)].cursor() as cursor:
        cursor.execute(
            f"SELECT {_TRACE_SELECT}, t.packed_candidates, t.occurred_at"
            " FROM traces_request_key k"
            " JOIN traces_trace t ON t.id = k.trace_id AND t.occurred_at = k.occurred_at"
            " WHERE k.environment_id = %s AND k.request_id = %s AND t.agent_id = %s"
            " AND t.strategy = %s AND t.occurred_at >= %s AND t.occurred_at < %s"
            " AND t.received_at <= %s",
            [
                preview.environment_id,
                request_id,
                preview.agent_id,
                preview.document.key,
                preview.window_start,
                preview.window_end,
                preview.requested_at,
            ],
        )
        trace = cursor.fetchone()
        if trace is None:
            raise NotFound(f"No trace {request_id} in this preview's window.")
    candidates = candidate_rows(trace[report.T_ID], trace[-2])
    strategies = recorded_strategies(preview.document)
    live = strategies.get(preview.live_version_number)
    if live is None:
        raise NotFound("The live version of this preview can no longer be read.")
    old, new, rows = report.side_by_side(
        trace[:-2], candidates, live, Strategy.from_body(preview.body)
    )
    return SideBySide(
        request_id=request_id, trace_status=trace[report.T_STATUS], old=old, new=new, rows=rows
    )


# --- the publish judgement's question ---------------------------------------------------------------
def preview_publish_finding(
    *, agent, environment: Environment, document_key: str, body, actor, now=None
) -> Finding | None:
    """Where `environment` requires a preview: None when a complete preview of this content
    against what is live now, at most 24 h old, covered at least 1,000 traces or every trace
    of the last 7 days; a flag (publish with a reason) when it covered fewer; else the
    refusal `preview_required`."""
    now = now or timezone.now()
    document = Document.objects.filter(agent=agent, key=document_key).first() if agent else None
    if document is None or document.kind != Document.Kind.STRATEGY:
        return None  # a profile, or a document not created yet: nothing to preview
    live = live_release(document=document, environment=environment)
    if live is None:
        return None  # nothing live: no traffic to preview against
    preview = (
        Preview.objects.filter(
            document=document,
            environment=environment,
            content_hash=content_hash(body),
            live_content_hash=live.version.content_hash,
            state=Preview.State.COMPLETE,
            finished_at__gte=now - REQUIRED_FRESHNESS,
        )
        .order_by("-traces_done", "-finished_at")
        .first()
    )
    if preview is None:
        return Finding(
            "environment",
            PREVIEW_REQUIRED,
            f"{environment.key} requires an impact preview before a publish: run one of this "
            f"version against {environment.key} (complete, at most 24 hours old, against what "
            "is live there now), then publish.",
        )
    whole_week = (
        not preview.sampled
        and preview.window_end >= now - REQUIRED_FRESHNESS
        and preview.window_end - preview.window_start >= DEFAULT_WINDOW
    )
    if preview.traces_done >= REQUIRED_TRACES or whole_week:
        return None
    return Finding(
        "reason",
        PREVIEW_FEW_TRACES,
        f"The impact preview covered only {preview.traces_done:,} traces (fewer than "
        f"{REQUIRED_TRACES:,}, and not every trace of the last 7 days): say why it is "
        "enough in the reason.",
        severity=FLAG,
    )


# --- the report as the page shows it ----------------------------------------------------------------
STATUS_ORDER = ("ready", "degraded", "missing_required_data", "budget_exceeded", "source_conflict")
SOURCE_KINDS = (
    ("required_lost", "Required items lost", "bad"),
    ("required_kept", "Required items regained", "good"),
    ("optional_dropped", "Optional items dropped", "warn"),
    ("optional_added", "Optional items added", "info"),
)


def _words(component: str, value: str) -> str:
    """A status, decision or reason code in an operator's words, from the component that
    words it for the pages (_components/term.html); reason codes: traces.diagnosis.reason_words."""
    return render_to_string(f"_components/{component}.html", {"value": value}).strip()


def _tone(old: str, new: str) -> str:
    if old == new:
        return "same"
    rank = {status: i for i, status in enumerate(STATUS_ORDER)}
    worse = (new != "ready" and old == "ready") or (
        new in ("missing_required_data", "budget_exceeded", "source_conflict")
        and old in ("ready", "degraded")
    )
    if worse:
        return "bad"
    return "good" if rank.get(new, 9) < rank.get(old, 9) or new == "ready" else "warn"


def report_view(report_data: dict | None) -> dict | None:
    """The stored report reshaped for the page: the matrix as rows × columns over the
    statuses seen, each cell with its count, tone and anchor; the per-source tables; the
    cells' id lists (anchors the cells link to)."""
    if not report_data:
        return None
    lists = []

    def listed(anchor: str, title: str, cell: dict) -> dict:
        entry = {"anchor": anchor, "title": title, **cell}
        if cell.get("count"):
            lists.append(entry)
        return entry

    view = {"report": report_data, "lists": lists}
    share = (report_data.get("fidelity") or {}).get("share")
    view["fidelity_percent"] = (
        None if share is None else f"{share * 100:.1f}".rstrip("0").rstrip(".")
    )
    view["fidelity_floor_percent"] = f"{report.FIDELITY_FLOOR * 100:g}"
    matrix = report_data.get("status_matrix") or {}
    seen = {old for old in matrix} | {new for row in matrix.values() for new in row}
    statuses = [s for s in STATUS_ORDER if s in seen] + sorted(seen - set(STATUS_ORDER))
    view["statuses"] = statuses
    view["matrix"] = [
        {
            "old": old,
            "cells": [
                listed(
                    f"ids-{old}-{new}",
                    f"{_words('term', old)} → {_words('term', new)}",
                    {
                        **matrix.get(old, {}).get(new, {"count": 0, "ids": []}),
                        "tone": _tone(old, new),
                        "new": new,
                    },
                )
                for new in statuses
            ],
        }
        for old in statuses
        if old in matrix
    ]
    view["sources"] = [
        {
            "source": source,
            "rows": [
                listed(
                    f"ids-{source}-{kind}-{code}",
                    f"{source}: {label} — {diagnosis.reason_words(code)}",
                    {
                        **cell,
                        "kind": label,
                        "tone": tone,
                        "code": code,
                        "why": diagnosis.reason_words(code),
                    },
                )
                for kind, label, tone in SOURCE_KINDS
                for code, cell in sorted(kinds.get(kind, {}).items())
            ],
        }
        for source, kinds in sorted((report_data.get("sources") or {}).items())
    ]
    for name, title in (("changed", "Traces whose decisions change"),):
        if report_data.get(name):
            view[name] = listed(f"ids-{name}", title, report_data[name])
    conflicts = report_data.get("conflicts") or {}
    view["conflicts"] = {
        key: listed(f"ids-conflicts-{key}", f"Conflicts {key.replace('_', ' ')}", cell)
        for key, cell in conflicts.items()
    }
    over = report_data.get("over_budget") or {}
    which = {"old": "with the live version", "new": "with the new version"}
    view["over_budget"] = {
        key: listed(f"ids-over-{key}", f"Over-budget items {which.get(key, key)}", cell)
        for key, cell in over.items()
    }
    view["intervals"] = [
        {"what": _interval_words(name), "name": name, **rate}
        for name, rate in (report_data.get("intervals") or {}).items()
    ]
    view["not_previewable_count"] = report.not_previewable_count(report_data)
    return view


def _interval_words(name: str) -> str:
    """A sampled rate's name ("ready->budget_exceeded", "changed") in words."""
    if "->" in name:
        old, new = name.split("->", 1)
        return f"{_words('term', old)} → {_words('term', new)}"
    return {"changed": "decisions change", "over_budget_new": "an item over budget, new"}.get(
        name, name
    )


def impact_words(preview: Preview) -> str:
    """One line for the publish and approval pages: "Impact on 1,234 traces of sg-test, last
    7 days: 12 become budget_exceeded; decisions change in 40."."""
    data = preview.report or {}
    days = max(1, round((preview.window_end - preview.window_start).total_seconds() / 86400))
    previewed = data.get("previewed", 0)
    where = (
        f"Impact on {previewed:,} trace{'s' if previewed != 1 else ''} of "
        f"{preview.environment.key}, last {days} day{'s' if days != 1 else ''}"
    )
    if data.get("withheld"):
        return f"{where}: withheld — the replay did not reproduce the recorded decisions."
    becoming: dict[str, int] = {}
    for old, row in (data.get("status_matrix") or {}).items():
        for new, cell in row.items():
            if old != new:
                becoming[new] = becoming.get(new, 0) + cell["count"]
    parts = [
        f"{count:,} become {_words('term', status)}" for status, count in sorted(becoming.items())
    ]
    apart = report.not_previewable_count(data)
    if not previewed:
        # Nothing replayed is no evidence that nothing changes: never "no status changes".
        return f"{where}: nothing could be judged — {apart:,} not previewable (counted apart)."
    if not parts:
        parts = ["no status changes"]
    changed = (data.get("changed") or {}).get("count", 0)
    text = f"{where}: " + ", ".join(parts) + f"; decisions change in {changed:,}."
    if apart:
        text += f" {apart:,} not previewable (counted apart)."
    return text


def impact_danger(preview: Preview) -> dict | None:
    """What a go-live page must warn of in a complete preview, or None: traces whose status
    gets worse ("181 of 209 replayed traces get worse: 181 become budget_exceeded"), or
    nothing judged at all (0 of 214 traces previewable: no evidence either way). `confirm`:
    the words a person ticks to go on anyway, naming what they accept."""
    data = preview.report or {}
    previewed = data.get("previewed", 0)
    where = preview.environment.key
    if not previewed:
        total = preview.traces_done
        return {
            "kind": "nothing_judged",
            "title": f"Nothing could be judged: 0 of {total:,} traces of {where} previewable",
            "message": "No trace could be replayed with this version, so the preview says "
            "nothing about what changes — not that nothing does.",
            "confirm": f"Nothing could be judged in {where} (0 of {total:,} traces "
            "previewable), and I go on without evidence.",
        }
    worse: dict[str, int] = {}
    for old, row in (data.get("status_matrix") or {}).items():
        for new, cell in row.items():
            if _tone(old, new) == "bad":
                worse[new] = worse.get(new, 0) + cell["count"]
    count = sum(worse.values())
    if not count:
        return None
    becoming = ", ".join(
        f"{n:,} become {_words('term', status)}" for status, n in sorted(worse.items())
    )
    return {
        "kind": "worse",
        "title": f"{count:,} of {previewed:,} replayed traces of {where} get worse",
        "message": f"{becoming} with this version.",
        "confirm": f"{count:,} of {previewed:,} replayed traces get worse ({becoming}), and I "
        "go on anyway.",
    }


def _fidelity_words(data: dict) -> str:
    """How far the replay can be trusted, in words: it reproduced what the runtimes decided
    on so many traces (the share, "fidelity", is the report page's detail)."""
    fidelity = data.get("fidelity") or {}
    if not fidelity.get("checked"):
        return "no trace recorded what the replay needs to check itself against"
    return (
        f"the replay reproduced what the runtime decided on {fidelity['reproduced']:,} of "
        f"{fidelity['checked']:,} traces"
    )


def preview_summary(*, user, version: Version, environment: Environment) -> dict | None:
    """What the publish page and the approval request show of the saved preview of this
    version's content in `environment`: its state, one sentence of impact, the fidelity, a
    link to the full report (for someone who may read it), or — when there is none — the
    link to run one; and, where the environment requires a preview, what is missing (the
    publish judgement's own finding). None for a profile."""
    document = version.document
    if document.kind != Document.Kind.STRATEGY:
        return None
    agent = document.agent
    allowed = user_can_preview(user, agent)
    preview = saved_preview(version=version, environment=environment)
    summary = {
        "allowed": allowed,
        "environment": environment.key,
        "new_url": reverse("preview-new", args=[agent.key, document.key])
        + f"?version={version.number}&environment={environment.key}",
        "preview": None,
        "required": None,
    }
    if environment.require_preview:
        finding = preview_publish_finding(
            agent=agent,
            environment=environment,
            document_key=document.key,
            body=version.body,
            actor=user,
        )
        if finding is not None:
            summary["required"] = {
                "code": finding.code,
                "message": finding.message,
                "needs_reason": finding.code == PREVIEW_FEW_TRACES,
            }
    if preview is None:
        return summary
    state = effective_state(preview)
    entry = {
        "pk": preview.pk,
        "state": state,
        "url": reverse("preview-detail", args=[agent.key, preview.pk]),
        "finished_at": preview.finished_at,
        "live_version_number": preview.live_version_number,
        "traces": preview.traces_done,
    }
    if state == Preview.State.COMPLETE:
        entry["sentence"] = impact_words(preview)
        entry["fidelity"] = _fidelity_words(preview.report or {})
        entry["withheld"] = bool((preview.report or {}).get("withheld"))
        entry["danger"] = None if entry["withheld"] else impact_danger(preview)
    elif state in (Preview.State.CANCELLED, Preview.State.FAILED):
        entry["sentence"] = f"The last preview was {state}, not complete. " + coverage_words(
            preview
        )
    else:
        entry["sentence"] = (
            f"A preview is running: {preview.traces_done:,} of {preview.traces_total:,} traces."
        )
    summary["preview"] = entry
    return summary
