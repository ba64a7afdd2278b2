"""Reads of regression sets: the sets of an agent, one set, its members as the checker takes
them (one query), and the checks — a body, a version, what is live in each environment, or
the strategies of a configuration file — against them."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from urllib.parse import urlencode

from context_runtime import wire
from context_runtime.engine import EngineInputError, Strategy
from context_runtime.findings import Finding
from django.db import connection
from django.db.models import Count

from console.kernel.audit import AccessAction, access_record
from console.kernel.errors import NotFound, ValidationFailed
from console.kernel.policy import (
    check_user_can_view_regressions,
    user_can_manage_regressions,
    user_can_view_regressions,
)
from strategies.catalog.models import Agent, Environment
from strategies.documents.models import Document, Version
from strategies.exchange import format as config_format
from strategies.releases.models import Release
from strategies.releases.selectors.refusals import REGRESSION_SET_FAILED
from traces.filters import TraceFilters
from traces.regressions import checks
from traces.regressions.models import Member, RegressionSet
from traces.replay import not_replayable_reason
from traces.selectors import trace_candidates, trace_listing
from traces.stored import candidates_match, traces_walk


def strategy_of(agent: Agent, key: str) -> Document:
    """The agent's strategy named `key`; a field error otherwise."""
    document = Document.objects.filter(
        agent=agent, key=key or "", kind=Document.Kind.STRATEGY
    ).first()
    if document is None:
        message = f"{agent.key} has no strategy {key}."
        raise ValidationFailed(
            message,
            details=[{"path": "strategy", "code": "unknown_strategy", "message": message}],
        )
    return document


def regression_sets(*, agent: Agent, strategy: str = ""):
    """The agent's sets, newest first, with their member counts (one query)."""
    sets = RegressionSet.objects.filter(agent=agent).select_related("document")
    if strategy:
        sets = sets.filter(document__key=strategy)
    return sets.annotate(member_count=Count("members"))


def regression_set_get(*, user, agent: Agent, pk) -> RegressionSet:
    """The set `pk` of `agent` when `user` may read it; unknown or another agent's: 404."""
    check_user_can_view_regressions(user, agent, target=("regression_set", str(pk), str(pk)))
    found = (
        RegressionSet.objects.select_related("agent", "document").filter(pk=pk, agent=agent).first()
    )
    if found is None:
        raise NotFound("No such regression set.")
    return found


def members_of(regression_set: RegressionSet):
    return Member.objects.filter(set=regression_set).order_by("-added_at", "-id")


def member_get(*, agent: Agent, pk) -> Member:
    member = (
        Member.objects.select_related("set__agent", "set__document")
        .filter(pk=pk, set__agent=agent)
        .first()
    )
    if member is None:
        raise NotFound("No such member.")
    return member


def member_cases(sets) -> dict[int, list[checks.MemberCase]]:
    """Every member of `sets` as the checker takes it, by set id: one query, and one more for
    the snapshots of members this process has not decoded yet (a stored member's snapshot
    never changes, so the checker keeps it decoded — checks.decoded)."""
    rows = list(
        Member.objects.filter(set__in=sets)
        .values_list("set_id", "pk", "request_id", "environment_key", "expectations", "added_at")
        .order_by("pk")
    )
    stamps = {pk: added.isoformat() for _, pk, _, _, _, added in rows}
    known = checks.decoded_known(stamps.items())
    missing = [pk for pk, stamp in stamps.items() if (pk, stamp) not in known]
    snapshots = (
        dict(Member.objects.filter(pk__in=missing).values_list("pk", "snapshot")) if missing else {}
    )
    cases: dict[int, list[checks.MemberCase]] = {s.pk: [] for s in sets}
    for set_id, pk, request_id, environment, expectations, _ in rows:
        stamp = stamps[pk]
        cases[set_id].append(
            checks.MemberCase(
                pk,
                request_id,
                environment,
                snapshots.get(pk),
                expectations,
                stamp,
                known.get((pk, stamp)),
            )
        )
    return cases


def strategy_read(body, *, path: str = "body") -> Strategy:
    """A body to check with; not a strategy: 400 with the engine's findings under `path`."""
    if not isinstance(body, dict):
        raise ValidationFailed(
            "The body to check must be a strategy (a JSON object).",
            details=[{"path": path, "code": "invalid_type", "message": "Must be an object."}],
        )
    try:
        return Strategy.from_body(body)
    except EngineInputError as exc:
        raise ValidationFailed(
            "That is not a valid strategy body.",
            code="invalid_strategy",
            details=[
                {"path": f"{path}.{f.path}".rstrip("."), "code": f.code, "message": f.message}
                for f in exc.findings[:50]
            ],
        ) from exc


