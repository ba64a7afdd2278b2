"""The rollout guards' distributions (traces.rollouts.stats) against reference values.

The Clopper–Pearson and incomplete-beta references are scipy 1.17's (`scipy.stats.beta.ppf`
/ `.cdf`; the small-n rows are also the classic exact-interval tables, e.g. 1 of 10 →
0.0025–0.4450, 10 of 100 → 0.0490–0.1762); the χ² tails are the textbook critical values.
"""

from __future__ import annotations

import math
import random

import pytest

from traces.rollouts import stats

# (count, total) → (lower, upper) of the exact two-sided 95% interval.
CLOPPER_PEARSON = [
    ((0, 10), (0.0, 0.3084971078187607)),
    ((1, 10), (0.0025285785444617848, 0.4450161170281954)),
    ((5, 10), (0.18708602844739855, 0.8129139715526015)),
    ((9, 10), (0.5549838829718047, 0.9974714214555382)),
    ((10, 10), (0.6915028921812392, 1.0)),
    ((1, 100), (0.00025314603297742064, 0.054459385392080645)),
    ((10, 100), (0.04900468922148595, 0.17622259774002266)),
    ((29, 100), (0.2035741892507318, 0.3892659589074483)),
    ((5, 1000), (0.00162541951756276, 0.011629470559812147)),
    ((7, 2000), (0.0014083038325025412, 0.007197961714658002)),
    ((50, 1_000_000), (3.7111184347986994e-05, 6.591824198810435e-05)),
    ((5000, 1_000_000), (0.004862691820452957, 0.005140187265579256)),
    ((500_000, 1_000_000), (0.49901951919531184, 0.5009804808046882)),
    ((3, 3_000_000), (2.062240884423889e-07, 2.9224215474787457e-06)),
]


@pytest.mark.parametrize(("counts", "expected"), CLOPPER_PEARSON)
def test_clopper_pearson__reference_values__match_to_1e_8(counts, expected):
    low, high = stats.clopper_pearson(*counts)
    assert low == pytest.approx(expected[0], rel=1e-8, abs=1e-15)
    assert high == pytest.approx(expected[1], rel=1e-8)


@pytest.mark.parametrize(
    ("x", "a", "b", "expected"),
    [
        (0.1, 2, 9, 0.2639010709),
        (0.3, 2, 9, 0.8506916541),
        (0.5, 0.5, 0.5, 0.5),  # the arcsine law is symmetric
        (0.25, 1, 1, 0.25),  # uniform
        (0.9, 5, 1, 0.9**5),  # I_x(a, 1) = x^a
    ],
)
def test_beta_cdf__reference_values(x, a, b, expected):
    assert stats.beta_cdf(x, a, b) == pytest.approx(expected, rel=1e-9)


def test_beta_quantile__inverts_the_cdf_across_shapes():
    generator = random.Random(7)
    for _ in range(300):
        a, b = generator.uniform(0.5, 5000), generator.uniform(0.5, 5000)
        p = generator.uniform(0.001, 0.999)
        x = stats.beta_quantile(p, a, b)
        assert stats.beta_cdf(x, a, b) == pytest.approx(p, rel=1e-7, abs=1e-12)


@pytest.mark.parametrize(
    ("statistic", "p"),
    [(3.841458820694124, 0.05), (6.634896601021214, 0.01), (10.827566170662733, 0.001), (0, 1)],
)
def test_chi2_sf_1df__textbook_critical_values(statistic, p):
    assert stats.chi2_sf_1df(statistic) == pytest.approx(p, rel=1e-9)


def test_sample_ratio__60_40_at_half__is_far_below_0_001():
    # χ² = (6000 − 5000)²/5000 × 2 = 400 on 10,000 requests; 40 on 1,000.
    assert stats.sample_ratio_p(600, 400, 0.5) == pytest.approx(math.erfc(math.sqrt(20)))
    assert stats.sample_ratio_p(600, 400, 0.5) < 1e-9
    assert stats.sample_ratio_p(5010, 4990, 0.5) > 0.5


def test_sample_ratio__a_share_of_0_or_1__allows_no_request_on_the_other_arm():
    assert stats.sample_ratio_p(0, 1000, 0.0) == 1.0
    assert stats.sample_ratio_p(1, 1000, 0.0) == 0.0
    assert stats.sample_ratio_p(1000, 1, 1.0) == 0.0


def test_lower_bound__more_bad_requests_never_lowers_it():
    for total in (50, 1000, 100_000):
        bounds = [stats.clopper_pearson(k, total)[0] for k in range(0, min(total, 300))]
        assert all(b2 > b1 for b1, b2 in zip(bounds, bounds[1:], strict=False))
    # …nor one more bad request in one more compared request
    bounds = [stats.clopper_pearson(k, 1000 + k)[0] for k in range(0, 300)]
    assert all(b2 > b1 for b1, b2 in zip(bounds, bounds[1:], strict=False))


def test_msprt__only_an_arm_worse_than_control_counts():
    assert stats.msprt_likelihood_ratio(10, 1000, 50, 1000) == 1.0
    assert stats.msprt_likelihood_ratio(0, 1000, 0, 1000) == 1.0
    assert stats.msprt_likelihood_ratio(100, 1000, 10, 1000) > 1e6


def test_msprt__a_null_difference_crosses_1_over_alpha_in_at_most_alpha_of_runs():
    """Always valid: looked at after every 100 requests up to 10,000, an A/A comparison
    rejects at α = 0.05 in no more than 5% of runs."""
    generator = random.Random(11)
    crossed = 0
    runs = 400
    for _ in range(runs):
        bad_a = bad_b = n = 0
        for _ in range(100):
            for _ in range(50):  # 100 requests: 50 per arm, rate 3% on both
                bad_a += generator.random() < 0.03
                bad_b += generator.random() < 0.03
            n += 50
            if stats.msprt_likelihood_ratio(bad_a, n, bad_b, n) >= 1 / 0.05:
                crossed += 1
                break
    assert crossed / runs <= 0.05
