"""The loss pieces every algorithm shares: the clipped surrogate (with a role's clip range),
the clipped value loss, the k3 KL estimator and the loss aggregation.

Why one file: an algorithm (:mod:`flowzoo.agents.train.algorithms`) names its per-token loss
from these; the learner adds the KL anchor and the aggregation the same way for every one, so
a change to a piece shows in one place, as in CleanRL's single-file losses.
"""

from __future__ import annotations

import torch

from flowzoo.config import LOSS_AGGS, TrainConfig


def clipped_surrogate(
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


def policy_loss(
    cfg: TrainConfig,
    role: str,
    new_lp: torch.Tensor,
    old_lp: torch.Tensor,
    adv: torch.Tensor,
    values: tuple[torch.Tensor, ...] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The clipped surrogate with the role's (asymmetric) clip range: GRPO's and RLOO's whole
    per-token loss, PPO's policy part (``values`` is for a critic's loss; unused here)."""
    return clipped_surrogate(
        new_lp, old_lp, adv, cfg.for_role(role, "clip_low"), cfg.for_role(role, "clip_high")
    )


def value_loss(
    new_v: torch.Tensor, old_v: torch.Tensor, ret: torch.Tensor, clip: float = 0.2
) -> torch.Tensor:
    """Clipped value loss (per token, unreduced)."""
    clipped = old_v + torch.clamp(new_v - old_v, -clip, clip)
    return 0.5 * torch.maximum((new_v - ret) ** 2, (clipped - ret) ** 2)


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
