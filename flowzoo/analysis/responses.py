"""The readings two declared sweeps ask for (issue 62): whether the early warning's
``rollback`` response saves the final model (``baselines/sweeps/rollback-response.toml``),
and whether normalising advantages once across agents gives gradient-norm spikes that
per-agent normalisation does not (Dr. MAS's claim, ``baselines/sweeps/estimators-falls.toml``:
GRPO and Dr. MAS on the same groups, docs/training.md "Dr. MAS").

Why here and read as declared: each compares two cells that differ only in the setting the
sweep varies, paired by seed, with the test its file states (a paired t, two-sided, α =
0.05); a report holding no such pair prints nothing, and a reading whose declared runs are
not all in prints no verdict (:func:`flowzoo.analysis.conflict.missing_for`).
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import mean, median
from typing import Any

from flowzoo.analysis.conflict import conflict_rows, missing_declared, missing_for, paired_t_p
from flowzoo.analysis.findings import too_little
from flowzoo.analysis.protocol import cell_label
from flowzoo.analysis.records import DEFAULTS
from flowzoo.analysis.stats import fisher_exact, t_interval
from flowzoo.analysis.warning import run_warnings

#: each pair: (the settings its two sides differ in, side A's values, side B's values); a
#: reading is B - A
ROLLBACK = ("monitor_response",), {"monitor_response": "warn"}, {"monitor_response": "rollback"}
#: the control for what a rollback to step 0 amounts to: warning only, at half the lr
ROLLBACK_VS_LR = (
    ("monitor_response", "lr"),
    {"monitor_response": "warn", "lr": 1e-4},
    {
        "monitor_response": "rollback",
        "lr": 2e-4,
    },
)
SPIKES = ("algo",), {"algo": "dr-mas"}, {"algo": "grpo", "adv_norm": "group"}
FALLS = ("algo",), {"algo": "grpo", "adv_norm": "group"}, {"algo": "role-baseline"}


def _value(run: Any, key: str) -> Any:
    return run.config.get(key, DEFAULTS.get(key))


def _side(cell: Any, want: dict) -> bool:
    """Whether every run of ``cell`` has the ``want`` values (a setting a run's config does
    not name: its default)."""
    return all(_value(r, k) == v for r in cell.runs for k, v in want.items())


def _signature(cell: Any, keys: tuple[str, ...]) -> tuple:
    """The cell's name without the settings ``keys``, from its run's settings (never by
    parsing its label): two cells alike but for ``keys`` share it."""
    return (*cell.key[:5], cell.runs[0].lever_parts(keys))


def _label(cell: Any, keys: tuple[str, ...]) -> str:
    """The pair's name: the cell's, without the settings the pair compares."""
    sig = _signature(cell, keys)
    return cell_label((*sig[:5], ", ".join(sig[5]) or "-"))


def matched(stats: list, keys: tuple[str, ...], a: dict, b: dict) -> list[tuple[Any, Any]]:
    """(A cell, B cell) pairs alike but for ``keys``, A's runs at ``a``'s values, B's at
    ``b``'s."""
    sides_a = {_signature(c, keys): c for c in stats if _side(c, a)}
    return [
        (sides_a[sig], c) for c in stats if _side(c, b) and (sig := _signature(c, keys)) in sides_a
    ]


def _waits(missing: list[str], *cells: Any) -> bool:
    """Whether a reading over ``cells`` waits for declared runs of their workflows."""
    return bool(missing_for(missing, {c.key[1] for c in cells}))


def _decided(d: float, h: float, p: float, gate: str | None, missing: bool) -> str:
    if missing:
        return "no verdict (runs missing)"
    if gate:
        return gate
    if d - h > 0:
        return f"supported (p = {p:.2g})"
    if d + h < 0:
        return f"contradicted (p = {p:.2g})"
    return f"inconclusive (p = {p:.2g})"


def _by_seed(cell: Any, values: list) -> dict:
    return dict(zip((r.config.get("seed") for r in cell.runs), values, strict=True))


def _paired(a: dict, b: dict) -> tuple[float, float, float, int]:
    """B - A over the seeds both ran: (mean, 95% t half-width, paired t p, seeds)."""
    common = sorted(set(a) & set(b), key=str)
    diffs = [b[k] - a[k] for k in common]
    if len(diffs) < 2:
        return (mean(diffs) if diffs else math.nan), math.inf, 1.0, len(diffs)
    d, h = t_interval(diffs)
    return d, h, paired_t_p(diffs), len(diffs)


