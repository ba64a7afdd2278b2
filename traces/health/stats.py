"""Rates with intervals, percentiles from the power-of-two histogram, and sparkline geometry.

Pure: no queries and no Django.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Z95 = 1.959964  # two-sided 95%


def wilson(count: int, total: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of count/total: honest at small totals and at 0 or 100%,
    where the normal approximation gives nonsense (a 0% rate of 3 traces is not 0 ± 0)."""
    if total <= 0:
        return 0.0, 1.0
    p = count / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Rate:
    count: int
    total: int

    @property
    def value(self) -> float | None:
        return self.count / self.total if self.total else None

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.count, self.total)

    @property
    def low(self) -> float:
        return self.interval[0]

    @property
    def high(self) -> float:
        return self.interval[1]

    def as_dict(self) -> dict:
        low, high = self.interval
        return {
            "count": self.count,
            "total": self.total,
            "rate": self.value,
            "low": round(low, 6) if self.total else None,
            "high": round(high, 6) if self.total else None,
        }


def verdict(now: Rate, before: Rate, *, higher_is_worse: bool = True) -> str:
    """'worse', 'better' or 'same': a change only when the 95% intervals do not overlap
    ('unknown' when either side has no traffic)."""
    if not now.total or not before.total:
        return "unknown"
    if now.low > before.high:
        return "worse" if higher_is_worse else "better"
    if now.high < before.low:
        return "better" if higher_is_worse else "worse"
    return "same"


def _sign_tail(k: int, n: int) -> float:
    """P(X >= k) for X ~ Binomial(n, 1/2): exact up to 1,000 pairs, then the normal
    approximation with continuity correction (its error there is far below the test's 2.5%)."""
    if k <= 0:
        return 1.0
    if n <= 1000:
        return sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n
    z = (k - 0.5 - n / 2) / math.sqrt(n / 4)
    return 0.5 * math.erfc(z / math.sqrt(2))


def paired_verdict(worse: int, better: int, *, compared: int) -> str:
    """'worse', 'better' or 'same' for one version against another on the SAME requests:
    McNemar's exact (sign) test on the discordant requests — `worse` where only this version
    showed the metric, `better` where only the other did — two-sided at 95%. Requests where
    both agree carry no evidence either way, so a version that agrees on every request is
    never worse ('unknown' with nothing compared)."""
    if compared <= 0:
        return "unknown"
    pairs = worse + better
    if _sign_tail(worse, pairs) < 0.025:
        return "worse"
    if _sign_tail(better, pairs) < 0.025:
        return "better"
    return "same"


def peak_rate(series: list[list[tuple[int, int]]]) -> float:
    """The highest rate of several bucket lists (at least 5%): their common top."""
    rates = [c / t for buckets in series for c, t in buckets if t]
    return max(max(rates, default=0.0), 0.05)


def percentile_bound(histogram: dict, q: float) -> int | None:
    """The upper bound of the power-of-two bucket holding the q-quantile (bucket k holds
    [2^(k-1), 2^k)): "p95 ≤ 8,192 tokens". None without data."""
    counts = sorted((int(k), int(v)) for k, v in histogram.items() if int(v) > 0)
    total = sum(v for _, v in counts)
    if not total:
        return None
    rank = q * total
    seen = 0
    for bucket, count in counts:
        seen += count
        if seen >= rank:
            return 0 if bucket == 0 else 2**bucket
    return 2 ** counts[-1][0]


@dataclass(frozen=True)
class Spark:
    """A small line of a rate over time: SVG points in a width × height box, 0% at the
    bottom; buckets without traffic leave a gap (several polylines)."""

    lines: list  # [[(x, y), ...], ...]
    width: int
    height: int
    peak: float  # the rate at the top of the box
    summary: str

    @property
    def polylines(self) -> list[str]:
        return [" ".join(f"{x},{y}" for x, y in line) for line in self.lines]


def sparkline(
    buckets: list[tuple[int, int]],
    *,
    width: int = 120,
    height: int = 24,
    what: str = "failed",
    peak: float | None = None,
) -> Spark:
    """buckets: (count, total) per bucket, oldest first. `peak`: the rate at the top (lines
    drawn on one axis share it); by default the highest rate, at least 5%."""
    rates = [count / total if total else None for count, total in buckets]
    known = [r for r in rates if r is not None]
    peak = peak or max(max(known, default=0.0), 0.05)  # a flat 0% line sits at the bottom
    step = width / max(len(buckets) - 1, 1)
    lines, line = [], []
    for i, rate in enumerate(rates):
        if rate is None:
            if line:
                lines.append(line)
            line = []
            continue
        line.append((round(i * step, 1), round(height - rate / peak * (height - 2) - 1, 1)))
    if line:
        lines.append(line)
    # A single point draws nothing as a polyline: give it a short flat stroke.
    lines = [ln if len(ln) > 1 else [ln[0], (round(ln[0][0] + 2, 1), ln[0][1])] for ln in lines]
    count = sum(c for c, _ in buckets)
    total = sum(t for _, t in buckets)
    summary = (
        f"{count} of {total} {what} ({count / total:.1%}); highest bucket {max(known):.1%}"
        if total
        else "no traffic"
    )
    return Spark(lines=lines, width=width, height=height, peak=peak, summary=summary)
