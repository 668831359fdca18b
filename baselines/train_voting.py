"""Train voting-math on a tiny model with Shared- and Isolated-Policy GRPO (the issue's
reference run) and print base / peak / final held-out accuracy and gradient-mass shares.

    python baselines/train_voting.py --model tiny-m --steps 40 --out runs/voting-baseline
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from flowzoo.agents.train.trainer import TrainConfig, Trainer


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--model", default="tiny-m")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--eval-episodes", type=int, default=100)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/voting-baseline")
    args = ap.parse_args()
    results = {}
    for policy in ("shared", "isolated"):
        cfg = TrainConfig(
            env="voting-math",
            model=args.model,
            policy=policy,
            steps=args.steps,
            eval_every=args.eval_every,
            eval_episodes=args.eval_episodes,
            lr=args.lr,
            seed=args.seed,
            out_dir=str(Path(args.out) / policy),
        )
        s = Trainer(cfg).train()
        results[policy] = s
        c = s["curve"]
        print(
            f"{policy:9s} base {c['base']:.3f} peak {c['peak']:.3f}@{c['peak_step']} final {c['final']:.3f} "
            f"cliff {c['cliff']} wall {s['wall_s']:.0f}s shares {json.dumps({k: round(v, 3) for k, v in s['mean_grad_share'].items()})}",
            flush=True,
        )
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "summary.json").write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
