"""The rollout guards: pure judgements of a step's evidence (no queries, no Django).

`evaluate(evidence, settings, active_guards=…, versions=…)` returns one GuardResult per
active guard, state `ok`, `breach` (roll back), `insufficient` (not enough traffic to judge
yet) or `pause` (stop and ask a person: the evidence is not about the version). What each
guard decides, and why, is in docs/rollout-evidence.md.

Each result says what it saw in an operator's words (`message`: the versions by number, "the
new version (v5)" / "the current version (v4)", never an arm's name), and the statistics
behind it apart (`statistics`: bounds, thresholds, tests), which the rollout page keeps one
disclosure away.
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


# What each guard judges, as the rollout page titles it (its name stays in the facts).
LABELS = {
    MINIMUM_DATA: "Enough traffic",
    SAMPLE_RATIO: "Split as planned",
    PAIRED: "Same requests, both versions",
    UNPAIRED: "Providers and fallbacks",
    OUTCOMES: "Outcomes",
    ATTRIBUTION: "Providers failing both versions",
}


@dataclass(frozen=True)
class Versions:
    """How the statements name the two versions a rollout compares (the arms `new` and
    `old` of the wire)."""

    new: str = "the new version"
    old: str = "the current version"

    @classmethod
    def numbered(cls, new: int, old: int) -> Versions:
        """During a rollout: the version rolled out, and the one live when it started."""
        return cls(f"the new version (v{new})", f"the current version (v{old})")

    @classmethod
    def watched(cls, new: int, old: int) -> Versions:
        """During the paired watch after completion: the new version is live by then."""
        return cls(f"the live version (v{new})", f"the previous version (v{old})")

    def of(self, arm: str) -> str:
        return self.new if arm == "new" else self.old


@dataclass(frozen=True)
class GuardResult:
    name: str
    state: str
    message: str
    evidence: dict = field(default_factory=dict)
    statistics: str = ""  # the figures behind the message, for a reader who asks

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "label": LABELS.get(self.name, self.name),
            "state": self.state,
            "message": self.message,
            "statistics": self.statistics,
            "evidence": self.evidence,
        }


def _upper_first(words: str) -> str:
    return words[:1].upper() + words[1:]


def _percent(value: float) -> str:
    return f"{value:.0%}" if value >= 0.01 or value == 0 else f"{value:.2%}"


def _expected_arms(share: float | None) -> tuple[str, ...]:
    """The arms a step serves: a shadow step (share 0) serves old only, a full one new only."""
    if share is None:
        return ARMS
    return tuple(arm for arm, expected in (("new", share), ("old", 1 - share)) if expected > 0)


# --- minimum data ----------------------------------------------------------------------------------
def _minimum_data(evidence: StepEvidence, settings: GuardSettings, versions: Versions):
    needed = settings.guard_min_traces
    counts = {arm: evidence.arm(arm).traces for arm in _expected_arms(evidence.share)}
    short = {arm: count for arm, count in counts.items() if count < needed}
    facts = {"traces": counts, "needed": needed}
    if short:
        words = ", ".join(
            f"{count} of the {needed} requests needed on {versions.of(arm)}"
            for arm, count in short.items()
        )
        return GuardResult(MINIMUM_DATA, INSUFFICIENT, f"Not enough traffic yet: {words}.", facts)
    served = " and ".join(versions.of(arm) for arm in counts)
    return GuardResult(MINIMUM_DATA, OK, f"At least {needed} requests on {served}.", facts)


# --- sample ratio ----------------------------------------------------------------------------------
def _sample_ratio(evidence: StepEvidence, versions: Versions) -> GuardResult:
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
            f"The runtime is not applying the split: {_percent(observed)} of requests got "
            f"{versions.new}, {_percent(share)} expected.",
            facts,
            statistics=f"Sample ratio test: {new} requests on {versions.new}, {old} on "
            f"{versions.old}; χ² p = {p:.1g}, below {SAMPLE_RATIO_P:g}.",
        )
    return GuardResult(
        SAMPLE_RATIO, OK, "The requests split between the versions as planned.", facts
    )


# --- paired ----------------------------------------------------------------------------------------
def _paired(evidence: StepEvidence, settings: GuardSettings, versions: Versions) -> GuardResult:
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
            "status": f"its answer could not be used where {versions.old}'s could",
            "required_lost": f"it lost a required item {versions.old} selected",
            "tokens": f"it used more than 1.2 × the tokens of {versions.old}",
        }
        threshold = _percent(settings.guard_paired_threshold)
        return GuardResult(
            PAIRED,
            BREACH,
            f"{_upper_first(versions.new)} did worse than {versions.old} on the same requests: "
            f"in {worst['requests']} of {compared} ({words[breaches[0]]}) — clearly more than "
            f"the {threshold} this environment tolerates.",
            facts,
            statistics=f"{_percent(worst['requests'] / compared)} observed; the 95% lower "
            f"bound {_percent(worst['lower_bound'])} exceeds the threshold {threshold} (at "
            f"least {worst['minimum']} requests needed).",
        )
    if not compared:
        return GuardResult(PAIRED, INSUFFICIENT, "No request has run both versions yet.", facts)
    return GuardResult(
        PAIRED,
        OK,
        f"{_upper_first(versions.new)} did no worse than {versions.old} on the same "
        f"{compared} requests.",
        facts,
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


def _what_went_wrong(test: str, rate_new: str, rate_old: str, versions: Versions) -> str:
    """A sequential test's breach in words: which rate, on which version."""
    kind, _, subject = test.partition(":")
    if kind == "not_fetched":
        what = f"The {subject} provider returned nothing in {rate_new} of requests on"
    elif kind == "config_fallback":
        what = f"The runtime fell back to its saved configuration in {rate_new} of requests on"
    else:
        what = f"The outcome {subject} was bad in {rate_new} of the requests reported on"
    return f"{what} {versions.new}, against {rate_old} on {versions.old}."


