"""Alerts pages (docs/alerts.md): per agent, its rules with their standing and the last hour
of their metric, the history of alerts with their request ids and the version health page,
silences; the rule form with each refusal at its field. Thin: parse, call one service or
selector, render."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from console.kernel.errors import ApplicationError
from console.kernel.policy import Capability, requires, user_can_manage_alerts
from strategies.catalog.models import Environment
from strategies.documents.views import agent_tabs
from traces.alerts import rules, selectors, services
from traces.health.stats import sparkline
from traces.outcomes.views import _error_details  # the same refusal → field errors

READERS = requires(Capability.VIEW_TRACES)
EDITORS = requires(Capability.ROLLBACK)
FORM_FIELDS = rules.FIELDS


def _form_values(post) -> dict:
    values = {name: (post.get(name) or "").strip() for name in FORM_FIELDS}
    values["baseline"] = post.get("baseline") == "on"
    values["enabled"] = post.get("enabled") == "on"
    return values


def _as_form(rule) -> dict:
    """A rule's settings as the form shows them (rates in %)."""
    values = {name: getattr(rule, name) for name in FORM_FIELDS}
    percent = rules.METRICS[rule.metric].kind == rules.RATE or rule.baseline
    for name in ("warning_threshold", "alert_threshold"):
        if values[name] is not None:
            values[name] = f"{values[name] * 100:g}" if percent else f"{values[name]:g}"
    values["environment"] = rule.environment.key
    return values


def _percent(values: dict) -> bool:
    metric = rules.METRICS.get(values.get("metric") or "")
    return metric is None or metric.kind == rules.RATE or bool(values.get("baseline"))


class RuleRow:
    """A rule as the page lists it: its standing, its value now, the last hour."""

    def __init__(self, rule, counts, now, open_alert):
        self.rule = rule
        self.metric = rules.METRICS[rule.metric]
        until = selectors.minute_of(now)
        judged = rules.judge(rules.spec_of(rule), counts.window(until, rule.window_minutes))
        self.value = rules.format_value(rule.metric, judged.value)
        self.words = judged.words
        self.open_alert = open_alert
        buckets = []
        for sums in counts.series(until, selectors.SPARK_MINUTES):
            if self.metric.kind == rules.TRAFFIC:
                buckets.append((sums["traces"], 1))
            else:
                of = sum(sums[c] for c in self.metric.denominator)
                buckets.append((sums[self.metric.numerator], of))
        self.spark = sparkline(buckets, width=120, height=24, what=self.metric.label)

    def threshold_words(self) -> str:
        def one(value):
            if value is None:
                return "—"
            if self.rule.baseline:
                return f"{value * 100:g} % {'over' if self.rule.comparison == 'above' else 'under'} its 7-day baseline"
            return rules.format_value(self.rule.metric, value)

        return f"warning {one(self.rule.warning_threshold)}, alert {one(self.rule.alert_threshold)}"


class HistoryRow:
    """An alert as the history lists it: its value in words, its links."""

    def __init__(self, alert):
        self.alert = alert
        self.links = services.alert_links(alert)
        self.requests = list(zip(alert.request_ids, self.links["requests"], strict=True))
        if alert.level == rules.NO_DATA:
            self.value = "no trace"
        else:
            self.value = rules.format_value(alert.rule.metric, alert.value)


