"""Confidence intervals over held-out problems (no torch: reports and runs share them).

Why bootstrap over problems: an evaluation's samples of one problem are not independent (a
hard problem is failed by all k), so the unit that is resampled is the problem, each carrying
its mean over its k samples. Two evaluations of the same problems (base and final of a run)
are compared *paired*: the per-problem differences are resampled, which is what makes a
gain of a few points resolvable on a few hundred problems.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: bootstrap resamples (the CI's own Monte-Carlo error is ~0.1 of a point at this count)
N_BOOT = 2000


def bootstrap_ci(
    per_problem: Sequence[float], level: float = 0.95, n_boot: int = N_BOOT, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, low, high): the mean of per-problem scores and its percentile bootstrap
    interval over problems."""
    x = np.asarray(per_problem, dtype=float)
    if x.size == 0:
        raise ValueError("bootstrap_ci needs at least one problem")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    a = (1 - level) / 2
    lo, hi = np.quantile(means, [a, 1 - a])
    return float(x.mean()), float(lo), float(hi)


def paired_diff_ci(
    a: Sequence[float], b: Sequence[float], level: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, low, high) of ``b - a`` over the same problems, paired."""
    if len(a) != len(b):
        raise ValueError(f"paired comparison needs the same problems ({len(a)} vs {len(b)})")
    return bootstrap_ci(np.asarray(b, float) - np.asarray(a, float), level, seed=seed)


def mean_of(evals: Sequence[Sequence[float]]) -> list[float]:
    """Per-problem mean over several evaluations of the same problems (a run's last few)."""
    return np.asarray(evals, dtype=float).mean(axis=0).tolist()


#: two-sided 95% Student-t quantiles by degrees of freedom
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def wilson(k: float, n: float, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson interval of a proportion ``k / n`` (sound at small ``n`` and near 0 or 1,
    where the normal interval is not); (0, 1) when ``n`` is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def fisher_exact(a: int, n1: int, b: int, n2: int) -> float:
    """Two-sided p of Fisher's exact test that ``a`` of ``n1`` and ``b`` of ``n2`` are one
    rate: with the margins fixed, the chance of a table no likelier than the one seen (the
    one-stratum case of :func:`stratified_exact`). Why: counts of runs that fell are a few
    of a handful, where 3 of 3 against 0 of 3 is p = 0.1 and no count difference at 3 runs
    a side decides anything."""
    return stratified_exact([(a, n1, b, n2)])[0]


def stratified_exact(tables: Sequence[tuple[int, int, int, int]]) -> tuple[float, float]:
    """Two-sided p of the exact test that two sides share one rate within every stratum,
    and the count the first side would have at one rate: ``tables`` are ``(a, n1, b, n2)``
    per stratum (``a`` of ``n1`` against ``b`` of ``n2``); the statistic is the first side's
    total, whose law given each stratum's margins is the convolution of hypergeometrics; p
    sums the totals no likelier than the one seen. One stratum gives :func:`fisher_exact`.
    Why: runs of several builds (or cells) pooled into one 2x2 table compare builds as well
    as sides, and a build that falls often with more runs on one side would decide alone."""
    law = [1.0]  # law[x]: the chance of a first-side total x so far
    seen = expected = 0.0
    for a, n1, b, n2 in tables:
        if not (0 <= a <= n1 and 0 <= b <= n2):
            raise ValueError(f"stratified_exact: a table ({a} fell of {n1}, {b} fell of {n2})")
        k, n = a + b, n1 + n2
        lo, hi = max(0, k - n2), min(k, n1)
        q = [0.0] * lo + [
            math.comb(n1, x) * math.comb(n2, k - x) / math.comb(n, k) for x in range(lo, hi + 1)
        ]
        law = [
            sum(law[t - x] * q[x] for x in range(len(q)) if 0 <= t - x < len(law))
            for t in range(len(law) + len(q) - 1)
        ]
        seen += a
        expected += k * n1 / n if n else 0.0
    cut = law[int(seen)] * (1 + 1e-9)
    return min(1.0, sum(v for v in law if v <= cut)), expected


def t95(df: int) -> float:
    """The two-sided 95% Student-t quantile (inf below 1 degree of freedom: no interval)."""
    return _T95.get(df, 1.96) if df >= 1 else float("inf")


def t_interval(xs: Sequence[float]) -> tuple[float, float]:
    """The mean of ``xs`` and the half-width of its 95% t interval (inf for one value)."""
    m = float(np.mean(xs))
    if len(xs) < 2:
        return m, float("inf")
    return m, t95(len(xs) - 1) * float(np.std(xs, ddof=1)) / math.sqrt(len(xs))


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """mean(a) - mean(b) and the half-width of its 95% interval (Welch, with the smaller
    side's degrees of freedom: conservative at 3 seeds; inf with one value a side)."""
    d = float(np.mean(a)) - float(np.mean(b))
    va = float(np.var(a, ddof=1)) / len(a) if len(a) > 1 else float("inf")
    vb = float(np.var(b, ddof=1)) / len(b) if len(b) > 1 else float("inf")
    return d, t95(min(len(a), len(b)) - 1) * math.sqrt(va + vb)
