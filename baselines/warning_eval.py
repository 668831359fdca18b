"""The cliff early warning evaluated as a detector, on the committed run records.

    python baselines/warning_eval.py tune   # tuning set only: writes tuned.json
    python baselines/warning_eval.py test   # the test set, once, at the shipped defaults

Why two commands: the thresholds are chosen on the tuning set and shipped as the config's
defaults (``monitor_*`` in :class:`flowzoo.config.TrainConfig`) before any number of the test
set is computed; ``test`` refuses to run unless the defaults are the tuned values, so what is
evaluated is what ships. Both replay each run's metrics lines through
:class:`flowzoo.analysis.warning.Monitor`, the class the trainer feeds every step.

Declaration (also ``baselines/results/warning-eval/DECLARATION.md``, written before any test
number was computed):

- Data: every completed run with an eval curve under ``baselines/results/*/runs/*``, read by
  the report's ``load_runs`` (superseded sets have since moved to ``results/archive/``). Only training-time fields reach a detector (``eval`` entries
  are stripped from the lines it is fed).
- Label, the report's fall rule (``readings.trajectory`` over the whole curve, the run's own
  ``cliff_window`` and ``cliff_margin``): positive = ``rose then fell``, negative = ``rose and
  held``; ``undecided`` and ``never rose`` runs are in neither (counted; the never-rose runs
  warned on are reported apart).
- Tuning set (by build): tiny-s-code second build (testbed-ladder-code-1e-4,
  map-claims-code-48), tiny-s math recipes 8 and 9 (testbed-ladder-r8/-r9,
  map-claims-r8/-r9). Test set: every other result set: tiny-s-code first build, the three
  tiny-s-code12 builds (stages 0, 1, 2), tiny-s math recipes 7 and 10, tiny-m, tiny-m-code.
  No build is on both sides.
- Per positive: ``t_fall`` = the first evaluation step at which the rule, applied to the
  evaluations up to it, reads ``rose then fell``; ``w`` = the steps done at the detector's
  first warning (its line's step + 1); detected when ``w <= t_fall``; lead = ``t_fall - w``;
  in time when lead >= ``eval_every``. Recall = detected / positives, recall in time = in
  time / positives, false-alarm rate = negatives warned on at any step / negatives; each
  with a 95% Wilson interval; lead as median, quartiles, range.
- Naive baseline: the same monitor with only its ``reward_drop`` rule (training reward
  alone), tuned on the same set by the same rule. Monitor vs baseline: exact two-sided
  McNemar tests on the positives' in-time detections and on the negatives' alarms.
- Tuning rule: over the grids below (ordered least to most sensitive), maximise recall in
  time subject to a false-alarm rate <= 0.15 on the tuning set; ties: higher recall, then
  fewer false alarms, then the first grid point.
- Targets (issue 62): on the test set recall >= 0.8, false alarms <= 0.2, median lead >= one
  evaluation interval, and better than the naive baseline; each reported met or missed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import math
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from flowzoo.analysis.readings import trajectory
from flowzoo.analysis.report import load_runs
from flowzoo.analysis.stats import wilson
from flowzoo.analysis.warning import Thresholds, replay

ROOT = Path(__file__).resolve().parent / "results"
OUT = ROOT / "warning-eval"
TUNING = (
    "testbed-ladder-code-1e-4",
    "map-claims-code-48",
    "testbed-ladder-r8",
    "testbed-ladder-r9",
    "map-claims-r8",
    "map-claims-r9",
)
#: the build of the result sets whose runs recorded no weights digest (docs/testbed.md)
UNDIGESTED = {
    "testbed-ladder": "tiny-s recipe 7",
    "map-claims": "tiny-s recipe 7",
    **{
        f"{kind}-r{n}": f"tiny-s recipe {n}"
        for kind in ("testbed-ladder", "map-claims")
        for n in (8, 9, 10)
    },
    "map-claims-tiny-m": "tiny-m (digest not recorded)",
}
#: the false-alarm rate the tuning may not pass (a margin under the 0.2 target)
MAX_TUNING_FA = 0.15
#: the monitor's grid: update-size thresholds (largest first) x windows, and the reward
#: rule's drops (largest first) x windows; every point of the product is scored
#: (0.030 .. 0.010 by 0.0005)
UPDATE_GRID = [(round(0.030 - 0.0005 * i, 4), k) for i in range(41) for k in (3, 1)]
REWARD_GRID = [(d, k) for d in (0.5, 0.4, 0.3, 0.25, 0.2, 0.15, 0.1) for k in (8, 5, 3)]
#: the naive baseline's grid (the reward rule alone)
NAIVE_GRID = [(round(0.5 - 0.025 * i, 3), k) for i in range(19) for k in (8, 5, 3, 2, 1)]
OFF = 0.0


@dataclass
class Case:
    """One run as the evaluation reads it."""

    name: str
    result_set: str
    build: str
    klass: str
    eval_every: int
    t_fall: int | None
    lr: float
    lines: list[dict] = field(repr=False)

    @property
    def positive(self) -> bool:
        return self.klass == "rose then fell"

    @property
    def negative(self) -> bool:
        return self.klass == "rose and held"


def first_fall(evals: list[tuple[int, dict]], window: int, floor: float) -> int | None:
    """The first evaluation step at which the report's rule, read on the evaluations up to
    it, says the run rose then fell (None: it never does)."""
    for j in range(2, len(evals) + 1):
        if trajectory(evals[:j], window, floor).klass == "rose then fell":
            return evals[j - 1][0]
    return None


def load(sets: list[str]) -> list[Case]:
    """The runs of ``sets`` (result-set names under ``baselines/results``), labelled."""
    cases = []
    for s in sets:
        with contextlib.redirect_stderr(io.StringIO()):  # left-out runs: counted below
            runs = load_runs(set_dir(s) / "runs")
        for r in runs:
            w, f = int(r.config.get("cliff_window", 3)), float(r.config.get("cliff_margin", 0.0))
            t = trajectory(r.evals, w, f)
            tf = first_fall(r.evals, w, f) if t.klass == "rose then fell" else None
            lines = [{k: v for k, v in m.items() if k != "eval"} for m in r.metrics]
            build = f"{r.config['model']} {r.build[:8]}" if r.build else UNDIGESTED.get(s, s)
            every = int(r.config["eval_every"])
            lr = float(r.config["lr"])
            cases.append(Case(r.path.name, s, build, t.klass, every, tf, lr, lines))
    return cases


def set_dir(name: str) -> Path:
    """A result set's folder: current, or moved under ``archive/`` when superseded (the
    evaluation reads every set, whatever its status in ``baselines/results/INDEX.md``)."""
    return ROOT / name if (ROOT / name).is_dir() else ROOT / "archive" / name


def test_sets() -> list[str]:
    """Every result set with per-run records that is not a tuning set."""
    found = [*ROOT.glob("*/runs/*/metrics.jsonl"), *ROOT.glob("archive/*/runs/*/metrics.jsonl")]
    have = sorted({p.parents[2].name for p in found})
    return [s for s in have if s not in TUNING and s != OUT.name]


def thresholds(update: tuple[float, int], reward: tuple[float, int]) -> Thresholds:
    return Thresholds(update[0], update[1], reward[0], reward[1])


def first_warning(case: Case, th: Thresholds) -> tuple[int, dict] | None:
    """(steps done, the warning) at a detector's first warning on ``case`` (None: none)."""
    alarms = replay(case.lines, th)
    return (alarms[0].step + 1, alarms[0].as_dict()) if alarms else None


