"""The one seam for the RL algorithm: an advantage estimator and an objective, chosen once
from ``cfg.algo`` (:func:`algorithm_for`).

Why one seam: the trainer asks the estimator for a step's advantages and the learner asks the
objective for a turn's per-token loss; neither branches on the algorithm's name. The KL anchor
(per role) and the loss aggregation are the learner's, the same for every algorithm.

Adding an algorithm: its pieces in :mod:`flowzoo.train.algorithms`, an estimator in
:mod:`flowzoo.train.advantage` (or here), one entry in :data:`ALGORITHMS` and its name in
:data:`flowzoo.config.ALGOS` (the torch-free CLI lists the choices from there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from flowzoo.config import ALGOS, TrainConfig
from flowzoo.train import advantage
from flowzoo.train.advantage import Advantages, Critic
from flowzoo.train.algorithms.grpo import clipped_token_loss
from flowzoo.train.algorithms.ppo import value_loss
from flowzoo.train.rollout import EpisodeRecord, TurnRecord

#: rewards -> advantages: (config, records, the step's turns, their rewards, the critic or None)
Estimator = Callable[
    [TrainConfig, list[EpisodeRecord], list[TurnRecord], list[float], "Critic | None"], Advantages
]
#: ValueTerms: (new values, old values, returns) of a turn's tokens, for a critic's loss
ValueTerms = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
#: one turn's per-token loss and clipped mask: (config, role, new log-probs, old log-probs,
#: per-token advantages, value terms or None)
Objective = Callable[
    [TrainConfig, str, torch.Tensor, torch.Tensor, torch.Tensor, "ValueTerms | None"],
    tuple[torch.Tensor, torch.Tensor],
]


def clipped_surrogate(
    cfg: TrainConfig,
    role: str,
    new_lp: torch.Tensor,
    old_lp: torch.Tensor,
    adv: torch.Tensor,
    values: ValueTerms | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The clipped token objective with the role's (asymmetric) clip range."""
    return clipped_token_loss(
        new_lp, old_lp, adv, cfg.for_role(role, "clip_low"), cfg.for_role(role, "clip_high")
    )


def clipped_surrogate_and_value(
    cfg: TrainConfig,
    role: str,
    new_lp: torch.Tensor,
    old_lp: torch.Tensor,
    adv: torch.Tensor,
    values: ValueTerms | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO: the clipped objective plus ``vf_coef`` x the clipped value loss."""
    loss, clipped = clipped_surrogate(cfg, role, new_lp, old_lp, adv, values)
    if values is None:
        raise ValueError("the PPO objective needs the critic's values")
    new_v, old_v, ret = values
    return loss + cfg.vf_coef * value_loss(new_v, old_v, ret, cfg.value_clip), clipped


def _grpo(cfg, records, turns, rewards, critic):  # the critic is not used: groups are
    return advantage.grpo(cfg, records, turns, rewards)


def _ppo(cfg, records, turns, rewards, critic):
    if critic is None:
        raise ValueError("PPO's estimator needs a critic")
    return advantage.ppo(cfg, critic, records, turns, rewards)


@dataclass(frozen=True)
class Algorithm:
    """An RL algorithm as flowzoo's loop sees it."""

    name: str
    #: rewards -> advantages
    estimate: Estimator
    #: one turn's per-token loss (before the KL anchor and the aggregation)
    objective: Objective
    #: whether every policy gets a value head (its parameters join the policy's optimizer)
    critic: bool = False


ALGORITHMS: dict[str, Algorithm] = {
    "grpo": Algorithm("grpo", _grpo, clipped_surrogate),
    "ppo": Algorithm("ppo", _ppo, clipped_surrogate_and_value, critic=True),
}
if set(ALGORITHMS) != set(ALGOS):  # the CLI's choices and what the loop can run
    raise RuntimeError(f"config.ALGOS {ALGOS} and ALGORITHMS {tuple(ALGORITHMS)} differ")


def algorithm_for(cfg: TrainConfig) -> Algorithm:
    """The algorithm ``cfg.algo`` names (validated by the config, checked again here)."""
    try:
        return ALGORITHMS[cfg.algo]
    except KeyError:
        raise ValueError(f"unknown algo {cfg.algo!r}; valid: {', '.join(ALGORITHMS)}") from None


__all__ = ["ALGORITHMS", "Algorithm", "Critic", "Estimator", "Objective", "algorithm_for"]
