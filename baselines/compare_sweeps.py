"""Are two sweeps of the same file the same runs? Compares, run by run, every evaluation
(accuracy, per-problem counts, the out-of-distribution accuracy) and every step's per-role
loss, gradient norm and reward; exit status 1 on any difference.

Why: a refactor that claims "behaviour unchanged" shows it here, on a fixed sweep
(``baselines/sweeps/refactor-check.toml``) run before and after.

    python baselines/compare_sweeps.py RUNS_BEFORE RUNS_AFTER
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _lines(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def evals(run: Path) -> list[tuple]:
    """(step, accuracy, per-problem counts, ood accuracy) of every evaluation."""
    return [
        (
            m["step"],
            m["eval"]["accuracy"],
            m["eval"].get("per_problem"),
            (m["eval"].get("ood") or {}).get("accuracy"),
        )  # fmt: skip
        for m in _lines(run)
        if "eval" in m
    ]


def updates(run: Path) -> list[tuple]:
    """(step, {role: (loss, gradient norm, reward)}) of every training step."""
    return [
        (
            m["step"],
            {
                r: (v.get("loss"), v.get("grad_norm"), v.get("reward"))
                for r, v in m["roles"].items()
            },
        )  # fmt: skip
        for m in _lines(run)
        if m.get("step", -1) >= 0 and "roles" in m
    ]


def compare(before: Path, after: Path) -> int:
    """Print one line per run; the number of runs that differ."""
    names = sorted(p.name for p in before.iterdir() if (p / "metrics.jsonl").exists())
    if not names:
        raise SystemExit(f"no runs under {before}")
    differ = 0
    for name in names:
        a, b = before / name, after / name
        if not (b / "metrics.jsonl").exists():
            print(f"MISSING    {name}")
            differ += 1
            continue
        same_eval, same_upd = evals(a) == evals(b), updates(a) == updates(b)
        curve = [(s, round(x, 4)) for s, x, _, _ in evals(a)]
        status = "identical" if same_eval and same_upd else "DIFFERENT"
        print(f"{status:<10} {name}  evals {curve}" + ("" if same_upd else "  (updates differ)"))
        differ += not (same_eval and same_upd)
    print(f"{len(names) - differ} of {len(names)} runs identical (evaluations and updates)")
    return differ


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sys.exit(1 if compare(Path(sys.argv[1]), Path(sys.argv[2])) else 0)