def _rollbacks(run: Any) -> list[dict]:
    mon = run.summary.get("monitor")
    rbs = mon.get("rollbacks") if isinstance(mon, dict) else None
    return [x for x in rbs if isinstance(x, dict)] if isinstance(rbs, list) else []


def _steps_trained(run: Any) -> int:
    """Training steps run: the kept metrics lines, and the steps each rollback discarded
    (their lines leave metrics.jsonl; the rollback's record keeps from where to where)."""
    kept = sum(1 for m in run.metrics if isinstance(m.get("step"), int) and m["step"] >= 0)
    redone = 0
    for rb in _rollbacks(run):
        at, to = rb.get("at_step"), rb.get("to_step")
        if isinstance(at, int) and isinstance(to, int):
            redone += max(0, at - to)
    return kept + redone


def _first_warning(run: Any) -> int | None:
    alarms = run_warnings(run.summary, run.metrics, run.config, DEFAULTS)[0]
    return min(a.step for a in alarms) if alarms else None


def rollback_rows(stats: list, missing: list[str]) -> list[str]:
    """The rollback response against warning only (the same lr) and against warning only at
    half the lr (what a rollback to the first checkpoint amounts to): final accuracy,
    rollback - warn, paired by seed; beside it the steps each side ran, when it first
    warned and how many rollbacks it made."""
    pairs: list[tuple[Any, Any, tuple[str, ...]]]
    pairs = [(w, r, ROLLBACK[0]) for w, r in matched(stats, *ROLLBACK)]
    pairs += [(w, r, ROLLBACK_VS_LR[0]) for w, r in matched(stats, *ROLLBACK_VS_LR)]
    if not pairs:
        return []
    out = [
        "## The early warning's rollback, measured",
        "",
        "Final held-out accuracy of `monitor_response=rollback` minus `warn` (the default), "
        "paired by seed (95% t interval, paired t, two-sided α = 0.05): *supported* (rollback "
        "saves the final model) when the interval lies above 0, *contradicted* when below. "
        "Against warning only at half the lr (a rollback to the step-0 checkpoint is a run at "
        "half the lr), the same test, read beside it. Steps count every training step run, "
        "those a rollback discarded and ran again included; the first warning's step is the "
        "median over the runs that warned.",
        "",
        "| cell | warn arm | seeds | final, warn | final, rollback | rollback − warn | steps run, warn / rollback | first warning, warn / rollback | rollbacks (mean) | runs that warned, warn / rollback | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w, r, keys in pairs:
        d, h, p, n = _paired(_by_seed(w, w.final), _by_seed(r, r.final))
        gate = too_little([w]) or too_little([r])
        if n != len(w.runs) or n != len(r.runs):
            gate = (
                gate or "no verdict (the declared test pairs seeds; the sides ran different seeds)"
            )
        steps = [mean(_steps_trained(x) for x in c.runs) for c in (w, r)]
        firsts = [[f for x in c.runs if (f := _first_warning(x)) is not None] for c in (w, r)]
        first = " / ".join(f"{median(f):g}" if f else "-" for f in firsts)
        arm = f"lr {_value(w.runs[0], 'lr'):g}"
        out.append(
            f"| {_label(w, keys)} | {arm} | {len(w.runs)} / {len(r.runs)} | {mean(w.final):.3f} | "
            f"{mean(r.final):.3f} | {d:+.3f} ± {h:.3f} | {steps[0]:.0f} / {steps[1]:.0f} | "
            f"{first} | {mean(len(_rollbacks(x)) for x in r.runs):.1f} | "
            f"{len(firsts[0])} / {len(firsts[1])} | {_decided(d, h, p, gate, _waits(missing, w, r))} |"
        )
    return out + [""]


def spike_ratio(run: Any) -> float | None:
    """The run's largest per-step policy gradient norm over its median step's (each step: its
    largest policy's norm); None without two finite positive norms."""
    norms: list[float] = []
    for m in run.metrics:
        pols = m.get("policies")
        if not isinstance(pols, dict) or not isinstance(m.get("step"), int) or m["step"] < 0:
            continue
        raw = [v.get("grad_norm") for v in pols.values() if isinstance(v, dict)]
        g = [float(x) for x in raw if isinstance(x, (int, float)) and math.isfinite(x) and x > 0]
        if g:
            norms.append(max(g))
    if len(norms) < 2:
        return None
    return max(norms) / median(norms)


def spike_rows(stats: list, missing: list[str]) -> list[str]:
    """Dr. MAS's claim: the log spike ratio under GRPO (one mean and std per group, pooled
    over roles) minus under Dr. MAS (the same groups split by role), paired by seed."""
    pairs = matched(stats, *SPIKES)
    if not pairs:
        return []
    out = [
        "## Gradient-norm spikes: one normalisation across agents vs per agent",
        "",
        "Per run, the spike ratio = its largest per-step policy gradient norm over the median "
        "step's; log ratio of GRPO (its groups pooled over roles) minus Dr. MAS (`algo=dr-mas`, "
        "the same groups split by role), paired by seed (95% t interval, paired t, two-sided "
        "α = 0.05): *supported* (normalising across agents spikes more) when the interval "
        "lies above 0, *contradicted* when below. Read on the same grouping (`group_by`) on "
        "both sides.",
        "",
        "| cell | seeds | spike ratio, dr-mas | spike ratio, grpo | log ratio, grpo − dr-mas | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for dm, gl in pairs:
        ra = {k: v for k, v in _by_seed(dm, [spike_ratio(x) for x in dm.runs]).items() if v}
        rb = {k: v for k, v in _by_seed(gl, [spike_ratio(x) for x in gl.runs]).items() if v}
        d, h, p, n = _paired(
            {k: math.log(v) for k, v in ra.items()}, {k: math.log(v) for k, v in rb.items()}
        )
        gate = too_little([dm]) or too_little([gl])
        if (n != len(dm.runs) or n != len(gl.runs)) and not gate:
            gate = "no verdict (a run without gradient norms, or the sides ran different seeds)"
        out.append(
            f"| {_label(dm, SPIKES[0])} | {n} | {mean(ra.values()) if ra else math.nan:.2f} | "
            f"{mean(rb.values()) if rb else math.nan:.2f} | {d:+.3f} ± {h:.3f} | "
            f"{_decided(d, h, p, gate, _waits(missing, dm, gl))} |"
        )
    return out + [""]


def fall_rows(stats: list, missing: list[str]) -> list[str]:
    """The per-role running baseline against GRPO on the falls: runs that rose then fell
    (the report's rule), a two-sided Fisher exact test; the final accuracy paired by seed."""
    pairs = matched(stats, *FALLS)
    if not pairs:
        return []
    out = [
        "## Falls by estimator: the per-role baseline vs GRPO",
        "",
        "Runs that rose then fell (the report's rule) under `algo=role-baseline` and under "
        "GRPO, a two-sided Fisher exact test (the primary reading); the final accuracy, "
        "role-baseline − GRPO, paired by seed (95% t interval, paired t), beside it. α = 0.05.",
        "",
        "| cell | fell, grpo | fell, role-baseline | Fisher p | final, role-baseline − grpo | verdict on the falls |",
        "|---|---|---|---|---|---|",
    ]
    for g, rb in pairs:
        fg, fr = g.count("rose then fell"), rb.count("rose then fell")
        p = fisher_exact(fr, len(rb.runs), fg, len(g.runs))
        d, h, _, n = _paired(_by_seed(g, g.final), _by_seed(rb, rb.final))
        gate = too_little([g]) or too_little([rb])
        if _waits(missing, g, rb):
            verdict = "no verdict (runs missing)"
        elif gate:
            verdict = gate
        elif p <= 0.05:
            verdict = (
                f"{'fewer' if fr / len(rb.runs) < fg / len(g.runs) else 'more'} falls (p = {p:.2g})"
            )
        else:
            verdict = f"inconclusive (p = {p:.2g})"
        out.append(
            f"| {_label(g, FALLS[0])} | {fg}/{len(g.runs)} | {fr}/{len(rb.runs)} | {p:.3g} | "
            f"{d:+.3f} ± {h:.3f} ({n} seeds) | {verdict} |"
        )
    return out + [""]


def declared_rows(stats: list, roots: list[Path]) -> list[str]:
    """Every declared sweep's reading (the conflict testbed's capture, the rollback, the
    spikes, the falls by estimator), each only where the report holds its pair of cells. A
    reading whose declared runs are not all in (lost, or still running: sweep.json names
    every declared run from the start) gives no verdict."""
    n, missing = missing_declared(roots, {r.path.name for c in stats for r in c.runs})
    out = conflict_rows(stats, n, missing)
    return (
        out + rollback_rows(stats, missing) + spike_rows(stats, missing) + fall_rows(stats, missing)
    )


__all__ = ["fall_rows", "matched", "declared_rows", "rollback_rows", "spike_ratio", "spike_rows"]
