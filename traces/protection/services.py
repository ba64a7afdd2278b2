"""Writes for data protection (docs/data-protection.md): an environment's redaction rules
(audited, for its admins), the ruleset ingest applies (fail-closed), and erasure by principal
(audited, with a receipt).
"""

from __future__ import annotations

import hashlib

from context_runtime.findings import Finding
from django.db import connection

from console.kernel.audit import AuditAction, audit_record
from console.kernel.errors import Conflict, NotFound, Unavailable, ValidationFailed
from console.kernel.policy import check_user_can_manage_data_protection
from console.kernel.sessions import require_recent_authentication
from console.kernel.transactions import service_transaction
from strategies.catalog.models import Environment
from traces.models import RequestKey, Snapshot, Trace
from traces.outcomes.models import Outcome
from traces.protection import detectors, engine
from traces.protection.models import Erasure, RedactionRule

MAX_RULES_PER_ENVIRONMENT = 30


class RedactionUnavailable(Unavailable):
    """The environment's rules could not be loaded or applied: the batch is refused, nothing
    stored; the runtime retries (its spool keeps the batch)."""

    code = "redaction_unavailable"


# --- rules -------------------------------------------------------------------------------------
def rule_state(rule: RedactionRule) -> dict:
    return {
        "key": rule.key,
        "detector": rule.detector,
        "pattern": rule.pattern,
        "action": rule.action,
    }


def rule_target(rule: RedactionRule) -> tuple:
    return ("redaction_rule", rule.pk, f"{rule.environment.key}: {rule.key}")


def rule_findings(*, key: str, detector: str, pattern: str, action: str) -> list[Finding]:
    """Why a rule cannot be saved, per field; [] when it can."""
    found = []
    if detector not in RedactionRule.Detector.values:
        found.append(Finding("detector", "invalid_choice", "Choose a detector."))
    if action not in RedactionRule.Action.values:
        found.append(Finding("action", "invalid_choice", "Choose redact or refuse."))
    if detector == detectors.CUSTOM:
        if not key or not _slug(key):
            found.append(Finding("key", "invalid", "Name it with 1–50 letters, digits, - or _."))
        problem = detectors.custom_pattern_problem(pattern)
        if problem:
            found.append(Finding("pattern", "invalid_pattern", problem))
    elif pattern:
        found.append(Finding("pattern", "not_allowed", "Only a custom rule takes a pattern."))
    return found


def _slug(key: str) -> bool:
    return len(key) <= 50 and all(ch.isascii() and (ch.isalnum() or ch in "-_") for ch in key)


@service_transaction
def redaction_rule_add(
    *, environment: Environment, detector: str, action: str, actor, key: str = "", pattern: str = ""
) -> RedactionRule:
    """Add a rule to `environment`: a built-in detector (named after it) or a custom pattern
    (named by `key`). A pattern that does not compile, is too slow or would match everything
    is refused, and nothing is saved."""
    check_user_can_manage_data_protection(
        actor, target=("environment", environment.pk, environment.key)
    )
    key = (key or "").strip() if detector == detectors.CUSTOM else detector
    pattern = pattern or ""
    found = rule_findings(key=key, detector=detector, pattern=pattern, action=action)
    if found:
        raise ValidationFailed("That redaction rule cannot be saved.", details=found)
    environment = Environment.objects.select_for_update().get(pk=environment.pk)
    rules = RedactionRule.objects.filter(environment=environment)
    if rules.filter(key=key).exists():
        raise Conflict(
            f"{environment.key} already has a rule named {key}.",
            code="rule_exists",
            details=[Finding("key", "taken", "Already a rule here; remove it first.")],
        )
    if rules.count() >= MAX_RULES_PER_ENVIRONMENT:
        raise ValidationFailed(
            f"An environment has at most {MAX_RULES_PER_ENVIRONMENT} redaction rules.",
            details=[Finding("key", "too_many", "Remove a rule first.")],
        )
    rule = RedactionRule.objects.create(
        environment=environment, key=key, detector=detector, pattern=pattern, action=action
    )
    audit_record(
        actor=actor,
        action=AuditAction.REDACTION_RULE_CREATE,
        target=rule_target(rule),
        after=rule_state(rule),
    )
    return rule


@service_transaction
def redaction_rule_remove(*, rule: RedactionRule, actor) -> None:
    check_user_can_manage_data_protection(actor, target=rule_target(rule))
    before = rule_state(rule)
    target = rule_target(rule)
    rule.delete()
    audit_record(
        actor=actor, action=AuditAction.REDACTION_RULE_DELETE, target=target, before=before
    )


def ruleset_compile(rows) -> engine.Ruleset:
    """The rules as ingest applies them. Raises on a rule that cannot be used."""
    rules = []
    for key, detector, pattern, action in rows:
        if detector not in RedactionRule.Detector.values or action not in (
            engine.REDACT,
            engine.REFUSE,
        ):
            raise ValueError(f"rule {key!r}: unknown detector or action")
        name = key if detector == detectors.CUSTOM else detector
        rules.append(engine.Rule(key, detectors.Detector(name, detector, pattern), action))
    return engine.Ruleset(tuple(rules))


