"""The interface every algorithm file fills in: advantages from a step's :class:`Batch`, and
a turn's per-token loss from the model's outputs.

Why one small interface: the learner asks the algorithm for the batch's advantages, whether
it has a critic, and for a turn's loss. Neither it nor the trainer imports an algorithm's internals or branches on its name,
so an algorithm is one file in this package plus its name in :data:`flowzoo.config.ALGOS`.

Two optional hooks, for estimators that need them: ``state`` (what an estimator carries from
step to step, a per-role running baseline: the learner holds it and the checkpoint saves it,
so a resumed run continues exactly) and ``outputs`` (what the model is asked per micro-batch:
a centralised critic reads the values from another input than the policy's log-probs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from flowzoo.agents.train.batch import Batch
from flowzoo.agents.train.losses import Advantages, model_outputs
from flowzoo.agents.train.segments import per_turn, pieces
from flowzoo.config import TrainConfig

if TYPE_CHECKING:
    from flowzoo.agents.train.rollout import TurnRecord


@dataclass
class Critic:
    """What a critic-based estimator needs: the router (each policy's forward) and each
    policy's value head."""

    router: Any
    heads: dict[str, torch.nn.Module]


class EstimatorState(Protocol):
    """What an estimator carries from step to step (plain data in its state dict: a
    checkpoint holds tensors and plain data only)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Estimator(Protocol):
    """A batch -> its advantages: (config, the step's batch, the critic or None, the
    estimator's state or None)."""

    def __call__(
        self,
        cfg: TrainConfig,
        batch: Batch,
        critic: Critic | None = None,
        state: Any = None,
    ) -> Advantages: ...


#: a micro-batch's model outputs: (policy, value head or None, its turns, the batch's
#: advantages, temperature) -> (per-token log-probs, per-token values or None)
Outputs = Callable[
    [Any, "torch.nn.Module | None", Sequence["TurnRecord"], Advantages, float],
    "tuple[list[torch.Tensor], list[torch.Tensor] | None]",
]
#: ValueTerms: (new values, old values, returns) of a turn's tokens, for a critic's loss
ValueTerms = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
#: one turn's per-token loss and clipped mask: (config, role, new log-probs, old log-probs,
#: per-token advantages, value terms or None)
Loss = Callable[
    [TrainConfig, str, torch.Tensor, torch.Tensor, torch.Tensor, "ValueTerms | None"],
    tuple[torch.Tensor, torch.Tensor],
]


def turn_outputs(
    policy: Any,
    head: torch.nn.Module | None,
    turns: Sequence[TurnRecord],
    adv: Advantages,
    temperature: float,
) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """Log-probs (and, with a value head, values) of each turn's completion after its own
    prompt, from one scoring pass: every algorithm's outputs but a centralised critic's. A
    turn with tool calls: each generated segment after its own prompt, joined per turn."""
    p_ids, c_ids = pieces(turns)
    lps, values = model_outputs(policy, head, p_ids, c_ids, temperature)
    return per_turn(turns, lps), (per_turn(turns, values) if values is not None else None)


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
    #: builds what the estimator carries between steps (None: it carries nothing)
    state: Callable[[TrainConfig], EstimatorState] | None = None
    #: a micro-batch's log-probs and values (the learner's forward pass)
    outputs: Outputs = turn_outputs

    @property
    def critic(self) -> bool:
        """Whether every policy gets a value head."""
        return self.value_head is not None
