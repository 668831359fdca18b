"""The role-conflict testbed's capture reading (docs/testbed-conflict.md), decided by the
test its sweep declared before it ran (baselines/sweeps/conflict-claims.toml).

Why a reading of its own: on the conflict builds the final role (Voting's aggregator,
Orch-Workers' synthesizer) is rewarded for the opposite surface choice of the solving
roles (a bare answer where they work the steps). A shared policy pulled toward the solving
roles' side carries it into the final role; separate parameters need not. So the reading is
the final role's considered (bare) rate at the last evaluation, Isolated minus Shared, a
paired t over seeds, Holm-corrected over the workflows read within one protocol (the
study's, and the update-matched control), with the team's final accuracy beside it: capture
*at a cost* is a higher Isolated rate where Shared's team does not score higher.

A declared sweep that lost runs prints no verdict from fewer runs than it declared
(:func:`missing_declared`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import mean, stdev
from typing import Any

from flowzoo.analysis.behaviour import role_rates
from flowzoo.analysis.findings import matched_pairs, paired_by_seed, too_little, update_matched
from flowzoo.analysis.protocol import cell_label
from flowzoo.analysis.stats import t_sf

#: the role that writes the final answer from the others' under ``conflict``
FINAL_ROLE = {"voting": "aggregator", "orch-workers": "synthesizer"}
#: the declared test's level (two-sided, Holm within a protocol)
ALPHA = 0.05


def paired_t_p(diffs: list[float]) -> float:
    """The two-sided p of a paired t test that the mean of ``diffs`` is 0 (1.0 with fewer
    than two; 0.0 where every difference is the same non-zero value)."""
    if len(diffs) < 2:
        return 1.0
    m, sd = mean(diffs), stdev(diffs)
    if sd == 0.0:
        return 1.0 if m == 0.0 else 0.0
    t = m / (sd / math.sqrt(len(diffs)))
    return min(1.0, 2.0 * t_sf(abs(t), len(diffs) - 1))


def holm(ps: list[float], alpha: float = ALPHA) -> list[bool]:
    """Which of ``ps`` Holm's step-down procedure rejects at family-wise level ``alpha``."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out = [False] * len(ps)
    for k, i in enumerate(order):
        if ps[i] > alpha / (len(ps) - k):
            break
        out[i] = True
    return out


def missing_declared(roots: list[Path], loaded: set[str]) -> tuple[int, list[str]]:
    """(runs declared by the sweeps under ``roots``, the declared run ids with no completed
    record among ``loaded`` run dir names): read from each root's ``sweep.json``."""
    declared: list[str] = []
    for root in roots:
        try:
            rec = json.loads((Path(root) / "sweep.json").read_text())
        except (OSError, ValueError):
            continue
        ids = rec.get("declared") if isinstance(rec, dict) else None
        if isinstance(ids, list):
            declared += [str(x) for x in ids]
    return len(declared), [x for x in declared if x not in loaded]


def _id_value(run_id: str, key: str) -> str | None:
    """The value a declared run id gives setting ``key`` (its ``key=value`` part, as the
    sweep wrote it: values hold no ``-``), or None when the id names no such setting (the
    sweep file fixed it for every run)."""
    return next((x[len(key) + 1 :] for x in run_id.split("-") if x.startswith(f"{key}=")), None)


def declared_workflow(run_id: str) -> str | None:
    """The workflow a declared run id names (``env=orch_workers_math`` -> ``orch-workers``),
    or None when the id names no env."""
    env = _id_value(run_id, "env")
    return env.rsplit("_", 1)[0].replace("_", "-") if env and "_" in env else None


def missing_for(missing: list[str], workflows: set[str]) -> list[str]:
    """The missing declared runs a reading over ``workflows`` waits for: those of these
    workflows, and every one whose id names none (it may be any). Why per reading: a sweep
    declares several tests, each on its own runs (the capture test on Voting and
    Orch-Workers, a control on Eval-Opt); one is read when all of *its* runs are in, and
    never on fewer. The workflows are the test's declared ones, not the cells at hand, so a
    family of tests (Holm) is not read on the part of it that has run."""
    return [m for m in missing if (w := declared_workflow(m)) is None or w in workflows]


def _is_conflict(cell: Any) -> bool:
    return cell.key[1] in FINAL_ROLE and all(
        (r.config.get("env_options") or {}).get("conflict") is True for r in cell.runs
    )


def _protocol(cell: Any) -> str:
    return "update-matched control" if update_matched(cell) else "study's protocol"


