"""Readings of one run that measure the study's phenomena, each a stated rule that can come
out either way (no torch).

- **Trajectory class** (:func:`trajectory`): *never rose* / *rose and held* / *rose then
  fell*, decided by paired bootstrap intervals over the held-out problems, not a constant
  margin; *fell* reads the final window's evaluations after the peak against the peak. The
  peak is the best of several evaluations, so the rise and fall tests use a
  Bonferroni-corrected level (``1 - 0.05 / (evaluations - 1)``): a flat run does not "rise"
  by picking its luckiest evaluation. A *cliff* is a run that rose, then fell back to or
  below its base.
- **Capture** (:func:`capture`): under a shared policy, a role captures it when its share of
  the gradient mass exceeds its share of the tokens and grows from its early share, while
  the other role's own decision quality (Voting: the aggregator against the solvers'
  majority; Eval-Opt: the evaluator's verdict accuracy; Orch-Workers: the synthesizer
  against any worker) is read at base and at the end.
- **Amplification** (:func:`role_norms`): the per-role gradient norm of same-role parallel
  agents over training, and before vs after the peak of a run that fell.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import mean

from flowzoo.analysis.stats import bootstrap_ci, mean_of, paired_decided_ci, t_interval, welch

#: capture: how far a role's gradient share must exceed its token share
CAPTURE_EXCESS = 0.05


@dataclass
class Point:
    """One evaluation: its step, accuracy, CI and (when recorded) per-problem scores."""

    step: int
    acc: float
    lo: float
    hi: float
    per_problem: list[float] | None

    @classmethod
    def of(cls, step: int, ev: dict) -> Point:
        acc = float(ev["accuracy"])
        k = int(ev.get("samples", 1))
        pp = [c / k for c in ev["per_problem"]] if ev.get("per_problem") else None
        if "ci" in ev:
            lo, hi = map(float, ev["ci"])
        else:  # older runs: a normal interval from the problem count
            n = max(1, int(ev.get("episodes", 1)))
            h = 1.96 * math.sqrt(max(acc * (1 - acc), 1e-12) / n)
            lo, hi = acc - h, acc + h
        return cls(step, acc, lo, hi, pp)


@dataclass
class Trajectory:
    base: float
    base_ci: tuple[float, float]
    peak: float
    peak_step: int
    final: float
    final_ci: tuple[float, float]
    #: final - base, with its 95% CI (paired over problems when per-problem scores exist)
    gain: float
    gain_ci: tuple[float, float]
    #: peak - base and final - peak, with their Bonferroni-corrected CIs
    rise_ci: tuple[float, float]
    fall_ci: tuple[float, float]
    klass: str
    cliff: bool
    paired: bool
    #: the readings ("gain", "rise", "fall") whose bootstrap bound stayed within its
    #: Monte-Carlo error of the threshold at every resample count: not decided either way
    undecided: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        d = asdict(self)
        if not self.undecided:  # records of decided runs read as they always did
            d.pop("undecided")
        else:
            d["undecided"] = list(self.undecided)
        return d

    @property
    def improved(self) -> bool:
        """The gain's interval lies above 0, and not by the luck of one resampling seed."""
        return self.gain_ci[0] > 0 and "gain" not in self.undecided

    @property
    def worsened(self) -> bool:
        """The gain's interval lies below 0, and not by the luck of one resampling seed."""
        return self.gain_ci[1] < 0 and "gain" not in self.undecided


def _diff(
    a: list[Point],
    b: list[Point],
    level: float,
    lo_at: tuple[float, ...] = (),
    hi_at: tuple[float, ...] = (),
) -> tuple[float, float, float, bool, bool]:
    """mean(b) - mean(a) over evaluations (per problem when all have scores), with a CI,
    whether it was paired, and whether the low bound's comparisons with ``lo_at`` and the
    high bound's with ``hi_at`` are decided (:func:`~flowzoo.analysis.stats.decided_ci`)."""
    if all(p.per_problem for p in a + b) and len({len(p.per_problem) for p in a + b}) == 1:
        d, lo, hi, decided = paired_decided_ci(
            mean_of([p.per_problem for p in a]),
            mean_of([p.per_problem for p in b]),
            lo_at,
            hi_at,
            level,
        )
        return d, lo, hi, True, decided
    d = mean(p.acc for p in b) - mean(p.acc for p in a)
    z = _z(level) / 1.96
    ha = mean((p.hi - p.lo) / 2 for p in a) * z
    hb = mean((p.hi - p.lo) / 2 for p in b) * z
    h = math.hypot(ha, hb)
    return d, d - h, d + h, False, True


