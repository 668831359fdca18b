"""The study's claims, each checked against a set of cells by a stated rule (no torch).

Every claim is decided only on enough evidence (:func:`too_little`: >= 3 runs a side, >= 4
evaluations each); otherwise it says *insufficient evidence*. Each rule reads the per-run
readings of :mod:`flowzoo.analysis.readings`, so a verdict can come out either way.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from statistics import mean
from typing import Any

from flowzoo.analysis.protocol import cell_label
from flowzoo.analysis.readings import capture, norm_around_peak, readings_of, role_norms
from flowzoo.analysis.stats import stratified_exact, t_interval, welch

#: the least evidence a claim is decided on: runs on each compared side, evaluations per run
MIN_RUNS = 3
MIN_EVALS = 4

RULES = [
    "**Trajectory classes** (per run, 95% bootstrap intervals over held-out problems, paired "
    "where per-problem scores exist): *rose* = the peak's interval against base is above 0 "
    "(Bonferroni-corrected over the run's evaluations, so picking the best evaluation does not "
    "make a flat run rise); *fell* = the interval of the final window's evaluations that "
    "come after the peak, against the peak, is below 0; classes: never rose / rose and held / rose then fell; a "
    "*cliff* = rose then fell to at most the base. A bootstrap bound whose Monte-Carlo band "
    "(the order statistics where another resampling seed could put it) holds the rule's "
    "threshold is resampled with 20,000 and then 200,000 draws; if it still does, the "
    "reading is *undecided* (the run is left out of the fall counts, and a gain so read "
    "counts as neither improved nor worsened).",
    "**Gain**: final - base with its 95% CI; a run *improved* (or *worsened*) when the CI "
    "excludes 0.",
    "**Capture** (shared policy): the role with the largest mean gradient-mass share captures "
    "the policy when the 95% interval over steps of its share minus the share the workflow's "
    "shape gives it (its turn share under a sequence-mean loss, its token share under a "
    "token-mean one) lies above 0.05 *and* the interval of its late share (last third of "
    "steps) minus its early share (first third) lies above 0; beside it, the other role's own "
    "decision quality at base and at the end (Voting: accuracy - majority of the sampled "
    "solvers; Eval-Opt: evaluator verdict accuracy; Orch-Workers: accuracy - any worker).",
    "**Isolated vs Shared** (peaks, amplification): a matched pair of cells counts as higher "
    "or lower only when the 95% interval over seeds of the difference excludes 0: paired by "
    "seed (a t interval of the per-seed differences) where both cells ran the same seeds, "
    "else Welch.",
    "**Control** (per workflow): each of its cells against the single agent trained the same "
    "way (same task, model, parameterisation, levers), on the final accuracy, paired by seed; "
    "the workflow ends *above* or *below* its control when most of its cells are clearly so "
    "(95% interval excludes 0); clearly below contradicts the claim, it does not just fail to "
    "support it. The *compute-matched* control is the single agent (same task, model, "
    "parameterisation) whose sampled turns per step are within 25% of the workflow's: a "
    "workflow spends 3-6 turns per episode to the single agent's one.",
    "**Amplification**: read on what moves the weights where runs record it: the length of "
    "the actual update (after clipping and Adam) along the parallel role's descent direction, "
    "Isolated vs Shared paired by seed, per Adam step (the verdict's reading) and per "
    "rollout step (times the Adam steps the role's policy made in it); beside it, the "
    "parallel role's (solvers', workers') "
    "gradient norm per turn of "
    "its policy's batch (a shared policy's norm scaled back by policy turns / role turns, "
    "since its loss is normalised by all its turns) under Isolated vs Shared in matched "
    "cells, and, in runs that rose then fell, before vs after the peak.",
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


def update_matched(cell: Any) -> bool:
    """Whether ``cell``'s runs ran under the update-matched control."""
    return all(bool(r.config.get("update_matched", False)) for r in cell.runs)


