"""The rollout guards: pure judgements of a step's evidence (no queries, no Django).

`evaluate(evidence, settings, active_guards=…)` returns one GuardResult per active guard,
state `ok`, `breach` (roll back), `insufficient` (not enough traffic to judge yet) or
`pause` (stop and ask a person: the evidence is not about the version). What each guard
decides, and why, is in docs/rollout-evidence.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from traces.rollouts import stats
from traces.rollouts.evidence import (
    ARMS,
    PAIRED_KINDS,
    PAIRED_REQUIRED_LOST,
    StepEvidence,
)

PAIRED = "paired"
UNPAIRED = "unpaired"
OUTCOMES = "outcomes"
SAMPLE_RATIO = "sample_ratio"
MINIMUM_DATA = "minimum_data"
ATTRIBUTION = "attribution"
GUARDS = (MINIMUM_DATA, SAMPLE_RATIO, PAIRED, UNPAIRED, OUTCOMES, ATTRIBUTION)

OK, BREACH, INSUFFICIENT, PAUSE = "ok", "breach", "insufficient", "pause"
STATES = (OK, BREACH, INSUFFICIENT, PAUSE)

ALPHA = 0.05  # split (Bonferroni) over the sequential tests the active guards run
SAMPLE_RATIO_P = 0.001
PAIRED_MIN_REQUESTS = 5
PAIRED_CONFIDENCE = 0.95
# A provider not fetched in both versions on this share of the step's requests MORE than
# before the rollout (its baseline; 0 without one), 95% lower bound, in every arm the step
# serves, makes the step's evidence about the provider, not the version. A provider that
# fails as often as before (the demo's order service: 8%) is not an outage; one failing
# more in one arm only is the version's doing (the unpaired guard judges that).
ATTRIBUTION_SHARE = 0.05


@dataclass(frozen=True)
class GuardSettings:
    """The environment's guard settings (strategies' Environment carries the same names)."""

    guard_paired_threshold: float = 0.005
    guard_required_lost_min: int = 3
    guard_min_traces: int = 100

    @classmethod
    def of(cls, source) -> GuardSettings:
        """From any object with these attributes (an Environment), defaults for missing."""
        if isinstance(source, cls):
            return source
        defaults = cls()
        return cls(
            **{
                name: getattr(source, name, getattr(defaults, name))
                for name in cls.__dataclass_fields__
            }
        )


@dataclass(frozen=True)
class GuardResult:
    name: str
    state: str
    message: str
    evidence: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "state": self.state,
            "message": self.message,
            "evidence": self.evidence,
        }


def _percent(value: float) -> str:
    return f"{value:.0%}" if value >= 0.01 or value == 0 else f"{value:.2%}"


def _expected_arms(share: float | None) -> tuple[str, ...]:
    """The arms a step serves: a shadow step (share 0) serves old only, a full one new only."""
    if share is None:
        return ARMS
    return tuple(arm for arm, expected in (("new", share), ("old", 1 - share)) if expected > 0)


# --- minimum data ----------------------------------------------------------------------------------
def _minimum_data(evidence: StepEvidence, settings: GuardSettings) -> GuardResult:
    needed = settings.guard_min_traces
    counts = {arm: evidence.arm(arm).traces for arm in _expected_arms(evidence.share)}
    short = {arm: count for arm, count in counts.items() if count < needed}
    facts = {"traces": counts, "needed": needed}
    if short:
        words = ", ".join(f"{count} of {needed} on {arm}" for arm, count in short.items())
        return GuardResult(MINIMUM_DATA, INSUFFICIENT, f"Not enough traffic yet: {words}.", facts)
    return GuardResult(MINIMUM_DATA, OK, f"At least {needed} traces on each arm.", facts)


# --- sample ratio ----------------------------------------------------------------------------------
def _sample_ratio(evidence: StepEvidence) -> GuardResult:
    new, old, share = evidence.new.traces, evidence.old.traces, evidence.share
    facts = {"new": new, "old": old, "share": share}
    if share is None:
        return GuardResult(SAMPLE_RATIO, INSUFFICIENT, "The step's share is not known.", facts)
    p = stats.sample_ratio_p(new, old, share)
    facts["p"] = p
    if p < SAMPLE_RATIO_P:
        observed = new / (new + old)
        return GuardResult(
            SAMPLE_RATIO,
            PAUSE,
            f"The runtime is not applying the split: {_percent(observed)} of traces on the "
            f"new version, {_percent(share)} expected (χ² p = {p:.1g}).",
            facts,
        )
    return GuardResult(SAMPLE_RATIO, OK, "The arms match the step's share.", facts)


# --- paired ----------------------------------------------------------------------------------------
def _paired(evidence: StepEvidence, settings: GuardSettings) -> GuardResult:
    compared = evidence.compared
    kinds, breaches = {}, []
    for kind in PAIRED_KINDS:
        count = evidence.paired_count(kind)
        minimum = (
            settings.guard_required_lost_min
            if kind == PAIRED_REQUIRED_LOST
            else PAIRED_MIN_REQUESTS
        )
        low = stats.clopper_pearson_lower(count.requests, compared, PAIRED_CONFIDENCE)
        kinds[kind] = {
            "requests": count.requests,
            "compared": compared,
            "share": count.requests / compared if compared else None,
            "lower_bound": low,
            "minimum": minimum,
            "request_ids": list(count.request_ids),
        }
        if count.requests >= minimum and low > settings.guard_paired_threshold:
            breaches.append(kind)
    facts = {"threshold": settings.guard_paired_threshold, "kinds": kinds, "breached": breaches}
    if breaches:
        worst = kinds[breaches[0]]
        words = {
            "status": "its status was not usable while the old version's was",
            "required_lost": "it lost a required item the old version selected",
            "tokens": "it used more than 1.2 × the old version's tokens",
        }
        return GuardResult(
            PAIRED,
            BREACH,
            f"The new version was worse on the same inputs in {worst['requests']} of "
            f"{compared} requests ({words[breaches[0]]}); the 95% lower bound "
            f"{_percent(worst['lower_bound'])} exceeds {_percent(settings.guard_paired_threshold)}.",
            facts,
        )
    if not compared:
        return GuardResult(PAIRED, INSUFFICIENT, "No request compared yet.", facts)
    return GuardResult(
        PAIRED, OK, f"No regression on the same inputs over {compared} requests.", facts
    )


# --- unpaired and outcomes: the sequential two-proportion test ------------------------------------
def _rate_tests(evidence: StepEvidence) -> dict[str, list[tuple[str, int, int, int, int]]]:
    """Per guard, its tests: (what, bad on new, traces on new, bad on old, traces on old)."""
    new, old = evidence.new, evidence.old
    unpaired = [
        (
            f"not_fetched:{source}",
            new.not_fetched.get(source, 0),
            new.traces,
            old.not_fetched.get(source, 0),
            old.traces,
        )
        for source in sorted({*new.not_fetched, *old.not_fetched})
    ]
    unpaired.append(
        ("config_fallback", new.config_fallback, new.traces, old.config_fallback, old.traces)
    )
    outcomes = [
        (
            f"outcome:{kind}",
            new.outcomes_bad.get(kind, 0),
            new.outcomes.get(kind, 0),
            old.outcomes_bad.get(kind, 0),
            old.outcomes.get(kind, 0),
        )
        for kind in sorted({*new.outcomes, *old.outcomes})
    ]
    return {UNPAIRED: unpaired, OUTCOMES: outcomes}


def _sequential(name: str, tests: list, alpha: float, evidence: StepEvidence) -> GuardResult:
    if set(_expected_arms(evidence.share)) != set(ARMS):
        return GuardResult(name, OK, "Nothing to compare: this step serves one version.", {})
    rows, breaches = [], []
    for what, bad_new, n_new, bad_old, n_old in tests:
        ratio = stats.msprt_likelihood_ratio(bad_new, n_new, bad_old, n_old)
        row = {
            "test": what,
            "new": [bad_new, n_new],
            "old": [bad_old, n_old],
            "likelihood_ratio": ratio,
            "reject_at": 1 / alpha,
        }
        rows.append(row)
        if ratio >= 1 / alpha:
            breaches.append(row)
    facts = {"alpha": alpha, "tests": rows, "breached": [row["test"] for row in breaches]}
    if breaches:
        row = breaches[0]
        rate_new = row["new"][0] / row["new"][1]
        rate_old = row["old"][0] / row["old"][1]
        return GuardResult(
            name,
            BREACH,
            f"{row['test']}: {_percent(rate_new)} on the new version against "
            f"{_percent(rate_old)} on the old one (sequential test, α = {alpha:.3g}).",
            facts,
        )
    return GuardResult(name, OK, "No rate worse on the new version.", facts)


# --- attribution -----------------------------------------------------------------------------------
def _shared_failures(evidence: StepEvidence, settings: GuardSettings) -> list[dict]:
    failing = []
    for source, requests in sorted(evidence.not_fetched_both.items(), key=lambda kv: -kv[1]):
        baseline = evidence.baseline.rate(source, minimum=settings.guard_min_traces)
        limit = (baseline or 0.0) + ATTRIBUTION_SHARE
        arms = {}
        for name in _expected_arms(evidence.share):
            arm = evidence.arm(name)
            count = arm.not_fetched_both.get(source, 0)
            if count <= limit * arm.compared:
                break  # its lower bound is under the observed share: no need to compute it
            low = stats.clopper_pearson_lower(count, arm.compared, PAIRED_CONFIDENCE)
            if low <= limit:
                break
            arms[name] = {"requests": count, "compared": arm.compared, "lower_bound": low}
        else:
            failing.append(
                {
                    "source": source,
                    "requests": requests,
                    "compared": evidence.compared,
                    "baseline": baseline,
                    "baseline_traces": evidence.baseline.traces,
                    "limit": limit,
                    "arms": arms,
                    "request_ids": list(evidence.not_fetched_both_ids.get(source, ())),
                }
            )
    return failing


def _attribution(failing: list[dict], held: list[GuardResult]) -> GuardResult:
    facts = {"sources": failing, "held": [result.as_dict() for result in held]}
    if not failing:
        return GuardResult(ATTRIBUTION, OK, "No provider failing both versions.", facts)
    first = failing[0]
    facts["request_ids"] = first["request_ids"]  # requests neither version could serve it
    message = (
        f"{first['source']} not fetched in {_percent(first['requests'] / first['compared'])} "
        "of requests in both versions"
    )
    if first["baseline"] is not None:
        message += f" ({_percent(first['baseline'])} before the rollout)"
    if held:
        message += f" (held, not rolled back: {', '.join(r.name for r in held)})"
    return GuardResult(ATTRIBUTION, PAUSE, message + ".", facts)


# --- all of them -----------------------------------------------------------------------------------
def evaluate(evidence: StepEvidence, settings, *, active_guards=GUARDS) -> list[GuardResult]:
    """Judge a step. `settings`: a GuardSettings or an object with its attributes (the
    environment). A breach while a provider fails both versions (attribution) is held: the
    breaching guard reports `pause` and the attribution guard names the provider, so a
    provider's outage never rolls a version back."""
    active = [name for name in GUARDS if name in set(active_guards)]
    unknown = set(active_guards) - set(GUARDS)
    if unknown:
        raise ValueError(f"unknown guards: {sorted(unknown)}")
    settings = GuardSettings.of(settings)
    tests = _rate_tests(evidence)
    # Bonferroni over the sequential tests actually run (each source, fallback, outcome kind).
    run = sum(len(tests[name]) for name in (UNPAIRED, OUTCOMES) if name in active)
    alpha = ALPHA / max(run, 1)
    results = []
    for name in active:
        if name == MINIMUM_DATA:
            results.append(_minimum_data(evidence, settings))
        elif name == SAMPLE_RATIO:
            results.append(_sample_ratio(evidence))
        elif name == PAIRED:
            results.append(_paired(evidence, settings))
        elif name in (UNPAIRED, OUTCOMES):
            results.append(_sequential(name, tests[name], alpha, evidence))
    if ATTRIBUTION in active:
        failing = _shared_failures(evidence, settings)
        held = [result for result in results if result.state == BREACH] if failing else []
        results = [
            GuardResult(r.name, PAUSE, r.message, {**r.evidence, "held_by": ATTRIBUTION})
            if r in held
            else r
            for r in results
        ]
        results.append(_attribution(failing, held))
    return results
