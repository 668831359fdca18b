"""GRPO: group-relative advantages (reward minus its group's mean, over a std) and the
clipped token loss.

One GRPO update reads three files: :mod:`~flowzoo.agents.train.learner` (the update step:
advantages, mini-batches, loss, KL anchor, optimizer step), this one, which says what GRPO
is (:func:`advantages` over the batch's groups, the clipped surrogate as its loss), and
:mod:`~flowzoo.agents.train.losses` (the model's log-probs, the advantages container, the
clipped surrogate, the k3 KL and the aggregation). What it reads of its input, the step's
:class:`~flowzoo.agents.train.batch.Batch` (built by the trainer's loop before the update),
is fields: each turn's reward, its group key and whether that group has reward variance.

Groups are explicit: the batch names each turn's (``cfg.group_by``: the study keys by task x
role, so a role's turns and its same-role agents share one group). A group seen once (a size-1
group) gets advantage 0 and is counted, never its raw reward — a silent failure in some peers.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from flowzoo.agents.train import losses
from flowzoo.agents.train.algorithms.base import Algorithm, Critic
from flowzoo.agents.train.batch import Batch
from flowzoo.agents.train.losses import Advantages
from flowzoo.config import ADV_NORMS, TrainConfig


@dataclass
class AdvantageStats:
    groups: int = 0
    singleton_groups: int = 0
    zero_std_groups: int = 0


def group_relative(
    keys: Sequence[Hashable],
    rewards: Sequence[float],
    std_norm: bool = True,
    norm: str = "group",
    roles: Sequence[str] | None = None,
    eps: float = 1e-6,
) -> tuple[list[float], AdvantageStats]:
    """Group-relative advantages: reward minus its group's mean, divided by a std that is the
    group's (``norm="group"``), the whole batch's (``"global"``), the turn's role's over the
    whole batch (``"per-role"``: not Dr. MAS's per-agent form, which takes the mean and the
    std of the agent's own rewards on one problem: ``algo="dr-mas"``, :mod:`.dr_mas`) or 1
    (``"none"`` / ``std_norm=False``)."""
    if norm not in ADV_NORMS:
        raise ValueError(f"unknown advantage norm {norm!r}; valid: {', '.join(ADV_NORMS)}")
    if len(keys) != len(rewards):
        raise ValueError(f"{len(keys)} keys but {len(rewards)} rewards")
    if norm == "per-role" and roles is None:
        raise ValueError("per-role advantage normalisation needs the turns' roles")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        members[k].append(i)
    stats = AdvantageStats(groups=len(members))
    r = torch.tensor(list(rewards), dtype=torch.float64)
    centred = torch.zeros_like(r)
    group_std = torch.ones_like(r)
    valid = torch.zeros(len(r), dtype=torch.bool)
    for idx in members.values():
        if len(idx) == 1:
            stats.singleton_groups += 1
            continue
        t = torch.tensor(idx)
        g = r[t]
        sd = g.std(unbiased=False)
        if float(sd) < eps:
            stats.zero_std_groups += 1
        centred[t] = g - g.mean()
        group_std[t] = sd
        valid[t] = True
    if not std_norm or norm == "none":
        scale = torch.ones_like(r)
    elif norm == "group":
        scale = group_std
    elif norm == "global":
        scale = torch.full_like(
            r, float(centred[valid].std(unbiased=False)) if valid.sum() > 1 else 1.0
        )
    else:
        assert roles is not None  # per-role: checked above
        scale = torch.ones_like(r)
        for role in set(roles):
            sel = torch.tensor(
                [i for i, x in enumerate(roles) if x == role and valid[i]], dtype=torch.long
            )
            if len(sel) > 1:
                scale[torch.tensor([i for i, x in enumerate(roles) if x == role])] = float(
                    centred[sel].std(unbiased=False)
                )
    adv = torch.where(valid, centred / (scale + eps), torch.zeros_like(r))
    return adv.tolist(), stats


def advantages(
    cfg: TrainConfig, batch: Batch, critic: Critic | None = None, state: Any = None
) -> Advantages:
    """Group-relative advantages over the batch's groups (no critic, no state); with
    ``filter_groups`` the turns of groups without reward variance add no loss."""
    adv, stats = group_relative(
        batch.groups, batch.rewards, cfg.std_norm, cfg.adv_norm, [t.role for t in batch.turns]
    )
    out = Advantages(scalar=list(adv), stats=dataclasses.asdict(stats))
    if cfg.filter_groups:
        out.drop_uninformative(batch)
    return out


ALGORITHM = Algorithm("grpo", advantages, losses.policy_loss)

__all__ = ["ALGORITHM", "AdvantageStats", "advantages", "group_relative"]