def matched_pairs(multi: list) -> list[tuple]:
    """(isolated cell, shared cell) pairs that differ only by policy. An isolated cell under
    the update-matched control pairs with the shared cell of the study's protocol where no
    shared cell ran under the control: one policy already makes the shared step count, so
    its run is the same either way (tests/agents/train/test_protocol.py)."""
    by = {(c.key[0], c.key[1], c.key[2], c.key[4], c.key[5], c.key[3]): c for c in multi}
    out = []
    for (task, wf, model, param, lev, pol), c in by.items():
        if pol != "isolated":
            continue
        partner = by.get((task, wf, model, param, lev, "shared"))
        if partner is None and update_matched(c):
            run = c.runs[0]
            study = replace(run, config={**run.config, "update_matched": False}).levers
            partner = by.get((task, wf, model, param, study, "shared"))
        if partner is not None:
            out.append((c, partner))
    return out


def by_protocol(pairs: list) -> dict[str, list[tuple]]:
    """Matched pairs split by protocol (the study's, the update-matched control), so a
    claim is read within one; {"": pairs} where no pair ran under the control."""
    control = [p for p in pairs if update_matched(p[0])]
    if not control:
        return {"": pairs}
    study = [p for p in pairs if not update_matched(p[0])]
    return {"the study's protocol": study, "the update-matched control": control}


def _improves(multi: list) -> str:
    traj = [t for c in multi for t in c.traj]
    n = len(traj)
    up = sum(t.improved for t in traj)
    down = sum(t.worsened for t in traj)
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


#: what "±" is in the findings (every one is :func:`paired_by_seed`'s)
FINDINGS_PM = (
    "In the findings, ± is a 95% interval's half-width over seeds: a t interval of the "
    "per-seed differences where both sides ran the same seeds (*paired*), else Welch's."
)


def paired_by_seed(
    a: list[float], a_seeds: list, b: list[float], b_seeds: list
) -> tuple[float, float, bool]:
    """mean(a) - mean(b) with its 95% half-width: over the per-seed differences where both
    sides ran the same seeds (seeds share problems and base evaluations, so pairing removes
    that noise), else Welch over the two sets; and whether it was paired."""
    common = sorted(set(a_seeds) & set(b_seeds), key=str)
    if len(common) >= 2 and len(common) == len(a_seeds) == len(b_seeds):
        ia, ib = dict(zip(a_seeds, a, strict=True)), dict(zip(b_seeds, b, strict=True))
        d, h = t_interval([ia[k] - ib[k] for k in common])
        return d, h, True
    d, h = welch(a, b)
    return d, h, False


def _seeds(cell) -> list:
    return [r.config.get("seed") for r in cell.runs]


def _versus(pairs: list, values) -> tuple[int, int, float, list[str]]:
    """Per matched pair, isolated vs shared on ``values(cell)`` (one value per run, in run
    order), paired by seed where both ran the same seeds: (pairs clearly higher, clearly
    lower, mean difference, each pair's difference with its interval)."""
    higher = lower = 0
    diffs, text = [], []
    for i, s in pairs:
        d, h, paired = paired_by_seed(values(i), _seeds(i), values(s), _seeds(s))
        higher += d - h > 0
        lower += d + h < 0
        diffs.append(d)
        text.append(f"{d:+.3f} ± {h:.3f}" + (" paired" if paired else ""))
    return higher, lower, mean(diffs), text


def _decide(higher: int, lower: int, n: int, gate: str | None) -> str:
    if gate:
        return gate
    if 2 * higher > n:
        return "supported"
    if 2 * lower > n:
        return "contradicted"
    return "inconclusive"


def _peaks(pairs: list) -> str:
    higher, lower, diff, text = _versus(pairs, lambda c: c.peak)
    gate = too_little([i for i, _ in pairs]) or too_little([s for _, s in pairs])
    verdict = _decide(higher, lower, len(pairs), gate)
    return (
        f"**Isolated-Policy reaches a higher peak than Shared-Policy** — {verdict}: clearly "
        f"higher (95% interval over seeds above 0) in {higher}/{len(pairs)} matched cells, "
        f"clearly lower in {lower}/{len(pairs)}; mean peak difference {diff:+.3f} "
        f"({'; '.join(text)})."
    )


def fall_counts(pairs: list) -> list[tuple[Any, Any, tuple[int, int, int, int]]]:
    """Per matched pair of a parallel workflow (Voting, Orch-Workers): the isolated and the
    shared cell and (isolated runs that rose then fell, isolated runs, shared ones, runs);
    a run whose class is undecided (a bound within its Monte-Carlo error of the rule's
    threshold) is counted on neither side of the table."""

    def decided(c: Any) -> int:
        return len(c.traj) - c.count("undecided")

    return [
        (i, s, (i.count("rose then fell"), decided(i), s.count("rose then fell"), decided(s)))
        for i, s in pairs
        if i.key[1] in ("voting", "orch-workers")
    ]


