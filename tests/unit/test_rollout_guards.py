"""The rollout guards (traces.rollouts.guards.evaluate): pure judgements of a step's
evidence — paired, unpaired, sample ratio, minimum data and attribution."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from types import MappingProxyType

import pytest

from traces.rollouts import guards
from traces.rollouts.evidence import ArmEvidence, PairedCount, ProviderBaseline, StepEvidence
from traces.rollouts.guards import GuardSettings, evaluate

SINCE = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
SETTINGS = GuardSettings()


def arm(traces, *, not_fetched=None, fallback=0, compared=None, outcomes=None, bad=None, both=None):
    return ArmEvidence(
        traces=traces,
        usable=traces,
        config_fallback=fallback,
        compared=traces if compared is None else compared,
        not_fetched=MappingProxyType(not_fetched or {}),
        not_fetched_both=MappingProxyType(both or {}),
        outcomes=MappingProxyType(outcomes or {}),
        outcomes_bad=MappingProxyType(bad or {}),
    )


def evidence(new, old, *, share=0.5, paired=None, both=None, baseline=None):
    return StepEvidence(
        rollout_key="ro-7",
        step=1,
        since=SINCE,
        share=share,
        new=new,
        old=old,
        paired=MappingProxyType(paired or {}),
        not_fetched_both=MappingProxyType(both or {}),
        baseline=baseline or ProviderBaseline(),
    )


def by_name(results):
    return {result.name: result for result in results}


def states(results):
    return {result.name: result.state for result in results}


def test_evaluate__enough_traffic_and_nothing_wrong__every_guard_ok():
    results = evaluate(evidence(arm(500), arm(500)), SETTINGS)
    assert [r.name for r in results] == list(guards.GUARDS)
    assert set(states(results).values()) == {"ok"}


def test_minimum_data__short_of_100_per_arm__insufficient_and_says_how_far():
    result = by_name(evaluate(evidence(arm(40), arm(400), share=0.1), SETTINGS))["minimum_data"]
    assert result.state == "insufficient"
    assert "40 of the 100 requests needed on the new version" in result.message


def test_minimum_data__a_shadow_step_serves_only_old__needs_no_new_traces():
    results = by_name(evaluate(evidence(arm(0), arm(300), share=0.0), SETTINGS))
    assert results["minimum_data"].state == "ok"
    assert results["sample_ratio"].state == "ok"
    assert results["unpaired"].state == "ok"  # nothing to compare, nothing to breach


# --- paired ----------------------------------------------------------------------------------------
def test_paired__20_of_1000_worse_status__breach_with_bound_and_five_ids():
    ids = tuple(f"req-{i}" for i in range(5))
    results = by_name(
        evaluate(
            evidence(arm(500), arm(500), paired={"status": PairedCount(20, ids)}),
            SETTINGS,
        )
    )
    paired = results["paired"]
    assert paired.state == "breach"
    kind = paired.evidence["kinds"]["status"]
    assert kind["requests"] == 20 and kind["compared"] == 1000
    assert kind["lower_bound"] == pytest.approx(0.012268, abs=1e-5)  # CP lower, 20 of 1000
    assert kind["request_ids"] == list(ids)
    assert "20 of 1000" in paired.message


def test_paired__5_of_1000__bound_under_the_threshold__ok():
    # 5 of 1000: 0.5% observed, but the 95% lower bound is 0.16%: not proven above 0.5%.
    results = by_name(
        evaluate(evidence(arm(500), arm(500), paired={"tokens": PairedCount(5)}), SETTINGS)
    )
    assert results["paired"].state == "ok"


def test_paired__four_requests__never_a_breach_however_few_compared():
    results = by_name(
        evaluate(evidence(arm(2), arm(2), paired={"status": PairedCount(4)}), SETTINGS)
    )
    assert results["paired"].state == "ok"


def test_paired__required_lost__three_requests_are_enough():
    three = evidence(arm(50), arm(50), paired={"required_lost": PairedCount(3)})
    two = evidence(arm(50), arm(50), paired={"required_lost": PairedCount(2)})
    assert by_name(evaluate(three, SETTINGS))["paired"].state == "breach"
    assert by_name(evaluate(two, SETTINGS))["paired"].state == "ok"
    # …and the environment's own minimum and threshold are the ones used
    stricter = GuardSettings(guard_required_lost_min=4, guard_paired_threshold=0.005)
    assert by_name(evaluate(three, stricter))["paired"].state == "ok"


# --- unpaired --------------------------------------------------------------------------------------
def test_unpaired__a_new_source_timing_out_on_the_new_version__breach_naming_it():
    new = arm(2000, not_fetched={"order_delivery": 200, "policy": 20})
    old = arm(2000, not_fetched={"order_delivery": 20, "policy": 22})
    result = by_name(evaluate(evidence(new, old), SETTINGS))["unpaired"]
    assert result.state == "breach"
    assert result.evidence["breached"] == ["not_fetched:order_delivery"]
    assert "order_delivery" in result.message


def test_unpaired__config_fallback_only_on_the_new_version__breach():
    result = by_name(evaluate(evidence(arm(3000, fallback=150), arm(3000, fallback=3)), SETTINGS))
    assert result["unpaired"].state == "breach"


def test_outcomes__escalations_up_on_the_new_version__breach():
    new = arm(3000, outcomes={"escalated": 1000}, bad={"escalated": 200})
    old = arm(3000, outcomes={"escalated": 1000}, bad={"escalated": 80})
    assert by_name(evaluate(evidence(new, old), SETTINGS))["outcomes"].state == "breach"


def test_alpha__split_over_the_tests_the_active_guards_run():
    new = arm(1000, not_fetched={"a": 1, "b": 1}, outcomes={"x": 5})
    old = arm(1000, not_fetched={"a": 1, "b": 1}, outcomes={"x": 5})
    every = by_name(evaluate(evidence(new, old), SETTINGS))
    assert every["unpaired"].evidence["alpha"] == pytest.approx(0.05 / 4)  # a, b, fallback, x
    alone = by_name(evaluate(evidence(new, old), SETTINGS, active_guards=["unpaired"]))
    assert alone["unpaired"].evidence["alpha"] == pytest.approx(0.05 / 3)


# --- sample ratio ----------------------------------------------------------------------------------
def test_sample_ratio__60_40_split_at_share_half__pause_saying_the_split_is_not_applied():
    result = by_name(evaluate(evidence(arm(6000), arm(4000)), SETTINGS))["sample_ratio"]
    assert result.state == "pause"
    assert "not applying the split" in result.message


def test_sample_ratio__a_fair_split__ok():
    generator = random.Random(3)
    new = sum(generator.random() < 0.1 for _ in range(10_000))
    result = by_name(evaluate(evidence(arm(new), arm(10_000 - new), share=0.1), SETTINGS))
    assert result["sample_ratio"].state == "ok"


# --- attribution -----------------------------------------------------------------------------------
def _provider_failing(
    rate: float, *, seed: int, requests: int = 10_000, old_rate=None, baseline=None
):
    """Requests split at share 0.5; `order_delivery` not fetched on `rate` of each (of arm
    old's: `old_rate`, default the same), the same requests for both versions (the other
    version decides on the same candidates). `baseline`: its rate over 2,000 requests
    before the rollout."""
    generator = random.Random(seed)
    rates = {"new": rate, "old": rate if old_rate is None else old_rate}
    counts = {"new": [0, 0], "old": [0, 0]}
    for _ in range(requests):
        side = "new" if generator.random() < 0.5 else "old"
        counts[side][0] += 1
        counts[side][1] += generator.random() < rates[side]
    new, old = counts["new"], counts["old"]
    before = (
        ProviderBaseline(2000, MappingProxyType({"order_delivery": round(2000 * baseline)}))
        if baseline is not None
        else None
    )
    return evidence(
        arm(new[0], not_fetched={"order_delivery": new[1]}, both={"order_delivery": new[1]}),
        arm(old[0], not_fetched={"order_delivery": old[1]}, both={"order_delivery": old[1]}),
        both={"order_delivery": new[1] + old[1]},
        baseline=before,
    )


def test_attribution__a_provider_failing_30pct_in_both__pause_naming_it_no_breach():
    results = evaluate(_provider_failing(0.3, seed=5), SETTINGS)
    named = by_name(results)
    assert named["attribution"].state == "pause"
    assert named["attribution"].message.startswith(
        "The order_delivery provider returned nothing for both versions in 30% of requests"
    )
    assert "breach" not in states(results).values()


def test_attribution__a_breach_while_the_provider_fails_both__held_as_a_pause():
    shared = _provider_failing(0.3, seed=6)
    worse = evidence(
        shared.new,
        shared.old,
        both=dict(shared.not_fetched_both),
        paired={"status": PairedCount(100, ("r1",))},
    )
    named = by_name(evaluate(worse, SETTINGS))
    assert named["paired"].state == "pause"
    assert named["paired"].evidence["held_by"] == "attribution"
    assert "Held, not rolled back: what “Same requests, both versions” saw" in (
        named["attribution"].message
    )


def test_attribution__a_rare_failure_in_both__no_pause():
    named = by_name(evaluate(_provider_failing(0.01, seed=8), SETTINGS))
    assert named["attribution"].state == "ok"


def test_attribution__a_provider_failing_as_often_as_before_the_rollout__no_pause():
    # The demo's order service times out on 8% of requests, before and during the rollout.
    results = evaluate(_provider_failing(0.08, seed=9, baseline=0.08), SETTINGS)
    assert set(states(results).values()) == {"ok"}, by_name(results)["attribution"].message


def test_attribution__failing_far_more_often_than_before__pause_naming_the_baseline():
    named = by_name(evaluate(_provider_failing(0.3, seed=10, baseline=0.08), SETTINGS))
    assert named["attribution"].state == "pause"
    assert named["attribution"].message == (
        "The order_delivery provider returned nothing for both versions in 30% of requests (8% "
        "before the rollout): that is the provider, not the version, so a person decides."
    )
    facts = named["attribution"].evidence["sources"][0]
    assert facts["baseline"] == 0.08 and set(facts["arms"]) == {"new", "old"}


def test_attribution__failing_more_in_the_new_arm_only__the_versions_doing_not_held():
    # Each arm's served version asks the providers: failing more under the new one only is
    # not an outage, and the unpaired guard's breach is not held.
    named = by_name(
        evaluate(_provider_failing(0.3, seed=11, old_rate=0.08, baseline=0.08), SETTINGS)
    )
    assert named["attribution"].state == "ok"
    assert named["unpaired"].state == "breach"


# --- A/A -------------------------------------------------------------------------------------------
def _aa_run(seed: int, *, requests: int = 10_000, share: float = 0.5, every: int = 250):
    """An A/A rollout: both versions identical (no paired difference), sources failing at the
    same rates in both arms, evaluated as traffic arrives (every `every` requests). Returns
    the states seen."""
    generator = random.Random(seed)
    rates = {"order_delivery": 0.02, "policy": 0.01, "kb": 0.005}
    tallies = {side: {"n": 0, "fallback": 0, **dict.fromkeys(rates, 0)} for side in ("new", "old")}
    seen = set()
    for i in range(1, requests + 1):
        tally = tallies["new" if generator.random() < share else "old"]
        tally["n"] += 1
        tally["fallback"] += generator.random() < 0.01
        for source, rate in rates.items():
            tally[source] += generator.random() < rate
        if i % every == 0:
            arms = {
                side: arm(t["n"], fallback=t["fallback"], not_fetched={s: t[s] for s in rates})
                for side, t in tallies.items()
            }
            results = evaluate(evidence(arms["new"], arms["old"], share=share), SETTINGS)
            seen |= {r.state for r in results if r.name != "minimum_data"}
    return seen


def test_aa__10000_requests__no_breach_no_pause():
    assert _aa_run(seed=2026) <= {"ok", "insufficient"}


def test_aa__over_many_runs__false_alarms_stay_under_alpha():
    runs = 100
    alarms = sum(
        bool(_aa_run(seed, requests=4000, share=0.1, every=400) - {"ok", "insufficient"})
        for seed in range(runs)
    )
    assert alarms / runs <= 0.05


def test_evaluate__an_unknown_guard_name__refused():
    with pytest.raises(ValueError, match="unknown guards"):
        evaluate(evidence(arm(1), arm(1)), SETTINGS, active_guards=["nope"])


# --- the statements (issue 32 item 10) --------------------------------------------------------------
V5_OVER_V4 = guards.Versions.numbered(5, 4)


def test_statements__versions_numbered__named_by_number_never_by_arm():
    short = by_name(evaluate(evidence(arm(40), arm(60), share=0.5), SETTINGS, versions=V5_OVER_V4))[
        "minimum_data"
    ]
    assert short.message == (
        "Not enough traffic yet: 40 of the 100 requests needed on the new version (v5), "
        "60 of the 100 requests needed on the current version (v4)."
    )
    assert " on new" not in short.message and "arm" not in short.message


def test_statements__paired_breach__plain_words_first_statistics_apart():
    ids = tuple(f"req-{i}" for i in range(5))
    paired = by_name(
        evaluate(
            evidence(arm(52), arm(52), paired={"required_lost": PairedCount(12, ids)}),
            SETTINGS,
            versions=V5_OVER_V4,
        )
    )["paired"]
    assert paired.state == "breach"
    assert paired.message == (
        "The new version (v5) did worse than the current version (v4) on the same requests: "
        "in 12 of 104 (it lost a required item the current version (v4) selected) — clearly "
        "more than the 0.50% this environment tolerates."
    )
    assert "lower bound" not in paired.message
    assert "95% lower bound" in paired.statistics and "exceeds the threshold 0.50%" in (
        paired.statistics
    )
    assert paired.as_dict()["statistics"] == paired.statistics
    assert paired.as_dict()["label"] == "Same requests, both versions"


def test_statements__a_provider_worse_on_the_new_version__named_with_its_rates():
    new = arm(2000, not_fetched={"order_delivery": 200})
    old = arm(2000, not_fetched={"order_delivery": 20})
    result = by_name(evaluate(evidence(new, old), SETTINGS, versions=V5_OVER_V4))["unpaired"]
    assert result.state == "breach"
    assert result.message == (
        "The order_delivery provider returned nothing in 10% of requests on the new version "
        "(v5), against 1% on the current version (v4)."
    )
    assert result.statistics.startswith("Sequential test of not_fetched:order_delivery")
