"""Stable-Baselines3 PPO learns the Voting aggregator's choice, against majority vote.

The three solvers are noisy scripted experts of different reliability (error rates 0.65,
0.5, 0.15 per turn; the reliable one is last, so majority vote's earliest-wins tie-break does
not favour it). PPO sees per-candidate features (has answer, agreement share, fraction of
written steps that check out, position) and picks one candidate per episode.

    python baselines/sb3_aggregator.py --timesteps 20000 --episodes 1000 --png runs/sb3_aggregator.png
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from flowzoo.envs.scripted import expert_policy
from flowzoo.envs.wrappers import AggregatorChoiceEnv, scripted

ERROR_RATES = (0.65, 0.5, 0.15)


def make(split: str, seed: int) -> AggregatorChoiceEnv:
    solvers = {
        f"solver_{i}": scripted(expert_policy(e, seed=seed + i)) for i, e in enumerate(ERROR_RATES)
    }
    return AggregatorChoiceEnv(solvers, split=split)


def evaluate(model, episodes: int, seed: int) -> dict:
    """PPO (deterministic), majority vote and random choice on the same held-out episodes."""
    env = make("test", seed)
    ppo = maj = rand = 0.0
    for i in range(episodes):
        obs, _ = env.reset(seed=seed * 100_003 + i)
        action, _ = model.predict(obs, deterministic=True)
        _, r, *_rest, info = env.step(action)
        ppo += r
        maj += float(info["majority_correct"])
        rand += float(np.mean(list(info["solver_correct"].values())))
    return {"ppo": ppo / episodes, "majority": maj / episodes, "random": rand / episodes}


def run(
    timesteps: int = 20_000, episodes: int = 1000, seed: int = 0, png: str | None = None
) -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.monitor import Monitor

    env = Monitor(make("train", seed))
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=128,
        batch_size=64,
        learning_rate=3e-3,
        ent_coef=0.01,
        gamma=1.0,
        seed=seed,
        verbose=0,
    )
    t = time.time()
    model.learn(total_timesteps=timesteps)
    wall = time.time() - t
    res = {
        **evaluate(model, episodes, seed + 1),
        "timesteps": timesteps,
        "eval_episodes": episodes,
        "train_wall_s": round(wall, 1),
    }
    curve = np.array(env.get_episode_rewards(), dtype=float)
    if png and len(curve):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        w = max(1, len(curve) // 50)
        smooth = np.convolve(curve, np.ones(w) / w, mode="valid")
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot(np.arange(len(smooth)) + w, smooth, label="PPO (training episodes, moving mean)")
        ax.axhline(
            res["majority"], color="C1", ls="--", label=f"majority vote {res['majority']:.2f}"
        )
        ax.axhline(res["random"], color="C2", ls=":", label=f"random choice {res['random']:.2f}")
        ax.set_xlabel("episode")
        ax.set_ylabel("accuracy")
        ax.set_title("SB3 PPO learns the Voting aggregator's choice")
        ax.legend(loc="lower right")
        fig.tight_layout()
        fig.savefig(png, dpi=120)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--timesteps", type=int, default=20_000)
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--png", default="runs/sb3_aggregator.png")
    args = ap.parse_args()
    import os

    os.makedirs(os.path.dirname(args.png) or ".", exist_ok=True)
    print(json.dumps(run(args.timesteps, args.episodes, args.seed, args.png), indent=1))


if __name__ == "__main__":
    main()
