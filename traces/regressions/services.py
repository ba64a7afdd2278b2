"""Writes of regression sets: a set created, edited, deleted; a request added to a set or
removed; members past their set's retention dropped. Each is audited in its transaction; each
look at a set's members is in the access log (`regression_look_record`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import msgspec
from context_runtime import replay as engine_replay
from context_runtime.engine import EngineInputError, Strategy
from context_runtime.findings import Finding
from django.db import IntegrityError
from django.db.models import F
from django.utils import timezone

from console.kernel.audit import AccessAction, AuditAction, SystemActor, access_record, audit_record
from console.kernel.errors import ApplicationError, Conflict, ValidationFailed
from console.kernel.limits import MAX_DESCRIPTION_CHARS, MAX_NOTE_CHARS, text_findings
from console.kernel.policy import Capability, check_user_can, check_user_can_manage_regressions
from console.kernel.transactions import service_transaction
from strategies.catalog.models import Agent, Environment
from strategies.documents.models import Document, Version
from traces import replay
from traces.models import Trace
from traces.regressions import checks, selectors
from traces.regressions.models import MAX_RETENTION_DAYS, Member, RegressionSet
from traces.selectors import trace_candidates

MAX_NAME_CHARS = 100
MAX_MEMBER_NOTE_CHARS = 500


class StaleRevision(Conflict):
    code = "stale_revision"


def set_target(regression_set: RegressionSet):
    return ("regression_set", str(regression_set.pk), regression_set.name)


def set_state(regression_set: RegressionSet) -> dict:
    return {
        "name": regression_set.name,
        "strategy": regression_set.document.key,
        "description": regression_set.description,
        "retention_days": regression_set.retention_days,
        "keep_reason": regression_set.keep_reason,
    }


def member_state(member: Member) -> dict:
    """What the audit row says of a member: never its snapshot."""
    return {
        "set": member.set.name,
        "request_id": member.request_id,
        "environment": member.environment_key,
        "strategy_version": member.strategy_version,
        "expectations": [checks.expectation_words(e) for e in member.expectations],
        "note": member.note,
        "expires_at": member.expires_at.isoformat(),
    }


def _refuse(findings: list[Finding], message: str) -> None:
    if findings:
        raise ValidationFailed(message, details=findings)


def _set_findings(*, name, description, retention_days, keep_reason) -> list[Finding]:
    findings: list[Finding] = []
    if not isinstance(name, str) or not name.strip():
        findings.append(Finding("name", "required", "Give the set a name."))
    else:
        findings += text_findings(name, "name", max_chars=MAX_NAME_CHARS)
    findings += text_findings(description or "", "description", max_chars=MAX_DESCRIPTION_CHARS)
    if (
        isinstance(retention_days, bool)
        or not isinstance(retention_days, int)
        or not 1 <= retention_days <= MAX_RETENTION_DAYS
    ):
        findings.append(
            Finding(
                "retention_days", "invalid", f"A whole number of days, 1 to {MAX_RETENTION_DAYS}."
            )
        )
    if not isinstance(keep_reason, str) or not keep_reason.strip():
        findings.append(
            Finding(
                "keep_reason",
                "required",
                "Say why these requests are kept beyond trace retention.",
            )
        )
    else:
        findings += text_findings(keep_reason, "keep_reason", max_chars=MAX_NOTE_CHARS)
    return findings


@service_transaction
def regression_set_create(
    *,
    actor,
    agent: Agent,
    strategy: str,
    name: str,
    description: str = "",
    retention_days: int = 365,
    keep_reason: str,
) -> RegressionSet:
    """A new, empty set of `agent`'s strategy `strategy`. Names are unique per agent."""
    check_user_can_manage_regressions(actor, agent, target=("agent", agent.key, agent.key))
    document = selectors.strategy_of(agent, strategy)
    name = (name or "").strip() if isinstance(name, str) else name
    _refuse(
        _set_findings(
            name=name,
            description=description,
            retention_days=retention_days,
            keep_reason=keep_reason,
        ),
        "That regression set cannot be saved.",
    )
    if RegressionSet.objects.filter(agent=agent, name=name).exists():
        raise ValidationFailed(
            f"{agent.key} has a set named {name} already.",
            details=[Finding("name", "taken", "Another set of this agent has this name.")],
        )
    try:
        regression_set = RegressionSet.objects.create(
            agent=agent,
            document=document,
            name=name,
            description=description or "",
            retention_days=retention_days,
            keep_reason=keep_reason.strip(),
            created_by=actor if getattr(actor, "pk", None) else None,
        )
    except IntegrityError as exc:  # a concurrent create of the same name: the database decides
        raise ValidationFailed(
            f"{agent.key} has a set named {name} already.",
            details=[Finding("name", "taken", "Another set of this agent has this name.")],
        ) from exc
    audit_record(
        actor=actor,
        action=AuditAction.REGRESSION_SET_CREATE,
        target=set_target(regression_set),
        agent=agent,
        after=set_state(regression_set),
    )
    return regression_set