def score(cases: list[Case], firsts: list[int | None]) -> dict:
    """Recall, recall in time, false alarms (counts and Wilson intervals) and lead."""
    pos = [(c, w) for c, w in zip(cases, firsts, strict=True) if c.positive]
    neg = [(c, w) for c, w in zip(cases, firsts, strict=True) if c.negative]
    det = [(c, w) for c, w in pos if w is not None and w <= c.t_fall]
    leads = [c.t_fall - w for c, w in det]
    in_time = sum(c.t_fall - w >= c.eval_every for c, w in det)
    fa = sum(w is not None for _, w in neg)
    never = [(c, w) for c, w in zip(cases, firsts, strict=True) if c.klass == "never rose"]

    def rate(k: int, n: int) -> dict:
        lo, hi = wilson(k, n)
        return {"k": k, "n": n, "rate": k / n if n else None, "ci": [lo, hi]}

    q = statistics.quantiles(leads, n=4) if len(leads) >= 2 else [None, None, None]
    return {
        "recall": rate(len(det), len(pos)),
        "recall_in_time": rate(in_time, len(pos)),
        "false_alarms": rate(fa, len(neg)),
        "lead_steps": {
            "median": statistics.median(leads) if leads else None,
            "q1": q[0],
            "q3": q[2],
            "min": min(leads) if leads else None,
            "max": max(leads) if leads else None,
        },
        "lead_intervals_median": statistics.median([(c.t_fall - w) / c.eval_every for c, w in det])
        if det
        else None,
        "never_rose_warned": {"k": sum(w is not None for _, w in never), "n": len(never)},
    }


