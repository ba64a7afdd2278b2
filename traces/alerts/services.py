"""Writes of standing alerts: a rule's creation and change, silences (each audited, in the
service's transaction), and the evaluator's tick (`alerts_evaluate`), which moves each
enabled rule through rules.step and sends what rules.owed says (`alert.fired` /
`alert.resolved`) through the environment's signed webhooks (strategies.delivery's outbox);
under a silence it holds that back, and sends it once the silence has ended."""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import quote

from context_runtime.findings import Finding
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.http import RFC3986_SUBDELIMS, urlencode

from console.kernel.audit import AuditAction, audit_record
from console.kernel.errors import Conflict, ValidationFailed
from console.kernel.policy import check_user_can_manage_alerts
from console.kernel.transactions import service_transaction
from strategies.catalog.models import Environment
from strategies.delivery import webhooks
from traces.alerts import rules, selectors
from traces.alerts.models import Alert, AlertRule, Level, Silence

log = logging.getLogger(__name__)

FIRED_EVENT = "alert.fired"
RESOLVED_EVENT = "alert.resolved"
MAX_SILENCE = timedelta(days=30)
# One tick at a time: a tick that finds another running skips (the next one judges again).
_TICK_LOCK = 0x616C657274  # "alert"


def _name(actor) -> str:
    return getattr(actor, "username", "") or "system"


def rule_state(rule: AlertRule) -> dict:
    """A rule as the audit log, the API and the pages read it (thresholds as fractions)."""
    return {
        "id": rule.pk,
        "name": rule.name,
        "environment": rule.environment.key,
        "metric": rule.metric,
        "comparison": rule.comparison,
        "warning_threshold": rule.warning_threshold,
        "alert_threshold": rule.alert_threshold,
        "window_minutes": rule.window_minutes,
        "min_traffic": rule.min_traffic,
        "baseline": rule.baseline,
        "no_data_minutes": rule.no_data_minutes,
        "enabled": rule.enabled,
        "revision": rule.revision,
    }


def _environment(key: str, found: list[Finding]) -> Environment | None:
    environment = Environment.objects.filter(key=(key or "").strip()).first()
    if environment is None:
        found.append(Finding("environment", "not_found", "Choose one of the environments."))
    return environment


def _refuse(found: list[Finding]) -> None:
    if found:
        raise ValidationFailed("The alert rule was not saved.", details=found)


# --- rules -------------------------------------------------------------------------------------
@service_transaction
def rule_create(
    *, agent, environment: str, values: dict, actor, percent: bool = False
) -> AlertRule:
    """A new rule of `agent` in `environment`; refused (nothing saved) with each finding at
    its field. Audited."""
    check_user_can_manage_alerts(actor, agent, target=("alert_rule", None, "create"))
    clean, found = rules.rule_check(values, percent=percent)
    env = _environment(environment, found)
    if (
        env is not None
        and AlertRule.objects.filter(agent=agent, environment=env, name=clean["name"]).exists()
    ):
        found.append(Finding("name", "duplicate", f"{env.key} already has a rule of that name."))
    _refuse(found)
    try:
        with transaction.atomic():
            rule = AlertRule.objects.create(
                agent=agent, environment=env, created_by=_name(actor), **clean
            )
    except IntegrityError:  # the same name, saved meanwhile: the database decides
        _refuse([Finding("name", "duplicate", f"{env.key} already has a rule of that name.")])
    audit_record(
        actor=actor,
        action=AuditAction.ALERT_RULE_CREATE,
        target=("alert_rule", rule.pk, rule.name),
        agent=agent,
        after=rule_state(rule),
    )
    return rule