def _z(level: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + level / 2)


def trajectory(evals: list[tuple[int, dict]], window: int = 3, floor: float = 0.0) -> Trajectory:
    """Read a run's held-out curve (``(step, eval dict)`` pairs, base first) by the rules in
    the module doc; ``floor`` is a margin added under every interval (0: the CI alone)."""
    if not evals:
        raise ValueError("need at least one evaluation")
    pts = [Point.of(s, e) for s, e in evals]
    base = pts[0]
    i = max(range(len(pts)), key=lambda k: (pts[k].acc, -k))
    peak = pts[i]
    tail = pts[-window:] if len(pts) > 1 else pts
    if len(pts) > 1 and tail[0] is base:
        tail = tail[1:]
    level = 1 - 0.05 / max(1, len(pts) - 1)
    gain, glo, ghi, paired, gain_ok = _diff([base], tail, 0.95, (0.0,), (0.0,))
    _, rlo, rhi, _, rise_ok = _diff([base], [peak], level, lo_at=(floor,))
    # a fall is read on the final window's evaluations that come after the peak (a run that
    # peaks at its last evaluation has not fallen, whatever the window's mean)
    after = [p for p in tail if p.step > peak.step]
    flo, fhi, fall_ok = 0.0, 0.0, True
    if after:
        _, flo, fhi, _, fall_ok = _diff([peak], after, level, hi_at=(-floor,))
    rose = rlo > floor and peak is not base
    fell = bool(after) and fhi < -floor
    undecided = tuple(
        name
        for name, ok in (("gain", gain_ok), ("rise", rise_ok or peak is base), ("fall", fall_ok))
        if not ok and (name != "fall" or rose)
    )
    klass = "never rose" if not rose else ("rose then fell" if fell else "rose and held")
    if "rise" in undecided or "fall" in undecided:
        klass = "undecided"
    if tail[0].per_problem and all(p.per_problem for p in tail):
        fm, flo_, fhi_ = bootstrap_ci(mean_of([p.per_problem for p in tail]))
    else:
        fm = mean(p.acc for p in tail)
        h = math.hypot(*[(p.hi - p.lo) / 2 for p in tail]) / len(tail)
        flo_, fhi_ = fm - h, fm + h
    return Trajectory(
        base=base.acc,
        base_ci=(base.lo, base.hi),
        peak=peak.acc,
        peak_step=peak.step,
        final=fm,
        final_ci=(flo_, fhi_),
        gain=gain,
        gain_ci=(glo, ghi),
        rise_ci=(rlo, rhi),
        fall_ci=(flo, fhi),
        klass=klass,
        cliff=klass == "rose then fell" and fm <= base.acc,
        paired=paired,
        undecided=undecided,
    )


def evals_of(metrics: list[dict]) -> list[tuple[int, dict]]:
    """A run's evaluations from its metrics lines: base (step -1) at step 0, then each
    evaluation at the number of steps done."""
    return [(m["step"] + 1, m["eval"]) for m in metrics if "eval" in m]


def readings_of(summary: dict, workflow: str) -> dict:
    """What the study reads from a run: the workflow's readings the run recorded in its
    ``summary.json``; a run written before runs recorded them gets the registered
    workflow's declaration."""
    if isinstance(summary.get("readings"), dict):
        return summary["readings"]
    from flowzoo.envs.registry import workflow_readings

    return workflow_readings(workflow)


def partner_quality(readings: dict, ev: dict) -> float | None:
    """The non-dominant role's decision quality in one evaluation (``readings``'
    ``partner_quality``: an eval key, or ``a - b``)."""
    rule = readings.get("partner_quality")
    if not rule:
        return None
    if " - " in rule:
        a, b = rule.split(" - ")
        if a not in ev or b not in ev:
            return None
        return float(ev[a]) - float(ev[b])
    return float(ev[rule]) if rule in ev else None


