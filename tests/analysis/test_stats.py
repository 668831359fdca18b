"""The interval arithmetic every verdict rests on: exact Student-t quantiles (pinned against
scipy), and bootstrap readings that are never decided by one resampling seed."""

import random

import numpy as np
import pytest

from flowzoo.analysis import stats
from flowzoo.analysis.readings import trajectory
from flowzoo.analysis.stats import (
    betainc,
    bootstrap_ci,
    decided_ci,
    t95,
    t_interval,
    t_quantile,
    t_sf,
    welch,
)
from tests.analysis.test_readings import _eval

scipy_stats = pytest.importorskip("scipy.stats")


def test_t95_is_the_exact_quantile_for_every_degree_of_freedom():
    for df in range(1, 301):
        assert t95(df) == pytest.approx(scipy_stats.t.ppf(0.975, df), rel=1e-10, abs=1e-10)
    # the old table returned the normal quantile from 10 degrees of freedom on
    assert t95(10) == pytest.approx(2.228, abs=1e-3) and t95(24) == pytest.approx(2.064, abs=1e-3)
    assert t95(0) == float("inf")


@pytest.mark.parametrize("df", [1, 2, 3, 5, 9, 10, 30, 299, 1000, 2.5])
@pytest.mark.parametrize("p", [0.001, 0.025, 0.1, 0.5, 0.8, 0.975, 0.995, 0.9999])
def test_t_quantile_and_tail_match_scipy(p, df):
    assert t_quantile(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-9, abs=1e-10)
    x = scipy_stats.t.ppf(p, df)
    assert t_sf(x, df) == pytest.approx(scipy_stats.t.sf(x, df), rel=1e-9, abs=1e-14)


def test_betainc_matches_scipy_and_refuses_outside_its_domain():
    special = pytest.importorskip("scipy.special")
    for a, b, x in [(0.5, 0.5, 0.3), (5, 0.5, 0.99), (150, 0.5, 0.2), (2, 3, 0.0), (2, 3, 1.0)]:
        assert betainc(a, b, x) == pytest.approx(special.betainc(a, b, x), rel=1e-10, abs=1e-15)
    with pytest.raises(ValueError, match="outside"):
        betainc(1, 1, 1.5)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)
    with pytest.raises(ValueError):
        t_quantile(0.5, 0)


def test_t_intervals_use_the_exact_quantile_past_ten_seeds():
    rng = random.Random(3)
    xs = [rng.gauss(0.02, 0.03) for _ in range(20)]
    m, h = t_interval(xs)
    sd = float(np.std(xs, ddof=1))
    assert h == pytest.approx(scipy_stats.t.ppf(0.975, 19) * sd / len(xs) ** 0.5)
    assert h > 1.96 * sd / len(xs) ** 0.5  # wider than the normal interval it used to be
    a, b = xs[:12], [x + 0.01 for x in xs[8:]]
    d, hw = welch(a, b)
    se = (np.var(a, ddof=1) / 12 + np.var(b, ddof=1) / 12) ** 0.5
    assert hw == pytest.approx(scipy_stats.t.ppf(0.975, 11) * se)


def _diffs(n: int = 200, seed: int = 0, shift: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(-4, 5, size=n) / 4 + shift


def test_a_clear_bound_is_decided_with_the_usual_draw():
    x = _diffs(shift=0.3)
    m, lo, hi, ok = decided_ci(x)
    assert ok and (m, lo, hi) == bootstrap_ci(x)  # the same 2,000 resamples as always
    assert lo > 0


def test_a_bound_on_its_threshold_is_resampled_and_left_undecided(monkeypatch):
    x = _diffs(seed=4)
    _, lo, hi = bootstrap_ci(x)
    # the threshold sits exactly on the usual draw's low bound: another seed could put the
    # bound on either side of it
    monkeypatch.setattr(stats, "BOOT_ESCALATION", (stats.N_BOOT,))
    assert decided_ci(x, lo_at=(lo,), hi_at=())[3] is False
    assert decided_ci(x, lo_at=(), hi_at=(hi,))[3] is False
    # far from the threshold: decided
    assert decided_ci(x, lo_at=(lo - 0.2,), hi_at=())[3] is True


def test_more_resamples_decide_what_one_draw_cannot():
    x = _diffs(seed=4)
    _, lo, _ = bootstrap_ci(x)
    # a threshold just inside the usual draw's Monte-Carlo band, but outside the band of
    # 200,000 resamples around the bound they find
    _, lo_big, _, _ = decided_ci(x, lo_at=(lo,), hi_at=())
    t = lo_big + (0.004 if lo_big < lo else -0.004)
    m, lo2, hi2, ok = decided_ci(x, lo_at=(t,), hi_at=())
    assert ok and lo2 != lo  # decided, on a bigger draw than the usual one


def test_a_trajectory_whose_rise_sits_on_its_threshold_is_undecided(monkeypatch):
    curve = [(10 * i, _eval(a, seed=i)) for i, a in enumerate([0.40, 0.46, 0.47, 0.46])]
    t = trajectory(curve)
    assert t.klass == "rose and held" and t.undecided == ()
    assert "undecided" not in t.as_dict()  # decided records read as they always did
    monkeypatch.setattr(stats, "BOOT_ESCALATION", (stats.N_BOOT,))
    on_edge = trajectory(curve, floor=t.rise_ci[0])
    assert on_edge.klass == "undecided" and "rise" in on_edge.undecided
    assert on_edge.as_dict()["undecided"] == ["rise"]
