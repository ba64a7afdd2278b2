"""THE one evaluator of standing alerts, pure (no database): what each metric is, whether a
rule's settings make sense, what level a window of counts puts a rule at, and what that
does to its open alert. The form, the API, the evaluator task and the tests all ask here.

A window's counts are sums of the per-minute health counters (traces.health) of the rule's
agent and environment, live arm, each trace once (through its strategy's row): the names in
`COLUMNS`, summed by `selectors.window_counts`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from context_runtime.findings import Finding

# The sums a window holds (selectors.COLUMN_SQL says how each is read off a counter row).
COLUMNS = (
    "traces",
    "failures",
    "missing_required_data",
    "budget_exceeded",
    "source_conflict",
    "degraded",
    "fallback",
    "task_completed_true",
    "task_completed_false",
    "escalated_true",
    "escalated_false",
)

RATE = "rate"
TRAFFIC = "traffic"


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    kind: str  # RATE: numerator / denominator; TRAFFIC: traces per minute
    numerator: str = "traces"
    denominator: tuple[str, ...] = ("traces",)
    of: str = "traces"  # what the denominator counts, in words
    status: str = ""  # the trace status behind it (the sample requests, the traces link)


METRICS: dict[str, Metric] = {
    m.key: m
    for m in (
        Metric(
            "missing_required_data",
            "Missing required data",
            RATE,
            "missing_required_data",
            status="missing_required_data",
        ),
        Metric(
            "budget_exceeded",
            "Budget exceeded",
            RATE,
            "budget_exceeded",
            status="budget_exceeded",
        ),
        Metric(
            "source_conflict", "Source conflict", RATE, "source_conflict", status="source_conflict"
        ),
        Metric("degraded", "Degraded", RATE, "degraded", status="degraded"),
        Metric("failed", "Failed (neither ready nor degraded)", RATE, "failures"),
        Metric("fallback_resolution", "Served from a fallback configuration", RATE, "fallback"),
        Metric(
            "task_completed",
            "Task completed",
            RATE,
            "task_completed_true",
            ("task_completed_true", "task_completed_false"),
            of="task_completed reports",
        ),
        Metric(
            "escalated",
            "Escalated to a person",
            RATE,
            "escalated_true",
            ("escalated_true", "escalated_false"),
            of="escalated reports",
        ),
        Metric("traffic", "Traffic (traces per minute)", TRAFFIC),
    )
}

COMPARISONS = ("above", "below")
MAX_WINDOW_MINUTES = 1440
MAX_MIN_TRAFFIC = 1_000_000
MAX_TRAFFIC_THRESHOLD = 1_000_000.0  # traces per minute
MAX_BASELINE_ABOVE = 10.0  # "over its baseline by at most 1000 %"
BASELINE_DAYS = 7
BASELINE_MINUTES = BASELINE_DAYS * 24 * 60

OK, WARNING, ALERT, NO_DATA, UNKNOWN = "ok", "warning", "alert", "no_data", "unknown"
FIRING = (WARNING, ALERT, NO_DATA)
_RANK = {OK: 0, WARNING: 1, ALERT: 2, NO_DATA: 3}


# --- a rule's settings, judged ---------------------------------------------------------------------
@dataclass(frozen=True)
class RuleSpec:
    """A rule's settings as the evaluator reads them (thresholds as fractions)."""

    metric: str
    comparison: str
    alert_threshold: float
    warning_threshold: float | None = None
    window_minutes: int = 10
    min_traffic: int = 20
    baseline: bool = False
    no_data_minutes: int | None = None


FIELDS = (
    "name",
    "metric",
    "comparison",
    "warning_threshold",
    "alert_threshold",
    "window_minutes",
    "min_traffic",
    "baseline",
    "no_data_minutes",
    "enabled",
)