def _page(
    request, agent, *, values=None, errors=(), silence_values=None, silence_errors=(), status=200
):
    now = timezone.now()
    environment = Environment.objects.filter(key=request.GET.get("environment") or "").first()
    found = selectors.rules_of(agent=agent, environment=environment)
    spans = {(r.agent_id, r.environment_id): selectors.SPARK_MINUTES for r in found}
    for r in found:
        key = (r.agent_id, r.environment_id)
        spans[key] = max(spans[key], r.window_minutes)
    counts = selectors.counter_minutes(spans, now=now)
    opens = selectors.open_alerts([r.pk for r in found])
    rows = [RuleRow(r, counts[(r.agent_id, r.environment_id)], now, opens.get(r.pk)) for r in found]
    history = selectors.history(
        agent=agent, environment=environment, before_id=request.GET.get("before")
    )
    can_edit = user_can_manage_alerts(request.user, agent)
    context = {
        "agent": agent,
        "rows": rows,
        "history": [HistoryRow(a) for a in history],
        "older": history[-1].pk if len(history) == selectors.HISTORY_PAGE else None,
        "silences": selectors.silences_of(agent=agent),
        "now": now,
        "environments": Environment.objects.filter(archived_at__isnull=True),
        "environment": environment,
        "metrics": list(rules.METRICS.values()),
        "values": values
        or {"comparison": "above", "window_minutes": 10, "min_traffic": 20, "enabled": True},
        "errors": list(errors),
        "silence_values": silence_values
        or {"ends_at": (now + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")},
        "silence_errors": list(silence_errors),
        "can_edit": can_edit,
        "tabs": agent_tabs(agent, "alerts-page", request.user),
    }
    return TemplateResponse(request, "alerts/page.html", context, status=status)


@require_http_methods(["GET", "POST"])
@READERS
def alerts_page(request, agent):
    agent = request.agent
    if request.method == "GET":
        return _page(request, agent)
    values = _form_values(request.POST)
    environment = (request.POST.get("environment") or "").strip()
    try:
        rule = services.rule_create(
            agent=agent,
            environment=environment,
            values=values,
            actor=request.user,
            percent=_percent(values),
        )
    except ApplicationError as error:
        if error.status in (403, 404):
            raise
        return _page(
            request, agent, values={**values, "environment": environment},
            errors=_error_details(error), status=error.status,
        )  # fmt: skip
    messages.success(request, f"Rule “{rule.name}” watches {rule.environment.key} from now on.")
    return redirect("alerts-page", agent=agent.key)


@require_http_methods(["GET", "POST"])
@READERS
def rule_edit(request, agent, pk):
    agent = request.agent
    rule = selectors.rule_get(agent=agent, pk=pk)
    values, errors, status = _as_form(rule), [], 200
    if request.method == "POST":
        values = _form_values(request.POST)
        revision = request.POST.get("revision")
        try:
            rule = services.rule_update(
                rule=rule,
                values=values,
                actor=request.user,
                revision=int(revision) if (revision or "").isdigit() else None,
                percent=_percent(values),
            )
        except ApplicationError as error:
            if error.status in (403, 404):
                raise
            errors, status = _error_details(error), error.status
            values["environment"] = rule.environment.key
        else:
            messages.success(request, f"Rule “{rule.name}” saved.")
            return redirect("alerts-page", agent=agent.key)
    context = {
        "agent": agent,
        "rule": rule,
        "values": values,
        "errors": errors,
        "metrics": list(rules.METRICS.values()),
        "history": [HistoryRow(a) for a in selectors.history(agent=agent, rule=rule)],
        "can_edit": user_can_manage_alerts(request.user, agent),
    }
    return TemplateResponse(request, "alerts/rule.html", context, status=status)


@require_POST
@EDITORS
def silence_add(request, agent):
    agent = request.agent
    values = {
        k: (request.POST.get(k) or "").strip() for k in ("environment", "rule", "reason", "ends_at")
    }
    try:
        silence = services.silence_create(agent=agent, values=values, actor=request.user)
    except ApplicationError as error:
        if error.status in (403, 404):
            raise
        return _page(
            request, agent, silence_values=values, silence_errors=_error_details(error),
            status=error.status,
        )  # fmt: skip
    messages.success(
        request,
        f"Silenced until {silence.ends_at:%Y-%m-%d %H:%M} UTC: alerts are still recorded, not sent.",
    )
    return redirect("alerts-page", agent=agent.key)


@require_POST
@EDITORS
def silence_lift(request, agent, pk):
    agent = request.agent
    silence = selectors.silence_get(agent=agent, pk=pk)
    services.silence_lift(silence=silence, actor=request.user)
    messages.success(request, "Silence lifted: alerts are sent again.")
    return redirect("alerts-page", agent=agent.key)
