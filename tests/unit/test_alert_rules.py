"""The one evaluator of standing alerts (traces.alerts.rules), pure: a rule's settings judged
field by field, a window of counts judged into a level (thresholds, warning and alert, the
window, minimum traffic, the 7-day baseline, no data) and the state machine of an alert."""

from __future__ import annotations

import pytest

from traces.alerts import rules
from traces.alerts.rules import RuleSpec, judge, rule_check, step

GOOD = {
    "name": "Orders missing in prod",
    "metric": "missing_required_data",
    "comparison": "above",
    "warning_threshold": 0.01,
    "alert_threshold": 0.02,
    "window_minutes": 10,
    "min_traffic": 20,
}


def paths(found) -> dict[str, str]:
    return {f.path: f.code for f in found}


def window(traces=100, **counts) -> dict:
    return {**dict.fromkeys(rules.COLUMNS, 0), "traces": traces, **counts}


# --- settings ---------------------------------------------------------------------------------
def test_rule_check__good_rule__clean_and_no_finding():
    clean, found = rule_check(GOOD)
    assert found == []
    assert clean["alert_threshold"] == 0.02 and clean["warning_threshold"] == 0.01
    assert clean["enabled"] is True and clean["baseline"] is False


def test_rule_check__percent_from_the_form__stored_as_fractions():
    clean, found = rule_check(
        {**GOOD, "warning_threshold": "1", "alert_threshold": "2 %"}, percent=True
    )
    assert found == []
    assert clean["alert_threshold"] == pytest.approx(0.02)


@pytest.mark.parametrize(
    ("changes", "field", "code"),
    [
        ({"alert_threshold": 1.5}, "alert_threshold", "out_of_range"),
        ({"alert_threshold": -0.1}, "alert_threshold", "out_of_range"),
        ({"alert_threshold": "two"}, "alert_threshold", "invalid"),
        ({"alert_threshold": "nan"}, "alert_threshold", "invalid"),
        ({"alert_threshold": None}, "alert_threshold", "required"),
        ({"warning_threshold": 0.03}, "warning_threshold", "after_alert"),
        ({"comparison": "below", "warning_threshold": 0.01}, "warning_threshold", "after_alert"),
        ({"window_minutes": 0}, "window_minutes", "out_of_range"),
        ({"window_minutes": 1441}, "window_minutes", "out_of_range"),
        ({"window_minutes": 2.5}, "window_minutes", "invalid"),
        ({"min_traffic": -1}, "min_traffic", "out_of_range"),
        ({"no_data_minutes": 0}, "no_data_minutes", "out_of_range"),
        ({"metric": "anything"}, "metric", "invalid_choice"),
        ({"comparison": "sideways"}, "comparison", "invalid_choice"),
        ({"name": " "}, "name", "required"),
        ({"name": "x" * 101}, "name", "too_long"),
    ],
)
def test_rule_check__bad_field__finding_at_that_field(changes, field, code):
    _, found = rule_check({**GOOD, **changes})
    assert paths(found).get(field) == code, found


def test_rule_check__percent_out_of_range__says_percent():
    _, found = rule_check({**GOOD, "alert_threshold": "150", "warning_threshold": ""}, percent=True)
    assert paths(found) == {"alert_threshold": "out_of_range"}
    assert "100 %" in found[0].message


def test_rule_check__traffic_metric__thresholds_are_traces_per_minute():
    _, found = rule_check(
        {
            **GOOD,
            "metric": "traffic",
            "comparison": "below",
            "warning_threshold": 50,
            "alert_threshold": 10,
        }
    )
    assert found == []


def test_rule_check__baseline_below__warning_is_the_smaller_share():
    values = {**GOOD, "metric": "task_completed", "comparison": "below", "baseline": True}
    assert rule_check({**values, "warning_threshold": 0.1, "alert_threshold": 0.2})[1] == []
    _, found = rule_check({**values, "warning_threshold": 0.3, "alert_threshold": 0.2})
    assert paths(found) == {"warning_threshold": "after_alert"}


# --- judging a window ---------------------------------------------------------------------------
SPEC = RuleSpec(
    metric="missing_required_data",
    comparison="above",
    warning_threshold=0.01,
    alert_threshold=0.02,
    window_minutes=10,
    min_traffic=20,
)


@pytest.mark.parametrize(
    ("missing", "level"), [(0, "ok"), (1, "ok"), (2, "warning"), (3, "alert"), (50, "alert")]
)
def test_judge__rate_against_warning_and_alert__level(missing, level):
    judged = judge(SPEC, window(100, missing_required_data=missing))
    assert judged.level == level
    assert judged.value == pytest.approx(missing / 100)