def _key(s: dict) -> tuple:
    """The tuning rule's order: in-time recall, then recall, then fewer false alarms."""
    return (s["recall_in_time"]["k"], s["recall"]["k"], -s["false_alarms"]["k"])


def _firsts(cases: list[Case], th: Thresholds) -> list[int | None]:
    out = []
    for c in cases:
        f = first_warning(c, th)
        out.append(f[0] if f else None)
    return out


def tune(cases: list[Case]) -> dict:
    """The monitor's and the baseline's grid points chosen by the tuning rule. The two rules
    never interact (each reads its own signal and warns once), so a point's first warning is
    the earlier of its rules' first warnings, each replayed alone through the monitor."""
    upd = {u: _firsts(cases, thresholds(u, (OFF, 1))) for u in UPDATE_GRID}
    rew = {r: _firsts(cases, thresholds((OFF, 1), r)) for r in set(REWARD_GRID + NAIVE_GRID)}

    def best(points: list, firsts_of) -> tuple:
        chosen, chosen_score = None, None
        for p in points:
            s = score(cases, firsts_of(p))
            if s["false_alarms"]["rate"] is None or s["false_alarms"]["rate"] > MAX_TUNING_FA:
                continue
            if chosen_score is None or _key(s) > _key(chosen_score):  # first point wins ties
                chosen, chosen_score = p, s
        return chosen, chosen_score

    def both(p: tuple) -> list[int | None]:
        pairs = zip(upd[p[0]], rew[p[1]], strict=True)
        return [min((x for x in xs if x is not None), default=None) for xs in pairs]

    mon, mon_s = best(list(itertools.product(UPDATE_GRID, REWARD_GRID)), both)
    naive, naive_s = best(NAIVE_GRID, lambda p: rew[p])
    if mon is None or naive is None:
        raise SystemExit(f"no grid point keeps false alarms <= {MAX_TUNING_FA} on the tuning set")
    return {
        "monitor": thresholds(*mon).as_dict(),
        "naive": thresholds((OFF, 1), naive).as_dict(),
        "tuning_scores": {"monitor": mon_s, "naive": naive_s},
        "grid_points": {"monitor": len(UPDATE_GRID) * len(REWARD_GRID), "naive": len(NAIVE_GRID)},
    }


def mcnemar(a: list[bool], b: list[bool]) -> dict:
    """Exact two-sided McNemar test of paired outcomes ``a`` vs ``b``."""
    only_a = sum(x and not y for x, y in zip(a, b, strict=True))
    only_b = sum(y and not x for x, y in zip(a, b, strict=True))
    n = only_a + only_b
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2**n if n else 1.0
    return {"only_monitor": only_a, "only_naive": only_b, "p": min(1.0, 2 * tail)}


def _groups(cases: list[Case]) -> Counter:
    return Counter(c.klass for c in cases)


def evaluate(cases: list[Case], th: dict[str, Thresholds]) -> dict:
    """Every detector's scores on ``cases``, per build too, and each run's outcome."""
    warned = {n: [first_warning(c, t) for c in cases] for n, t in th.items()}
    firsts = {n: [f[0] if f else None for f in fs] for n, fs in warned.items()}
    out: dict = {n: score(cases, firsts[n]) for n in th}

    def hit(c: Case, w: int | None, in_time: bool) -> bool:
        if w is None:
            return False
        return c.t_fall - w >= (c.eval_every if in_time else 0) if c.positive else True

    pos = [i for i, c in enumerate(cases) if c.positive]
    neg = [i for i, c in enumerate(cases) if c.negative]
    out["mcnemar_in_time"] = mcnemar(
        [hit(cases[i], firsts["monitor"][i], True) for i in pos],
        [hit(cases[i], firsts["naive"][i], True) for i in pos],
    )
    out["mcnemar_false_alarms"] = mcnemar(
        [firsts["monitor"][i] is not None for i in neg],
        [firsts["naive"][i] is not None for i in neg],
    )
    for key, of in (("per_build", lambda c: c.build), ("per_lr", lambda c: f"{c.lr:g}")):
        by: dict[str, list[int]] = defaultdict(list)
        for i, c in enumerate(cases):
            by[of(c)].append(i)
        out[key] = {
            b: {n: score([cases[i] for i in ix], [firsts[n][i] for i in ix]) for n in th}
            | {"classes": dict(_groups([cases[i] for i in ix]))}
            for b, ix in sorted(by.items(), key=lambda x: str(x[0]))
        }
    # when the monitor first warns (steps done): on the falls it caught, on runs that held
    pairs = list(zip(cases, firsts["monitor"], strict=True))
    caught = [w for c, w in pairs if c.positive and w is not None and w <= c.t_fall]
    alarms = [w for c, w in pairs if c.negative and w is not None]
    out["monitor_first_warning_step"] = {
        "falls_caught": _spread(caught),
        "false_alarms": _spread(alarms),
    }
    out["classes"] = dict(_groups(cases))
    out["runs"] = [
        {
            "result_set": c.result_set,
            "run": c.name,
            "build": c.build,
            "class": c.klass,
            "t_fall": c.t_fall,
            "eval_every": c.eval_every,
            "lr": c.lr,
            **{f"{n}_first_warning": warned[n][i][1] if warned[n][i] else None for n in th},
            **{f"{n}_warned_at": firsts[n][i] for n in th},
        }
        for i, c in enumerate(cases)
    ]
    return out


