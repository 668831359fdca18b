"""The main job's figure: ``flowzoo train`` on its defaults, base and final held-out accuracy
with 95% CIs, the paired gain and the wall time, one row per seed in ``--record`` (default
``runs/main-job.json``: a rerun never rewrites the committed record unless asked).

    python baselines/main_job.py                 # the defaults (what the README's command runs)
    python baselines/main_job.py --seed 1 --out runs/main-job-s1
    python baselines/main_job.py --record baselines/results/main-job.json   # update the record
    python baselines/main_job.py --family code --out runs/code-main-s0 \
        --record baselines/results/code-main-job.json   # the code family's default
    python baselines/main_job.py --family code-testbed --seed S --out runs/code-tb-sS \
        --record baselines/results/code-testbed-main-job.json   # the code testbed

Not a timed test: a record of what the default run does on this machine. The run resumes if
interrupted (re-run the same command).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
from pathlib import Path
from statistics import mean

from flowzoo.agents.train.trainer import TrainConfig, Trainer
from flowzoo.analysis.records import read_metrics

#: per task family: the command a row records and the settings it runs. The code family's
#: default is smaller (8 problems a step, 40 steps): each code episode runs unit tests in
#: the sandbox (recipe 8's runs: ~17 s a step against the math default's ~3 s)
FAMILY_DEFAULTS: dict[str, tuple[str, dict]] = {
    "math": ("flowzoo train (defaults)", {}),
    "code": (
        "flowzoo train --env voting-code --steps 40 --problems-per-step 8 --eval-every 20 --seed S",
        {"env": "voting-code", "steps": 40, "problems_per_step": 8, "eval_every": 20},
    ),
    # the code testbed (docs/testbed-code.md): its build and its tasks, half the code
    # default's steps (the first build's runs were at 0.95-0.97 by step 20 and held to 40)
    "code-testbed": (
        "flowzoo train --env voting-code --model tiny-s-code --env-options "
        '\'{"dataset": "guarded"}\' --steps 20 --problems-per-step 8 --eval-every 20 --seed S',
        {
            "env": "voting-code",
            "model": "tiny-s-code",
            "env_options": {"dataset": "guarded"},
            "steps": 20,
            "problems_per_step": 8,
            "eval_every": 20,
        },
    ),
}


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/main-job")
    ap.add_argument(
        "--record",
        default="runs/main-job.json",
        help="the rows file (the committed one: baselines/results/main-job.json)",
    )
    ap.add_argument(
        "--family",
        choices=sorted(FAMILY_DEFAULTS),
        default="math",
        help="math: `flowzoo train` on its defaults; code: the code family's default run; "
        "code-testbed: that run on the code testbed (tiny-s-code, guarded tasks)",
    )
    ap.add_argument(
        "--model", default=None, help="another scale or a weights folder (default: tiny-s)"
    )
    args = ap.parse_args()
    label, overrides = FAMILY_DEFAULTS[args.family]
    if args.model:
        overrides = {**overrides, "model": args.model}
        # counted, not compared: a --model equal to the label's own leaves it unchanged
        named, n = re.subn(r"--model \S+", lambda _: f"--model {args.model}", label)  # no escapes
        label = named if n else f"{label} --model {args.model}"
    cfg = TrainConfig(seed=args.seed, out_dir=args.out, **overrides)
    s = Trainer(cfg).train()
    c, e = s["curve"], s.get("eval", {})
    acc = [m["train_acc"] for m in read_metrics(Path(args.out) / "metrics.jsonl") if m["step"] >= 0]
    row = {
        "config": label,
        "env": cfg.env,
        "model": cfg.model,
        # which build of it (a scale name names a recipe; recipes are rebuilt)
        "base_model": s.get("base_model"),
        "seed": cfg.seed,
        "steps": s["steps_done"],
        "status": s["status"],
        "wall_s": s["wall_s"],
        "eval": e,
        "base": [c["base"], *c["base_ci"]],
        "final": [c["final"], *c["final_ci"]],
        "gain": [c["gain"], *c["gain_ci"]],
        "trajectory": c["klass"],
        # structure never trained (the ood split): base, final, gain with their CIs
        "ood": s.get("ood"),
        "greedy": [e.get("greedy_base"), e.get("greedy_last")],
        # each role's considered-behaviour rate (docs/testbed.md), base and last evaluation
        "behaviour": [e.get("behaviour_base"), e.get("behaviour_last")],
        # accuracy on the step's own training problems, first and last 10 steps (what RL
        # raises on the problems it trains on, beside what carries over to held-out ones)
        "train_acc": [round(mean(acc[:10]), 3), round(mean(acc[-10:]), 3)],
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
    }
    rec = Path(args.record)
    rows = json.loads(rec.read_text()) if rec.exists() else []
    rows = [r for r in rows if r.get("seed") != cfg.seed] + [row]
    rec.parent.mkdir(parents=True, exist_ok=True)
    rec.write_text(json.dumps(sorted(rows, key=lambda r: r["seed"]), indent=1))
    print(
        f"base {c['base']:.3f} [{c['base_ci'][0]:.3f}, {c['base_ci'][1]:.3f}]  final "
        f"{c['final']:.3f} [{c['final_ci'][0]:.3f}, {c['final_ci'][1]:.3f}]  gain "
        f"{c['gain']:+.3f} [{c['gain_ci'][0]:+.3f}, {c['gain_ci'][1]:+.3f}]  "
        f"wall {s['wall_s']:.0f}s; training-problem accuracy {row['train_acc'][0]:.3f} -> "
        f"{row['train_acc'][1]:.3f} -> {rec}"
    )


if __name__ == "__main__":
    main()
