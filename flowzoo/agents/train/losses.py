"""What every algorithm's loss is made of: the model's per-token log-probs (and values), the
advantages an algorithm estimates (:class:`Advantages`), the clipped surrogate (with a role's
clip range), the clipped value loss, the k3 KL estimator and the loss aggregation.

Why one file: an algorithm (:mod:`flowzoo.agents.train.algorithms`) names its per-token loss
from these; the learner adds the KL anchor and the aggregation the same way for every one, so
a change to a piece shows in one place, as in CleanRL's single-file losses. One GRPO update
reads three files: :mod:`~flowzoo.agents.train.learner` (the update step),
:mod:`~flowzoo.agents.train.algorithms.grpo` (what GRPO is) and this one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

import torch

from flowzoo.config import LOSS_AGGS, TrainConfig

if TYPE_CHECKING:
    from flowzoo.agents.train.batch import Batch
    from flowzoo.agents.train.rollout import TurnRecord


@overload
def model_outputs(
    policy, head: torch.nn.Module, prompt_ids, completion_ids, temperature: float
) -> tuple[list[torch.Tensor], list[torch.Tensor]]: ...
@overload
def model_outputs(
    policy, head: None, prompt_ids, completion_ids, temperature: float
) -> tuple[list[torch.Tensor], None]: ...
def model_outputs(
    policy, head: torch.nn.Module | None, prompt_ids, completion_ids, temperature: float
) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """Per-token log-probs of each completion and, with a critic's ``head``, its values read
    from the same scoring pass (:meth:`~flowzoo.agents.models.policy.Policy.score`)."""
    if head is None:
        return policy.logprobs(prompt_ids, completion_ids, temperature), None
    lps, hidden = policy.score(prompt_ids, completion_ids, temperature, hidden=True)
    return lps, [head(h) for h in hidden]


@dataclass
class Advantages:
    """What an algorithm estimates on a batch; aligned with ``batch.turns`` (``turn.index``)."""

    #: GRPO, RLOO: one advantage per turn
    scalar: list[float] | None = None
    #: PPO: per-token advantages, returns and old values (None for turns with no tokens)
    token: list[torch.Tensor | None] | None = None
    returns: list[torch.Tensor | None] | None = None
    old_values: list[torch.Tensor | None] | None = None
    #: group statistics (sizes, singletons, dropped) for the metrics line
    stats: dict[str, Any] = field(default_factory=dict)
    #: turns (by index) that add no loss: uninformative groups (``filter_groups``) and
    #: truncated turns (``mask_truncated``)
    skip: set[int] = field(default_factory=set)

    def tokens(self, t: TurnRecord, like: torch.Tensor) -> torch.Tensor:
        """The turn's advantage for each of its completion tokens."""
        if self.scalar is not None:
            return torch.full_like(like, float(self.scalar[t.index]))
        tok = self.token[t.index] if self.token is not None else None
        if tok is None:
            raise ValueError(f"no advantage was estimated for turn {t.index}")
        return tok

    def value_targets(self, t: TurnRecord) -> tuple[torch.Tensor, torch.Tensor]:
        """PPO: (old values, returns) of the turn's tokens."""
        old = self.old_values[t.index] if self.old_values is not None else None
        ret = self.returns[t.index] if self.returns is not None else None
        if old is None or ret is None:
            raise ValueError(f"no value targets were estimated for turn {t.index}")
        return old, ret

    def drop_uninformative(self, batch: Batch) -> None:
        """``filter_groups``: leave out of the loss every turn whose group has no reward
        variance (its group-relative advantages are all 0), counted in the statistics."""
        dead = [i for i, ok in enumerate(batch.informative) if not ok]
        self.skip |= set(dead)
        self.stats["dropped_groups"] = len({batch.groups[i] for i in dead})
        self.stats["dropped_turns"] = len(self.skip)


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
