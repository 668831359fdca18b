"""What each role learned to *do*: its behaviour rate (the considered side of its menu,
docs/testbed.md) at base and at the end, per cell, and Isolated vs Shared on the end rate.

Why beside the accuracy tables: the testbed's claims are about roles, and a role can change
its behaviour while the team's accuracy does not move (an evaluator that stops checking once
the drafts are right keeps its verdicts accurate). Read from each run's first and last
evaluation records (``behaviour`` and ``behaviour_n``: the role's decided turns).
"""

from __future__ import annotations

from statistics import mean

from flowzoo.analysis.findings import matched_pairs, paired_by_seed
from flowzoo.analysis.protocol import cell_label
from flowzoo.analysis.readings import evals_of


def role_rates(cell, which: int) -> dict[str, list[tuple[object, float, int]]]:
    """role -> (seed, rate, decided turns) per run of ``cell`` at its first (0) or last (-1)
    evaluation, for runs whose records hold the reading (also the conflict testbed's
    capture reading, :mod:`flowzoo.analysis.conflict`)."""
    out: dict[str, list[tuple[object, float, int]]] = {}
    for r in cell.runs:
        ev = evals_of(r.metrics)
        if not ev:
            continue
        e = ev[which][1]
        n = e.get("behaviour_n") or {}
        for role, v in (e.get("behaviour") or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out.setdefault(role, []).append(
                    (r.config.get("seed"), float(v), int(n.get(role, 0)))
                )
    return out


def behaviour_rows(stats: list) -> list[str]:
    """The report's behaviour section (empty where no run recorded a behaviour reading)."""
    rows = []
    lasts = {id(c): role_rates(c, -1) for c in stats}
    for c in stats:
        first, last = role_rates(c, 0), lasts[id(c)]
        for role in sorted(set(first) & set(last)):
            b, e = first[role], last[role]
            rows.append(
                f"| {cell_label(c.key)} | {role} | "
                f"{mean(v for _, v, _ in b):.2f} ({mean(n for *_, n in b):.0f}) | "
                f"{mean(v for _, v, _ in e):.2f} ({mean(n for *_, n in e):.0f}) | "
                f"{', '.join(f'{v:.2f}' for _, v, _ in e)} |"
            )
    if not rows:
        return []
    out = [
        "## Behaviour",
        "",
        "Each role's considered-behaviour rate (its menu: docs/testbed.md) at the first and "
        "the last evaluation, mean over runs, with the mean number of decided turns it rests "
        "on in brackets; a role whose turns stop being contested (every solver works its "
        "steps) is read on few turns at the end.",
        "",
        "| cell | role | base (turns) | last (turns) | last, per run |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]
    versus = []
    for i, s in matched_pairs([c for c in stats if c.key[1] != "single"]):
        li, ls = lasts[id(i)], lasts[id(s)]
        for role in sorted(set(li) & set(ls)):
            d, h, paired = paired_by_seed(
                [v for _, v, _ in li[role]],
                [k for k, _, _ in li[role]],
                [v for _, v, _ in ls[role]],
                [k for k, _, _ in ls[role]],
            )
            clear = "isolated higher" if d - h > 0 else "shared higher" if d + h < 0 else "-"
            versus.append(
                f"| {cell_label(i.key, policy=False)} | {role} | "
                f"{d:+.3f} ± {h:.3f}{' (paired)' if paired else ''} | {clear} |"
            )
    if versus:
        out += [
            "Isolated − Shared on the last rate (95% t half-width over seeds, paired by seed "
            "where both ran the same seeds):",
            "",
            "| cell | role | isolated − shared | clearly |",
            "|---|---|---|---|",
            *versus,
            "",
        ]
    return out