def test_judge__less_traffic_than_the_minimum__not_judged():
    judged = judge(SPEC, window(19, missing_required_data=19))
    assert judged.level == rules.UNKNOWN
    assert "19" in judged.words


def test_judge__no_warning_threshold__straight_to_alert_or_ok():
    spec = RuleSpec(**{**SPEC.__dict__, "warning_threshold": None})
    assert judge(spec, window(100, missing_required_data=2)).level == "ok"
    assert judge(spec, window(100, missing_required_data=3)).level == "alert"


def test_judge__fallback_and_failed__their_columns():
    spec = RuleSpec(metric="fallback_resolution", comparison="above", alert_threshold=0.05)
    assert judge(spec, window(100, fallback=6)).level == "alert"
    spec = RuleSpec(metric="failed", comparison="above", alert_threshold=0.05)
    assert judge(spec, window(100, failures=5)).level == "ok"


def test_judge__outcome_rate__over_the_reports_of_its_kind():
    spec = RuleSpec(
        metric="task_completed", comparison="below", alert_threshold=0.8, min_traffic=10
    )
    judged = judge(spec, window(1000, task_completed_true=7, task_completed_false=3))
    assert judged.level == "alert" and judged.value == pytest.approx(0.7) and judged.traffic == 10


def test_judge__below_its_baseline_by_more_than_the_share__alert():
    spec = RuleSpec(
        metric="task_completed",
        comparison="below",
        baseline=True,
        warning_threshold=0.05,
        alert_threshold=0.2,
        min_traffic=10,
    )
    base = window(10_000, task_completed_true=900, task_completed_false=100)  # 90 %
    assert (
        judge(spec, window(task_completed_true=88, task_completed_false=12), baseline=base).level
        == "ok"
    )
    warned = judge(spec, window(task_completed_true=80, task_completed_false=20), baseline=base)
    assert warned.level == "warning" and warned.threshold == pytest.approx(0.9 * 0.95)
    alert = judge(spec, window(task_completed_true=70, task_completed_false=30), baseline=base)
    assert alert.level == "alert" and alert.baseline == pytest.approx(0.9)


def test_judge__baseline_rule_without_a_baseline__not_judged():
    spec = RuleSpec(metric="degraded", comparison="above", baseline=True, alert_threshold=0.5)
    assert judge(spec, window(100, degraded=90), baseline=None).level == rules.UNKNOWN


def test_judge__no_trace_in_the_no_data_minutes__no_data():
    spec = RuleSpec(**{**SPEC.__dict__, "no_data_minutes": 5})
    judged = judge(spec, window(0), recent_traces=0)
    assert judged.level == rules.NO_DATA and "traffic stopped" in judged.words
    assert judge(spec, window(100), recent_traces=3).level == "ok"


def test_judge__traffic_below__per_minute():
    spec = RuleSpec(metric="traffic", comparison="below", alert_threshold=5, window_minutes=10)
    assert judge(spec, window(40)).level == "alert"  # 4 a minute
    assert judge(spec, window(60)).level == "ok"


# --- the state machine -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("open_level", "judged", "action"),
    [
        (None, "ok", None),
        (None, "unknown", None),
        (None, "warning", "fire"),
        (None, "alert", "fire"),
        (None, "no_data", "fire"),
        ("warning", "alert", "raise"),
        ("alert", "warning", "lower"),
        ("alert", "no_data", "raise"),
        ("alert", "alert", None),
        ("alert", "unknown", None),  # too little traffic: an open alert stays open
        ("warning", "ok", "resolve"),
        ("no_data", "ok", "resolve"),
    ],
)
def test_step__each_transition(open_level, judged, action):
    assert step(open_level, judged) == action


# --- what is sent: from the level last sent to the level now (also once a silence ends) ---------
@pytest.mark.parametrize(
    ("notified", "level", "event"),
    [
        ("", "warning", "alert.fired"),  # fired (or fired under the silence, still firing)
        ("", "alert", "alert.fired"),
        ("", "no_data", "alert.fired"),
        ("", "ok", None),  # fired and resolved under the silence: nothing, ever
        ("warning", "alert", "alert.fired"),  # rose (or rose under the silence)
        ("alert", "warning", None),  # lowered: a lower level sends nothing
        ("alert", "alert", None),  # already told
        ("warning", "ok", "alert.resolved"),  # told it fired, resolved under the silence
        ("alert", "ok", "alert.resolved"),
        ("ok", "ok", None),  # its resolve was sent already
        ("ok", "warning", "alert.fired"),
    ],
)
def test_owed__what_a_silence_held_back(notified, level, event):
    assert rules.owed(notified, level) == event