def ruleset_load(environment_id: int) -> engine.Ruleset:
    """The environment's ruleset, fail-closed: a rule that cannot be read or compiled (a
    pattern saved before a check existed, a database error) raises RedactionUnavailable, so
    the batch is refused with 503 and retried — never stored unredacted."""
    try:
        rows = RedactionRule.objects.filter(environment_id=environment_id).values_list(
            "key", "detector", "pattern", "action"
        )
        return ruleset_compile(list(rows))
    except Exception as exc:  # fail closed: whatever went wrong, nothing is stored raw
        raise RedactionUnavailable(
            "The environment's redaction rules could not be loaded; nothing was stored. "
            "Retry later (an admin must fix the rules)."
        ) from exc


def rules_preview(environment: Environment, text: str) -> tuple[str, dict, str | None]:
    """The environment's rules on `text`, as a free-text field would be stored."""
    try:
        ruleset = ruleset_load(environment.pk)
    except RedactionUnavailable as exc:
        return "", {}, exc.message
    return engine.preview(text, ruleset)


# --- erasure by principal ----------------------------------------------------------------------
def principal_digest(principal: str) -> str:
    return hashlib.sha256(principal.encode()).hexdigest()


@service_transaction
def principal_erase(*, principal: str, reference: str, actor) -> Erasure:
    """Delete every trace of `principal` (in every environment), their candidates, request
    keys and snapshots, and the outcomes reported for those requests; audited, with a receipt
    (counts per table, ids). The receipt and the audit row name the principal by its digest
    only."""
    check_user_can_manage_data_protection(actor, target=("principal", None, "erasure"))
    principal = (principal or "").strip()
    reference = (reference or "").strip()
    found = []
    if not principal:
        found.append(Finding("principal", "required", "Name the principal to erase."))
    if not reference:
        found.append(
            Finding("reference", "required", "Give the data-protection request's reference.")
        )
    elif len(reference) > 200:
        found.append(Finding("reference", "too_long", "At most 200 characters."))
    if found:
        raise ValidationFailed("The erasure cannot run.", details=found)
    require_recent_authentication(actor, action="erase a principal's traces")
    traces = list(
        Trace.objects.filter(principal=principal).values_list(
            "id", "environment_id", "request_id", "occurred_at"
        )
    )
    if not traces:
        raise NotFound(
            "No trace names that principal (an erasure that finds nothing removes nothing).",
            code="principal_not_found",
        )
    trace_ids = [t[0] for t in traces]
    by_environment: dict[int, list[str]] = {}
    for _, environment_id, request_id, _ in traces:
        by_environment.setdefault(environment_id, []).append(request_id)
    outcome_ids: list[int] = []
    for environment_id, request_ids in by_environment.items():
        outcome_ids += list(
            Outcome.objects.filter(
                environment_id=environment_id, request_id__in=request_ids
            ).values_list("id", flat=True)
        )
    snapshot_ids = list(
        Snapshot.objects.filter(trace_id__in=trace_ids).values_list("id", flat=True)
    )
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM traces_candidate WHERE trace_id = ANY(%s)", [trace_ids])
        candidates = cursor.rowcount
    Outcome.objects.filter(id__in=outcome_ids).delete()
    Snapshot.objects.filter(id__in=snapshot_ids).delete()
    request_keys = 0
    for environment_id, request_ids in by_environment.items():
        request_keys += RequestKey.objects.filter(
            environment_id=environment_id, request_id__in=request_ids
        )._raw_delete(RequestKey.objects.db)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM traces_trace WHERE id = ANY(%s)", [trace_ids])
        trace_rows = cursor.rowcount
    counts = {
        "traces_trace": trace_rows,
        "traces_candidate": candidates,
        "traces_snapshot": len(snapshot_ids),
        "traces_request_key": request_keys,
        "outcomes_outcome": len(outcome_ids),
    }
    removed = {
        "traces_trace": sorted(trace_ids),
        "traces_snapshot": sorted(snapshot_ids),
        "outcomes_outcome": sorted(outcome_ids),
    }
    erasure = Erasure.objects.create(
        principal_digest=principal_digest(principal),
        reference=reference,
        requested_by=actor if getattr(actor, "pk", None) else None,
        requested_by_name=getattr(actor, "username", "") or "system",
        counts=counts,
        removed=removed,
    )
    audit_record(
        actor=actor,
        action=AuditAction.PRINCIPAL_ERASE,
        target=("erasure", erasure.pk, reference),
        after={"principal_sha256": erasure.principal_digest, "counts": counts},
    )
    return erasure


def erasure_receipt(erasure: Erasure) -> dict:
    """The receipt, as downloaded: what was removed, when, by whom, for which request."""
    return {
        "erasure": erasure.pk,
        "reference": erasure.reference,
        "principal_sha256": erasure.principal_digest,
        "requested_by": erasure.requested_by_name,
        "created_at": erasure.created_at.isoformat(),
        "counts": erasure.counts,
        "removed": erasure.removed,
    }
