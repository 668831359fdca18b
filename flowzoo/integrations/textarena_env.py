"""A two-agent flowzoo workflow as a TextArena two-player game (``FlowzooEvalOptMath-v0``,
``FlowzooEvalOptCode-v0``): player 0 is the optimizer, player 1 the evaluator; each
observation is the player's whole prompt (a string, what TextArena's agents read), and
``close()`` gives, as TextArena's games do, ``(rewards, game_info)``: each player's reward
from flowzoo's verifier or judge, and per player its role, whether the answer was correct
and the verifier's reason.

What TextArena's shape cannot say: roles with several agents (Voting's solvers, the workers)
have no seat of their own, so only two-agent workflows are offered; a game's reward is one
number per player, so flowzoo's per-turn flags travel in ``step``'s info instead.
"""

from __future__ import annotations

import random
from typing import Any

import textarena as ta
from textarena.envs.registration import ENV_REGISTRY, register

from flowzoo.envs.registry import make_env

GAMES = {"FlowzooEvalOptMath-v0": "eval-opt-math", "FlowzooEvalOptCode-v0": "eval-opt-code"}


class FlowzooArena(ta.Env):
    """One flowzoo problem per game (picked by the reset seed from the split)."""

    def __init__(self, env_id: str = "eval-opt-math", split: str = "test", **options: Any):
        self.env = make_env(env_id, split=split, **options)
        agents = list(self.env.possible_agents)
        if len(agents) != 2:
            raise ValueError(
                f"{env_id} has {len(agents)} agents {agents}; a TextArena two-player game needs a "
                "two-agent workflow (eval-opt-math, eval-opt-code)"
            )
        self.player_of = {a: i for i, a in enumerate(agents)}
        self.rewards: dict[int, float] = {}
        self.game_info: dict[int, dict[str, Any]] = {}

    def reset(self, num_players: int = 2, seed: int | None = None) -> None:
        if num_players != 2:
            raise ValueError(f"a flowzoo game has 2 players, got num_players={num_players}")
        task = random.Random(seed).choice(self.env.tasks)
        self.env.reset(seed=seed, options={"task_id": task.id})
        self.rewards = {}
        self.game_info = {i: {"role": self.env.role_of(a)} for a, i in self.player_of.items()}

    def get_observation(self) -> tuple[int, str]:
        a = self.env.agent_selection
        return self.player_of[a], self.env.observe(a)["prompt"]

    def step(self, action: str) -> tuple[bool, dict[str, Any]]:
        env = self.env
        agent = env.agent_selection
        env.step(action if isinstance(action, str) else "")
        info = {"agent": agent, "flags": list(env.turn_log()[-1].flags)}
        if env.episode_over():
            self.rewards = {self.player_of[a]: float(env.rewards[a]) for a in env.agents}
            info.update(correct=bool(env.infos[agent].get("correct", False)))
            for a in env.agents:
                self.game_info[self.player_of[a]].update(
                    correct=bool(env.infos[a].get("correct", False)),
                    reason=str(env.infos[a].get("verdict_reason", "")),
                )
            while env.agents:  # the terminated agents' bookkeeping steps
                env.step(None)
            return True, info
        return False, info

    def close(self) -> tuple[dict[int, float], dict[int, dict[str, Any]]]:
        """``(rewards, game_info)`` as TextArena's games give them: each player's reward (0
        for a game that did not finish) and what flowzoo knows of its game."""
        rewards = {i: self.rewards.get(i, 0.0) for i in (0, 1)}
        return rewards, {i: dict(self.game_info.get(i, {})) for i in (0, 1)}


for _game, _env_id in GAMES.items():
    if _game not in ENV_REGISTRY:
        register(_game, entry_point=FlowzooArena, env_id=_env_id)

__all__ = ["GAMES", "FlowzooArena"]