@dataclass
class SetCheck:
    """One set checked with one body."""

    regression_set: RegressionSet
    label: str
    results: list
    totals: checks.Totals = field(init=False)

    def __post_init__(self):
        self.totals = checks.totals(self.results)

    @property
    def outcome(self) -> str:
        """failed, not_checkable, passed — or empty: no member left to check (never passed)."""
        if not self.results:
            return checks.EMPTY
        if self.totals.failed:
            return checks.FAILED
        if self.totals.not_checkable:
            return checks.NOT_CHECKABLE
        return checks.PASSED

    def as_dict(self) -> dict:
        return {
            "set": self.regression_set.pk,
            "name": self.regression_set.name,
            "strategy": self.regression_set.document.key,
            "checked": self.label,
            "outcome": self.outcome,
            "totals": self.totals.as_dict(),
            "members": [r.as_dict() for r in self.results],
        }


def sets_check(*, sets, strategy: Strategy, label: str) -> list[SetCheck]:
    """Each of `sets` against one strategy (members read in one query)."""
    sets = list(sets)
    cases = member_cases(sets)
    return [SetCheck(s, label, checks.check(strategy, cases[s.pk], label=label)) for s in sets]


def version_get(*, document: Document, number) -> Version:
    version = Version.objects.filter(document=document, number=number).first()
    if version is None:
        raise NotFound(
            f"{document.key} has no version {number}.",
            code="unknown_version",
            details=[{"path": "version", "code": "unknown_version", "message": str(number)}],
        )
    return version


@dataclass(frozen=True)
class Column:
    """One thing a set page checks the set against: an environment's live version, or a
    version asked for."""

    label: str  # "sg-test · v3", "v1"
    version: int
    check: SetCheck


def set_page_columns(*, regression_set: RegressionSet, version: int | None = None) -> list[Column]:
    """The set against what is live in each environment (position order) and, when asked,
    against `version`: each distinct version replayed once."""
    document = regression_set.document
    releases = (
        Release.objects.filter(document=document)
        .select_related("environment", "version")
        .order_by("environment__position")
    )
    wanted = [(f"{r.environment.key} · v{r.version.number}", r.version) for r in releases]
    if version is not None:
        chosen = version_get(document=document, number=version)
        wanted.append((f"v{chosen.number}" + (" (draft)" if chosen.is_draft else ""), chosen))
    cases = member_cases([regression_set])[regression_set.pk]
    done: dict[int, list] = {}
    columns = []
    for label, row in wanted:
        if row.number not in done:
            strategy = Strategy.from_body(row.body)
            done[row.number] = checks.check(strategy, cases, label=f"v{row.number}")
        columns.append(Column(label, row.number, SetCheck(regression_set, label, done[row.number])))
    return columns


def environments_live(document: Document) -> list[tuple[Environment, int]]:
    return [
        (r.environment, r.version.number)
        for r in Release.objects.filter(document=document)
        .select_related("environment", "version")
        .order_by("environment__position")
    ]


# --- a configuration file (config as code) ----------------------------------------------------
@dataclass(frozen=True)
class FileStrategy:
    """A strategy of a configuration file, as it would be after the change: its draft if it
    has one, else its newest version."""

    key: str
    label: str  # "draft" or "v4" (as numbered in the file)
    body: dict
    path: str  # where in the file


def file_strategies(text: str | bytes) -> tuple[config_format.ConfigFile, list[FileStrategy]]:
    """Read a configuration file (the config-as-code format, read by its one reader) and
    pick each strategy's body to check. A file that does not read: 400 with every finding."""
    if len(text) > config_format.MAX_FILE_BYTES:
        raise ValidationFailed(
            "The file is over the size limit.",
            code="too_large",
            details=[{"path": "file", "code": "too_large", "message": "At most 1 MiB."}],
        )
    data = config_format.file_parse_text(text)
    parsed, findings = config_format.file_read(data)
    if parsed is None:
        raise ValidationFailed(
            "The configuration file cannot be read.",
            code="invalid_file",
            details=[{**f, "path": f"file.{f['path']}".rstrip(".")} for f in findings],
        )
    picked = []
    for document in parsed.documents:
        if document.kind != Document.Kind.STRATEGY:
            continue
        if document.draft is not None:
            picked.append(
                FileStrategy(document.key, "draft", document.draft.body, document.draft.path)
            )
        elif document.versions:
            newest = max(document.versions, key=lambda v: v.number)
            picked.append(FileStrategy(document.key, f"v{newest.number}", newest.body, newest.path))
    return parsed, picked