EDITABLE = ("name", "description", "retention_days", "keep_reason")


@service_transaction(durable=True)
def regression_set_update(
    *, actor, regression_set: RegressionSet, revision: int, changes: dict
) -> RegressionSet:
    """Edit a set's name, description, retention or reason. `revision`: the one the editor
    read (a stale one is 409 with the current state). A new retention applies to every member
    (kept `retention_days` from when it was added)."""
    agent = regression_set.agent
    check_user_can_manage_regressions(actor, agent, target=set_target(regression_set))
    locked = (
        RegressionSet.objects.select_for_update()
        .select_related("document")
        .get(pk=regression_set.pk)
    )
    if locked.revision != revision:
        raise StaleRevision(
            "Someone changed this set since you read it; here it is as it is now.",
            extra={"current": {**set_state(locked), "revision": locked.revision}},
        )
    before = set_state(locked)
    merged = {**before, **{k: v for k, v in changes.items() if k in EDITABLE}}
    if isinstance(merged["name"], str):
        merged["name"] = merged["name"].strip()
    _refuse(
        _set_findings(
            name=merged["name"],
            description=merged["description"],
            retention_days=merged["retention_days"],
            keep_reason=merged["keep_reason"],
        ),
        "That change cannot be saved.",
    )
    if (
        merged["name"] != locked.name
        and RegressionSet.objects.filter(agent=agent, name=merged["name"]).exists()
    ):
        raise ValidationFailed(
            f"{agent.key} has a set named {merged['name']} already.",
            details=[Finding("name", "taken", "Another set of this agent has this name.")],
        )
    for name in EDITABLE:
        setattr(locked, name, merged[name])
    locked.revision += 1
    locked.save()
    if before["retention_days"] != locked.retention_days:
        locked.members.update(expires_at=F("added_at") + timedelta(days=locked.retention_days))
    audit_record(
        actor=actor,
        action=AuditAction.REGRESSION_SET_UPDATE,
        target=set_target(locked),
        agent=agent,
        before=before,
        after=set_state(locked),
    )
    return locked


@service_transaction(durable=True)
def regression_set_require(
    *, actor, regression_set: RegressionSet, environments: list[str]
) -> RegressionSet:
    """Name the environments where a version goes live only when it passes this set (the
    go-live judgement asks: publish, approval, rollout start). An environment's rules are
    the catalog's: the right to manage it (admin). A set with no member cannot be required
    (it would pass everything): a field error, nothing saved."""
    agent = regression_set.agent
    check_user_can(
        actor,
        Capability.MANAGE_CATALOG,
        agent,
        target=set_target(regression_set),
        message="Requiring a set in an environment is an environment's rule: it needs the "
        "permission to manage agents and environments.",
    )
    locked = RegressionSet.objects.select_for_update().get(pk=regression_set.pk)
    keys = list(dict.fromkeys(k for k in environments if isinstance(k, str)))
    found = {e.key: e for e in Environment.objects.filter(key__in=keys)}
    findings = [
        Finding(f"required_in[{i}]", "unknown_environment", f"No environment {key}.")
        for i, key in enumerate(keys)
        if key not in found
    ]
    if keys and not locked.members.exists():
        findings.append(
            Finding(
                "required_in",
                "empty_set",
                "This set keeps no request yet: required, it would pass every version. Keep a "
                "request in it first.",
            )
        )
    _refuse(findings, "The set cannot be required there.")
    before = sorted(locked.required_in.values_list("key", flat=True))
    locked.required_in.set([found[k] for k in keys])
    after = sorted(keys)
    if before != after:
        audit_record(
            actor=actor,
            action=AuditAction.REGRESSION_SET_UPDATE,
            target=set_target(locked),
            agent=agent,
            before={"required_in": before},
            after={"required_in": after},
        )
    return locked


