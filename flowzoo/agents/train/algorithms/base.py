"""The interface every algorithm file fills in: advantages from a step's batch, and a turn's
per-token loss from the model's outputs.

Why one small interface: the trainer asks for advantages (and, for dynamic sampling, which
turns are informative); the learner asks for the model's outputs (log-probs, and values where
the algorithm has a critic) and a turn's loss. Neither imports an algorithm's internals or
branches on its name, so an algorithm is one file in this package plus its name in
:data:`flowzoo.config.ALGOS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from flowzoo.agents.train import losses
from flowzoo.agents.train.advantage import Advantages, Critic, informative_turns
from flowzoo.agents.train.rollout import EpisodeRecord, TurnRecord
from flowzoo.config import TrainConfig

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
#: per turn, whether it can teach anything (dynamic sampling keeps problems that have one)
Informative = Callable[
    [TrainConfig, list[EpisodeRecord], list[TurnRecord], list[float]], list[bool]
]


def policy_loss(
    cfg: TrainConfig,
    role: str,
    new_lp: torch.Tensor,
    old_lp: torch.Tensor,
    adv: torch.Tensor,
    values: ValueTerms | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The clipped token objective with the role's (asymmetric) clip range."""
    return losses.clipped_surrogate(
        new_lp, old_lp, adv, cfg.for_role(role, "clip_low"), cfg.for_role(role, "clip_high")
    )


class ValueHead(torch.nn.Module):
    """A scalar value per position from the last hidden state (zero-initialised)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.proj.weight)
        torch.nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden.float()).squeeze(-1)


def model_outputs(
    policy, head: torch.nn.Module | None, prompt_ids, completion_ids, temperature: float
) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """Per-token log-probs of each completion and, with a critic's ``head``, its values read
    from the same scoring pass (:meth:`~flowzoo.agents.models.policy.Policy.score`)."""
    if head is None:
        return policy.logprobs(prompt_ids, completion_ids, temperature), None
    lps, hidden = policy.score(prompt_ids, completion_ids, temperature, hidden=True)
    return lps, [head(h) for h in hidden]


@dataclass(frozen=True)
class Algorithm:
    """An RL algorithm as flowzoo's loop sees it."""

    name: str
    #: rewards -> advantages
    estimate: Estimator
    #: one turn's per-token loss (before the KL anchor and the aggregation)
    objective: Objective = policy_loss
    #: builds a policy's value head from its hidden size (its parameters join the policy's
    #: optimizer); None: no critic
    value_head: Callable[[int], torch.nn.Module] | None = None
    #: per turn, whether it is informative (dynamic sampling): its group has reward variance
    informative: Informative = informative_turns

    @property
    def critic(self) -> bool:
        """Whether every policy gets a value head."""
        return self.value_head is not None
