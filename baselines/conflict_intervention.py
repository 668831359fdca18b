"""The intervention declared in ``baselines/sweeps/conflict-intervention.toml``, read: does
weighting every role's turns the same in a shared policy's loss remove the capture that
``conflict-claims.toml`` found on Orch-Workers (the Shared synthesizer answering bare less
often than the Isolated one)?

Reads each run's last evaluation (``eval.behaviour``, ``eval.accuracy`` in ``metrics.jsonl``)
and pairs runs by seed. The primary reading is the declared one: the synthesizer's bare rate,
equal weights minus Shared, a paired t over seeds (two-sided, alpha = 0.05). Writes
``reading.json`` and ``README.md`` to ``--out``. No verdict from fewer runs than declared.

    python3 baselines/conflict_intervention.py \\
        --claims runs/conflict-claims --intervention runs/conflict-intervention \\
        --out baselines/results/conflict-intervention
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from flowzoo.analysis.conflict import ALPHA, paired_t_p
from flowzoo.analysis.records import read_metrics
from flowzoo.analysis.stats import t_interval

SEEDS = range(8)
ARMS = {
    "shared": "env=orch_workers_math-policy=shared-seed={s}",
    "isolated": "env=orch_workers_math-policy=isolated-seed={s}",
    "isolated (update-matched)": "extra{x}-env=orch_workers_math-policy=isolated-update_matched=True-seed={s}",
    "shared, equal role weights": "seed={s}",
}


def last_eval(run: Path) -> dict | None:
    """The run's last evaluation, or None when it did not complete."""
    try:
        if json.loads((run / "summary.json").read_text()).get("status") != "completed":
            return None
    except (OSError, ValueError):
        return None
    evals = [m["eval"] for m in read_metrics(run / "metrics.jsonl") if "eval" in m]
    return evals[-1] if evals else None


def arm_values(root: Path, pattern: str) -> dict[int, dict]:
    """seed -> (synthesizer bare rate, orchestrator considered rate, accuracy)."""
    out = {}
    for s in SEEDS:
        ev = last_eval(root / pattern.format(s=s, x=12 + s))
        if ev is not None:
            b = ev.get("behaviour") or {}
            out[s] = {
                "synthesizer": b.get("synthesizer"),
                "orchestrator": b.get("orchestrator"),
                "accuracy": ev["accuracy"],
            }
    return out


def paired(a: dict[int, dict], b: dict[int, dict], key: str) -> dict:
    """``a`` minus ``b`` on ``key``, paired by seed: mean, 95% t half-width, p, n."""
    seeds = sorted(set(a) & set(b))
    diffs = [a[s][key] - b[s][key] for s in seeds]
    m, h = t_interval(diffs) if diffs else (float("nan"), float("inf"))
    return {
        "diff": m,
        "half_width": h,
        "p": paired_t_p(diffs) if len(diffs) > 1 else 1.0,
        "n": len(diffs),
    }


def verdict(x: dict, n_declared: int) -> str:
    if x["n"] < n_declared:
        return f"no verdict ({x['n']} of the {n_declared} declared pairs have completed runs)"
    if x["p"] >= ALPHA:
        return f"inconclusive (p = {x['p']:.2g})"
    if x["diff"] > 0:
        return (
            f"the pressure carries the effect (equal weights raise the bare rate; p = {x['p']:.2g})"
        )
    return f"contradicted (equal weights lower the bare rate; p = {x['p']:.2g})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--claims", default="runs/conflict-claims", help="conflict-claims runs")
    ap.add_argument("--intervention", default="runs/conflict-intervention", help="its runs")
    ap.add_argument(
        "--out", default="baselines/results/conflict-intervention", help="where to write"
    )
    a = ap.parse_args(argv)
    roots = {k: Path(a.intervention if "equal" in k else a.claims) for k in ARMS}
    arms = {k: arm_values(roots[k], p) for k, p in ARMS.items()}
    eq, sh = arms["shared, equal role weights"], arms["shared"]
    primary = paired(eq, sh, "synthesizer")
    rows = {
        "synthesizer bare rate, equal weights - Shared (declared)": primary,
        "synthesizer bare rate, Isolated - equal weights": paired(
            arms["isolated"], eq, "synthesizer"
        ),
        "synthesizer bare rate, Isolated (update-matched) - equal weights": paired(
            arms["isolated (update-matched)"], eq, "synthesizer"
        ),
        "synthesizer bare rate, Isolated - Shared (conflict-claims)": paired(
            arms["isolated"], sh, "synthesizer"
        ),
        "final accuracy, equal weights - Shared": paired(eq, sh, "accuracy"),
        "orchestrator considered rate, equal weights - Shared": paired(eq, sh, "orchestrator"),
    }
    means = {
        k: {
            m: sum(v[m] for v in vals.values()) / len(vals)
            for m in ("synthesizer", "orchestrator", "accuracy")
        }
        for k, vals in arms.items()
        if vals
    }
    result = {
        "declared": "baselines/sweeps/conflict-intervention.toml",
        "verdict": verdict(primary, len(SEEDS)),
        "runs": {k: len(v) for k, v in arms.items()},
        "means": means,
        "readings": rows,
        "per_seed": {k: {str(s): v for s, v in vals.items()} for k, vals in arms.items()},
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "reading.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        "# The intervention on the capture (Orch-Workers, role-conflict testbed)",
        "",
        f"Declared in `{result['declared']}`; written by `python3 baselines/conflict_intervention.py`.",
        "Each number is a run's last evaluation (200 held-out problems × 4 samples); pairs by seed; "
        "± is a 95% t half-width over seeds.",
        "",
        f"**Verdict (declared reading)**: {result['verdict']}.",
        "",
        "| arm | runs | synthesizer bare rate | orchestrator considered rate | final accuracy |",
        "|---|---|---|---|---|",
    ]
    for k, m in means.items():
        lines.append(
            f"| {k} | {result['runs'][k]} | {m['synthesizer']:.4f} | {m['orchestrator']:.3f} | {m['accuracy']:.3f} |"
        )
    lines += ["", "| reading | difference ± 95% | p | pairs |", "|---|---|---|---|"]
    for k, x in rows.items():
        lines.append(
            f"| {k} | {x['diff']:+.4f} ± {x['half_width']:.4f} | {x['p']:.2g} | {x['n']} |"
        )
    (out / "README.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