@service_transaction
def rule_update(
    *, rule: AlertRule, values: dict, actor, revision: int | None = None, percent: bool = False
) -> AlertRule:
    """Change a rule's settings (those given; the others stay). `revision`: the one the
    client read — a stale one is refused (409 with the current state). Switching a rule off
    resolves its open alert (nothing sent). Audited."""
    check_user_can_manage_alerts(actor, rule.agent, target=("alert_rule", rule.pk, rule.name))
    rule = (
        AlertRule.objects.select_for_update().select_related("environment", "agent").get(pk=rule.pk)
    )
    if revision is not None and revision != rule.revision:
        raise Conflict(
            "The rule changed since you loaded it.",
            code="stale_revision",
            extra={"current": rule_state(rule)},
        )
    before = rule_state(rule)
    current = {name: getattr(rule, name) for name in rules.FIELDS}
    if percent:
        for name in ("warning_threshold", "alert_threshold"):
            if current[name] is not None and (
                rules.METRICS[rule.metric].kind == rules.RATE or rule.baseline
            ):
                current[name] *= 100
    clean, found = rules.rule_check({**current, **values}, percent=percent)
    if (
        clean["name"] != rule.name
        and AlertRule.objects.filter(
            agent=rule.agent, environment=rule.environment, name=clean["name"]
        ).exists()
    ):
        found.append(
            Finding("name", "duplicate", "This environment already has a rule of that name.")
        )
    _refuse(found)
    for name, value in clean.items():
        setattr(rule, name, value)
    rule.revision += 1
    if not rule.enabled:
        _resolve_open(rule, because="The rule was switched off.", now=timezone.now())
        rule.level, rule.level_since = Level.UNKNOWN, None
    rule.save()
    audit_record(
        actor=actor,
        action=AuditAction.ALERT_RULE_UPDATE,
        target=("alert_rule", rule.pk, rule.name),
        agent=rule.agent,
        before=before,
        after=rule_state(rule),
    )
    return rule


def _resolve_open(rule: AlertRule, *, because: str, now: datetime) -> None:
    Alert.objects.filter(rule=rule, resolved_at=None).update(
        resolved_at=now, resolved_because=because, held=False
    )


# --- silences ------------------------------------------------------------------------------------
@service_transaction
def silence_create(*, agent, values: dict, actor, now: datetime | None = None) -> Silence:
    """Silence the alerts of one rule, or of the agent in one environment or all, until
    `ends_at` (required, in the future, at most 30 days ahead), with a reason (required).
    Alerts are still recorded, marked silenced, but not sent: held, and sent (what is still
    owed) at the first tick after the silence ends. Audited."""
    check_user_can_manage_alerts(actor, agent, target=("alert_silence", None, "create"))
    now = now or timezone.now()
    found: list[Finding] = []
    reason = str(values.get("reason") or "").strip()
    if not reason:
        found.append(Finding("reason", "required", "Say why, e.g. “order service maintenance”."))
    elif len(reason) > 500:
        found.append(Finding("reason", "too_long", "At most 500 characters."))
    ends_at = values.get("ends_at")
    if isinstance(ends_at, str):
        try:
            ends_at = parse_datetime(ends_at.strip())
        except ValueError:
            ends_at = None
        if ends_at is not None and timezone.is_naive(ends_at):
            ends_at = timezone.make_aware(ends_at, timezone.get_current_timezone())
    if not isinstance(ends_at, datetime):
        found.append(Finding("ends_at", "required", "Say when it ends, e.g. 2026-12-07T18:00."))
    elif ends_at <= now:
        found.append(Finding("ends_at", "in_the_past", "The end must be in the future."))
    elif ends_at > now + MAX_SILENCE:
        found.append(Finding("ends_at", "too_far", "At most 30 days ahead."))
    environment = None
    if values.get("environment"):
        environment = _environment(str(values["environment"]), found)
    rule = None
    if values.get("rule"):
        try:
            rule = AlertRule.objects.filter(agent=agent, pk=int(values["rule"])).first()
        except (TypeError, ValueError):
            rule = None
        if rule is None:
            found.append(Finding("rule", "not_found", "Choose one of this agent's rules."))
        elif environment is not None and rule.environment_id != environment.pk:
            found.append(
                Finding("rule", "other_environment", "That rule is of another environment.")
            )
        else:
            environment = rule.environment
    if found:
        raise ValidationFailed("The silence was not saved.", details=found)
    silence = Silence.objects.create(
        agent=agent,
        environment=environment,
        rule=rule,
        reason=reason,
        ends_at=ends_at,
        created_by=_name(actor),
    )
    audit_record(
        actor=actor,
        action=AuditAction.ALERT_SILENCE_CREATE,
        target=("alert_silence", silence.pk, rule.name if rule else "all rules"),
        agent=agent,
        after=silence_state(silence),
    )
    return silence


def silence_state(silence: Silence) -> dict:
    return {
        "id": silence.pk,
        "environment": silence.environment.key if silence.environment_id else None,
        "rule": silence.rule_id,
        "reason": silence.reason,
        "ends_at": silence.ends_at.isoformat(),
        "created_by": silence.created_by,
        "lifted_at": silence.lifted_at.isoformat() if silence.lifted_at else None,
    }


