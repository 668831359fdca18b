"""Did a run run the protocol its claim is about, and did it run long enough? (no torch)

Two readings a dynamics claim needs before anything else is read from a run:

- **Optimiser figures** (:func:`optimiser_figures`): Adam steps per rollout step per policy
  (verl-style fixed-size mini-batches make several, and more for a policy playing more turns),
  and per role the clip fraction and the mean ``|ratio - 1|`` over its tokens. One on-policy
  step leaves the ratio at 1 and the clip idle; these figures show whether it acted.
- **Passage** (:func:`passage`): steps to the peak, to the plateau and to a fall, and whether
  the run *passed* its peak, read on a 3-evaluation moving average so one lucky evaluation
  does not set the peak. A run that reaches its plateau (within the peak's half-interval) only
  in its last ``window`` evaluations and did not fall has not shown what comes after its
  peak, and a claim about peaks and cliffs cannot stand on it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from statistics import mean

from flowzoo.analysis.readings import Point, _diff


@dataclass
class Passage:
    """Where a run's held-out curve peaked and fell (steps are rollout steps done)."""

    #: step of the best 3-evaluation moving average
    peak_step: int
    #: first step whose moving average is within the peak evaluation's half-CI of the peak
    plateau_step: int
    #: first evaluation after the peak significantly below it (paired, Bonferroni), or None
    fall_step: int | None
    #: evaluations after the plateau was reached
    after_plateau: int
    #: the run shows what follows its peak: it fell, or ``window`` evaluations came after
    #: it reached its plateau (a still-rising run reaches it only at its end)
    passed: bool

    def as_dict(self) -> dict:
        return asdict(self)


def _smoothed(pts: list[Point]) -> list[float]:
    return [mean(p.acc for p in pts[max(0, i - 1) : i + 2]) for i in range(len(pts))]


def passage(evals: list[tuple[int, dict]], window: int = 3) -> Passage:
    """Read ``(step, eval dict)`` pairs (base first) for steps to peak, plateau and fall."""
    if not evals:
        raise ValueError("need at least one evaluation")
    pts = [Point.of(s, e) for s, e in evals]
    sm = _smoothed(pts)
    i = max(range(len(pts)), key=lambda k: (sm[k], -k))
    half = (pts[i].hi - pts[i].lo) / 2
    plateau = next(k for k in range(len(pts)) if sm[k] >= sm[i] - half)
    # the fall is read against the best single evaluation at or around the smoothed peak
    j = max(range(max(0, i - 1), min(len(pts), i + 2)), key=lambda k: pts[k].acc)
    level = 1 - 0.05 / max(1, len(pts) - 1)
    fall = next((p.step for p in pts[j + 1 :] if _diff([pts[j]], [p], level)[2] < 0), None)
    after = len(pts) - 1 - plateau
    return Passage(
        peak_step=pts[i].step,
        plateau_step=pts[plateau].step,
        fall_step=fall,
        after_plateau=after,
        passed=fall is not None or after >= window,
    )


def optimiser_figures(metrics: list[dict]) -> dict:
    """Means over a run's steps: ``opt_steps`` per policy, and per role ``clip_frac``,
    ``ratio_dev`` (mean |ratio - 1|) and the fraction of steps whose clip acted."""
    steps: dict[str, list[float]] = defaultdict(list)
    roles: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for m in metrics:
        if m.get("step", -1) < 0:
            continue
        for name, p in (m.get("policies") or {}).items():
            if "opt_steps" in p:
                steps[name].append(float(p["opt_steps"]))
        for role, r in (m.get("roles") or {}).items():
            for k in ("clip_frac", "ratio_dev"):
                if k in r:
                    roles[role][k].append(float(r[k]))
            if "clip_frac" in r:
                roles[role]["clip_acted"].append(float(r["clip_frac"] > 0))
    return {
        "opt_steps": {k: mean(v) for k, v in steps.items()},
        "roles": {r: {k: mean(v) for k, v in d.items()} for r, d in roles.items()},
    }


def protocol_line(config: dict) -> str:
    """The optimiser protocol a run ran, in one phrase."""
    mb = int(config.get("ppo_mini_batch", 0) or 0)
    batches = (
        f"mini-batches of {mb} x G turns"
        if mb > 0
        else f"{int(config.get('minibatches', 1))} Adam step(s) per rollout step"
    )
    sched = str(config.get("lr_schedule", "constant"))
    warm = int(config.get("warmup_steps", 0) or 0)
    return f"lr {config.get('lr')} {sched}, {warm} warmup, {batches}"


def _avg(figs: list[dict], get) -> float:
    """Mean over runs of what ``get`` reads from each run's figures (runs without it aside)."""
    xs = [x for x in (get(f) for f in figs) if x is not None]
    return mean(xs) if xs else float("nan")


def _role(role: str, key: str):
    return lambda f: f["roles"].get(role, {}).get(key)


def _policy_steps(policy: str):
    return lambda f: f["opt_steps"].get(policy)


def _list(names: list[str], figs: list[dict], getter, spec: str) -> str:
    """``name value, ...`` over runs' figures; a figure no run recorded reads ``-``."""
    vals = [(n, _avg(figs, getter(n))) for n in names]
    return ", ".join(f"{n} {v:{spec}}" if v == v else f"{n} -" for n, v in vals)


def cell_label(key: tuple, policy: bool = True) -> str:
    """A cell's name in the report's tables: ``voting-math tiny-s isolated full levers``
    (``policy=False``: the matched pair's name, without the policy)."""
    task, wf, model, pol, param, lev = key
    return f"{wf}-{task} {model} {pol + ' ' if policy else ''}{param} {lev}"


def protocol_rows(cells: list) -> list[str]:
    """The report's protocol table: per cell, what the optimiser did and whether its runs
    passed their peak (cells as :func:`flowzoo.analysis.report.cell_stats` makes them)."""
    md = [
        "| cell | protocol | Adam steps / rollout step (per policy) | clip fraction (per role) | mean abs(ratio - 1) | runs past their peak | steps to plateau / peak / fall (per run) |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        figs = [optimiser_figures(r.metrics) for r in c.runs]
        pols = sorted({p for f in figs for p in f["opt_steps"]})
        roles = sorted({r for f in figs for r in f["roles"]})
        opt = _list(pols, figs, _policy_steps, ".1f")
        clip = _list(roles, figs, lambda r: _role(r, "clip_frac"), ".4f")
        dev = _list(roles, figs, lambda r: _role(r, "ratio_dev"), ".4f")
        ps = [passage(r.evals) for r in c.runs]
        when = "; ".join(
            f"{p.plateau_step}/{p.peak_step}/{p.fall_step if p.fall_step else '-'}" for p in ps
        )
        md.append(
            f"| {cell_label(c.key)} | {protocol_line(c.runs[0].config)} | "
            f"{opt or '-'} | {clip or '-'} | {dev or '-'} | "
            f"{sum(p.passed for p in ps)}/{len(ps)} | {when} |"
        )
    return md
