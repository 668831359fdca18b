"""What PPO's per-turn GAE changed, measured at the main job's size (issue 39).

Before, PPO's GAE gave each agent's trajectory one reward, its *last* turn's; now each turn's
own reward reaches that turn (``flowzoo.agents.train.algorithms.ppo.gae``). The two differ
only where an agent's turns carry different rewards, i.e. where an earlier turn was cut at
its token budget and ``overlong_penalty`` > 0. So the measurement runs Eval-Opt on math (the
workflow whose optimizer and evaluator play several turns) with PPO, the main job's shape
and an overlong penalty of 1 with truncated turns kept in the loss, two arms a seed:

- ``per-turn``: the shipped estimator;
- ``last-turn``: the old one, rebuilt here (every turn of a trajectory given its last
  turn's reward; not an option of the library).

It counts, per run, the multi-turn trajectories and those whose turn rewards differ (where
the arms can differ at all), and records base, final and gain with 95% CIs per run::

    python baselines/ppo_gae.py --seed 0 --record baselines/results/ppo-gae.json
    python baselines/ppo_gae.py --seed 0 --role-settings '{"evaluator": {"max_new_tokens": 40}}' \
        --record baselines/results/ppo-gae.json   # a budget that cuts turns: where they differ

Resumable: a run directory that exists is resumed (re-run the same command).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from statistics import mean

import torch

from flowzoo.agents.train.algorithms import ppo
from flowzoo.agents.train.trainer import TrainConfig, Trainer
from flowzoo.analysis.records import read_metrics

ARMS = ("per-turn", "last-turn")
_shipped_gae = ppo.gae


class _Counts:
    """Trajectories seen by GAE in this process, and those whose turn rewards differ."""

    def __init__(self) -> None:
        self.multi_turn = 0
        self.differing = 0

    def wrap(self, last_turn: bool):
        def gae(
            values: list[torch.Tensor], turn_rewards: Sequence[float], gamma: float, lam: float
        ):
            if len(turn_rewards) > 1:
                self.multi_turn += 1
                self.differing += int(len(set(turn_rewards)) > 1)
            if last_turn:  # the estimator before the change: one reward, the last turn's
                turn_rewards = [turn_rewards[-1]] * len(turn_rewards)
            return _shipped_gae(values, turn_rewards, gamma, lam)

        return gae


def run(
    arm: str,
    seed: int,
    out: Path,
    penalty: float,
    steps: int | None = None,
    role_settings: dict | None = None,
) -> dict:
    counts = _Counts()
    ppo.gae = counts.wrap(last_turn=arm == "last-turn")
    try:
        cfg = TrainConfig(
            env="eval-opt-math",
            algo="ppo",
            overlong_penalty=penalty,
            mask_truncated=False,
            seed=seed,
            out_dir=str(out),
            role_settings=role_settings or {},
            **({"steps": steps, "eval_every": steps} if steps else {}),
        )
        s = Trainer(cfg).train()
    finally:
        ppo.gae = _shipped_gae
    c = s["curve"]
    steps_m = [m for m in read_metrics(out / "metrics.jsonl") if m["step"] >= 0]
    cut = {
        role: [
            round(mean(m["roles"][role]["truncated_frac"] for m in part), 3)
            for part in (steps_m[:10], steps_m[-10:])
        ]
        for role in steps_m[0]["roles"]
    }
    return {
        "arm": arm,
        "seed": seed,
        "config": f"env=eval-opt-math algo=ppo overlong_penalty={penalty} mask_truncated=false"
        + (f" role_settings={json.dumps(role_settings)}" if role_settings else ""),
        "status": s["status"],
        "steps": s["steps_done"],
        "wall_s": s["wall_s"],
        "base": [c["base"], *c["base_ci"]],
        "final": [c["final"], *c["final_ci"]],
        "gain": [c["gain"], *c["gain_ci"]],
        "trajectory": c["klass"],
        # counted in this process (a resumed run counts only the steps it ran)
        # per role, the share of its turns cut at the budget: first 10 steps, last 10
        "truncated_frac": cut,
        "multi_turn_trajectories": counts.multi_turn,
        "differing_turn_rewards": counts.differing,
    }


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    ap.add_argument("--penalty", type=float, default=1.0, help="overlong_penalty of both arms")
    ap.add_argument("--steps", type=int, default=None, help="default: the main job's")
    ap.add_argument(
        "--role-settings",
        type=json.loads,
        default=None,
        help='e.g. \'{"evaluator": {"max_new_tokens": 40}}\': a budget that cuts turns, '
        "so the arms can differ",
    )
    ap.add_argument("--out", default="runs/ppo-gae", help="run directories go under it")
    ap.add_argument("--record", default="runs/ppo-gae.json", help="the rows file")
    args = ap.parse_args()
    rec = Path(args.record)
    for arm in args.arms:
        tag = f"{arm}-s{args.seed}" + ("-cut" if args.role_settings else "")
        row = run(
            arm, args.seed, Path(args.out) / tag, args.penalty, args.steps, args.role_settings
        )
        rows = json.loads(rec.read_text()) if rec.exists() else []
        rows = [
            r for r in rows if (r["arm"], r["seed"], r["config"]) != (arm, args.seed, row["config"])
        ]
        rows.append(row)
        rec.parent.mkdir(parents=True, exist_ok=True)
        rec.write_text(
            json.dumps(sorted(rows, key=lambda r: (r["config"], r["seed"], r["arm"])), indent=1)
        )
        g = row["gain"]
        print(
            f"{arm} seed {args.seed}: gain {g[0]:+.3f} [{g[1]:+.3f}, {g[2]:+.3f}]; "
            f"{row['differing_turn_rewards']} of {row['multi_turn_trajectories']} multi-turn "
            f"trajectories had differing turn rewards; {row['wall_s']:.0f}s"
        )


if __name__ == "__main__":
    main()