def _falls(pairs: list) -> str | None:
    counted = fall_counts(pairs)
    if not counted:
        return None
    tables = [t for *_, t in counted]
    fi, ni, fs, ns = (sum(t[j] for t in tables) for j in range(4))
    # each matched pair is a stratum: pooling cells of several builds into one table would
    # compare the builds too (recipe 11 and 12 fell opposite ways at one lr)
    p, expected = stratified_exact(tables)
    several = len(counted) > 1 and fi + fs > 0
    test = "stratified exact test" if several else "Fisher's exact"
    gate = too_little([i for i, *_ in counted]) or too_little([s for _, s, _ in counted])
    if gate:
        verdict = gate
    elif fi == fs == 0:
        verdict = "inconclusive (no run rose then fell)"
    elif p >= 0.05:
        verdict = f"inconclusive (counts this far apart by chance: {test} p = {p:.2f})"
    else:  # the first side's total against its expectation within the cells, not pooled
        verdict = "supported" if fi > expected else "contradicted"
        verdict += f" ({test} p = {p:.2g})" if several else ""
    by_cell = ""
    if several:
        more = sum(a * n2 > b * n1 for a, n1, b, n2 in tables)
        less = sum(a * n2 < b * n1 for a, n1, b, n2 in tables)
        by_cell = (
            f"; within each cell (isolated vs shared), isolated fell more often in {more} "
            f"and less often in {less} of {len(counted)}: "
            + "; ".join(
                f"{cell_label(i.key, policy=False)} {a}/{n1} vs {b}/{n2}"
                for i, _, (a, n1, b, n2) in counted
            )
        )
    return (
        f"**Isolated-Policy rises then falls more often in Voting/Orch-Workers** — {verdict}: "
        f"rose then fell isolated {fi}/{ni} runs vs shared {fs}/{ns}{by_cell}."
    )


def _capture(multi: list) -> str | None:
    shared = [c for c in multi if c.key[3] == "shared"]
    reads = [
        (c, capture(readings_of(r.summary, c.key[1]), r.metrics, r.config.get("loss_agg", "")))
        for c in shared
        for r in c.runs
    ]
    reads = [(c, x) for c, x in reads if x is not None]
    if not reads:
        return None
    caught = [x for _, x in reads if x["captured"]]
    q = _partner_pairs(caught)
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
        f"{name}: {xs[0]['role']} share {mean(x['grad_share'] for x in xs):.2f} vs its "
        f"{xs[0]['null']} {mean(x['token_share'] for x in xs):.2f}, early {mean(x['early_share'] for x in xs):.2f}"
        f" -> late {mean(x['late_share'] for x in xs):.2f}, captured {sum(x['captured'] for x in xs)}/{len(xs)}"
        + _partner(xs)
        for name, xs in by_cell.items()
    )
    return (
        f"**Under Shared-Policy one role captures the gradient and its partner's decisions "
        f"degrade** — {verdict}: captured in {len(caught)}/{len(reads)} shared runs; partner "
        f"quality fell in {worse}/{len(q)} of those. {detail}."
    )


def _partner_pairs(xs: list[dict]) -> list[tuple[float, float]]:
    """(base, final) of the partner's decision quality, for the readings that have both."""
    return [
        (x["partner_quality_base"], x["partner_quality_final"])
        for x in xs
        if x["partner_quality_base"] is not None and x["partner_quality_final"] is not None
    ]


def _partner(xs: list[dict]) -> str:
    q = _partner_pairs(xs)
    if not q:
        return ""
    return (
        f"; {xs[0]['partner']} quality {mean(a for a, _ in q):+.3f} -> {mean(b for _, b in q):+.3f}"
    )


def _per_run(runs: list, values) -> tuple[list[float], list]:
    """Per run, the mean of ``values(run)`` and the run's seed (runs with none left out)."""
    out, seeds = [], []
    for r in runs:
        xs = values(r)
        if xs:
            out.append(mean(xs))
            seeds.append(r.config.get("seed"))
    return out, seeds


def _mean_norms(runs: list, role: str, shared: bool) -> tuple[list[float], list]:
    """Per run, the mean per-turn gradient norm of ``role`` and the run's seed."""
    return _per_run(runs, lambda r: [v for _, v in role_norms(r.metrics, role, shared)])


