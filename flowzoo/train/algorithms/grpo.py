"""GRPO: group-relative advantages and the clipped token objective.

Groups are explicit: a :class:`GroupKey` names what must match for two turns to be compared
(the study keys by task x role: its trajectories are named by role, so a role's turns and
its same-role agents share one group). One function, :func:`advantages`, turns keys and
rewards into advantages. A key seen once (a size-1 group) gets advantage 0 and is counted,
never its raw reward — a silent failure in some peers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from flowzoo.config import ADV_NORMS, GROUP_BY, LOSS_AGGS  # the one definition


@dataclass(frozen=True)
class GroupKey:
    """What two turns must share to be in the same GRPO group."""

    task: str
    role: str | None = None
    agent: str | None = None
    turn: int | None = None

    @staticmethod
    def of(group_by: str, task: str, role: str, agent: str, turn: int) -> GroupKey:
        if group_by == "task":
            return GroupKey(task)
        if group_by == "task_role":
            return GroupKey(task, role=role)
        if group_by == "task_role_turn":
            return GroupKey(task, role=role, turn=turn)
        if group_by == "task_agent_turn":
            return GroupKey(task, agent=agent, turn=turn)
        raise ValueError(f"unknown group_by {group_by!r}; valid: {', '.join(GROUP_BY)}")


@dataclass
class AdvantageStats:
    groups: int = 0
    singleton_groups: int = 0
    zero_std_groups: int = 0


def advantages(
    keys: Sequence[Hashable],
    rewards: Sequence[float],
    std_norm: bool = True,
    norm: str = "group",
    roles: Sequence[str] | None = None,
    eps: float = 1e-6,
) -> tuple[list[float], AdvantageStats]:
    """Group-relative advantages: reward minus its group's mean, divided by a std that is the
    group's (``norm="group"``), the whole batch's (``"global"``), the turn's role's
    (``"per-role"``, as in Dr. MAS) or 1 (``"none"`` / ``std_norm=False``)."""
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


def informative(
    keys: Sequence[Hashable], rewards: Sequence[float], eps: float = 1e-6
) -> list[bool]:
    """Per turn: is its group one a policy can learn from (two or more members whose rewards
    differ)? DAPO's dynamic sampling drops the rest, whose advantages are all 0."""
    members: dict[Hashable, list[float]] = defaultdict(list)
    for k, r in zip(keys, rewards, strict=True):
        members[k].append(float(r))
    ok = {
        k: len(v) > 1 and float(torch.tensor(v, dtype=torch.float64).std(unbiased=False)) >= eps
        for k, v in members.items()
    }
    return [ok[k] for k in keys]


def clipped_token_loss(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped surrogate (DAPO-style asymmetric clip) and the clipped mask."""
    ratio = torch.exp(new_logp - old_logp)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    loss = -torch.minimum(unclipped, clipped)
    was_clipped = (clipped < unclipped).float()
    return loss, was_clipped


def k3_kl(new_logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """The low-variance KL estimator ``exp(ref - new) - (ref - new) - 1`` (>= 0)."""
    d = ref_logp - new_logp
    return torch.exp(d) - d - 1.0


def aggregate(
    token_losses: list[torch.Tensor],
    weights: list[float],
    mode: str,
    total_tokens: int,
    total_seqs: float,
) -> torch.Tensor:
    """Sum of per-sequence contributions under a loss aggregation, normalised by the policy's
    whole batch (so per-role pieces add up to the policy's loss)."""
    if mode not in LOSS_AGGS:
        raise ValueError(f"unknown loss aggregation {mode!r}; valid: {', '.join(LOSS_AGGS)}")
    parts = []
    for tl, w in zip(token_losses, weights, strict=True):
        if tl.numel() == 0:
            continue
        if mode == "token-mean":
            parts.append(w * tl.sum() / max(1, total_tokens))
        elif mode == "seq-mean-token-mean":
            parts.append(w * tl.mean() / max(1e-9, total_seqs))
        else:
            parts.append(w * tl.sum() / max(1e-9, total_seqs))
    if not parts:
        return torch.zeros((), requires_grad=False)
    return torch.stack(parts).sum()
