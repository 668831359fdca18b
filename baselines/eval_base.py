"""Evaluate each tiny scale (or given model paths) as the base model of every workflow.

    python baselines/eval_base.py --scale tiny-s --scale tiny-m --episodes 200 --out baselines/results/base.md

Writes a Markdown table (accuracy, majority-vote accuracy where defined, parse-failure rate
per role) and a JSON file beside it. Models are built on first use (cached).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from flowzoo.agents.evaluate import evaluate_env, single_policy
from flowzoo.agents.policy import Policy
from flowzoo.agents.tiny import resolve_model

MATH = ["eval-opt-math", "voting-math", "orch-workers-math"]
CODE = ["eval-opt-code", "voting-code", "orch-workers-code"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", action="append", help="tiny-s | tiny-m | tiny-l | a local path")
    ap.add_argument("--env", action="append")
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--code", action="store_true", help="also the code workflows")
    ap.add_argument("--out", default="baselines/results/base.md")
    args = ap.parse_args()
    envs = args.env or (MATH + (CODE if args.code else []))
    rows = []
    for scale in args.scale or ["tiny-s", "tiny-m"]:
        pol = Policy(resolve_model(scale))
        for env_id in envs:
            t = time.time()
            r = evaluate_env(env_id, single_policy(pol), n_episodes=args.episodes)
            rows.append(
                {
                    "model": scale,
                    "params": pol.num_parameters(),
                    "seconds": round(time.time() - t, 1),
                    **r.as_dict(),
                }
            )
            print(rows[-1], flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    lines = [
        "| model | params | env | accuracy | majority vote | parse failures per role |",
        "|---|---:|---|---:|---:|---|",
    ]
    for r in rows:
        maj = f"{r['majority_correct']:.3f}" if "majority_correct" in r else "-"
        fails = ", ".join(f"{k} {v:.2f}" for k, v in r["parse_fail"].items())
        lines.append(
            f"| {r['model']} | {r['params']:,} | {r['env']} | {r['accuracy']:.3f} | {maj} | {fails} |"
        )
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
