"""The testbed's base measurements (docs/testbed.md): per-step accuracy in context, the
single solver's behaviour and accuracy by difficulty level (in distribution and one notch
past it), and every math role's behaviour rate and each env's sampled accuracy, before any
training. Written to ``baselines/results/testbed-<model>.json``.

    python baselines/testbed.py                      # the shipped tiny-s
    python baselines/testbed.py --model tiny-s-code --family code   # the code testbed
    python baselines/testbed.py --model PATH --problems 100
    python baselines/testbed.py --envs orch-workers-math --samples 8 \
        --out baselines/results/testbed-tiny-s-orch-workers-x8.json   # one env's roles only
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from flowzoo.agents.models.policy import Policy
from flowzoo.agents.models.threads import apply_threads
from flowzoo.agents.runs.weights import weights_identity
from flowzoo.agents.train.testbed import behaviour_rates, measure_base
from flowzoo.tiny.build import resolve_model


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--model", default="tiny-s")
    ap.add_argument("--family", choices=("math", "code"), default="math")
    ap.add_argument("--problems", type=int, default=200, help="held-out problems per reading")
    ap.add_argument(
        "--envs",
        nargs="+",
        default=None,
        help="only these envs' behaviour rates and accuracy (default: every reading)",
    )
    ap.add_argument(
        "--samples", type=int, default=2, help="with --envs: samples per problem at T=0.7"
    )
    ap.add_argument(
        "--conflict",
        action="store_true",
        help="read the envs as the role-conflict testbed (env option conflict=true; "
        "docs/testbed-conflict.md), as a -conflict build is trained",
    )
    ap.add_argument("--out", default="", help="default: baselines/results/testbed-<model>.json")
    args = ap.parse_args()
    opts = {"conflict": True} if args.conflict else None
    if opts and args.family != "math":
        ap.error("--conflict is a math testbed: drop --family code")
    apply_threads()
    path = resolve_model(args.model)
    policy = Policy(path)
    if args.envs:
        got = {
            "envs": behaviour_rates(
                policy,
                tuple(args.envs),
                n_problems=args.problems,
                samples=args.samples,
                env_options=opts,
            )
        }
    else:
        got = measure_base(policy, args.problems, args.family, env_options=opts)
    # testbed-tiny-s.json (math), testbed-tiny-s-code.json (the code family; for a code
    # testbed's build, tiny-s-code or tiny-s-code12: its code readings, -math its math ones)
    name = Path(args.model).name
    if re.search(r"-code\d*(-stage\d+)?$", name):
        name += "-math" if args.family == "math" else ""
    elif args.family == "code":
        name += "-code"
    out = Path(args.out or f"baselines/results/testbed-{name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    # which build was measured (a scale name names a recipe, and recipes are rebuilt)
    record = {"model": args.model, "weights": weights_identity(path), **got}
    if opts:
        record["env_options"] = opts
    out.write_text(json.dumps(record, indent=1) + "\n")
    s = got.get("step_accuracy")
    if s is not None:
        print(f"single steps (greedy, in context): {s['accuracy']:.3f} {s['ci']} on {s['steps']}")
    c = got.get("code_primitives")
    if c is not None:
        print(
            f"guarded programs (greedy, guard begun): {c['accuracy']:.3f} {c['ci']} on "
            f"{c['problems']}; by level {c['by_level']}"
        )
    for split, key in (("test", "solver_by_level"), ("ood", "ood_solver")):
        for lv, c in got.get(key, {}).items():
            print(
                f"  {split} level {lv}: worked {c['worked_rate']:.2f}, acc worked "
                f"{c['acc_worked']}, acc direct {c['acc_direct']}"
            )
    for env, r in got["envs"].items():
        beh = ", ".join(
            f"{k} {v:.2f} [{r['behaviour_ci'][k][0]:.2f}, {r['behaviour_ci'][k][1]:.2f}] "
            f"of {r['behaviour_n'][k]} turns"
            for k, v in r["behaviour"].items()
        )
        print(f"  {env}: acc {r['accuracy']:.3f} {r['ci']}; behaviour {beh}")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
