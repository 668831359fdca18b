"""``flowzoo report RUNS_DIR``: the empirical map from a directory of training runs.

Reads every run (``config.json``, ``summary.json``, ``metrics.jsonl``), groups runs that
differ only by seed into cells, and writes ``report.md`` with: a table per task of base,
peak (with step), final accuracy and delta vs base (mean ± std over seeds) and cliff counts;
the majority-vote and single-agent rows where those runs exist; a plot per cell of the
held-out accuracy curves aligned with per-role gradient-mass share (shared policy) or
per-role gradient norm (isolated policy); and findings that test the study's claims
against these numbers — each stated as supported, contradicted or inconclusive, with the
numbers behind it. No torch needed.
"""

from __future__ import annotations

import io
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean, pstdev, stdev
from typing import Any

from flowzoo.analysis.behaviour import behaviour_rows
from flowzoo.analysis.builds import build_label, run_build
from flowzoo.analysis.decompose import gain_rows
from flowzoo.analysis.findings import FINDINGS_PM, MIN_EVALS, MIN_RUNS, RULES, findings
from flowzoo.analysis.inputs import (
    check_knobs,
    check_out,
    config_fault,
    make_out,
    record_fault,
    write_out,
)
from flowzoo.analysis.protocol import protocol_rows
from flowzoo.analysis.readings import Trajectory, evals_of, trajectory
from flowzoo.analysis.responses import declared_rows
from flowzoo.config import NOT_SHAPING, eval_temperature

__all__ = ["build_report", "cell_stats", "findings", "load_runs", "mean_ci"]
from flowzoo.analysis.records import DEFAULTS, read_metrics
from flowzoo.analysis.stats import t95
from flowzoo.analysis.warning import warning_rows

LEVER_KEYS = ("role_weighting", "adv_norm", "kl_per_role", "kl_coef", "damper_lambda", "algo")
LEVER_DEFAULTS = {k: DEFAULTS[k] for k in LEVER_KEYS}
#: config keys that never separate cells: those that do not shape a run, the seed (cells pool
#: seeds), where a run was placed, and the keys a cell is already named by
NOT_LEVERS = frozenset(NOT_SHAPING) | {"seed", "fsdp", "env", "model", "policy", "param", "preset"}


@dataclass
class Run:
    path: Path
    config: dict
    summary: dict
    metrics: list[dict]
    curve: list[tuple[int, float]]
    base_extra: dict = field(default_factory=dict)
    #: other config keys whose values differ between the runs loaded together (a sweep's
    #: learning rates, say): they separate cells as the named levers do
    varying: tuple[str, ...] = ()
    #: the model as cells name it: its name, with its build where the runs loaded together
    #: hold runs of several builds of that name (:func:`label_builds`)
    model_label: str = ""

    @property
    def evals(self) -> list[tuple[int, dict]]:
        """The run's evaluations with everything recorded (CIs, per-problem scores); for a
        record holding only its curve, each point with its problem count."""
        ev = evals_of(self.metrics)
        if len(ev) == len(self.curve):
            return ev
        n = int(self.config.get("eval_episodes") or 0) or 200
        return [(int(s), {"accuracy": float(a), "episodes": n}) for s, a in self.curve]

    @property
    def workflow(self) -> str:
        return self.config["env"].rsplit("-", 1)[0]

    @property
    def task(self) -> str:
        return self.config["env"].rsplit("-", 1)[1]

    def lever_parts(self, leave_out: tuple[str, ...] = ()) -> tuple[str, ...]:
        """``key=value`` per setting separating the run's cell, but ``leave_out``'s."""
        d = LEVER_DEFAULTS  # the named levers off their defaults, then the varying keys
        keys = [k for k in LEVER_KEYS if self.config.get(k, d[k]) != d[k]]
        keys += [k for k in self.varying if k.partition(".")[0] not in LEVER_KEYS]
        vals = [(k, _setting(self.config, k)) for k in keys if k.partition(".")[0] not in leave_out]
        return tuple(f"{k}={json.dumps(v) if isinstance(v, (dict, list)) else v}" for k, v in vals)

    @property
    def levers(self) -> str:
        return ", ".join(self.lever_parts()) or "-"

    @property
    def cell(self) -> tuple:
        c = self.config
        model = self.model_label or str(c["model"])
        return (self.task, self.workflow, model, c["policy"], c["param"], self.levers)

    @property
    def build(self) -> str | None:
        """The digest of the weights build the run started from (None: not recorded)."""
        return run_build(self.summary)