@dataclass
class FileCheck:
    agent: Agent
    checks: list[SetCheck]

    @property
    def failed(self) -> bool:
        return any(c.totals.failed for c in self.checks)


def file_check(*, agent: Agent, strategies: list[FileStrategy]) -> FileCheck:
    """Every set of the agent against the file's body of the set's strategy (a set of a
    strategy the file does not hold is checked against nothing, and left out)."""
    by_key = {s.key: s for s in strategies}
    found = []
    sets = list(regression_sets(agent=agent).filter(document__key__in=list(by_key)))
    cases = member_cases(sets)
    for regression_set in sets:
        chosen = by_key[regression_set.document.key]
        strategy = strategy_read(chosen.body, path=f"file.{chosen.path}.body")
        label = f"{chosen.key} {chosen.label} (file)"
        found.append(
            SetCheck(
                regression_set, label, checks.check(strategy, cases[regression_set.pk], label=label)
            )
        )
    return FileCheck(agent, found)


def agent_of_file(parsed: config_format.ConfigFile) -> Agent:
    agent = Agent.objects.filter(key=parsed.agent_key).first()
    if agent is None:
        raise ValidationFailed(
            f"The console has no agent {parsed.agent_key}.",
            code="unknown_agent",
            details=[{"path": "file.agent.key", "code": "unknown_agent", "message": "Unknown."}],
        )
    return agent


def overall_outcome(found: list[SetCheck]) -> str:
    """failed when any member failed; not_checkable when none failed but some could not be
    judged; empty when all that was judged passed but a set has no member left (neither is
    ever passed); passed otherwise."""
    outcomes = {c.outcome for c in found}
    for outcome in (checks.FAILED, checks.NOT_CHECKABLE, checks.EMPTY):
        if outcome in outcomes:
            return outcome
    return checks.PASSED


def member_export(member: Member) -> dict:
    return {
        "id": member.pk,
        "set": member.set_id,
        "request_id": member.request_id,
        "environment": member.environment_key,
        "occurred_at": member.occurred_at,
        "strategy_version": member.strategy_version,
        "status": member.snapshot.get("status", ""),
        "expectations": member.expectations,
        "note": member.note,
        "added_at": member.added_at,
        "expires_at": member.expires_at,
    }


def set_export(regression_set: RegressionSet, members: int) -> dict:
    return {
        "id": regression_set.pk,
        "name": regression_set.name,
        "strategy": regression_set.document.key,
        "description": regression_set.description,
        "retention_days": regression_set.retention_days,
        "keep_reason": regression_set.keep_reason,
        "revision": regression_set.revision,
        "members": members,
        "created_at": regression_set.created_at,
    }


def _only(sets, wanted):
    if wanted is None:
        return list(sets)
    chosen = [s for s in sets if s.pk in set(wanted)]
    unknown = sorted(set(wanted) - {s.pk for s in chosen})
    if unknown:
        raise ValidationFailed(
            "Some sets named are not sets of this strategy.",
            details=[
                {"path": "sets", "code": "unknown_set", "message": f"No set {pk} here."}
                for pk in unknown
            ],
        )
    return chosen


def check_request(
    *, agent: Agent, strategy=None, body=None, version=None, file=None, sets=None
) -> list[SetCheck]:
    """What the check API asks: a configuration file, or one strategy's body or version,
    against the agent's sets (or those named)."""
    if file is not None:
        if strategy is not None or body is not None or version is not None:
            raise ValidationFailed(
                "Send a file, or a strategy with a body or a version: not both.",
                details=[{"path": "file", "code": "exclusive", "message": "Not with a body."}],
            )
        parsed, strategies = file_strategies(file)
        if parsed.agent_key != agent.key:
            raise ValidationFailed(
                f"The file configures {parsed.agent_key}, not {agent.key}.",
                code="wrong_agent",
                details=[{"path": "file.agent.key", "code": "wrong_agent", "message": agent.key}],
            )
        checked = file_check(agent=agent, strategies=strategies).checks
        if sets is not None:
            keep = _only([c.regression_set for c in checked], sets)
            checked = [c for c in checked if c.regression_set in keep]
        return checked
    if strategy is None or (body is None) == (version is None):
        raise ValidationFailed(
            "Send a file, or a strategy with either a body or a version.",
            details=[
                {
                    "path": "strategy" if strategy is None else "body",
                    "code": "required",
                    "message": "Name the strategy and give a body or a version.",
                }
            ],
        )
    document = strategy_of(agent, strategy)
    if version is not None:
        row = version_get(document=document, number=version)
        body, label = row.body, f"v{row.number}"
    else:
        label = "the body"
    read = strategy_read(body)
    return sets_check(
        sets=_only(regression_sets(agent=agent, strategy=strategy), sets),
        strategy=read,
        label=label,
    )


