"""Per-role gradient-mass share averaged over a run (no torch: reports use it)."""

from __future__ import annotations

from collections.abc import Sequence


def mean_grad_share(metrics: Sequence[dict]) -> dict[str, float]:
    """Mean per-role gradient-mass share over the steps that had any gradient (steps where
    every group had zero advantage carry no gradient and are skipped, not counted as 0)."""
    sums: dict[str, float] = {}
    n = 0
    for m in metrics:
        rows = m.get("roles", {})
        shares = {r: float(row["grad_share"]) for r, row in rows.items() if "grad_share" in row}
        if not shares or sum(shares.values()) <= 0:
            continue
        n += 1
        for r, v in shares.items():
            sums[r] = sums.get(r, 0.0) + v
    return {r: v / n for r, v in sums.items()} if n else {}
