"""The study's claims, each checked against a set of cells by a stated rule (no torch).

Every claim is decided only on enough evidence (:func:`too_little`: >= 3 runs a side, >= 4
evaluations each); otherwise it says *insufficient evidence*. Each rule reads the per-run
readings of :mod:`flowzoo.analysis.readings`, so a verdict can come out either way.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import mean

from flowzoo.analysis.readings import PARALLEL_ROLES, capture, norm_around_peak, role_norms

#: the least evidence a claim is decided on: runs on each compared side, evaluations per run
MIN_RUNS = 3
MIN_EVALS = 4

RULES = [
    "**Trajectory classes** (per run, 95% bootstrap intervals over held-out problems, paired "
    "where per-problem scores exist): *rose* = the peak's interval against base is above 0 "
    "(Bonferroni-corrected over the run's evaluations, so picking the best evaluation does not "
    "make a flat run rise); *fell* = the final's (mean of the last evaluations) interval "
    "against the peak is below 0; classes: never rose / rose and held / rose then fell; a "
    "*cliff* = rose then fell to at most the base.",
    "**Gain**: final - base with its 95% CI; a run *improved* (or *worsened*) when the CI "
    "excludes 0.",
    "**Capture** (shared policy): the role with the largest mean gradient-mass share captures "
    "the policy when its share exceeds its token share by > 0.05 *and* its late share (last "
    "third of steps) exceeds its early share (first third); beside it, the other role's own "
    "decision quality at base and at the end (Voting: accuracy - majority of the sampled "
    "solvers; Eval-Opt: evaluator verdict accuracy; Orch-Workers: accuracy - any worker).",
    "**Amplification**: the gradient norm of the parallel role (solvers, workers) under "
    "Isolated vs Shared in matched cells, and, in runs that rose then fell, before vs after "
    "the peak.",
]


def too_little(cells: list, min_runs: int = MIN_RUNS) -> str | None:
    """Why ``cells`` are too little evidence to decide a claim on (None when enough)."""
    runs = [r for c in cells for r in c.runs]
    if len(runs) < min_runs:
        return f"insufficient evidence ({len(runs)} runs; a claim needs >= {min_runs} a side)"
    short = min(len(r.curve) for r in runs)
    if short < MIN_EVALS:
        return (
            f"insufficient evidence (runs with {short} evaluations; a claim needs >= {MIN_EVALS})"
        )
    return None


def _pairs(multi: list) -> list[tuple]:
    """(isolated cell, shared cell) pairs that differ only by policy."""
    by = {(c.key[0], c.key[1], c.key[2], c.key[4], c.key[5], c.key[3]): c for c in multi}
    out = []
    for (task, wf, model, param, lev, pol), c in by.items():
        if pol == "isolated" and (task, wf, model, param, lev, "shared") in by:
            out.append((c, by[(task, wf, model, param, lev, "shared")]))
    return out


def _improves(multi: list) -> str:
    traj = [t for c in multi for t in c.traj]
    n = len(traj)
    up = sum(t.gain_ci[0] > 0 for t in traj)
    down = sum(t.gain_ci[1] < 0 for t in traj)
    rose = sum(t.klass != "never rose" for t in traj)
    if up > n / 2:
        verdict = "supported"
    elif down > n / 2:
        verdict = "contradicted"
    else:
        verdict = "inconclusive"
    verdict = too_little(multi) or verdict
    return (
        f"**Multi-agent RL improves over the base model** — {verdict}: {up}/{n} runs improved "
        f"(gain CI above 0), {down}/{n} worsened (CI below 0), the rest within their CI; "
        f"{rose}/{n} rose at some point; mean gain {mean(t.gain for t in traj):+.3f}."
    )


def _peaks(pairs: list) -> str:
    higher = sum(mean(i.peak) > mean(s.peak) for i, s in pairs)
    lower = sum(mean(i.peak) < mean(s.peak) for i, s in pairs)
    diff = mean(mean(i.peak) - mean(s.peak) for i, s in pairs)
    rose_i = sum(i.count("never rose") < len(i.traj) for i, _ in pairs)
    if 2 * higher > len(pairs) and diff > 0:
        verdict = "supported"
    elif 2 * lower > len(pairs) and diff < 0:
        verdict = "contradicted"
    else:
        verdict = "inconclusive"
    verdict = too_little([i for i, _ in pairs]) or too_little([s for _, s in pairs]) or verdict
    return (
        f"**Isolated-Policy reaches a higher peak than Shared-Policy** — {verdict}: higher in "
        f"{higher}/{len(pairs)} matched cells, lower in {lower}/{len(pairs)}, mean peak "
        f"difference {diff:+.3f} (cells where an isolated run rose at all: {rose_i})."
    )


def _falls(pairs: list) -> str | None:
    par = [(i, s) for i, s in pairs if i.key[1] in ("voting", "orch-workers")]
    if not par:
        return None
    fi = sum(i.count("rose then fell") for i, _ in par)
    fs = sum(s.count("rose then fell") for _, s in par)
    ni = sum(len(i.traj) for i, _ in par)
    ns = sum(len(s.traj) for _, s in par)
    gate = too_little([i for i, _ in par]) or too_little([s for _, s in par])
    if gate:
        verdict = gate
    elif fi == fs == 0:
        verdict = "inconclusive (no run rose then fell)"
    elif abs(fi / ni - fs / ns) * max(ni, ns) <= 1:
        verdict = "inconclusive (one run apart)"
    else:
        verdict = "supported" if fi / ni > fs / ns else "contradicted"
    return (
        f"**Isolated-Policy rises then falls more often in Voting/Orch-Workers** — {verdict}: "
        f"rose then fell isolated {fi}/{ni} runs vs shared {fs}/{ns}."
    )


def _capture(multi: list) -> str | None:
    shared = [c for c in multi if c.key[3] == "shared"]
    reads = [(c, capture(c.key[1], r.metrics)) for c in shared for r in c.runs]
    reads = [(c, x) for c, x in reads if x is not None]
    if not reads:
        return None
    caught = [x for _, x in reads if x["captured"]]
    q = [
        (x["partner_quality_base"], x["partner_quality_final"])
        for x in caught
        if x["partner_quality_base"] is not None and x["partner_quality_final"] is not None
    ]
    worse = sum(final < base for base, final in q)
    if 2 * len(caught) <= len(reads):
        verdict = "not supported"
    elif q and 2 * worse > len(q):
        verdict = "supported"
    else:
        verdict = (
            "inconclusive (a role captured the gradient, its partner's decisions did not degrade)"
        )
    verdict = too_little(shared) or verdict
    by_cell: dict[str, list[dict]] = defaultdict(list)
    for c, x in reads:
        by_cell[
            f"{c.key[1]}-{c.key[0]} {c.key[2]} {c.key[4]}"
            + ("" if c.key[5] == "-" else f" {c.key[5]}")
        ].append(x)
    detail = "; ".join(
        f"{name}: {xs[0]['role']} share {mean(x['grad_share'] for x in xs):.2f} vs tokens "
        f"{mean(x['token_share'] for x in xs):.2f}, early {mean(x['early_share'] for x in xs):.2f}"
        f" -> late {mean(x['late_share'] for x in xs):.2f}, captured {sum(x['captured'] for x in xs)}/{len(xs)}"
        + _partner(xs)
        for name, xs in by_cell.items()
    )
    return (
        f"**Under Shared-Policy one role captures the gradient and its partner's decisions "
        f"degrade** — {verdict}: captured in {len(caught)}/{len(reads)} shared runs; partner "
        f"quality fell in {worse}/{len(q)} of those. {detail}."
    )


def _partner(xs: list[dict]) -> str:
    q = [
        (x["partner_quality_base"], x["partner_quality_final"])
        for x in xs
        if x["partner_quality_base"] is not None and x["partner_quality_final"] is not None
    ]
    if not q:
        return ""
    return (
        f"; {xs[0]['partner']} quality {mean(a for a, _ in q):+.3f} -> {mean(b for _, b in q):+.3f}"
    )


def _amplification(pairs: list) -> str | None:
    rows, ratios = [], []
    for i, s in pairs:
        role = next(
            (r for r in PARALLEL_ROLES if any(r in m.get("roles", {}) for m in i.runs[0].metrics)),
            None,
        )
        if role is None:
            continue
        ni = [v for r in i.runs for _, v in role_norms(r.metrics, role)]
        ns = [v for r in s.runs for _, v in role_norms(r.metrics, role)]
        if not ni or not ns or mean(ns) == 0:
            continue
        ratio = mean(ni) / mean(ns)
        ratios.append(ratio)
        around = [
            norm_around_peak(r.metrics, role, t.peak_step)
            for r, t in zip(i.runs, i.traj, strict=True)
            if t.klass == "rose then fell"
        ]
        around = [a for a in around if a is not None]
        fall = (
            f", falling isolated runs {mean(b for _, b in around) / max(1e-12, mean(a for a, _ in around)):.2f}x "
            f"after the peak vs before ({len(around)} runs)"
            if around
            else ", no isolated run rose then fell"
        )
        rows.append(
            f"{i.key[1]}-{i.key[0]} {i.key[2]} {i.key[4]}: {role} norm isolated/shared {ratio:.2f}{fall}"
        )
    if not ratios:
        return None
    cells = [c for p in pairs for c in p]
    if too_little(cells):
        verdict = too_little(cells)
    elif sum(x > 1 for x in ratios) * 2 > len(ratios):
        verdict = "supported"
    elif sum(x < 1 for x in ratios) * 2 > len(ratios):
        verdict = "contradicted"
    else:
        verdict = "inconclusive"
    return (
        f"**Isolated-Policy amplifies the parallel role's gradient** — {verdict}: "
        + "; ".join(rows)
        + "."
    )


def findings(stats: list) -> list[str]:
    """Each claim's verdict with the numbers behind it (never beyond them)."""
    multi = [c for c in stats if c.key[1] != "single"]
    if not multi:
        return []
    lines = [_improves(multi)]
    pairs = _pairs(multi)
    if pairs:
        lines += [x for x in (_peaks(pairs), _falls(pairs), _amplification(pairs)) if x]
    else:
        lines.append(
            "**Isolated vs Shared** — inconclusive: no matched pair of cells (same workflow, "
            "task, model, parameterisation, levers)."
        )
    cap = _capture(multi)
    if cap:
        lines.append(cap)
    return lines