@service_transaction
def silence_lift(*, silence: Silence, actor, now: datetime | None = None) -> Silence:
    """End a silence now: the next tick sends what it held back (rules.owed). Audited."""
    check_user_can_manage_alerts(actor, silence.agent, target=("alert_silence", silence.pk, "lift"))
    before = silence_state(silence)
    if silence.lifted_at is None:
        silence.lifted_at = now or timezone.now()
        silence.lifted_by = _name(actor)
        silence.save(update_fields=["lifted_at", "lifted_by"])
    audit_record(
        actor=actor,
        action=AuditAction.ALERT_SILENCE_LIFT,
        target=("alert_silence", silence.pk, "lift"),
        agent=silence.agent,
        before=before,
        after=silence_state(silence),
    )
    return silence


# --- the evaluator's tick --------------------------------------------------------------------------
@dataclass
class Tick:
    """What one evaluation did."""

    rules: int = 0
    skipped: bool = False
    fired: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)
    changed: list[int] = field(default_factory=list)
    deliveries: list[int] = field(default_factory=list)


@dataclass
class _Move:
    """One rule's judgement in a tick and what it does to its alert (rules.step)."""

    rule: AlertRule
    judged: rules.Judgement
    alert: Alert | None
    action: str


def alerts_evaluate(*, now: datetime | None = None) -> Tick:
    """Judge every enabled rule on the counters up to `now` (the beat task passes the
    clock; tests pass their own) and move its alert: fire, raise or lower a level, resolve;
    then send what is owed (rules.owed) — also what a silence that has ended held back.
    Reads: the rules, open and held alerts and silences, one query for every rule's counter
    minutes, one for the baselines when a rule has one; at fire time at most two for every
    firing rule's sample requests. Writes in batches: one UPDATE of the rules whose level
    changed, one INSERT of the alerts fired, one UPDATE of the alerts changed, one INSERT of
    the outbox rows (queued once after commit). One tick at a time (an advisory lock: a
    concurrent tick skips)."""
    now = now or timezone.now()
    tick = Tick()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [_TICK_LOCK])
            if not cursor.fetchone()[0]:
                tick.skipped = True
                return tick
        found = list(AlertRule.objects.filter(enabled=True).select_related("agent", "environment"))
        tick.rules = len(found)
        opens, held = selectors.open_and_held({r.pk for r in found})
        if not found and not held:
            return tick
        for rule in found:  # the payloads read these: no query per alert
            if rule.pk in opens:
                alert = opens[rule.pk]
                alert.rule, alert.agent, alert.environment = rule, rule.agent, rule.environment
        silences = selectors.silences_active(now=now)
        spans: dict[tuple[int, int], int] = {}
        for rule in found:
            key = (rule.agent_id, rule.environment_id)
            spans[key] = max(spans.get(key, 1), rule.window_minutes, rule.no_data_minutes or 1)
        strategies = selectors.strategies_of(r.agent_id for r in found)
        minutes = selectors.counter_minutes(spans, now=now, strategies=strategies)
        need_baseline = {(r.agent_id, r.environment_id) for r in found if r.baseline}
        base = selectors.baselines(
            need_baseline, before=now - timedelta(hours=1), strategies=strategies
        )
        until = selectors.minute_of(now)
        moves, leveled = [], []
        for rule in found:
            counts = minutes[(rule.agent_id, rule.environment_id)]
            recent = None
            if rule.no_data_minutes:
                recent = counts.window(until, rule.no_data_minutes)["traces"]
            judged = rules.judge(
                rules.spec_of(rule),
                counts.window(until, rule.window_minutes),
                recent_traces=recent,
                baseline=base.get((rule.agent_id, rule.environment_id)),
            )
            if judged.level != rules.UNKNOWN and judged.level != rule.level:
                rule.level, rule.level_since = judged.level, now
                leveled.append(rule)
            alert = opens.get(rule.pk)
            action = rules.step(alert.current_level if alert else None, judged.level)
            if action is not None:
                moves.append(_Move(rule, judged, alert, action))
        _levels_save(leveled, now=now)
        touched = _moves_apply(moves, now=now, silences=silences, tick=tick, strategies=strategies)
        # What a silence held back: alerts not moved this tick, the silence maybe ended.
        moved = {id(alert) for alert, _ in touched}
        for alert in held:
            if id(alert) not in moved and not selectors.silence_covering(alert.rule, silences):
                touched.append((alert, None))
        sending = _owed(touched, silences=silences)
        _alerts_save([alert for alert, _ in touched], tick=tick)
        tick.deliveries += _deliver(sending, now=now)
    return tick


_LEVELS_UPDATE = """
UPDATE alerts_rule r SET level = v.level, level_since = %(now)s
FROM unnest(%(ids)s::bigint[], %(levels)s::text[]) AS v(id, level)
WHERE r.id = v.id
"""


