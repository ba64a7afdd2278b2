"""Rates, intervals and percentiles of the version-health page (traces.health.stats)."""

from __future__ import annotations

import pytest

from traces.health.stats import (
    Rate,
    paired_verdict,
    percentile_bound,
    sparkline,
    verdict,
    wilson,
)


def test_wilson__known_values__match_the_formula():
    low, high = wilson(10, 100)
    assert (round(low, 4), round(high, 4)) == (0.0552, 0.1744)


@pytest.mark.parametrize(("count", "total"), [(0, 3), (3, 3), (0, 10_000)])
def test_wilson__at_zero_and_all__an_honest_interval_not_a_point(count, total):
    low, high = wilson(count, total)
    assert 0 <= low <= count / total <= high <= 1
    assert high - low > 0


def test_wilson__no_traffic__knows_nothing():
    assert wilson(0, 0) == (0.0, 1.0)
    assert Rate(0, 0).as_dict()["rate"] is None


def test_verdict__worse_only_when_the_intervals_do_not_overlap():
    assert verdict(Rate(40, 100), Rate(10, 100)) == "worse"
    assert verdict(Rate(10, 100), Rate(40, 100)) == "better"
    assert verdict(Rate(10, 27), Rate(5, 25)) == "same"  # twice the rate, too few traces
    assert verdict(Rate(1, 10), Rate(0, 0)) == "unknown"


def test_percentile_bound__power_of_two_buckets():
    # 6200 → bucket 13 = [4096, 8192); 20000 → bucket 15 = [16384, 32768)
    histogram = {"13": 95, "15": 5}
    assert percentile_bound(histogram, 0.5) == 8192
    assert percentile_bound(histogram, 0.95) == 8192
    assert percentile_bound(histogram, 0.99) == 32768
    assert percentile_bound({}, 0.5) is None
    assert percentile_bound({"0": 3}, 0.5) == 0


def test_sparkline__gaps_without_traffic__and_a_summary_in_words():
    spark = sparkline([(1, 10), (0, 0), (0, 0), (5, 10), (0, 10)], width=40, height=10)
    assert len(spark.lines) == 2  # the empty buckets break the line
    assert spark.summary == "6 of 30 failed (20.0%); highest bucket 50.0%"
    assert sparkline([(0, 0)]).summary == "no traffic"


def test_paired_verdict__agreeing_on_every_request__never_worse():
    assert paired_verdict(0, 0, compared=16) == "same"
    assert paired_verdict(0, 0, compared=1_000_000) == "same"
    assert paired_verdict(0, 0, compared=0) == "unknown"


def test_paired_verdict__sign_test_on_the_discordant_requests():
    assert paired_verdict(6, 0, compared=16) == "worse"  # 2^-6 < 2.5%
    assert paired_verdict(5, 0, compared=16) == "same"  # 2^-5 > 2.5%: too few to tell
    assert paired_verdict(0, 6, compared=16) == "better"
    assert paired_verdict(520, 480, compared=5000) == "same"
    assert paired_verdict(1200, 1000, compared=50_000) == "worse"  # the normal tail, n > 1000
