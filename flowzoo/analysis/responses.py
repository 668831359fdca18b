"""The readings two declared sweeps ask for (issue 62): whether the early warning's
``rollback`` response saves the final model (``baselines/sweeps/rollback-response.toml``),
and whether normalising advantages once across agents gives gradient-norm spikes that
per-agent normalisation does not (Dr. MAS's claim, ``baselines/sweeps/estimators-falls.toml``:
GRPO and Dr. MAS on the same groups, docs/training.md "Dr. MAS").

Why here and read as declared: each compares two cells that differ only in the setting the
sweep varies, paired by seed, with the test its file states (a paired t, two-sided, α =
0.05); a report holding no such pair prints nothing, and a sweep that lost runs prints no
verdict (:func:`flowzoo.analysis.conflict.missing_declared`).
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import mean, median
from typing import Any

from flowzoo.analysis.conflict import missing_declared, paired_t_p
from flowzoo.analysis.findings import too_little
from flowzoo.analysis.protocol import cell_label
from flowzoo.analysis.stats import t_interval
from flowzoo.analysis.warning import run_warnings
from flowzoo.config import TrainConfig

DEFAULTS = dict(vars(TrainConfig()))
#: (section title, the settings the two sides differ in, side A's values, side B's values,
#: what B - A is read on)
ROLLBACK = ("monitor_response",), {"monitor_response": "warn"}, {"monitor_response": "rollback"}
SPIKES = ("algo",), {"algo": "dr-mas"}, {"algo": "grpo", "adv_norm": "group"}


def _value(run: Any, key: str) -> Any:
    return run.config.get(key, DEFAULTS.get(key))


def _side(cell: Any, want: dict) -> bool:
    """Whether every run of ``cell`` has the ``want`` values (a setting a run's config does
    not name: its default)."""
    return all(_value(r, k) == v for r in cell.runs for k, v in want.items())


def _signature(cell: Any, keys: tuple[str, ...]) -> tuple:
    """The cell's name without the levers ``keys``: two cells alike but for them share it."""
    rest = [p for p in cell.key[5].split(", ") if p.partition("=")[0] not in keys]
    return (*cell.key[:5], ", ".join(x for x in rest if x != "-"))


def _label(cell: Any, keys: tuple[str, ...]) -> str:
    """The pair's name: the cell's, without the settings the pair compares."""
    sig = _signature(cell, keys)
    return cell_label((*sig[:5], sig[5] or "-"))


def matched(stats: list, keys: tuple[str, ...], a: dict, b: dict) -> list[tuple[Any, Any]]:
    """(A cell, B cell) pairs alike but for ``keys``, A's runs at ``a``'s values, B's at
    ``b``'s."""
    sides_a = {_signature(c, keys): c for c in stats if _side(c, a)}
    return [
        (sides_a[sig], c) for c in stats if _side(c, b) and (sig := _signature(c, keys)) in sides_a
    ]


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


def _steps_trained(run: Any) -> int:
    """Training steps run, counting the steps a rollback repeats (one metrics line each)."""
    return sum(1 for m in run.metrics if isinstance(m.get("step"), int) and m["step"] >= 0)


def _warned(run: Any) -> bool:
    return bool(run_warnings(run.summary, run.metrics, run.config, DEFAULTS)[0])


def rollback_rows(stats: list, missing: bool) -> list[str]:
    """The rollback response against warning only: final accuracy, rollback - warn, paired
    by seed; the compute each side spent and how many runs warned, beside it."""
    pairs = matched(stats, *ROLLBACK)
    if not pairs:
        return []
    out = [
        "## The early warning's rollback, measured",
        "",
        "Final held-out accuracy of `monitor_response=rollback` minus `warn` (the default), "
        "paired by seed (95% t interval, paired t, two-sided α = 0.05): *supported* (rollback "
        "saves the final model) when the interval lies above 0, *contradicted* when below. "
        "Steps count every training step run, a step a rollback repeats included.",
        "",
        "| cell | seeds | final, warn | final, rollback | rollback − warn | steps run, warn / rollback | wall s, warn / rollback | runs that warned, warn / rollback | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for w, r in pairs:
        d, h, p, n = _paired(_by_seed(w, w.final), _by_seed(r, r.final))
        gate = too_little([w]) or too_little([r])
        if n != len(w.runs) or n != len(r.runs):
            gate = (
                gate or "no verdict (the declared test pairs seeds; the sides ran different seeds)"
            )
        steps = [mean(_steps_trained(x) for x in c.runs) for c in (w, r)]
        wall = [mean(float(x.summary.get("wall_s") or 0.0) for x in c.runs) for c in (w, r)]
        warned = [sum(_warned(x) for x in c.runs) for c in (w, r)]
        out.append(
            f"| {_label(w, ROLLBACK[0])} | {len(w.runs)} / {len(r.runs)} | {mean(w.final):.3f} | "
            f"{mean(r.final):.3f} | {d:+.3f} ± {h:.3f} | {steps[0]:.0f} / {steps[1]:.0f} | "
            f"{wall[0]:.0f} / {wall[1]:.0f} | {warned[0]} / {warned[1]} | "
            f"{_decided(d, h, p, gate, missing)} |"
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


def spike_rows(stats: list, missing: bool) -> list[str]:
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
        if n < 2 and not gate:
            gate = "no verdict (fewer than two seeds on both sides with gradient norms)"
        out.append(
            f"| {_label(dm, SPIKES[0])} | {n} | {mean(ra.values()) if ra else math.nan:.2f} | "
            f"{mean(rb.values()) if rb else math.nan:.2f} | {d:+.3f} ± {h:.3f} | "
            f"{_decided(d, h, p, gate, missing)} |"
        )
    return out + [""]


def response_rows(stats: list, roots: list[Path]) -> list[str]:
    """Both sections, each only where the report holds its pair of cells."""
    _, missing = missing_declared(roots, {r.path.name for c in stats for r in c.runs})
    return rollback_rows(stats, bool(missing)) + spike_rows(stats, bool(missing))


__all__ = ["matched", "response_rows", "rollback_rows", "spike_ratio", "spike_rows"]