def _levels_save(leveled: list[AlertRule], *, now) -> None:
    """The rules' new standing, in one UPDATE."""
    if leveled:
        with connection.cursor() as cursor:
            cursor.execute(
                _LEVELS_UPDATE,
                {"ids": [r.pk for r in leveled], "levels": [r.level for r in leveled], "now": now},
            )


def _moves_apply(moves: list[_Move], *, now, silences, tick: Tick, strategies) -> list:
    """Fire, raise, lower and resolve the alerts of `moves` in memory (the fired ones' sample
    requests read in at most two queries; nothing written yet: `_alerts_save`). Returns
    [(alert, judgement)] of every alert moved."""
    fires = [m for m in moves if m.action == rules.FIRE]
    sampled = selectors.sample_requests_many(
        [(m.rule, *_window(m.rule, now)) for m in fires if m.judged.level != rules.NO_DATA]
    )
    samples = iter(sampled)
    touched = []
    for m in moves:
        alert, judged = m.alert, m.judged
        if m.action == rules.FIRE:
            request_ids, document = [], ""
            if judged.level != rules.NO_DATA:
                request_ids, document = next(samples)
            alert = _alert_new(
                m.rule,
                judged,
                now=now,
                request_ids=request_ids,
                document=document or min(strategies.get(m.rule.agent_id, ()), default=""),
                silenced=selectors.silence_covering(m.rule, silences) is not None,
            )
        elif m.action == rules.RESOLVE:
            alert.resolved_at = now
            alert.resolved_because = judged.words
            alert.changes = [*alert.changes, _change(now, rules.OK, judged.value)]
            tick.resolved.append(alert.pk)
        else:  # RAISE / LOWER
            alert.current_level = judged.level
            if rules.higher(judged.level, alert.level):
                alert.level = judged.level
            alert.changes = [*alert.changes, _change(now, judged.level, judged.value)]
            tick.changed.append(alert.pk)
        touched.append((alert, judged))
    return touched


def _owed(touched: list, *, silences) -> list:
    """What each alert moved (or held) owes (rules.owed: from the level last sent to its
    level now): [(alert, event, judgement)] to send, the alerts' `notified_level` set; under a
    silence, held back instead (`held`) until the silence ends."""
    sending = []
    for alert, judged in touched:
        level = rules.OK if alert.resolved_at else alert.current_level
        event = rules.owed(alert.notified_level, level)
        if selectors.silence_covering(alert.rule, silences) is not None:
            alert.held = alert.held or event is not None
            continue
        if event:
            sending.append((alert, event, judged))
            alert.notified_level = level
        alert.held = False
    return sending


# Every alert a tick changed, in one statement (Django's bulk_update builds a CASE per field
# and row: 0.3 s of Python for 50 alerts).
_ALERTS_UPDATE = """
UPDATE alerts_alert a SET
    resolved_at = v.resolved_at, resolved_because = v.resolved_because,
    current_level = v.current_level, level = v.level, changes = v.changes, held = v.held,
    notified_level = v.notified_level
FROM unnest(%(ids)s::bigint[], %(resolved_at)s::timestamptz[], %(resolved_because)s::text[],
            %(current_level)s::text[], %(level)s::text[], %(changes)s::jsonb[],
            %(held)s::boolean[], %(notified_level)s::text[])
     AS v(id, resolved_at, resolved_because, current_level, level, changes, held,
          notified_level)
WHERE a.id = v.id
"""


def _alerts_save(alerts: list[Alert], *, tick: Tick) -> None:
    """The alerts fired: one INSERT; the others moved or released: one UPDATE."""
    created = [a for a in alerts if a.pk is None]
    changed = [a for a in alerts if a.pk is not None]
    Alert.objects.bulk_create(created)
    tick.fired += [a.pk for a in created]
    if not changed:
        return
    columns = ("resolved_at", "resolved_because", "current_level", "level", "held")
    params = {name: [getattr(a, name) for a in changed] for name in columns}
    params |= {
        "ids": [a.pk for a in changed],
        "changes": [json.dumps(a.changes) for a in changed],
        "notified_level": [a.notified_level for a in changed],
    }
    with connection.cursor() as cursor:
        cursor.execute(_ALERTS_UPDATE, params)


def _window(rule: AlertRule, now: datetime) -> tuple[datetime, datetime]:
    """The rule's window at `now` as sample requests read it: [its first minute, now's next)."""
    start = selectors.minute_of(now) - timedelta(minutes=rule.window_minutes - 1)
    return start, now + timedelta(minutes=1)


def _change(now: datetime, level: str, value) -> dict:
    return {"at": now.isoformat(), "level": level, "value": value}


