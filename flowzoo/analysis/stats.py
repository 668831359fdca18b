"""Confidence intervals over held-out problems (no torch: reports and runs share them).

Why bootstrap over problems: an evaluation's samples of one problem are not independent (a
hard problem is failed by all k), so the unit that is resampled is the problem, each carrying
its mean over its k samples. Two evaluations of the same problems (base and final of a run)
are compared *paired*: the per-problem differences are resampled, which is what makes a
gain of a few points resolvable on a few hundred problems.
"""

from __future__ import annotations

import functools
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
    means = _resampled_means(x, n_boot, seed)
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


#: resample counts tried in turn while a bound lies within its Monte-Carlo error of a
#: threshold (the first is :data:`N_BOOT`, so a clear decision reads as it always did)
BOOT_ESCALATION = (N_BOOT, 20_000, 200_000)


def _resampled_means(x: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """``n_boot`` bootstrap means of ``x``, sorted; drawn in chunks (200k x 1k problems
    would not fit at once), and the first chunk is exactly :func:`bootstrap_ci`'s draw."""
    rng = np.random.default_rng(seed)
    chunk = max(1, min(n_boot, 4_000_000 // max(1, x.size)))
    if n_boot <= chunk:
        return np.sort(x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1))
    parts = []
    for start in range(0, n_boot, chunk):
        k = min(chunk, n_boot - start)
        parts.append(x[rng.integers(0, x.size, size=(k, x.size))].mean(axis=1))
    return np.sort(np.concatenate(parts))


def _mc_band(means: np.ndarray, q: float) -> tuple[float, float]:
    """The 95% Monte-Carlo band of the ``q`` quantile of sorted resampled ``means``: the
    order statistics ``B q +- 1.96 sqrt(B q (1 - q))`` (distribution-free), i.e. where the
    bound could land with another resampling seed."""
    b = means.size
    half = 1.96 * math.sqrt(b * q * (1 - q))
    r = q * (b - 1)
    lo = int(max(0, math.floor(r - half)))
    hi = int(min(b - 1, math.ceil(r + half)))
    return float(means[lo]), float(means[hi])


def decided_ci(
    per_problem: Sequence[float],
    lo_at: Sequence[float] = (0.0,),
    hi_at: Sequence[float] = (0.0,),
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float, bool]:
    """(mean, low, high, decided): :func:`bootstrap_ci`, resampled with more draws
    (:data:`BOOT_ESCALATION`) while the low bound's Monte-Carlo band holds one of the
    thresholds it is compared with (``lo_at``), or the high bound's one of ``hi_at`` (the
    comparison could come out the other way with another resampling seed); ``decided`` is
    False when it still does at the largest count.
    Why: one counted fall rested on a bound of -0.003 that another seed put at 0.000."""
    x = np.asarray(per_problem, dtype=float)
    if x.size == 0:
        raise ValueError("decided_ci needs at least one problem")
    a = (1 - level) / 2
    lo = hi = float("nan")
    for n_boot in BOOT_ESCALATION:
        means = _resampled_means(x, n_boot, seed)
        lo, hi = (float(v) for v in np.quantile(means, [a, 1 - a]))
        checks = [(_mc_band(means, a), t) for t in lo_at]
        checks += [(_mc_band(means, 1 - a), t) for t in hi_at]
        if not any(bl <= t <= bh and bl < bh for (bl, bh), t in checks):
            return float(x.mean()), lo, hi, True
    return float(x.mean()), lo, hi, False


def paired_decided_ci(
    a: Sequence[float],
    b: Sequence[float],
    lo_at: Sequence[float] = (0.0,),
    hi_at: Sequence[float] = (0.0,),
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float, bool]:
    """:func:`decided_ci` of ``b - a`` over the same problems, paired."""
    if len(a) != len(b):
        raise ValueError(f"paired comparison needs the same problems ({len(a)} vs {len(b)})")
    diff = np.asarray(b, float) - np.asarray(a, float)
    return decided_ci(diff, lo_at, hi_at, level, seed)


def mean_of(evals: Sequence[Sequence[float]]) -> list[float]:
    """Per-problem mean over several evaluations of the same problems (a run's last few)."""
    return np.asarray(evals, dtype=float).mean(axis=0).tolist()


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


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz),
    converged to double precision."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), the Student-t tail's closed form."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"betainc: x = {x} is outside [0, 1]")
    if x in (0.0, 1.0):
        return x
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


@functools.lru_cache(maxsize=1024)
def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom, exact to ~1e-12
    (bisection on :func:`t_sf`). Why not a table that ends in 1.96: from 10 degrees of
    freedom on that table made every interval 2-12% too narrow and flipped a verdict."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p = {p} is outside (0, 1)")
    if df <= 0:
        raise ValueError(f"t_quantile: df = {df} must be > 0")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > 1.0 - p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_sf(mid, df) > 1.0 - p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def t95(df: int) -> float:
    """The two-sided 95% Student-t quantile, exact for every degree of freedom (inf below 1
    degree of freedom: no interval)."""
    return t_quantile(0.975, df) if df >= 1 else float("inf")


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