def _number(text, *, whole: bool):
    """A number from a form's text or an API's JSON; None when empty; ValueError when not."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    if isinstance(text, bool):
        raise ValueError(text)
    value = float(str(text).strip().rstrip("%").strip()) if isinstance(text, str) else float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    if whole:
        if value != int(value):
            raise ValueError(text)
        return int(value)
    return value


def _flag(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "on", "yes")
    return bool(value)


def rule_check(values: Mapping, *, percent: bool = False) -> tuple[dict, list[Finding]]:
    """Judge a rule's settings as sent (the form sends rates in %, `percent=True`; the API
    sends fractions). Returns (the settings cleaned, thresholds as fractions; the findings,
    each at its field). Nothing is saved while a finding remains."""
    found: list[Finding] = []
    clean: dict = {}

    def refuse(path: str, code: str, message: str) -> None:
        found.append(Finding(path, code, message))

    name = str(values.get("name") or "").strip()
    if not name:
        refuse("name", "required", "Give the rule a name, e.g. “Orders missing in prod”.")
    elif len(name) > 100:
        refuse("name", "too_long", "At most 100 characters.")
    clean["name"] = name
    metric = METRICS.get(str(values.get("metric") or ""))
    if metric is None:
        refuse("metric", "invalid_choice", "Choose one of: " + ", ".join(METRICS) + ".")
    clean["metric"] = metric.key if metric else str(values.get("metric") or "")
    comparison = str(values.get("comparison") or "")
    if comparison not in COMPARISONS:
        refuse("comparison", "invalid_choice", "Choose above or below.")
    clean["comparison"] = comparison
    clean["baseline"] = _flag(values.get("baseline"))
    clean["enabled"] = _flag(values.get("enabled", True))

    for field, whole, low, high, required, words in (
        ("window_minutes", True, 1, MAX_WINDOW_MINUTES, True, "minutes"),
        ("min_traffic", True, 0, MAX_MIN_TRAFFIC, False, "traces"),
        ("no_data_minutes", True, 1, MAX_WINDOW_MINUTES, False, "minutes"),
    ):
        try:
            number = _number(values.get(field), whole=whole)
        except ValueError:
            refuse(field, "invalid", f"A whole number of {words}, from {low} to {high}.")
            continue
        if number is None:
            if required:
                refuse(field, "required", f"A whole number of {words}, from {low} to {high}.")
            number = {"min_traffic": 20}.get(field)
        elif not low <= number <= high:
            refuse(field, "out_of_range", f"A whole number of {words}, from {low} to {high}.")
        clean[field] = number

    # The thresholds' range depends on what they compare: a rate (0..1), a share of the
    # baseline (0..1 under it, up to 10 over it), or traces per minute.
    scale = 100.0 if percent else 1.0
    unit = " %" if percent else ""
    if metric is not None and clean["baseline"]:
        high = 1.0 if comparison != "above" else MAX_BASELINE_ABOVE
        what = f"a share of the {BASELINE_DAYS}-day baseline, from 0 to {high * scale:g}{unit}"
    elif metric is not None and metric.kind == TRAFFIC:
        high, scale, unit = MAX_TRAFFIC_THRESHOLD, 1.0, ""
        what = f"traces per minute, from 0 to {high:g}"
    else:
        high = 1.0
        what = f"a rate from 0 to {high * scale:g}{unit}"
    for field in ("alert_threshold", "warning_threshold"):
        try:
            number = _number(values.get(field), whole=False)
        except ValueError:
            refuse(field, "invalid", f"A number: {what}.")
            clean[field] = None
            continue
        if number is not None:
            number = number / scale
            if metric is not None and not 0 <= number <= high:
                refuse(field, "out_of_range", f"Out of range: {what}.")
        elif field == "alert_threshold":
            refuse(field, "required", f"Give the alert threshold: {what}.")
        clean[field] = number
    alert, warning = clean["alert_threshold"], clean["warning_threshold"]
    if (
        alert is not None
        and warning is not None
        and comparison in COMPARISONS
        and not any(f.path in ("alert_threshold", "warning_threshold") for f in found)
    ):
        before = _warning_before(comparison, warning, alert, baseline=clean["baseline"])
        if not before:
            order = "below" if _rises(comparison, clean["baseline"]) else "above"
            refuse(
                "warning_threshold",
                "after_alert",
                f"The warning comes before the alert: set it {order} the alert threshold.",
            )
    return clean, found


def _rises(comparison: str, baseline: bool) -> bool:
    """Does the threshold number grow toward the alert? Absolute "above" thresholds and every
    baseline threshold (a larger share away from the baseline is worse) do."""
    return baseline or comparison == "above"


def _warning_before(comparison: str, warning: float, alert: float, *, baseline: bool) -> bool:
    return warning < alert if _rises(comparison, baseline) else warning > alert


def spec_of(rule) -> RuleSpec:
    return RuleSpec(
        metric=rule.metric,
        comparison=rule.comparison,
        alert_threshold=rule.alert_threshold,
        warning_threshold=rule.warning_threshold,
        window_minutes=rule.window_minutes,
        min_traffic=rule.min_traffic,
        baseline=rule.baseline,
        no_data_minutes=rule.no_data_minutes,
    )


# --- a window of counts, judged -------------------------------------------------------------------
@dataclass(frozen=True)
class Judgement:
    level: str
    value: float | None  # the metric's value over the window (None: not judged)
    threshold: float | None  # the absolute threshold that decided the level
    baseline: float | None  # the 7-day baseline's value, for baseline rules
    traffic: int  # traces (or reports) behind the value
    words: str  # why, in an operator's words


def metric_value(
    metric: Metric, sums: Mapping[str, float], minutes: int
) -> tuple[float | None, int]:
    """(the metric's value, how many traces or reports it stands on) of a window's sums."""
    if metric.kind == TRAFFIC:
        traces = int(sums.get("traces", 0))
        return traces / minutes, traces
    of = int(sum(sums.get(c, 0) for c in metric.denominator))
    return (sums.get(metric.numerator, 0) / of if of else None), of


def _crossed(value: float, threshold: float, comparison: str) -> bool:
    return value > threshold if comparison == "above" else value < threshold


def _absolute(spec: RuleSpec, threshold: float, baseline: float | None) -> float:
    if not spec.baseline or baseline is None:
        return threshold
    return baseline * (1 + threshold) if spec.comparison == "above" else baseline * (1 - threshold)


def judge(
    spec: RuleSpec,
    window: Mapping[str, float],
    *,
    recent_traces: int | None = None,
    baseline: Mapping[str, float] | None = None,
) -> Judgement:
    """The level `window` (the sums of the last `window_minutes`) puts the rule at.
    `recent_traces`: traces in the last `no_data_minutes` (rules with a no-data rule);
    `baseline`: the sums of the 7 days before the window (baseline rules)."""
    metric = METRICS[spec.metric]
    if spec.no_data_minutes and recent_traces is not None and recent_traces == 0:
        return Judgement(
            NO_DATA,
            0.0,
            None,
            None,
            0,
            f"No trace for {spec.no_data_minutes} min: traffic stopped.",
        )
    value, traffic = metric_value(metric, window, spec.window_minutes)
    floor = spec.min_traffic if metric.kind == RATE else 0
    if value is None or traffic < max(floor, 1 if metric.kind == RATE else 0):
        return Judgement(
            UNKNOWN, value, None, None, traffic,
            f"Too little traffic to judge: {traffic} {metric.of} of the {floor} needed.",
        )  # fmt: skip
    base = None
    if spec.baseline:
        base, base_traffic = metric_value(metric, baseline or {}, BASELINE_MINUTES)
        if base is None or base_traffic < floor or (metric.kind == TRAFFIC and base == 0):
            return Judgement(
                UNKNOWN, value, None, None, traffic, "No 7-day baseline to compare with yet."
            )
    alert = _absolute(spec, spec.alert_threshold, base)
    if _crossed(value, alert, spec.comparison):
        return Judgement(ALERT, value, alert, base, traffic, _words(metric, spec, value, alert))
    if spec.warning_threshold is not None:
        warning = _absolute(spec, spec.warning_threshold, base)
        if _crossed(value, warning, spec.comparison):
            return Judgement(
                WARNING, value, warning, base, traffic, _words(metric, spec, value, warning)
            )
    return Judgement(OK, value, alert, base, traffic, "Within its thresholds.")


def format_value(metric_key: str, value: float | None) -> str:
    if value is None:
        return "—"
    if METRICS[metric_key].kind == TRAFFIC:
        return f"{value:.1f}/min"
    return f"{value * 100:.1f} %"


def _words(metric: Metric, spec: RuleSpec, value: float, threshold: float) -> str:
    return (
        f"{metric.label} {format_value(metric.key, value)} over {spec.window_minutes} min, "
        f"{spec.comparison} {format_value(metric.key, threshold)}."
    )


# --- what a judgement does to the open alert --------------------------------------------------------
FIRE, RAISE, LOWER, RESOLVE = "fire", "raise", "lower", "resolve"


def step(open_level: str | None, judged: str) -> str | None:
    """The state machine per rule: ok → warning → alert (or no data) → resolved.
    `open_level`: the open alert's current level (None: no open alert). Not judged (too
    little traffic, no baseline) changes nothing. Returns FIRE, RAISE, LOWER, RESOLVE or
    None."""
    if judged == UNKNOWN:
        return None
    if open_level is None:
        return FIRE if judged in FIRING else None
    if judged == OK:
        return RESOLVE
    if judged == open_level:
        return None
    return RAISE if higher(judged, open_level) else LOWER


def higher(level: str, than: str) -> bool:
    """Is `level` worse than `than` (ok < warning < alert < no data)?"""
    return _RANK[level] > _RANK[than]


def owed(notified: str, level: str) -> str | None:
    """What a held alert owes its receivers once no silence covers it (Alertmanager sends a
    still-firing alert again when its silence ends): `notified` is the level last sent ('' —
    never sent; OK — its resolve was sent), `level` its level now (OK once resolved).

    Still firing, never sent or sent at a lower level: `alert.fired` (at its current level).
    Resolved, and a fired was sent: `alert.resolved` (the receiver was told it fired).
    Resolved and never sent, or nothing new (sent at this level or higher): nothing."""
    if level == OK:
        return "alert.resolved" if notified in FIRING else None
    if notified in FIRING and not higher(level, notified):
        return None
    return "alert.fired"