def _alert_new(
    rule: AlertRule, judged: rules.Judgement, *, now, request_ids, document, silenced: bool
) -> Alert:
    return Alert(
        rule=rule,
        agent=rule.agent,
        environment=rule.environment,
        level=judged.level,
        current_level=judged.level,
        fired_at=now,
        value=judged.value,
        threshold=judged.threshold,
        baseline=judged.baseline,
        traffic=judged.traffic,
        window_start=_window(rule, now)[0],
        window_end=now,
        document=document,
        request_ids=request_ids,
        changes=[_change(now, judged.level, judged.value)],
        silenced=silenced,
    )


def _absolute(path: str) -> str:
    return settings.CONSOLE_PUBLIC_URL + path


_ID_MARK = "request-id-mark"


@functools.lru_cache(maxsize=1024)
def _path(name: str, **kwargs) -> str:
    """reverse(), kept: a tick firing 50 alerts asks the same few pages' paths 150 times."""
    return reverse(name, kwargs=kwargs or None)


def _trace_path(request_id: str) -> str:
    """reverse("trace-detail") of `request_id`, quoted as reverse quotes it, without resolving
    the pattern each time (a tick firing 50 alerts links 250 requests)."""
    return _path("trace-detail", request_id=_ID_MARK).replace(
        _ID_MARK, quote(request_id, safe=RFC3986_SUBDELIMS + "/~:@")
    )


def alert_links(alert: Alert) -> dict:
    """Where to look: the version health page, the traces behind it, each sample request,
    and the alert in the console's history."""
    rule = alert.rule
    metric = rules.METRICS[rule.metric]
    health = None
    if alert.document:
        health = _path(
            "health-version",
            agent=alert.agent.key,
            environment=alert.environment.key,
            document=alert.document,
        )
    query = {
        "agent": alert.agent.key,
        "environment": alert.environment.key,
        "since": alert.window_start.isoformat(),
        "until": (alert.resolved_at or alert.window_end + timedelta(minutes=1)).isoformat(),
    }
    if metric.status:
        query["status"] = metric.status
    return {
        "health": health,
        "traces": _path("trace-list") + "?" + urlencode(query),
        "requests": [_trace_path(r) for r in alert.request_ids],
        "alert": _path("alerts-page", agent=alert.agent.key)
        + "?"
        + urlencode({"environment": alert.environment.key})
        + f"#alert-{alert.pk}",
    }


def alert_payload(alert: Alert, *, event: str, judged: rules.Judgement | None = None) -> dict:
    rule = alert.rule
    links = alert_links(alert)
    return {
        "event": event,
        "alert": alert.pk,
        "agent": alert.agent.key,
        "environment": alert.environment.key,
        "rule": {
            "id": rule.pk,
            "name": rule.name,
            "metric": rule.metric,
            "comparison": rule.comparison,
            "warning_threshold": rule.warning_threshold,
            "alert_threshold": rule.alert_threshold,
            "baseline": rule.baseline,
        },
        "level": alert.current_level if event == FIRED_EVENT else "ok",
        "value": judged.value if judged else alert.value,
        "threshold": judged.threshold
        if judged and judged.threshold is not None
        else alert.threshold,
        "baseline": alert.baseline,
        "traffic": judged.traffic if judged else alert.traffic,
        "window": {
            "minutes": rule.window_minutes,
            "start": alert.window_start.isoformat(),
            "end": alert.window_end.isoformat(),
        },
        "fired_at": alert.fired_at.isoformat(),
        "resolved_at": alert.resolved_at.isoformat() if alert.resolved_at else None,
        "request_ids": alert.request_ids,
        "links": {
            "health": _absolute(links["health"]) if links["health"] else None,
            "traces": _absolute(links["traces"]),
            "requests": [_absolute(u) for u in links["requests"]],
            "alert": _absolute(links["alert"]),
        },
    }


def _deliver(sending: list, *, now) -> list[int]:
    """Outbox rows for the webhooks that hear each (alert, event, judgement) of `sending`, in
    one INSERT; queued after commit, in one go (the relay task queues again what a broker error
    lost)."""
    items = []
    for alert, event, judged in sending:
        body = alert_payload(alert, event=event, judged=judged)
        body["occurred_at"] = now.isoformat()
        items.append(
            (alert.environment_id, event, json.dumps(body, separators=(",", ":")).encode())
        )
    ids = [pk for created in webhooks.deliveries_create_many(items) for pk in created]
    if ids:
        transaction.on_commit(lambda: webhooks.deliveries_send(ids), robust=True)
    return ids
