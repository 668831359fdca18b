"""AEC engine throughput with scripted policies vs PettingZoo's own tictactoe_v3."""

from __future__ import annotations

import numpy as np

import flowzoo
from benchmarks.common import Row, rate


def _fixed_policy(env, agent):
    role = env.role_of(agent)
    if role == "evaluator":
        return "Verdict: REVISE\nFeedback: check it."
    if role == "orchestrator":
        return "Strategy 1: a\nStrategy 2: b\nStrategy 3: c"
    if role == "aggregator":
        return "\\boxed{2}"
    return "Step: 3 + 4 = 7. \\boxed{7}"


def _drive(env, episodes: int, policy) -> int:
    steps = 0
    for i in range(episodes):
        env.reset(seed=i)
        for agent in env.agent_iter():
            _, _, term, trunc, _ = env.last()
            env.step(None if term or trunc else policy(env, agent))
            steps += 1
    return steps


def _tictactoe(episodes: int) -> int:
    from pettingzoo.classic import tictactoe_v3

    env = tictactoe_v3.env()
    rng = np.random.default_rng(0)
    steps = 0
    for i in range(episodes):
        env.reset(seed=i)
        for _agent in env.agent_iter():
            obs, _, term, trunc, _ = env.last()
            if term or trunc:
                env.step(None)
            else:
                env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
            steps += 1
    return steps


def run(quick: bool = False) -> list[Row]:
    n = 100 if quick else 400
    ref = rate(lambda: _tictactoe(n))
    rows = []
    for env_id in ("eval-opt-math", "voting-math", "orch-workers-math"):
        env = flowzoo.make_env(env_id)
        v = rate(lambda env=env: _drive(env, n, _fixed_policy))
        rows.append(
            Row(
                "env",
                f"{env_id} AEC steps/s",
                v,
                ref,
                "tictactoe_v3 steps/s",
                "steps/s",
                target=0.5,
            )
        )
    return rows