@service_transaction(durable=True)
def regression_set_delete(*, actor, regression_set: RegressionSet) -> None:
    """Delete a set and its members (audited with how many)."""
    agent = regression_set.agent
    check_user_can_manage_regressions(actor, agent, target=set_target(regression_set))
    before = {**set_state(regression_set), "members": regression_set.members.count()}
    target = set_target(regression_set)
    regression_set.delete()
    audit_record(
        actor=actor,
        action=AuditAction.REGRESSION_SET_DELETE,
        target=target,
        agent=agent,
        before=before,
    )


# --- members --------------------------------------------------------------------------------------
def _versions(document: Document) -> dict[int, Version]:
    return {v.number: v for v in Version.objects.filter(document=document).order_by("number")}


def snapshot_of(trace: Trace, recorded: Strategy) -> dict:
    """What a member keeps of its trace: the selection block and the candidates in their wire
    form with their replay fields (never a body), the recorded outcome, and the sources the
    recorded version read (the providers its runtime asked)."""
    candidates = [c.wire for c in trace_candidates(trace)]
    return {
        "selection": msgspec.to_builtins(replay.selection_info(trace)),
        "candidates": msgspec.to_builtins(candidates),
        "status": trace.status,
        "degradation": trace.degradation,
        "input_tokens": None if trace.input_estimate is None else int(trace.input_estimate),
        "sources": sorted(recorded.sources),
        "references": {},
    }


def _not_keepable(message: str, path: str = "request_id"):
    return ValidationFailed(
        message, code="not_replayable", details=[Finding(path, "not_replayable", message)]
    )