def _rate(r: dict) -> str:
    if not r["n"]:
        return "-"
    return f"{r['k']}/{r['n']} = {r['rate']:.2f} [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]"


def _lead(s: dict) -> str:
    ld = s["lead_steps"]
    if ld["median"] is None:
        return "-"
    quart = f", quartiles {ld['q1']:g}-{ld['q3']:g}" if ld["q1"] is not None else ""
    return f"{ld['median']:g}{quart}, range {ld['min']}-{ld['max']}"


def targets(s: dict, naive: dict, cases: list[Case]) -> list[str]:
    """Each target of issue 62, met or missed by how much."""
    every = statistics.median([c.eval_every for c in cases if c.positive] or [0])
    rec, fa = s["recall"]["rate"] or 0.0, s["false_alarms"]["rate"] or 0.0
    lead = s["lead_steps"]["median"]
    if lead is None:
        lead_said = "no detections"
    else:
        lead_said = "met" if lead >= every else f"missed by {every - lead:g} steps"
        lead_said += f" ({lead:g})"
    out = [
        f"recall >= 0.8: {'met' if rec >= 0.8 else f'missed by {0.8 - rec:.2f}'} ({rec:.2f})",
        f"false alarms <= 0.2: {'met' if fa <= 0.2 else f'missed by {fa - 0.2:.2f}'} ({fa:.2f})",
        f"median lead >= one evaluation interval ({every:g} steps): {lead_said}",
    ]
    better = _key(s) > _key(naive) and fa <= max(0.2, naive["false_alarms"]["rate"] or 0.0)
    out.append(
        "better than the naive baseline (more in-time detections, false alarms within the "
        f"target): {'yes' if better else 'no'}"
    )
    return out


def _spread(xs: list[int]) -> str:
    return f"{statistics.median(xs):g} ({min(xs)}-{max(xs)}, {len(xs)} runs)" if xs else "-"


def _split_rows(groups: dict) -> list[str]:
    """One table row per group: classes, then each detector's recall / in time / alarms."""
    rows = []
    for b, d in groups.items():
        cells = [
            " / ".join(
                f"{d[n][k]['k']}/{d[n][k]['n']}"
                for k in ("recall", "recall_in_time", "false_alarms")
            )
            for n in ("monitor", "naive")
        ]
        rows.append(f"| {b} | {d['classes']} | {cells[0]} | {cells[1]} |")
    return rows