def read_record(path: Path, skipped: list[str]) -> dict | None:
    """A run's JSON record (``summary.json``, ``config.json``), or None with the reason added
    to ``skipped``: a file torn by a kill or a disk fault names itself, it does not fail the
    whole report with a JSON error and no path."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        skipped.append(f"{path}: unreadable ({type(e).__name__}: {str(e)[:80]})")
        return None
    if not isinstance(data, dict):
        skipped.append(f"{path}: not a JSON object")
        return None
    return data


def load_runs(root: str | Path | list[str | Path], left_out: list[str] | None = None) -> list[Run]:
    """Every finished run directory below ``root`` (or several roots): its summary says
    ``completed`` and it has an eval curve; ``varying`` names the config keys that differ
    across them. An unfinished run (interrupted, failed, diverged: a curve cut short would
    pool as if it were whole) and an unreadable record are left out, each named on stderr
    and, as ``path: why``, in ``left_out`` when given."""
    roots = root if isinstance(root, (list, tuple)) else [root]
    runs = []
    skipped: list[str] = []
    for s in (p for r in roots for p in sorted(Path(r).rglob("summary.json"))):
        d = s.parent
        cfg_p = d / "config.json"
        if not cfg_p.exists():
            continue
        summary, config = read_record(s, skipped), read_record(cfg_p, skipped)
        if summary is None or config is None:
            continue
        if why := config_fault(config):  # wrong-typed, out of domain: named, not a traceback
            skipped.append(f"{cfg_p}: unreadable ({why})")
            continue
        status = summary.get("status")
        if status != "completed":
            skipped.append(
                f"{d}: unfinished (status {status or 'missing'}, "
                f"{summary.get('steps_done', '?')} of {config.get('steps', '?')} steps)"
            )
            continue
        metrics = read_metrics(d / "metrics.jsonl")
        if why := record_fault(summary, metrics):  # never averaged in, never a traceback
            skipped.append(f"{d}: unreadable ({why})")
            continue
        try:
            curve = [(int(x[0]), float(x[1])) for x in summary.get("eval_curve", [])]
        except (TypeError, ValueError, IndexError):
            skipped.append(f"{s}: its eval_curve is not a list of [step, accuracy]")
            continue
        if not curve:
            continue
        base: dict = next((m["eval"] for m in metrics if m.get("step") == -1 and "eval" in m), {})
        runs.append(Run(d, config, summary, metrics, curve, base))
    for why in skipped:  # named, never a traceback: one torn record does not stop a report
        print(f"flowzoo report: skipped {why}", file=sys.stderr)
    if left_out is not None:
        left_out += skipped
    keys = sorted({k for r in runs for k in r.config} - NOT_LEVERS)
    varying = tuple(v for k in keys for v in _varying(runs, k))
    for r in runs:
        r.varying = varying
    label_builds(runs)
    return runs


def _setting(config: dict, key: str) -> Any:
    """A run's value of ``key``, or of ``key.sub`` (one entry of a dict-valued setting)."""
    top, dot, sub = key.partition(".")
    value = config.get(top, DEFAULTS.get(top))
    return (value.get(sub) if isinstance(value, dict) else None) if dot else value


def _varying(runs: list[Run], key: str) -> list[str]:
    """``[key]`` when runs differ in it; of a dict (``env_options``) each entry that differs,
    as ``key.entry``: a cell's label names what separates it, not the whole option JSON."""
    vals = [_setting(r.config, key) for r in runs]
    if len({json.dumps(v, sort_keys=True) for v in vals}) < 2:
        return []
    if not all(isinstance(v, dict) or v is None for v in vals):
        return [key]
    subs = sorted({s for v in vals if v for s in v}, key=str)
    return [
        f"{key}.{s}"
        for s in subs
        if len({json.dumps(_setting(r.config, f"{key}.{s}"), sort_keys=True) for r in runs}) > 1
    ]


