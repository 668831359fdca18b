"""Evaluate each tiny scale (or given model paths) as the base model of every workflow, on the
held-out split (structure trained, problems not) and the out-of-distribution one (structure
never trained).

    python baselines/eval_base.py --scale tiny-s --code --code-dataset funcs \
        --code-dataset stdio --episodes 100 --out baselines/results/base-tiny-s.md

Writes a Markdown table (greedy accuracy; sampled accuracy with its 95% CI; Voting's
majority vote; parse failures per role) and a JSON file beside it, at ``--out`` (default
``runs/base/base.md``; the committed tables under ``baselines/results/`` change only when
named). Resumable: rows already in the JSON file are kept and not re-run (re-run the same
command).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from flowzoo.agents.models.policy import Policy
from flowzoo.agents.train.evaluate import evaluate_env, single_policy
from flowzoo.tiny.build import resolve_model

MATH = ["eval-opt-math", "voting-math", "orch-workers-math", "single-math"]
CODE = ["eval-opt-code", "voting-code", "orch-workers-code", "single-code"]


def _fails(r: dict) -> str:
    """Per role, the share of turns that did not parse: a coordinating role's parse flag
    or a solving role's missing answer, whichever is larger."""
    roles = dict.fromkeys([*r["parse_fail"], *r["no_answer"]])
    return ", ".join(
        f"{k} {max(r['parse_fail'].get(k, 0.0), r['no_answer'].get(k, 0.0)):.2f}" for k in roles
    )


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--scale", action="append", help="tiny-s | tiny-m | tiny-l | a local path")
    ap.add_argument("--env", action="append")
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--code", action="store_true", help="also the code workflows")
    ap.add_argument(
        "--code-dataset", action="append", help="code task sources (default: funcs; e.g. stdio)"
    )
    ap.add_argument("--samples", type=int, default=4, help="sampled evaluation: samples/problem")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--out", default="runs/base/base.md")
    args = ap.parse_args()
    envs = args.env or (MATH + (CODE if args.code else []))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = (
        json.loads(out.with_suffix(".json").read_text())
        if out.with_suffix(".json").exists()
        else []
    )
    rows = [r for r in done if "split" in r]

    def key(r: dict) -> tuple:
        return r["model"], r["greedy"]["env"], r["dataset"], r["split"]

    have = {key(r) for r in rows}
    for scale in args.scale or ["tiny-s", "tiny-m"]:
        pol = None
        for env_id in envs:
            datasets = (args.code_dataset or ["funcs"]) if env_id.endswith("-code") else [None]
            for ds, split in ((d, sp) for d in datasets for sp in ("test", "ood")):
                if (scale, env_id, ds or "arith", split) in have:
                    continue
                pol = pol or Policy(resolve_model(scale))
                opts = {"dataset": ds} if ds else {}
                common = dict(n_episodes=args.episodes, env_options=opts, split=split)
                t = time.time()
                greedy = evaluate_env(env_id, single_policy(pol), **common)
                sampled = evaluate_env(
                    env_id,
                    single_policy(pol),
                    temperature=args.temperature,
                    samples=args.samples,
                    **common,
                )
                rows.append(
                    {
                        "model": scale,
                        "params": pol.num_parameters(),
                        "dataset": ds or "arith",
                        "split": split,
                        "seconds": round(time.time() - t, 1),
                        "greedy": greedy.as_dict(),
                        "sampled": {**sampled.as_dict(), "ci": list(sampled.ci)},
                    }
                )
                out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
                print(json.dumps(rows[-1])[:300], flush=True)
    lines = [
        f"Greedy, and sampled at T={args.temperature} x {args.samples} per problem (95% "
        f"bootstrap CI over problems); {args.episodes} problems per row (or the whole split "
        "when smaller): `test` is held out by what is solved (structure trained, problems "
        "not), `ood` holds structure never trained. Parse failures per role are of the "
        "sampled turns.",
        "",
        "| model | params | env | tasks | split | greedy | sampled [95% CI] | majority vote "
        "(sampled) | parse failures per role |",
        "|---|---:|---|---|---|---:|---|---:|---|",
    ]
    for r in rows:
        g, s = r["greedy"], r["sampled"]
        maj = f"{s['majority_correct']:.3f}" if "majority_correct" in s else "-"
        lines.append(
            f"| {r['model']} | {r['params']:,} | {g['env']} | {r['dataset']} | {r['split']} | "
            f"{g['accuracy']:.3f} | {s['accuracy']:.3f} [{s['ci'][0]:.3f}, {s['ci'][1]:.3f}] | "
            f"{maj} | {_fails(s)} |"
        )
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