def capture(readings: dict, metrics: list[dict], loss_agg: str = "token-mean") -> dict | None:
    """The capture reading of one shared-policy run: the dominant role (by gradient share),
    its share against the share the workflow's shape gives it anyway, and its growth, each
    with a 95% interval over steps; beside it, its partner's decision quality at base and
    end. The null follows the loss's weighting: a token-mean loss weighs tokens (the token
    share), a sequence-mean one weighs turns (the turn share)."""
    by = "turns" if loss_agg != "token-mean" else "tokens"
    rows = [m for m in metrics if m.get("roles") and "step" in m and m["step"] >= 0]
    steps = []
    for m in rows:
        grad = {r: float(v.get("grad_share", 0.0)) for r, v in m["roles"].items()}
        base = {r: float(v.get(by, 0.0)) for r, v in m["roles"].items()}
        if sum(grad.values()) > 0 and sum(base.values()) > 0:
            t = sum(base.values())
            steps.append((grad, {r: x / t for r, x in base.items()}))
    if len(steps) < 3:
        return None
    roles = sorted({r for g, _ in steps for r in g})
    share = {r: mean(g.get(r, 0.0) for g, _ in steps) for r in roles}
    dom = max(roles, key=lambda r: share[r])
    null = mean(t.get(dom, 0.0) for _, t in steps)
    excess = _mean_ci([g.get(dom, 0.0) - t.get(dom, 0.0) for g, t in steps])
    third = max(1, len(steps) // 3)
    early = [g.get(dom, 0.0) for g, _ in steps[:third]]
    late = [g.get(dom, 0.0) for g, _ in steps[-third:]]
    growth = _diff_ci(late, early)
    ev = evals_of(metrics)
    q0 = partner_quality(readings, ev[0][1]) if ev else None
    q1 = partner_quality(readings, ev[-1][1]) if len(ev) > 1 else None
    # both intervals clear: above the shape's share by the margin, and growing
    captured = excess[1] > CAPTURE_EXCESS and growth[1] > 0
    return {
        "role": dom,
        "grad_share": share[dom],
        "token_share": null,
        "null": f"{by[:-1]} share",
        "excess_ci": excess,
        "early_share": mean(early),
        "late_share": mean(late),
        "growth_ci": growth,
        "captured": captured,
        "partner": readings.get("partner"),
        "partner_quality_base": q0,
        "partner_quality_final": q1,
    }


def _mean_ci(xs: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): a t interval over steps."""
    m, h = t_interval(xs)
    return m, m - h, m + h


def _diff_ci(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """(mean(a) - mean(b), low, high): Welch over two sets of steps."""
    d, h = welch(a, b)
    return d, d - h, d + h


def role_norms(metrics: list[dict], role: str, shared: bool = False) -> list[tuple[int, float]]:
    """(steps done, gradient norm) of ``role`` over a run, per turn of its policy's batch: a
    shared policy's loss is normalised by *all* its turns, so its role gradients are scaled
    back by (policy turns / role turns) — else Voting's solvers would look 4/3 stronger under
    Isolated from the normaliser alone."""
    out = []
    for m in metrics:
        rows = m.get("roles", {})
        if m.get("step", -1) < 0 or "grad_norm" not in rows.get(role, {}):
            continue
        scale = 1.0
        if shared and rows[role].get("turns"):
            scale = sum(float(r.get("turns", 0)) for r in rows.values()) / rows[role]["turns"]
        out.append((m["step"] + 1, float(rows[role]["grad_norm"]) * scale))
    return out


def norm_around_peak(
    metrics: list[dict], role: str, peak_step: int, shared: bool = False
) -> tuple[float, float] | None:
    """Mean gradient norm of ``role`` up to the peak and after it (None if either is empty)."""
    pts = role_norms(metrics, role, shared)
    before = [v for s, v in pts if s <= peak_step]
    after = [v for s, v in pts if s > peak_step]
    if not before or not after:
        return None
    return mean(before), mean(after)
