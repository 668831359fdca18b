"""RL algorithms: GRPO (group-relative advantages) and PPO (value head + GAE)."""

from flowzoo.train.algorithms.grpo import (
    GROUP_BY,
    LOSS_AGGS,
    GroupKey,
    advantages,
    clipped_token_loss,
    k3_kl,
)

__all__ = ["GROUP_BY", "LOSS_AGGS", "GroupKey", "advantages", "clipped_token_loss", "k3_kl"]