def _mean_moved(runs: list, role: str, per: str = "optimizer") -> tuple[list[float], list]:
    """Per run, the mean length of the actual update (after Adam) along ``role``'s descent
    direction (``update_along``) and the run's seed; runs that did not record it left out.
    ``per="optimizer"``: per Adam step (what the learner records, a mean over the rollout
    step's Adam steps); ``per="rollout"``: per rollout step (that mean times the Adam steps
    the role's policy made in it), because a policy that plays more turns makes more Adam
    steps per rollout step, and Isolated-Policy can amplify a role either way."""

    def moved(m: dict) -> float | None:
        along = m.get("roles", {}).get(role, {}).get("update_along")
        if m.get("step", -1) < 0 or along is None:
            return None
        if per == "optimizer":
            return float(along)
        pols = m.get("policies", {})
        pol = pols.get(role) or (next(iter(pols.values())) if len(pols) == 1 else None)
        if pol is None or "opt_steps" not in pol:
            return None
        return float(along) * float(pol["opt_steps"])

    return _per_run(runs, lambda r: [v for m in r.metrics if (v := moved(m)) is not None])


def amplification_inputs(i: Any, s: Any) -> tuple[str, tuple, tuple, tuple, tuple] | None:
    """What the amplification claim reads in a matched pair (isolated ``i``, shared ``s``):
    the parallel role the runs recorded, each side's per-run mean per-turn gradient norm
    (with seeds) and, where every run recorded it, each side's update along the descent
    per Adam step (empty lists otherwise); None when the pair has no such reading. One
    piece for the report's finding and the claims table."""
    parallel = readings_of(i.runs[0].summary, i.key[1]).get("parallel", [])
    role = next(
        (r for r in parallel if any(r in m.get("roles", {}) for m in i.runs[0].metrics)),
        None,
    )
    if role is None:
        return None
    norms = (_mean_norms(i.runs, role, shared=False), _mean_norms(s.runs, role, shared=True))
    if not norms[0][0] or not norms[1][0]:
        return None
    moved = (_mean_moved(i.runs, role), _mean_moved(s.runs, role))
    if len(moved[0][0]) != len(i.runs) or len(moved[1][0]) != len(s.runs):
        moved = (([], []), ([], []))
    return role, *norms, *moved


def _amplification(pairs: list) -> str | None:
    rows, usable = [], []
    for i, s in pairs:
        got = amplification_inputs(i, s)
        if got is None:
            continue
        role, (ni, si), (ns, ss), (mi, mis), (ms, mss) = got
        d, h, paired = paired_by_seed(ni, si, ns, ss)
        text = (
            f"{i.key[1]}-{i.key[0]} {i.key[2]} {i.key[4]}: {role} per-turn gradient norm "
            f"isolated {mean(ni):.3f} vs shared {mean(ns):.3f} (difference {d:+.3f} ± {h:.3f}"
            f"{', paired by seed' if paired else ''})"
        )
        # what moves the weights (Adam normalises step sizes): the verdict is read on it
        # where every run recorded it
        if mi:
            d, h, paired = paired_by_seed(mi, mis, ms, mss)
            text += (
                f"; the update's length along its descent direction per Adam step isolated "
                f"{mean(mi):.2e} vs shared {mean(ms):.2e} (difference {d:+.2e} ± {h:.2e}, the "
                f"verdict's reading)"
            )
            ri, ris = _mean_moved(i.runs, role, per="rollout")
            rs, rss = _mean_moved(s.runs, role, per="rollout")
            if len(ri) == len(i.runs) and len(rs) == len(s.runs):
                dr, hr, _ = paired_by_seed(ri, ris, rs, rss)
                text += (
                    f", per rollout step isolated {mean(ri):.2e} vs shared {mean(rs):.2e} "
                    f"(difference {dr:+.2e} ± {hr:.2e})"
                )
        usable.append((i, s, d, h))
        around = [
            norm_around_peak(r.metrics, role, t.peak_step)
            for r, t in zip(i.runs, i.traj, strict=True)
            if t.klass == "rose then fell"
        ]
        around = [a for a in around if a is not None]
        text += (
            f"; falling isolated runs {mean(b for _, b in around) / max(1e-12, mean(a for a, _ in around)):.2f}x "
            f"after the peak vs before ({len(around)} runs)"
            if around
            else "; no isolated run rose then fell"
        )
        rows.append(text)
    if not usable:
        return None
    gate = too_little([i for i, *_ in usable]) or too_little([s for _, s, *_ in usable])
    higher = sum(d - h > 0 for *_, d, h in usable)
    lower = sum(d + h < 0 for *_, d, h in usable)
    verdict = _decide(higher, lower, len(usable), gate)
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
    pairs = matched_pairs(multi)
    if pairs:
        for proto, ps in by_protocol(pairs).items():
            said = [x for x in (_peaks(ps), _falls(ps), _amplification(ps)) if ps and x]
            lines += [f"*Under {proto}:* {x}" if proto else x for x in said]
    else:
        lines.append(
            "**Isolated vs Shared** — inconclusive: no matched pair of cells (same workflow, "
            "task, model, parameterisation, levers)."
        )
    cap = _capture(multi)
    if cap:
        lines.append(cap)
    singles = [c for c in stats if c.key[1] == "single"]
    return lines + _controls(multi, singles)


