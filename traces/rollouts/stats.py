"""The distributions the rollout guards need, exact enough to be tested against reference
tables: the regularized incomplete beta function and its inverse (Clopper–Pearson bounds),
the χ² tail with one degree of freedom (sample ratio), and the mixture sequential
probability ratio of two proportions (always-valid, so a test looked at every 30 s keeps
its α).

Pure Python on purpose: scipy would add ~40 MB to every console install for three
functions; these are checked against scipy's values in tests/unit/test_rollout_stats.py.
"""

from __future__ import annotations

import functools
import math

_TINY = 1e-300
_EPS = 1e-15
_MAX_TERMS = 100_000


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (modified Lentz; Numerical Recipes §6.4):
    converges fast for x < (a + 1) / (a + b + 2)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"incomplete beta did not converge (a={a}, b={b}, x={x})")


def _log_front(a: float, b: float, x: float) -> float:
    return (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )


def beta_cdf(x: float, a: float, b: float) -> float:
    """I_x(a, b): the CDF of Beta(a, b) at x (a, b > 0)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(_log_front(a, b, x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def beta_quantile(p: float, a: float, b: float, *, start: float | None = None) -> float:
    """The x with I_x(a, b) = p: Newton steps on the CDF (its derivative is the density),
    kept inside a bisection bracket so a poor step never leaves it; to ~1e-13 relative."""
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    low, high = 0.0, 1.0
    # Start at the caller's guess, else the mean; each CDF costs more the larger a and b.
    x = start if start is not None and 0.0 < start < 1.0 else a / (a + b)
    log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    for _ in range(200):
        error = beta_cdf(x, a, b) - p
        if error == 0.0:
            return x
        if error > 0:
            high = x
        else:
            low = x
        density = math.exp(log_norm + (a - 1.0) * math.log(x) + (b - 1.0) * math.log1p(-x))
        step = x - error / density if density > 0 else -1.0
        if not low < step < high:
            step = (low + high) / 2
        if abs(step - x) <= 1e-13 * x or high - low < 1e-15:
            return step
        x = step
    return x


def _normal_guess(count: int, total: int, z: float) -> float:
    """The normal approximation of a bound: a start a Newton step or two from the exact one."""
    rate = count / total
    return rate + z * math.sqrt(rate * (1 - rate) / total)


def clopper_pearson_lower(count: int, total: int, confidence: float = 0.95) -> float:
    """The lower end of the exact (Clopper–Pearson) two-sided interval of count/total."""
    if total <= 0 or count <= 0:
        return 0.0
    alpha = 1.0 - confidence
    start = _normal_guess(count, total, -_z(1 - alpha / 2))
    return beta_quantile(alpha / 2, count, total - count + 1, start=start)


def clopper_pearson(count: int, total: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper–Pearson) two-sided interval of count/total."""
    if total <= 0:
        return 0.0, 1.0
    alpha = 1.0 - confidence
    high = 1.0
    if count < total:
        start = _normal_guess(count, total, _z(1 - alpha / 2))
        high = beta_quantile(1 - alpha / 2, count + 1, total - count, start=start)
    return clopper_pearson_lower(count, total, confidence), high


@functools.lru_cache(maxsize=16)
def _z(p: float) -> float:
    """The standard normal quantile by bisection on erfc (to ~1e-12): a starting point for
    the exact bounds, never a result; cached (guards ask for one confidence)."""
    low, high = -40.0, 40.0
    for _ in range(100):
        middle = (low + high) / 2
        if 0.5 * math.erfc(-middle / math.sqrt(2)) < p:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def chi2_sf_1df(statistic: float) -> float:
    """P(χ²₁ > statistic): with one degree of freedom the χ² is a squared normal."""
    if statistic <= 0:
        return 1.0
    return math.erfc(math.sqrt(statistic / 2.0))


def sample_ratio_p(first: int, second: int, first_share: float) -> float:
    """The p-value of Pearson's χ² for `first`/`second` counts against the expected share of
    `first`. A share of 0 or 1 allows no count on the other side: any is p = 0."""
    total = first + second
    if total == 0:
        return 1.0
    if first_share <= 0.0:
        return 0.0 if first else 1.0
    if first_share >= 1.0:
        return 0.0 if second else 1.0
    expected_first = total * first_share
    expected_second = total - expected_first
    statistic = (first - expected_first) ** 2 / expected_first + (
        second - expected_second
    ) ** 2 / expected_second
    return chi2_sf_1df(statistic)


# The mixture's spread, on the scale of a difference of two rates: the differences a guard
# should find soonest are a few points (a source timing out in 2% more requests). It tunes
# power only; the test keeps its α whatever it is.
MIXTURE_TAU = 0.02


def msprt_likelihood_ratio(
    bad_arm: int, total_arm: int, bad_control: int, total_control: int, *, tau: float = MIXTURE_TAU
) -> float:
    """The mixture sequential probability ratio (Johari et al., "Always valid inference",
    2017) for the difference of two proportions, arm − control, under a normal mixture
    N(0, τ²) and the normal approximation with the pooled rate: a test that rejects when it
    reaches 1/α keeps its α however often it is looked at. One-sided: only an arm worse
    than control counts (the ratio is 1 otherwise)."""
    if total_arm <= 0 or total_control <= 0:
        return 1.0
    difference = bad_arm / total_arm - bad_control / total_control
    if difference <= 0:
        return 1.0
    pooled = (bad_arm + bad_control) / (total_arm + total_control)
    variance = pooled * (1 - pooled) * (1 / total_arm + 1 / total_control)
    if variance <= 0:
        return 1.0
    spread = variance + tau * tau
    exponent = tau * tau * difference * difference / (2 * variance * spread)
    return math.sqrt(variance / spread) * math.exp(min(exponent, 700.0))