@service_transaction
def member_add(
    *, actor, regression_set: RegressionSet, trace: Trace, expectations, note: str
) -> Member:
    """Keep `trace`'s request in `regression_set` with its expectations and a note (a ticket
    reference). The set must be of the trace's agent and strategy; each expectation is judged
    against the version the request used and the strategy's current version."""
    agent = regression_set.agent
    check_user_can_manage_regressions(actor, agent, target=set_target(regression_set))
    document = regression_set.document
    if trace.agent_id != agent.pk or trace.strategy != document.key:
        raise ValidationFailed(
            f"{regression_set.name} keeps requests of {agent.key}'s {document.key}; "
            f"{trace.request_id} is not one.",
            code="wrong_set",
            details=[
                Finding(
                    "set",
                    "wrong_set",
                    f"Choose a set of {trace.request_id}'s agent and strategy.",
                )
            ],
        )
    if not isinstance(note, str) or not note.strip():
        findings = [Finding("note", "required", "Say why: a ticket reference.")]
    else:
        findings = text_findings(note, "note", max_chars=MAX_MEMBER_NOTE_CHARS)
    _refuse(findings, "The request cannot be kept.")
    why_not = replay.not_replayable_reason(trace)
    if why_not:
        raise _not_keepable(why_not)
    versions = _versions(document)
    recorded_version = versions.get(trace.strategy_version)
    if recorded_version is None:
        raise _not_keepable(
            f"The version this request used (v{trace.strategy_version}) is not in the console: "
            "its decisions cannot be checked against others."
        )
    current_version = versions[max(versions)]
    try:
        recorded = Strategy.from_body(recorded_version.body)
        current = Strategy.from_body(current_version.body)
        snapshot = snapshot_of(trace, recorded)
        wired = msgspec.convert(snapshot["candidates"], type=list[checks.wire.Candidate])
        engine_replay.trace_candidates(wired)
    except (engine_replay.NotReplayable, EngineInputError) as exc:
        raise _not_keepable(f"This request cannot be replayed: {exc}") from exc
    _refuse(
        checks.expectations_findings(
            expectations,
            candidates=wired,
            recorded_sources=recorded.sources,
            current_sources=current.sources,
            versions=versions,
        ),
        "Those expectations cannot be kept.",
    )
    for index, expectation in enumerate(expectations):
        if expectation["kind"] != checks.SAME_AS_RECORDED:
            continue
        number = expectation["version"]
        try:
            if number == trace.strategy_version:
                facts = checks.Facts.recorded(trace.status, trace.degradation, wired)
            else:
                facts = checks.reference_facts(versions[number].body, snapshot)
        except (engine_replay.NotReplayable, EngineInputError) as exc:
            raise _not_keepable(
                f"v{number} cannot be replayed on this request: {exc}",
                f"expectations[{index}].version",
            ) from exc
        never = sorted(Strategy.from_body(versions[number].body).sources - recorded.sources)
        if never:
            raise _not_keepable(
                f"v{number} reads {', '.join(never)}, which this request never fetched.",
                f"expectations[{index}].version",
            )
        snapshot["references"][str(number)] = checks.facts_dump(facts)
    if Member.objects.filter(
        set=regression_set, environment_key=trace.environment.key, request_id=trace.request_id
    ).exists():
        raise Conflict(
            f"{trace.request_id} is in {regression_set.name} already.",
            code="already_member",
            details=[Finding("request_id", "taken", "Already in this set.")],
        )
    now = timezone.now()
    member = Member.objects.create(
        set=regression_set,
        request_id=trace.request_id,
        environment_key=trace.environment.key,
        occurred_at=trace.occurred_at,
        strategy_version=trace.strategy_version,
        snapshot=snapshot,
        expectations=[dict(e) for e in expectations],
        note=note.strip(),
        added_by=actor if getattr(actor, "pk", None) else None,
        added_at=now,
        expires_at=now + timedelta(days=regression_set.retention_days),
    )
    audit_record(
        actor=actor,
        action=AuditAction.REGRESSION_MEMBER_ADD,
        target=("trace", trace.request_id, trace.request_id),
        agent=agent,
        after=member_state(member),
    )
    return member


@service_transaction(durable=True)
def member_remove(*, actor, member: Member) -> None:
    """Remove a request from its set. Not the last one of a set some environment requires:
    empty, the set would check nothing (409 at `member`; make it not required first). The
    retention's purge cannot be refused: the go-live judgement refuses an empty required set."""
    regression_set = member.set
    check_user_can_manage_regressions(
        actor, regression_set.agent, target=set_target(regression_set)
    )
    # The set locked, so two removals at once cannot both leave it empty.
    locked = RegressionSet.objects.select_for_update().get(pk=regression_set.pk)
    required = sorted(locked.required_in.values_list("key", flat=True))
    if required and not locked.members.exclude(pk=member.pk).exists():
        where = ", ".join(required)
        raise Conflict(
            f"{member.request_id} is the last request of “{locked.name}”, which {where} "
            "requires: empty, the set would check nothing.",
            code="last_member_of_required_set",
            details=[
                Finding(
                    "member",
                    "last_member_of_required_set",
                    f"Make the set not required in {where} first (an administrator, on the "
                    "set's page), or keep another request in it.",
                )
            ],
            extra={"current": {"required_in": required, "members": 1}},
        )
    before = member_state(member)
    member.delete()
    audit_record(
        actor=actor,
        action=AuditAction.REGRESSION_MEMBER_REMOVE,
        target=("trace", before["request_id"], before["request_id"]),
        agent=regression_set.agent,
        before=before,
    )