#: a single-agent cell is compute-matched to a workflow cell when the turns it samples per
#: step are within this fraction of the workflow's
COMPUTE_TOLERANCE = 0.25


def sampled_turns(cell) -> float | None:
    """Mean turns a cell's runs sampled per step (None for runs recorded before the count)."""
    xs = [m["sampled"]["turns"] for r in cell.runs for m in r.metrics if "sampled" in m]
    return mean(xs) if xs else None


def _same_way(c, singles: list) -> object | None:
    """The single agent trained the same way: same task, model, parameterisation, levers."""

    def way(k: tuple) -> tuple:
        return (k[0], k[2], k[4], k[5])  # policy aside: one agent has nothing to share

    return next((s for s in singles if way(s.key) == way(c.key)), None)


def _same_compute(c, singles: list) -> object | None:
    """The single agent of the same task, model and parameterisation that sampled about as
    many turns per step as the workflow (within :data:`COMPUTE_TOLERANCE`)."""
    want = sampled_turns(c)
    if want is None:
        return None
    gaps = []
    for s in singles:
        got = sampled_turns(s)
        if got is not None and (s.key[0], s.key[2], s.key[4]) == (c.key[0], c.key[2], c.key[4]):
            gaps.append((abs(got - want), s))
    near = [(g, s) for g, s in gaps if g <= COMPUTE_TOLERANCE * want]
    return min(near, key=lambda x: x[0])[1] if near else None


def _controls(multi: list, singles: list) -> list[str]:
    """Per workflow: does it end above the single agent trained the same way, and above one
    given the same compute (as many sampled turns per step)? A workflow clearly below its
    control contradicts the study's premise, and is said as such."""
    out = []
    for match, what in (
        (_same_way, "the single agent trained the same way"),
        (_same_compute, "a single agent given the same compute (sampled turns per step)"),
    ):
        by_wf: dict[str, list[tuple]] = defaultdict(list)
        for c in multi:
            s = match(c, singles)
            if s is not None:
                by_wf[c.key[1]].append((c, s))
        for wf, pairs in sorted(by_wf.items()):
            out.append(_control_line(wf, pairs, what))
    return out


def _control_line(wf: str, pairs: list[tuple], what: str) -> str:
    higher = lower = 0
    rows = []
    for c, s in pairs:
        d, h, paired = paired_by_seed(c.final, _seeds(c), s.final, _seeds(s))
        higher += d - h > 0
        lower += d + h < 0
        lev = f" [{s.key[5]}]" if s.key[5] != c.key[5] else ""
        rows.append(
            f"{c.key[0]} {c.key[2]} {c.key[3]}/{c.key[4]}: {mean(c.final):.3f} vs single{lev} "
            f"{mean(s.final):.3f} ({d:+.3f} ± {h:.3f}{', paired by seed' if paired else ''})"
        )
    gate = too_little([c for c, _ in pairs]) or too_little([s for _, s in pairs])
    verdict = _decide(higher, lower, len(pairs), gate)
    return (
        f"**{wf} ends above {what}** — {verdict}: clearly above in {higher}/{len(pairs)} "
        f"cells, clearly below in {lower}/{len(pairs)}; " + "; ".join(rows) + "."
    )
