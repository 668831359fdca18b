"""``flowzoo`` command line: ``envs`` lists the environments, ``demo`` plays them.

Subcommands that need torch import it lazily, so ``flowzoo envs`` works on a plain install.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence


def _cmd_envs(args: argparse.Namespace) -> int:
    from flowzoo.envs.registry import SPECS, make_env

    rows = []
    for env_id, spec in SPECS.items():
        if args.family and spec.family != args.family:
            continue
        try:
            env = make_env(env_id)
        except ImportError as e:  # a family whose optional extra is missing
            rows.append((env_id, spec.pettingzoo_id, f"(unavailable: {e})"))
            continue
        agents = ", ".join(env.possible_agents)
        rows.append((env_id, spec.pettingzoo_id, agents))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    print(f"{'id':<{w0}}  {'pettingzoo id':<{w1}}  agents (turn order)")
    for r in rows:
        print(f"{r[0]:<{w0}}  {r[1]:<{w1}}  {r[2]}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from flowzoo.envs.registry import make_env
    from flowzoo.envs.scripted import expert_policy, play_episode

    env_ids = args.env or ["eval-opt-math", "voting-math", "orch-workers-math"]
    print(
        f"Scripted noisy experts (error rate {args.error_rate}) on {args.episodes} test problems per env"
    )
    results = []
    for env_id in env_ids:
        env = make_env(env_id, split="test", n_tasks=max(args.episodes, 10))
        pol = expert_policy(args.error_rate, seed=args.seed)
        t0 = time.perf_counter()
        correct = steps = flags = 0
        majority: int | None = 0 if env_id.startswith("voting") else None
        for i in tqdm(range(args.episodes), desc=env_id, leave=False, file=sys.stderr):
            res = play_episode(env, pol, seed=args.seed * 100_000 + i)
            correct += res["correct"]
            if majority is not None:
                majority += res["majority_correct"]
            steps += len(env.episode.turns)
            flags += res["n_flags"]
        dt = time.perf_counter() - t0
        maj = "-" if majority is None else f"{majority / args.episodes:.3f}"
        results.append((env_id, correct / args.episodes, maj, flags / args.episodes, steps / dt))
    print(f"{'env':<20} {'accuracy':>8} {'majority':>8} {'flags/ep':>8} {'turns/s':>9}")
    for env_id, acc, maj, fl, sps in results:
        print(f"{env_id:<20} {acc:8.3f} {maj:>8} {fl:8.2f} {sps:9.0f}")
    env = make_env(env_ids[0], split="test", render_mode="ansi")
    play_episode(env, expert_policy(args.error_rate, seed=args.seed), seed=args.seed)
    print("\nOne episode:\n" + env.render())
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flowzoo", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("envs", help="list environment ids, PettingZoo ids and agents")
    e.add_argument("--family", choices=["math", "code"], default=None)
    e.set_defaults(fn=_cmd_envs)
    d = sub.add_parser("demo", help="play every env with noisy scripted experts and print a table")
    d.add_argument("--env", action="append", help="env id (repeatable); default: the math envs")
    d.add_argument("--episodes", type=int, default=200)
    d.add_argument("--error-rate", type=float, default=0.3)
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(fn=_cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except (ValueError, FileNotFoundError, ImportError) as e:
        print(f"flowzoo: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("flowzoo: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