@service_transaction(durable=True)
def members_purge_expired(*, now: datetime | None = None) -> int:
    """Drop the members past their set's retention: one audit row per set, naming them."""
    now = now or timezone.now()
    expired = list(
        Member.objects.filter(expires_at__lte=now)
        .select_related("set__agent", "set__document")
        .order_by("set_id", "id")
    )
    by_set: dict[int, list[Member]] = {}
    for member in expired:
        by_set.setdefault(member.set_id, []).append(member)
    for members in by_set.values():
        regression_set = members[0].set
        Member.objects.filter(pk__in=[m.pk for m in members]).delete()
        audit_record(
            actor=SystemActor("retention"),
            action=AuditAction.REGRESSION_MEMBER_EXPIRE,
            target=set_target(regression_set),
            agent=regression_set.agent,
            before={
                "members": [f"{m.request_id} ({m.environment_key})" for m in members[:200]],
                "count": len(members),
                "retention_days": regression_set.retention_days,
                "keep_reason": regression_set.keep_reason,
            },
        )
    return len(expired)


def regression_look_record(
    *, actor, checked: bool = False, regression_set: RegressionSet | None, agent, detail
) -> None:
    """One line in the access log for a look at kept requests: a set read (its page, its
    members), or sets checked against a version (the check API and command)."""
    action = AccessAction.REGRESSION_SET_CHECK if checked else AccessAction.REGRESSION_SET_VIEW
    access_record(
        actor=actor,
        action=action,
        target=set_target(regression_set) if regression_set is not None else None,
        agent=agent,
        detail=detail,
    )


@service_transaction(durable=True)
def trace_keep(*, actor, trace: Trace, set_id, new_set: dict, expectations, note: str) -> Member:
    """The trace page's one step: keep `trace`'s request in the set `set_id`, or in a new set
    (`new_set`: name, keep_reason, retention_days) made in the same transaction — refused,
    neither is saved."""
    agent = trace.agent
    check_user_can_manage_regressions(
        actor, agent, target=("trace", trace.request_id, trace.request_id)
    )
    if str(set_id).isdigit():
        regression_set = (
            RegressionSet.objects.select_related("agent", "document")
            .filter(pk=int(set_id), agent=agent)
            .first()
        )
        if regression_set is None:
            raise ValidationFailed(
                "Choose one of this agent's sets, or a new one.",
                details=[Finding("set", "unknown_set", "Not a set of this agent.")],
            )
    else:
        days = str(new_set.get("retention_days") or "365").strip()
        regression_set = regression_set_create(
            actor=actor,
            agent=agent,
            strategy=trace.strategy,
            name=new_set.get("name", ""),
            retention_days=int(days) if days.isascii() and days.isdigit() else days,
            keep_reason=new_set.get("keep_reason", ""),
        )
    return member_add(
        actor=actor,
        regression_set=regression_set,
        trace=trace,
        expectations=expectations,
        note=note,
    )


@dataclass(frozen=True)
class Grown:
    """What one "add these requests" step did: the members added, and each request not
    added with why (kept already, cannot be replayed, an expectation it cannot meet)."""

    added: list
    skipped: list  # (request_id, environment key, message)


def members_grow(*, actor, regression_set: RegressionSet, traces, expectations, note: str) -> Grown:
    """Keep each of `traces` (a saved search's, at most selectors.MAX_GROW) in the set with
    the same expectations and note, each as `member_add` keeps one (its own transaction and
    audit row): a request refused is reported, not fatal. Refused as a whole — nothing saved
    — when the expectations or the note are wrong for every request, or none is given."""
    check_user_can_manage_regressions(
        actor, regression_set.agent, target=set_target(regression_set)
    )
    if not traces:
        raise ValidationFailed(
            "The search finds no request to add.",
            details=[Finding("search", "empty", "Change the filters: no request matches.")],
        )
    findings = []
    if not isinstance(note, str) or not note.strip():
        findings.append(Finding("note", "required", "Say why: a ticket reference."))
    if not isinstance(expectations, list) or not expectations:
        findings.append(Finding("expectations", "required", "Give at least one expectation."))
    _refuse(findings, "No request was added.")
    added, skipped = [], []
    for trace in traces:
        try:
            added.append(
                member_add(
                    actor=actor,
                    regression_set=regression_set,
                    trace=trace,
                    expectations=expectations,
                    note=note,
                )
            )
        except ApplicationError as exc:
            said = "; ".join(f"{d.get('path')}: {d.get('message')}" for d in exc.details[:3])
            skipped.append((trace.request_id, trace.environment.key, said or exc.message))
    return Grown(added, skipped)
