"""How often each parameterisation rose then fell, build by build: a table and a plot of the
fall rate (95% Wilson interval) of Isolated and Shared in every matched Voting/Orch-Workers
cell of the given sweeps, with the exact test stratified by cell over all of them.

Why: the fall count came out opposite ways on two builds at one lr, so the claim about the
parameterisation is read across builds (each build a stratum), not on more seeds of one.
Every number is recomputed from the per-run records the report reads.

    python baselines/falls_by_build.py RUNS_DIR [RUNS_DIR ...] --out docs/img/falls-by-build.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

from flowzoo.analysis.findings import fall_counts, matched_pairs
from flowzoo.analysis.report import cell_stats, load_runs
from flowzoo.analysis.stats import stratified_exact, wilson


def fall_tables(dirs: list[str]) -> list[tuple[str, int, int, int, int]]:
    """(cell label, isolated fell, isolated runs, shared fell, shared runs) per matched cell
    of a parallel workflow, in the report's cell order."""
    rows = []
    for i, _, counts in fall_counts(matched_pairs(cell_stats(load_runs(dirs)))):
        _task, wf, model, _policy, _param, levers = i.key
        label = f"{wf} {model}" + (f" {levers}" if levers not in ("", "-") else "")
        rows.append((label, *counts))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("dirs", nargs="+", help="run directories (a sweep's out_dir or runs/)")
    ap.add_argument("--out", default=None, help="the plot (PNG); none if not given")
    args = ap.parse_args(argv)
    rows = fall_tables(args.dirs)
    if not rows:
        raise SystemExit("no matched Voting/Orch-Workers cells (Isolated and Shared) found")
    print("| cell | isolated fell | shared fell | Fisher's exact p |\n|---|---|---|---|")
    for label, a, n1, b, n2 in rows:
        p, _ = stratified_exact([(a, n1, b, n2)])
        print(f"| {label} | {a}/{n1} | {b}/{n2} | {p:.3f} |")
    p, expected = stratified_exact([r[1:] for r in rows])
    fi = sum(r[1] for r in rows)
    print(
        f"\nstratified exact test over {len(rows)} cells: p = {p:.3f}; isolated fell {fi} "
        f"against {expected:.1f} expected at one rate per cell"
    )
    if args.out:
        _plot(rows, Path(args.out))
    return 0


def _plot(rows: list, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(rows), 3.6))
    for k, (_, a, n1, b, n2) in enumerate(rows):
        for dx, (f, n), colour, name in (
            (-0.12, (a, n1), "tab:red", "Isolated"),
            (0.12, (b, n2), "tab:blue", "Shared"),
        ):
            lo, hi = wilson(f, n)
            ax.errorbar(k + dx, f / n, yerr=[[f / n - lo], [hi - f / n]], fmt="o", color=colour,
                        capsize=3, label=name if k == 0 else None)  # fmt: skip
    ticks = [r[0].replace(" ", "\n") + f"\n{r[2]} vs {r[4]} runs" for r in rows]
    ax.set_xticks(range(len(rows)), ticks, fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("runs that rose then fell")
    ax.set_title("Fall rate by build (95% Wilson intervals)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    raise SystemExit(main())
