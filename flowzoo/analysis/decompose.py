"""What a gain is made of: behaviour change and execution change, per role (no torch).

A role's accuracy on its decided turns is ``p * a_c + (1 - p) * a_s``: the share ``p`` of
its turns that take the considered behaviour, and the accuracy of each behaviour (``a_c``,
``a_s``). Between the base evaluation and the final one the change splits exactly into

- **behaviour**: ``(p1 - p0) * (a0_c - a0_s)``, the gain had each behaviour kept its base
  accuracy (the role only chose differently), and
- **execution**: ``p1 * (a1_c - a0_c) + (1 - p1) * (a1_s - a0_s)``, the gain from doing each
  behaviour better (or worse) at the final mix.

Why: "RL works" should say how. On the math testbed about 95% of the main job's gain was the
solvers' choice flipping; a build where RL only improves execution would read the other way.
Evaluation records carry ``behaviour_hits`` (per role, how many considered and how many
shortcut turns scored) beside ``behaviour`` and ``behaviour_n``; records written before that
field existed are not decomposed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Split:
    """One role's accuracy change between two evaluations, split in two."""

    role: str
    base: float
    final: float
    behaviour: float
    execution: float

    @property
    def total(self) -> float:
        return self.final - self.base


def _parts(ev: dict, role: str) -> tuple[float, float, float] | None:
    """(considered share, accuracy when considered, accuracy when shortcut) of ``role`` in
    one evaluation record, or None where it cannot be read (no hits recorded, no turns)."""
    hits = (ev.get("behaviour_hits") or {}).get(role)
    n = (ev.get("behaviour_n") or {}).get(role)
    p = (ev.get("behaviour") or {}).get(role)
    if hits is None or not n or p is None:
        return None
    n_c = round(p * n)
    n_s = n - n_c
    a_c = hits[0] / n_c if n_c else float("nan")
    a_s = hits[1] / n_s if n_s else float("nan")
    return p, a_c, a_s


def split_gain(base: dict, final: dict, role: str) -> Split | None:
    """``role``'s change from evaluation record ``base`` to ``final``, split into behaviour
    and execution (module doc); None when either record cannot be read, or a behaviour the
    role takes at the end was never taken at base (its base accuracy is unknown)."""
    b, f = _parts(base, role), _parts(final, role)
    if b is None or f is None:
        return None
    p0, a0c, a0s = b
    p1, a1c, a1s = f
    # a behaviour absent on one side contributes nothing there: its share is 0
    if (p1 > 0 and a0c != a0c) or (p1 < 1 and a0s != a0s):
        return None
    a1c = a1c if p1 > 0 else 0.0
    a1s = a1s if p1 < 1 else 0.0
    a0c = a0c if a0c == a0c else 0.0
    a0s = a0s if a0s == a0s else 0.0
    acc0 = p0 * a0c + (1 - p0) * a0s
    acc1 = p1 * a1c + (1 - p1) * a1s
    behaviour = (p1 - p0) * (a0c - a0s)
    execution = p1 * (a1c - a0c) + (1 - p1) * (a1s - a0s)
    return Split(role, acc0, acc1, behaviour, execution)


def split_run(evals: list[tuple[int, dict]]) -> list[Split]:
    """Every role's split between a run's first (base) and last evaluation."""
    if len(evals) < 2:
        return []
    base, final = evals[0][1], evals[-1][1]
    roles = sorted(set(base.get("behaviour_hits") or {}) & set(final.get("behaviour_hits") or {}))
    return [s for r in roles if (s := split_gain(base, final, r)) is not None]


def gain_rows(stats: list) -> list[str]:
    """The report's section "What the gain is made of": per cell and role, the mean over
    runs of the behaviour and execution parts of the role's accuracy change (base to last
    evaluation) with 95% t half-widths over runs; empty when no run recorded the hits."""
    from flowzoo.analysis.protocol import cell_label
    from flowzoo.analysis.stats import t_interval

    rows = []
    for c in stats:
        by_role: dict[str, list[Split]] = {}
        for r in c.runs:
            for s in split_run(r.evals):
                by_role.setdefault(s.role, []).append(s)
        for role, splits in sorted(by_role.items()):
            if len(splits) != len(c.runs):  # a role decomposed in only some runs: left out
                continue
            cells = []
            for part in ("base", "final", "behaviour", "execution"):
                m, h = t_interval([getattr(s, part) for s in splits])
                cells.append(f"{m:+.3f}" if h != h or h == float("inf") else f"{m:+.3f} ± {h:.3f}")
            rows.append(
                f"| {cell_label(c.key)} | {role} | {len(splits)} | " + " | ".join(cells) + " |"
            )
    if not rows:
        return []
    return [
        "## What the gain is made of",
        "",
        "Per role, its accuracy on its decided turns (a solving role's own answers, a "
        "coordinating role's team outcome) at base and at the last evaluation, and the change "
        "split into *behaviour* (the considered share moved, each behaviour's accuracy held "
        "at base) and *execution* (each behaviour done better or worse at the final share); "
        "means over runs, ± the 95% t half-width over runs (none for one run).",
        "",
        "| cell | role | runs | base | final | behaviour | execution |",
        "|---|---|---:|---|---|---|---|",
        *rows,
        "",
    ]