@dataclass(frozen=True)
class SetChoice:
    """One of the agent's sets of the trace's strategy, as the keep card offers it."""

    pk: int
    name: str
    member_count: int
    keeps: bool  # it keeps this request already


@dataclass(frozen=True)
class KeepCard:
    """What the trace page's "keep in a regression set" card offers."""

    allowed: bool
    why_not: str
    sets: tuple[SetChoice, ...]
    items: tuple[str, ...]  # the request's item ids and bundles
    sources: tuple[str, ...]
    statuses: tuple[str, ...]
    reasons: tuple[str, ...]
    versions: tuple[int, ...]
    kept_in: tuple[SetChoice, ...]  # the sets that keep this request already


# Written out: every trace page reads it, and the ORM took about 1.2 ms of Python to build
# this grouped query against 0.2 ms for the statement (docs/PERFORMANCE.md). Newest first,
# as `regression_sets`; a member is always of its set's strategy.
_SET_CHOICES = """
SELECT s.id, s.name, count(m.id),
       coalesce(bool_or(m.environment_key = %(environment)s AND m.request_id = %(request_id)s),
                false)
FROM regressions_regressionset s
JOIN strategies_document d ON d.id = s.document_id
LEFT JOIN regressions_member m ON m.set_id = s.id
WHERE s.agent_id = %(agent)s AND d.key = %(strategy)s
GROUP BY s.id
ORDER BY s.created_at DESC, s.id DESC
"""


def set_choices(trace) -> list[SetChoice]:
    """The agent's sets of the trace's strategy, each marked when it keeps this request."""
    with connection.cursor() as cursor:
        cursor.execute(
            _SET_CHOICES,
            {
                "environment": trace.environment.key,
                "request_id": trace.request_id,
                "agent": trace.agent_id,
                "strategy": trace.strategy,
            },
        )
        return [SetChoice(*row) for row in cursor.fetchall()]


def keep_card(*, user, trace, candidates=None, versions=None) -> KeepCard:
    """The card's state, nothing replayed: where the request is kept and the agent's sets of
    its strategy (a query each); the trace's candidates and the strategy's versions unless
    the page read them already (`candidates`: the stored candidates in order; `versions`: numbers)."""
    allowed = user_can_manage_regressions(user, trace.agent)
    why_not = not_replayable_reason(trace) or ""
    empty = KeepCard(allowed, why_not, (), (), (), (), (), (), ())
    if not trace.strategy:
        return empty
    sets = set_choices(trace)
    kept_in = tuple(s for s in sets if s.keeps)
    if not allowed or why_not:
        return KeepCard(allowed, why_not, (), (), (), (), (), (), kept_in)
    if candidates is None:
        candidates = list(trace_candidates(trace))
    rows = [(c.item_id, c.source, c.provider_bundle) for c in candidates]
    items = [item for item, _, _ in rows]
    items += [bundle for _, _, bundle in rows if bundle and bundle not in items]
    return KeepCard(
        allowed=True,
        why_not="",
        sets=tuple(sets),
        items=tuple(dict.fromkeys(items)),
        sources=tuple(dict.fromkeys(source for _, source, _ in rows)),
        statuses=tuple(s for s in wire.STATUSES if s != wire.INPUT_REFUSED),
        reasons=wire.REASON_CODES,
        versions=tuple(
            versions
            if versions is not None
            else Version.objects.filter(
                document__agent=trace.agent,
                document__key=trace.strategy,
                document__kind=Document.Kind.STRATEGY,
            )
            .order_by("-number")
            .values_list("number", flat=True)
        ),
        kept_in=kept_in,
    )