def builds_kept_apart(runs: list[Run]) -> list[str]:
    """The report's lines saying which model names held several builds, kept apart as
    separate cells (none when every name held one build: the report reads as before)."""
    notes = label_builds(runs)
    if not notes:
        return []
    return [
        "Builds kept apart: runs of one model name with different weights digests are "
        "different models, never seeds of one cell; the model column names the build (the "
        "first 12 hex digits of the sha256 over its weights files; `build unknown`: a record "
        "without the digest). " + "; ".join(notes) + ".",
        "",
    ]


def label_builds(runs: list[Run]) -> list[str]:
    """Keep builds apart: where runs of one model name hold two or more weights digests (a
    recipe rebuilt, another pretraining), each run's model is labelled with its build, so
    builds never pool as seeds of one cell; a run without a recorded digest is then its own
    ``build unknown``. Where at most one digest is recorded, nothing is labelled (a record
    from before digests pools as it always did). Returns one line per model kept apart."""
    by_model: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        by_model[str(r.config["model"])].append(r)
    notes = []
    for model, rs in sorted(by_model.items()):
        if len({r.build for r in rs} - {None}) < 2:
            for r in rs:
                r.model_label = model
            continue
        counts: dict[str, int] = defaultdict(int)
        for r in rs:
            r.model_label = f"{model} ({build_label(r.build)})"
            counts[build_label(r.build)] += 1
        notes.append(f"{model}: " + ", ".join(f"{b} ({n} runs)" for b, n in sorted(counts.items())))
    return notes


def _pm(g: float, h: float, n: int) -> str:
    """A mean with its 95% half-width; one run has no interval, and says so."""
    return f"{g:+.3f} ± {h:.3f}" if n > 1 else f"{g:+.3f} (1 run)"


def _ms(xs: list[float]) -> str:
    if not xs:
        return "-"
    if len(xs) == 1:
        return f"{xs[0]:.3f}"
    return f"{mean(xs):.3f} ± {pstdev(xs):.3f}"


@dataclass
class CellStats:
    key: tuple
    runs: list[Run]
    traj: list[Trajectory]
    majority: list[float]

    @property
    def base(self) -> list[float]:
        return [t.base for t in self.traj]

    @property
    def peak(self) -> list[float]:
        return [t.peak for t in self.traj]

    @property
    def peak_step(self) -> list[int]:
        return [t.peak_step for t in self.traj]

    @property
    def final(self) -> list[float]:
        return [t.final for t in self.traj]

    @property
    def ood_final(self) -> list[float]:
        """Final out-of-distribution accuracy (structure never trained) of the runs that
        evaluated it: the second number beside the held-out one."""
        return [r.summary["ood"]["final"] for r in self.runs if r.summary.get("ood")]

    @property
    def seeds(self) -> list:
        """The distinct seeds of the cell's runs (two runs of one seed are one seed)."""
        return list(dict.fromkeys(r.config.get("seed", DEFAULTS["seed"]) for r in self.runs))

    @property
    def seeds_cell(self) -> str:
        """The table's seeds column: the distinct seeds, and the runs where they are more
        (a seed run twice, say a copied run directory, pools as two samples)."""
        n, k = len(self.seeds), len(self.runs)
        return str(n) if n == k else f"{n} ({k} runs)"

    @property
    def cliffs(self) -> int:
        return sum(t.cliff for t in self.traj)

    @property
    def delta(self) -> list[float]:
        return [t.gain for t in self.traj]

    def count(self, klass: str) -> int:
        return sum(t.klass == klass for t in self.traj)