def _sequential(
    name: str, tests: list, alpha: float, evidence: StepEvidence, versions: Versions
) -> GuardResult:
    arms = _expected_arms(evidence.share)
    if set(arms) != set(ARMS):
        served = " and ".join(versions.of(arm) for arm in arms) or "no version"
        return GuardResult(name, OK, f"Nothing to compare: this step serves {served} only.", {})
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
            _what_went_wrong(row["test"], _percent(rate_new), _percent(rate_old), versions),
            facts,
            statistics=f"Sequential test of {row['test']}: likelihood ratio "
            f"{row['likelihood_ratio']:.3g} reached {row['reject_at']:.3g} (α = {alpha:.3g}).",
        )
    return GuardResult(name, OK, f"No rate worse on {versions.new}.", facts)


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
        f"The {first['source']} provider returned nothing for both versions in "
        f"{_percent(first['requests'] / first['compared'])} of requests"
    )
    if first["baseline"] is not None:
        message += f" ({_percent(first['baseline'])} before the rollout)"
    message += ": that is the provider, not the version, so a person decides."
    if held:
        seen = " and ".join(f"“{LABELS[r.name]}”" for r in held)
        message += f" Held, not rolled back: what {seen} saw."
    low = min((arm["lower_bound"] for arm in first["arms"].values()), default=None)
    statistics = (
        f"In every version served, the 95% lower bound {_percent(low)} exceeds "
        f"{_percent(first['limit'])} (the share before the rollout plus "
        f"{_percent(ATTRIBUTION_SHARE)})."
        if low is not None
        else ""
    )
    return GuardResult(ATTRIBUTION, PAUSE, message, facts, statistics=statistics)


# --- all of them -----------------------------------------------------------------------------------
def evaluate(
    evidence: StepEvidence, settings, *, active_guards=GUARDS, versions: Versions = Versions()
) -> list[GuardResult]:
    """Judge a step. `settings`: a GuardSettings or an object with its attributes (the
    environment); `versions`: how the statements name the two versions. A breach while a
    provider fails both versions (attribution) is held: the breaching guard reports `pause`
    and the attribution guard names the provider, so a provider's outage never rolls a
    version back."""
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
            results.append(_minimum_data(evidence, settings, versions))
        elif name == SAMPLE_RATIO:
            results.append(_sample_ratio(evidence, versions))
        elif name == PAIRED:
            results.append(_paired(evidence, settings, versions))
        elif name in (UNPAIRED, OUTCOMES):
            results.append(_sequential(name, tests[name], alpha, evidence, versions))
    if ATTRIBUTION in active:
        failing = _shared_failures(evidence, settings)
        held = [result for result in results if result.state == BREACH] if failing else []
        results = [
            GuardResult(
                r.name, PAUSE, r.message, {**r.evidence, "held_by": ATTRIBUTION}, r.statistics
            )
            if r in held
            else r
            for r in results
        ]
        results.append(_attribution(failing, held))
    return results
