"""RLOO (REINFORCE leave-one-out): a turn's advantage is its reward minus the mean reward of
the *other* members of its group; no std normalisation, no critic.

Why it is here: the baseline excludes the turn itself, so it is unbiased for any group size
(GRPO's mean includes the turn; its std rescales easy and hard problems alike). Groups are
the ones GRPO uses (``cfg.group_by``); a one-member group has no one to leave out and gets 0.
The loss is the shared clipped surrogate (:func:`~flowzoo.agents.train.losses.policy_loss`).
This file, plus ``"rloo"`` in :data:`flowzoo.config.ALGOS`, is the whole algorithm.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Any

from flowzoo.agents.train import losses
from flowzoo.agents.train.algorithms.base import Algorithm, Critic
from flowzoo.agents.train.batch import Batch
from flowzoo.agents.train.losses import Advantages
from flowzoo.config import TrainConfig


def leave_one_out(
    keys: Sequence[Hashable], rewards: Sequence[float]
) -> tuple[list[float], dict[str, int]]:
    """Per turn, ``r_i - mean(r_j for the other j in its group)``; (advantages, group stats)."""
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        members[k].append(i)
    adv = [0.0] * len(rewards)
    stats = {"groups": len(members), "singleton_groups": 0, "zero_std_groups": 0}
    for idx in members.values():
        n = len(idx)
        if n == 1:
            stats["singleton_groups"] += 1
            continue
        total = sum(float(rewards[i]) for i in idx)
        if len({float(rewards[i]) for i in idx}) == 1:
            stats["zero_std_groups"] += 1
        for i in idx:
            adv[i] = float(rewards[i]) - (total - float(rewards[i])) / (n - 1)
    return adv, stats


def advantages(
    cfg: TrainConfig, batch: Batch, critic: Critic | None = None, state: Any = None
) -> Advantages:
    """Leave-one-out advantages within the batch's groups (no critic)."""
    adv, stats = leave_one_out(batch.groups, batch.rewards)
    out = Advantages(scalar=adv, stats=stats)
    if cfg.filter_groups:
        out.drop_uninformative(batch)
    return out


ALGORITHM = Algorithm("rloo", advantages, losses.policy_loss)

__all__ = ["ALGORITHM", "advantages", "leave_one_out"]
