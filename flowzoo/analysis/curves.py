"""Peak / final / cliff reading of a held-out accuracy curve (no torch: reports use it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass
class CurveSummary:
    base: float
    peak: float
    peak_step: int
    final: float
    delta_vs_base: float
    drop_from_peak: float
    cliff: bool

    def as_dict(self) -> dict:
        return asdict(self)


def analyze_curve(
    steps: Sequence[int], acc: Sequence[float], window: int = 3, margin: float = 0.1
) -> CurveSummary:
    """Base (first point), peak (max, first step reaching it), final (mean of the last
    ``window`` points). **Cliff rule**: final is at least ``margin`` below the peak *and*
    below the base — the run got better, then ended worse than it started."""
    if not acc or len(steps) != len(acc):
        raise ValueError("need a non-empty accuracy curve with one step per point")
    base = float(acc[0])
    i = max(range(len(acc)), key=lambda k: (acc[k], -k))
    peak = float(acc[i])
    tail = acc[-window:]
    final = float(sum(tail) / len(tail))
    cliff = (peak - final) >= margin and final < base
    return CurveSummary(base, peak, int(steps[i]), final, final - base, peak - final, cliff)


def mean_grad_share(metrics: Sequence[dict]) -> dict[str, float]:
    """Mean per-role gradient-mass share over the steps that had any gradient (steps where
    every group had zero advantage carry no gradient and are skipped, not counted as 0)."""
    sums: dict[str, float] = {}
    n = 0
    for m in metrics:
        rows = m.get("roles", {})
        shares = {r: float(row.get("grad_share", 0.0)) for r, row in rows.items()}
        if not shares or sum(shares.values()) <= 0:
            continue
        n += 1
        for r, v in shares.items():
            sums[r] = sums.get(r, 0.0) + v
    return {r: v / n for r, v in sums.items()} if n else {}