def cell_stats(runs: list[Run], window: int = 3, floor: float = 0.0) -> list[CellStats]:
    """Runs that differ only by seed, pooled; each run read by :func:`trajectory`."""
    check_knobs(window=window, floor=floor)
    cells: dict[tuple, list[Run]] = defaultdict(list)
    for r in runs:
        cells[r.cell].append(r)
    out = []
    for key, rs in sorted(cells.items()):
        maj = [
            float(r.base_extra["majority_correct"])
            for r in rs
            if "majority_correct" in r.base_extra
        ]
        out.append(CellStats(key, rs, [trajectory(r.evals, window, floor) for r in rs], maj))
    return out


def mean_ci(xs: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t-interval over seeds (0 for one seed)."""
    if len(xs) < 2:
        return (xs[0] if xs else float("nan")), 0.0
    t = t95(len(xs) - 1)
    return mean(xs), t * stdev(xs) / len(xs) ** 0.5


def plot_name(key: tuple) -> str:
    """A readable file name for a figure of one cell group: workflow-task_model_param[_levers]."""
    task, wf, model, _pol, param, lev = key
    name = f"{wf}-{task}_{model}_{param}" + ("" if lev == "-" else f"_{lev}")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")[:120] + ".png"


def _plot_group(cells: list[CellStats], path: Path) -> tuple[float, float, str]:
    """One figure per workflow x task x model x param x levers, one column per policy
    (Shared beside Isolated): held-out accuracy per seed, their mean with a 95% band and the
    base as a dashed line; below, per-role gradient-mass share (shared) or norm (isolated).

    A column with one run has no band to show its noise, and an axis zoomed on one curve
    makes noise look like a trend: then the accuracy axis runs 0 to 1 and the figure says
    why. Returns the accuracy axis's limits and that note ("" when every column has a band)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    cols = sorted(cells, key=lambda c: {"shared": 0, "isolated": 1}.get(c.key[3], 2))
    unbanded: list[str] = []  # columns without a 95% band (one run at every step)
    fig, axes = plt.subplots(
        2, len(cols), figsize=(5.2 * len(cols), 5.6), sharex="col", squeeze=False
    )
    for j, c in enumerate(cols):
        ax1, ax2 = axes[0][j], axes[1][j]
        shared = c.key[3] == "shared"
        for i, r in enumerate(c.runs):
            xs, ys = zip(*r.curve, strict=True)
            ax1.plot(xs, ys, lw=0.8, alpha=0.5, color=f"C{i}", label=f"seed {r.config.get('seed')}")
        steps = sorted({s for r in c.runs for s, _ in r.curve})
        at = [[dict(r.curve).get(s) for r in c.runs] for s in steps]
        ok = [(s, [v for v in vs if v is not None]) for s, vs in zip(steps, at, strict=True)]
        m = [mean_ci(vs) for _, vs in ok]
        ax1.plot([s for s, _ in ok], [x for x, _ in m], color="k", lw=1.8, label="mean")
        if any(len(vs) > 1 for _, vs in ok):
            ax1.fill_between(
                [s for s, _ in ok],
                [x - h for x, h in m],
                [x + h for x, h in m],
                color="k",
                alpha=0.12,
                label="95% CI over seeds",
            )
        else:
            unbanded.append(c.key[3])
        ax1.axhline(mean(c.base), color="grey", ls="--", lw=1, label="base")
        ax1.set_title(f"{c.key[3]} ({c.seeds_cell} seeds)", fontsize=9)
        ax1.set_ylabel("held-out accuracy")
        ax1.legend(fontsize=6, ncol=2)
        per_role: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in c.runs:
            for row in r.metrics:
                for role, v in row.get("roles", {}).items():
                    per_role[role][row["step"] + 1].append(
                        v.get("grad_share" if shared else "grad_norm", 0.0)
                    )
        for k, (role, pts) in enumerate(sorted(per_role.items())):
            xs = sorted(pts)
            ax2.plot(xs, [mean(pts[x]) for x in xs], color=f"C{k}", label=role)
        ax2.set_ylabel("gradient-mass share" if shared else "per-role gradient norm")
        ax2.set_xlabel("training step")
        ax2.legend(fontsize=7)
        for ax in (ax1, ax2):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    lo = min(ax.get_ylim()[0] for ax in axes[0])
    hi = max(ax.get_ylim()[1] for ax in axes[0])
    note = ""
    if unbanded:
        lo, hi = min(lo, 0.0), max(hi, 1.0)
        note = (
            f"{' and '.join(unbanded)}: one run, no 95% band, so the accuracy axis spans 0 to 1 "
            "(not zoomed on the curve)"
        )
    for ax in axes[0]:  # one accuracy scale, so the policies compare at a glance
        ax.set_ylim(lo, hi)
    task, wf, model, _pol, param, lev = cols[0].key
    fig.suptitle(
        f"{wf}-{task} | {model} | {param}"
        + ("" if lev == "-" else f" | {lev}")
        + (f"\n{note}" if note else ""),
        fontsize=10,
    )
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    write_out(path, png.getvalue())  # whole, never through a link planted at its name
    plt.close(fig)
    return lo, hi, note


def sample_sizes(runs: list[Run], stats: list[CellStats]) -> str:
    """Runs, seeds per cell, evaluations per run and problems per evaluation, as one line."""
    seeds = [len(c.seeds) for c in stats]
    evals = [len(r.curve) for r in runs]
    # the problems each evaluation read, from the run's records ("?" where none says): not
    # the config's 0 for "the whole split", nor a default guessed for a curve-only record
    probs = sorted({_problems_read(r) for r in runs}, key=lambda x: (x == "?", x.zfill(12)))
    temps = sorted(
        {
            eval_temperature(
                float(r.config.get("eval_temperature", 0.0)),
                float(r.config.get("temperature", 0.7)),
            )
            for r in runs
        }
    )
    ks = sorted({int(r.config.get("eval_samples", 1)) for r in runs})
    return (
        f"Sample sizes: {len(runs)} runs in {len(stats)} cells; {min(seeds)}-{max(seeds)} seeds "
        f"per cell; {min(evals)}-{max(evals)} evaluations per run (base included) of "
        f"{'/'.join(map(str, probs))} held-out problems x "
        f"{'/'.join(map(str, ks))} samples at temperature "
        f"{'/'.join(map(str, temps))}. A claim is decided only on >= {MIN_RUNS} runs a side "
        f"with >= {MIN_EVALS} evaluations each; else it says insufficient evidence."
    )


def _problems_read(r: Run) -> str:
    """The held-out problems a run's first evaluation read, as its records say, else "?"."""
    first = evals_of(r.metrics)[:1]
    n = first[0][1].get("episodes") if first else (r.summary.get("eval") or {}).get("problems")
    return str(n) if isinstance(n, int) and not isinstance(n, bool) and n > 0 else "?"


def _need_matplotlib() -> None:
    """matplotlib is an optional extra: say which one, and the way around it, instead of a
    bare ModuleNotFoundError after every run has been read."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ImportError(
            "the report's plots need matplotlib, which is not installed: "
            "pip install 'flowzoo[report]', or pass --no-plots (plots=False) for report.md "
            "without the figures"
        ) from None


def build_report(
    root: str | Path | list[str | Path],
    out: str | Path | None = None,
    window: int = 3,
    floor: float = 0.0,
    plots: bool = True,
) -> Path:
    """Write ``report.md`` (and PNGs) for the runs below ``root`` (one dir or several, e.g.
    a math and a code sweep in one map); returns its path."""
    check_knobs(window=window, floor=floor)  # before anything is read or written
    if plots:
        _need_matplotlib()
    roots = [Path(r) for r in (root if isinstance(root, (list, tuple)) else [root])]
    root = roots[0] if len(roots) == 1 else Path(" + ".join(str(r) for r in roots))
    out = Path(out) if out else roots[0] / "report"
    check_out(out, ("report.md", "cells.json"))  # a link planted there: refused, named
    make_out(out)
    left_out: list[str] = []
    runs = load_runs(roots, left_out)
    if not runs:
        why = f"; left out: {'; '.join(left_out[:5])}" if left_out else ""
        raise ValueError(
            f"no finished runs (summary.json with status completed and an eval curve) under "
            f"{root}{why}"
        )
    stats = cell_stats(runs, window, floor)
    md = [
        f"# flowzoo report: {root}",
        "",
        f"{len(runs)} runs in {len(stats)} cells"
        + (
            f" ({len(left_out)} unfinished or unreadable runs left out, named below)"
            if left_out
            else ""
        )
        + f". The final accuracy is the mean of a run's last {window} evaluations"
        + (f"; every interval has a {floor} floor" if floor else "")
        + ". The seeds column counts distinct seeds (with the runs where they are more).",
        "",
        sample_sizes(runs, stats),
        "",
        *builds_kept_apart(runs),
        "Rules:",
        "",
        *[f"- {r}" for r in RULES],
        "",
    ]
    for task in sorted({c.key[0] for c in stats}):
        md += [
            f"## {task}",
            "",
            "| workflow | model | policy | param | levers | seeds | base (± SD) | peak (step) (± SD) | final (± SD) | final, out of distribution (± SD) | gain (± 95% CI half-width over seeds) | improved / worsened | never rose / held / fell | cliffs | majority vote (base) (± SD) |",
            "|---|---|---|---|---|---:|---|---|---|---|---|---|---|---|---|",
        ]
        for c in [c for c in stats if c.key[0] == task]:
            _, wf, model, pol, param, lev = c.key
            peak = f"{_ms(c.peak)} ({'/'.join(str(s) for s in c.peak_step)})"
            g, h = mean_ci(c.delta)
            n = len(c.runs)
            up = sum(t.improved for t in c.traj)
            down = sum(t.worsened for t in c.traj)
            classes = "/".join(
                str(c.count(k)) for k in ("never rose", "rose and held", "rose then fell")
            ) + (f" ({c.count('undecided')} undecided)" if c.count("undecided") else "")
            md.append(
                f"| {wf} | {model} | {pol} | {param} | {lev} | {c.seeds_cell} | {_ms(c.base)} | {peak} | "
                f"{_ms(c.final)} | {_ms(c.ood_final)} | {_pm(g, h, n)} | {up}/{down} of {n} | "
                f"{classes} | "
                f"{c.cliffs}/{n} | {_ms(c.majority)} |"
            )
        md.append("")
    md += [
        "## Protocol",
        "",
        "What the optimiser did in each cell (means over steps and runs) and whether its runs "
        "passed their peak (a fall was read after it, or 3 evaluations came after it); a "
        "dynamics claim read on runs that did not is read on rising runs.",
        "",
        *protocol_rows(stats),
        "",
    ]
    md += ["## Findings", "", FINDINGS_PM, ""] + [f"- {x}" for x in findings(stats)] + [""]
    md += behaviour_rows(stats)
    md += declared_rows(stats, roots)  # the declared sweeps' readings (conflict, rollback, ...)
    md += warning_rows(runs, DEFAULTS)  # the early warnings, per run
    md += gain_rows(stats)
    if left_out:
        md += [
            "## Runs left out",
            "",
            "Only completed runs whose records are readable (every accuracy a number in "
            "[0, 1], every setting of its type) are read; these are not:",
            "",
        ]
        md += [f"- {x}" for x in left_out] + [""]
    check_out(out, ["report.md", "cells.json"] + [plot_name(c.key) for c in stats if plots])
    if plots:
        md += ["## Curves", ""]
        groups: dict[tuple, list[CellStats]] = defaultdict(list)
        for c in stats:
            groups[c.key[:3] + c.key[4:]].append(c)
        for cells in groups.values():
            name = plot_name(cells[0].key)
            *_, note = _plot_group(cells, out / name)
            md.append(f"![{name[:-4]}]({name})")
            if note:
                md += ["", f"*{name[:-4]}: {note}.*", ""]
        md.append("")
    p = out / "report.md"
    write_out(p, "\n".join(md))
    write_out(
        out / "cells.json",
        json.dumps(
            [
                {
                    "key": list(c.key),
                    "runs": [str(r.path) for r in c.runs],
                    "trajectories": [t.as_dict() for t in c.traj],
                    "majority": c.majority,
                    "ood_final": c.ood_final,
                }
                for c in stats
            ],
            indent=1,
        ),
    )
    return p
