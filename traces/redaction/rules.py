"""An environment's redaction rules (audited, for its admins) and the ruleset ingest applies,
fail-closed (docs/data-protection.md)."""

from __future__ import annotations

from collections import Counter

from context_runtime.findings import Finding
from django.db import DatabaseError

from console.kernel.audit import AuditAction, audit_record
from console.kernel.errors import Conflict, Unavailable, ValidationFailed
from console.kernel.policy import check_user_can_manage_data_protection
from console.kernel.transactions import service_transaction
from strategies.catalog.models import Environment
from traces.models import RedactionRule
from traces.redaction import detectors, engine, fields

MAX_RULES_PER_ENVIRONMENT = 30


class RedactionUnavailable(Unavailable):
    """The environment's rules could not be loaded or applied: the batch is refused, nothing
    stored; the runtime retries (its spool keeps the batch)."""

    code = "redaction_unavailable"


def not_applied() -> RedactionUnavailable:
    """The refusal of a batch whose rules failed while being applied (raise it `from` the
    fault, which the log keeps)."""
    return RedactionUnavailable(
        "The environment's redaction rules could not be applied; nothing was stored. Retry later."
    )


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
        elif key == "preview":
            found.append(Finding("key", "reserved", "That name is reserved; choose another."))
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
    except DatabaseError:
        raise  # the database itself: the API's 503 database_unavailable says so
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


def runtime_report_redact(environment_id: int, body, text: tuple[str, ...]):
    """A heartbeat's or manifest's body (decoded JSON) under the environment's rules: the
    top-level `text` fields (the runtime's name) redacted, personal data in any other string
    or key refused (400 personal_data). Fail-closed (503). Registered with
    strategies.catalog.dependents at app start; strategies never imports traces."""
    ruleset = ruleset_load(environment_id)
    if not ruleset or not isinstance(body, dict):
        return body
    counts: Counter = Counter()

    def identifiers(value, path: str) -> None:
        if isinstance(value, str):
            if value:
                ruleset.text(value, path, fields.IDENTIFIER, counts)
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and key:
                    ruleset.text(key, path + "{}", fields.IDENTIFIER, counts)
                identifiers(item, f"{path}.{key}" if path else str(key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                identifiers(item, f"{path}[{i}]")

    try:
        out = dict(body)
        for name, value in body.items():
            if name in text and isinstance(value, str):
                out[name] = ruleset.text(value, name, fields.TEXT, counts)
            else:
                identifiers(value, name)
    except engine.Refused as exc:
        raise ValidationFailed(
            "The report holds personal data; nothing was recorded.",
            code=engine.PERSONAL_DATA,
            details=[exc.finding],
        ) from None
    except Exception as exc:
        raise not_applied() from exc
    return out