# --- what strategies asks through strategies.documents.regression_hook -------------------------
def body_results(*, user, agent: Agent, document_key: str, body, label: str) -> list | None:
    """The editor's and the release pages' view: each of the agent's sets of this strategy
    checked with `body` (SetCheck), or None when the user may not see kept requests. A body
    that is not a strategy yet checks nothing (the editor shows its findings). A look at
    kept requests: one access-log line naming the sets checked."""
    if not user_can_view_regressions(user, agent):
        return None
    sets = list(regression_sets(agent=agent, strategy=document_key))
    if not sets:
        return []
    try:
        strategy = Strategy.from_body(body)
    except EngineInputError:
        return []
    found = sets_check(sets=sets, strategy=strategy, label=label)
    access_record(
        actor=user,
        action=AccessAction.REGRESSION_SET_CHECK,
        target=None,
        agent=agent,
        detail={"strategy": document_key, "checked": label, "sets": [s.pk for s in sets]},
    )
    return found


def required_refusals(
    *, agent: Agent, environment: Environment, document_key: str, body, label: str
) -> list[Finding]:
    """The go-live judgement's question: a `regression_set_failed` refusal for each set
    `environment` requires that `body` does not pass, naming the set and its failing members
    (a member not checkable does not pass either: it is named as such)."""
    sets = list(regression_sets(agent=agent, strategy=document_key).filter(required_in=environment))
    if not sets:
        return []
    try:
        strategy = Strategy.from_body(body)
    except EngineInputError:
        return []  # the runtime's refusals say why the body cannot go live
    refusals = []
    for checked in sets_check(sets=sets, strategy=strategy, label=label):
        if checked.outcome == checks.PASSED:
            continue
        if checked.outcome == checks.EMPTY:
            refusals.append(_empty_refusal(checked.regression_set, environment))
            continue
        bad = [r for r in checked.results if r.outcome != checks.PASSED]
        named = "; ".join(_failing_words(r).rstrip(".") for r in bad[:5])
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        refusals.append(
            Finding(
                "environment",
                REGRESSION_SET_FAILED,
                f"{environment.key} requires the regression set “{checked.regression_set.name}” "
                f"to pass, and {label} does not: {named}{more}.",
            )
        )
    return refusals


def _empty_refusal(regression_set: RegressionSet, environment: Environment) -> Finding:
    """A required set with no member left (all removed, or expired by its retention) checks
    nothing: it refuses rather than let every version through."""
    return Finding(
        "environment",
        REGRESSION_SET_FAILED,
        f"{environment.key} requires the regression set “{regression_set.name}” to pass, and "
        f"it has no members left (removed, or expired after its {regression_set.retention_days} "
        "days of retention): it checks nothing. Keep a request in it again, or have an "
        f"administrator make it not required in {environment.key} (the set's page).",
    )


def _failing_words(result: checks.MemberResult) -> str:
    if result.outcome == checks.NOT_CHECKABLE:
        return f"{result.request_id} not checkable ({result.why_not or 'see the set page'})"
    failed = [r for r in result.results if r.outcome == checks.FAILED]
    return f"{result.request_id}: " + ", ".join(f"{r.words} — {r.message}" for r in failed)


# --- growing a set from many requests (issue 35, item 3) ---------------------------------------
MAX_GROW = 200  # requests added in one step; a larger search is narrowed first


@dataclass(frozen=True)
class Grow:
    """What "add these requests to a set" offers: the search (the trace list's filters, the
    agent forced), the sets of its strategy, the matching requests (newest first, at most
    MAX_GROW), and whether more matched."""

    filters: TraceFilters
    reason_code: str
    sets: list
    traces: list
    more: bool
    query: str


def grow_search(*, user, agent: Agent, query) -> Grow:
    """The requests a saved search (the trace list's filters, plus the pattern card's
    `reason_code`) finds among `agent`'s traces of one strategy: a strategy must be named, as
    a set checks one strategy's versions."""
    filters = TraceFilters.from_query(query)
    filters.agent = agent.key
    reason_code = (query.get("reason_code") or "").strip()
    if reason_code not in wire.REASON_CODES:
        reason_code = ""
    kept = {k: v for k, v in query.items() if k != "csrfmiddlewaretoken" and v}
    text = urlencode({**kept, "agent": agent.key})
    if not filters.strategy:
        return Grow(filters, reason_code, [], [], False, text)
    listing = trace_listing(user=user, filters=filters, per_page=MAX_GROW + 1)
    if reason_code:  # a check of the candidates themselves: reason codes are not kinds
        matches = candidates_match(reason_code=reason_code, source=filters.source)
        walk = traces_walk(listing.object_list, matches)
        found = listing.rows_of(list(islice(walk, MAX_GROW + 1)))
    else:
        found = listing.rows_at(0, MAX_GROW + 1)
    sets = list(regression_sets(agent=agent, strategy=filters.strategy))
    return Grow(filters, reason_code, sets, found[:MAX_GROW], len(found) > MAX_GROW, text)
