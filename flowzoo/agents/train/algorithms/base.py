"""The interface every algorithm file fills in: advantages from a step's :class:`Batch`, and
a turn's per-token loss from the model's outputs.

Why one small interface: the learner asks the algorithm for the batch's advantages, whether
it has a critic, and for a turn's loss. Neither it nor the trainer imports an algorithm's internals or branches on its name,
so an algorithm is one file in this package plus its name in :data:`flowzoo.config.ALGOS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from flowzoo.agents.train.batch import Batch
from flowzoo.agents.train.losses import Advantages
from flowzoo.config import TrainConfig


@dataclass
class Critic:
    """What a critic-based estimator needs: the router (each policy's forward) and each
    policy's value head."""

    router: Any
    heads: dict[str, torch.nn.Module]


#: a batch -> its advantages: (config, the step's batch, the critic or None)
Estimator = Callable[[TrainConfig, Batch, "Critic | None"], Advantages]
#: ValueTerms: (new values, old values, returns) of a turn's tokens, for a critic's loss
ValueTerms = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
#: one turn's per-token loss and clipped mask: (config, role, new log-probs, old log-probs,
#: per-token advantages, value terms or None)
Loss = Callable[
    [TrainConfig, str, torch.Tensor, torch.Tensor, torch.Tensor, "ValueTerms | None"],
    tuple[torch.Tensor, torch.Tensor],
]


@dataclass(frozen=True)
class Algorithm:
    """An RL algorithm as flowzoo's learner sees it."""

    name: str
    #: the batch's advantages
    advantages: Estimator
    #: one turn's per-token loss (before the KL anchor and the aggregation, the learner's)
    loss: Loss
    #: builds a policy's value head from its hidden size (its parameters join the policy's
    #: optimizer); None: no critic
    value_head: Callable[[int], torch.nn.Module] | None = None

    @property
    def critic(self) -> bool:
        """Whether every policy gets a value head."""
        return self.value_head is not None