def _read_pair(i: Any, s: Any) -> dict | None:
    """One matched pair's numbers: the final role's last bare rate per seed on each side,
    their paired difference and p, and the final accuracy's Isolated - Shared interval."""
    role = FINAL_ROLE[i.key[1]]
    ri, rs = role_rates(i, -1).get(role), role_rates(s, -1).get(role)
    if not ri or not rs:
        return None
    a, b = {k: v for k, v, _ in ri}, {k: v for k, v, _ in rs}
    paired = set(a) == set(b) and len(a) == len(ri) == len(rs)
    diffs = [a[k] - b[k] for k in sorted(a, key=str)] if paired else []
    acc, acc_h, _ = paired_by_seed(
        i.final,
        [r.config.get("seed") for r in i.runs],
        s.final,
        [r.config.get("seed") for r in s.runs],
    )
    return {
        "label": cell_label(i.key, policy=False),
        "role": role,
        "paired": paired,
        "diff": mean(diffs) if diffs else mean(a.values()) - mean(b.values()),
        "p": paired_t_p(diffs) if paired else 1.0,
        "n": len(diffs),
        "iso": mean(a.values()),
        "shared": mean(b.values()),
        "acc": acc,
        "acc_h": acc_h,
        "gate": too_little([i]) or too_little([s]),
    }


def _verdict(x: dict, rejected: bool) -> str:
    if x["gate"]:
        return x["gate"]
    if not x["paired"]:
        return "no verdict (the declared test is paired by seed, and the two sides ran different seeds)"
    if not rejected:
        return f"inconclusive (p = {x['p']:.2g}, Holm)"
    if x["diff"] < 0:
        return f"contradicted (Shared's final role answers bare more; p = {x['p']:.2g}, Holm)"
    if x["acc"] + x["acc_h"] < 0:  # Shared's team clearly scores higher: no cost
        return (
            f"inconclusive (Isolated's final role answers bare more, p = {x['p']:.2g}, but "
            "Shared's team scores higher: no cost)"
        )
    return f"supported (p = {x['p']:.2g}, Holm)"


def _in_protocol(run_id: str, proto: str) -> bool:
    """Whether a declared run serves ``proto``'s test: an id naming ``update_matched=True``
    only the control's, one naming it ``False`` only the study's, any other both (the Shared
    runs are both protocols' Shared side; a sweep that fixed the setting names neither)."""
    value = _id_value(run_id, "update_matched")
    if value is None:
        return True
    return (value == "True") == (proto == "update-matched control")


def capture_tests(stats: list, missing: list[str]) -> list[dict]:
    """The declared capture test on every matched conflict pair, per protocol, Holm over the
    workflows within it: each pair's numbers (:func:`_read_pair`) with ``protocol`` and
    ``verdict`` ("no verdict (runs missing)" while a run the test declared has no record).
    One reading for the report and the claims table."""
    pairs = [(i, s) for i, s in matched_pairs(stats) if _is_conflict(i) and _is_conflict(s)]
    missing = missing_for(missing, set(FINAL_ROLE))  # the test's runs: Voting, Orch-Workers
    by_protocol: dict[str, list[dict]] = {}
    for i, s in pairs:
        x = _read_pair(i, s)
        if x is not None:
            by_protocol.setdefault(_protocol(i), []).append(x)
    out = []
    for proto, xs in sorted(by_protocol.items()):
        waits = [m for m in missing if _in_protocol(m, proto)]
        for x, rej in zip(xs, holm([x["p"] for x in xs]), strict=True):
            verdict = "no verdict (runs missing)" if waits else _verdict(x, rej)
            out.append({**x, "protocol": proto, "verdict": verdict})
    return out


def conflict_rows(stats: list, n_declared: int, missing: list[str]) -> list[str]:
    """The report's section on the conflict testbed (empty when no conflict pair was run);
    ``n_declared``, ``missing``: :func:`missing_declared`'s reading of the sweeps."""
    if not any(_is_conflict(i) and _is_conflict(s) for i, s in matched_pairs(stats)):
        return []
    missing = missing_for(missing, set(FINAL_ROLE))
    out = [
        "## Capture at a cost (the role-conflict testbed)",
        "",
        "The final role's bare-answer rate (its considered behaviour under `conflict`) at the "
        "last evaluation, Isolated − Shared, a paired t over seeds, Holm over the workflows "
        "within each protocol (α = 0.05, two-sided); *supported* when Isolated's is higher "
        "and Shared's team does not score higher (final accuracy, Isolated − Shared, 95% "
        "interval), *contradicted* when Shared's is higher.",
        "",
    ]
    if missing:
        out += [
            f"**No verdict**: {len(missing)} of the runs this test declared (of the "
            f"{n_declared} of its sweep) have no completed record "
            f"({', '.join(missing[:6])}{', ...' if len(missing) > 6 else ''}); "
            "a declared test is not read on fewer runs than it declared.",
            "",
        ]
    out += [
        "| protocol | cell | final role | isolated | shared | isolated − shared (seeds) | p | final accuracy, isolated − shared | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for x in capture_tests(stats, missing):
        out.append(
            f"| {x['protocol']} | {x['label']} | {x['role']} | {x['iso']:.3f} | {x['shared']:.3f} | "
            f"{x['diff']:+.3f} ({x['n']}) | {x['p']:.3g} | {x['acc']:+.3f} ± {x['acc_h']:.3f} | "
            f"{x['verdict']} |"
        )
    return out + [""]