def markdown(res: dict, cases: list[Case], tuned: dict) -> str:
    names = {"monitor": "monitor (shipped defaults)", "naive": "naive (training reward only)"}
    md = [
        "# The cliff early warning, evaluated as a detector",
        "",
        "Declared before it ran: [DECLARATION.md](DECLARATION.md) (and the docstring of "
        "`baselines/warning_eval.py`). Commands, in order:",
        "",
        "    python baselines/warning_eval.py tune",
        "    python baselines/warning_eval.py test",
        "",
        f"Monitor thresholds (tuned, shipped as the config defaults): `{tuned['monitor']}`; "
        f"naive baseline: `{tuned['naive']}`.",
        "",
        f"Test set: {len(cases)} runs, classes {res['classes']}. Positives = rose then fell; "
        "negatives = rose and held; undecided and never-rose runs are in neither.",
        "",
        "| detector | recall (95% Wilson) | recall in time (lead >= one eval interval) | "
        "false alarms | lead, steps (median, quartiles, range) | lead, eval intervals "
        "(median) | never-rose runs warned |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in ("monitor", "naive"):
        s = res[n]
        li = s["lead_intervals_median"]
        md.append(
            f"| {names[n]} | {_rate(s['recall'])} | {_rate(s['recall_in_time'])} | "
            f"{_rate(s['false_alarms'])} | {_lead(s)} | {'-' if li is None else f'{li:g}'} | "
            f"{s['never_rose_warned']['k']}/{s['never_rose_warned']['n']} |"
        )
    m1, m2 = res["mcnemar_in_time"], res["mcnemar_false_alarms"]
    md += [
        "",
        f"Monitor vs naive, exact McNemar: in-time detections {m1['only_monitor']} runs only "
        f"the monitor, {m1['only_naive']} only the naive (p = {m1['p']:.3g}); false alarms "
        f"{m2['only_monitor']} only the monitor, {m2['only_naive']} only the naive "
        f"(p = {m2['p']:.3g}).",
        "",
        "Targets (issue 62), for the monitor:",
        "",
        *[f"- {t}" for t in targets(res["monitor"], res["naive"], cases)],
        "",
        "## Per build",
        "",
        "| build | classes | monitor: recall / in time / false alarms | naive: recall / in "
        "time / false alarms |",
        "|---|---|---|---|",
    ]
    md += _split_rows(res["per_build"])
    md += [
        "",
        "## Per learning rate",
        "",
        "| lr | classes | monitor: recall / in time / false alarms | naive: recall / in time "
        "/ false alarms |",
        "|---|---|---|---|",
        *_split_rows(res["per_lr"]),
        "",
        "When the monitor first warns (steps done; median, range): on the falls it caught "
        f"{res['monitor_first_warning_step']['falls_caught']}, on the runs that held "
        f"{res['monitor_first_warning_step']['false_alarms']}.",
    ]
    md += [
        "",
        "## The test set's falls",
        "",
        "| result set | run | build | fall shows at step | monitor warns at (signal) | "
        "lead | naive warns at |",
        "|---|---|---|---:|---|---:|---:|",
    ]
    for r in res["runs"]:
        if r["class"] != "rose then fell":
            continue
        w, fw = r["monitor_warned_at"], r["monitor_first_warning"]
        lead = "-" if w is None or w > r["t_fall"] else r["t_fall"] - w
        sig = f"{w} ({fw['signal']})" if fw else "-"
        md.append(
            f"| {r['result_set']} | {r['run']} | {r['build']} | {r['t_fall']} | {sig} | {lead} "
            f"| {r['naive_warned_at'] if r['naive_warned_at'] is not None else '-'} |"
        )
    return "\n".join(md) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("what", choices=("tune", "test"), help="tune on the tuning set, or test")
    ap.add_argument("--out", default=str(OUT), help="where tuned.json and the results go")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.what == "tune":
        cases = load(list(TUNING))
        tuned = tune(cases)
        tuned["tuning_sets"] = list(TUNING)
        tuned["tuning_classes"] = dict(_groups(cases))
        (out / "tuned.json").write_text(json.dumps(tuned, indent=1) + "\n")
        print(json.dumps({k: tuned[k] for k in ("monitor", "naive", "tuning_classes")}, indent=1))
        for n in ("monitor", "naive"):
            s = tuned["tuning_scores"][n]
            print(
                f"{n} on the tuning set: recall {_rate(s['recall'])}, in time "
                f"{_rate(s['recall_in_time'])}, false alarms {_rate(s['false_alarms'])}"
            )
        return 0
    from flowzoo.config import TrainConfig

    tuned = json.loads((out / "tuned.json").read_text())
    shipped = Thresholds.of(TrainConfig()).as_dict()
    if shipped != tuned["monitor"]:
        raise SystemExit(
            f"the config's monitor defaults {shipped} are not the tuned values "
            f"{tuned['monitor']}: ship the tuned values first (the test reads what ships)"
        )
    sets = test_sets()
    cases = load(sets)
    if not cases:
        raise SystemExit(f"no test runs found under {ROOT}/*/runs/")
    th = {"monitor": Thresholds(**tuned["monitor"]), "naive": Thresholds(**tuned["naive"])}
    res = evaluate(cases, th)
    res["test_sets"] = sets
    res["tuned"] = tuned
    res["commands"] = [
        "python baselines/warning_eval.py tune",
        "python baselines/warning_eval.py test",
    ]
    (out / "results.json").write_text(json.dumps(res, indent=1) + "\n")
    md = markdown(res, cases, tuned)
    (out / "results.md").write_text(md)
    print(md.split("## Per build")[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
