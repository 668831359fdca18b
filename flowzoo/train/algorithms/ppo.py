"""PPO pieces: a value head on the policy's last hidden state and GAE over each agent's turns.

Each agent's turns in an episode form one trajectory (its completion tokens in order); the
agent's reward (the team reward by default) arrives at its last token; GAE with ``gamma``
and ``lam`` runs backwards over that token sequence. The policy loss is the same clipped
surrogate as GRPO's, per token.
"""

from __future__ import annotations

import torch


class ValueHead(torch.nn.Module):
    """A scalar value per position from the last hidden state (zero-initialised)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.proj.weight)
        torch.nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden.float()).squeeze(-1)


def logprobs_and_values(policy, head: ValueHead, prompt_ids, completion_ids, temperature: float):
    """Per-token log-probs and values of each completion: the policy's one scoring pass
    (:meth:`~flowzoo.models.policy.Policy.score`), the values read from its hidden states."""
    lps, hidden = policy.score(prompt_ids, completion_ids, temperature, hidden=True)
    return lps, [head(h) for h in hidden]


def gae(
    values: list[torch.Tensor], final_reward: float, gamma: float = 1.0, lam: float = 0.95
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Advantages and returns for one agent trajectory given per-turn token values."""
    lengths = [len(v) for v in values]
    if sum(lengths) == 0:
        return [v.clone() for v in values], [v.clone() for v in values]
    v = torch.cat([x.detach().float() for x in values])
    n = len(v)
    rewards = torch.zeros(n)
    rewards[-1] = final_reward
    adv = torch.zeros(n)
    last = 0.0
    for j in range(n - 1, -1, -1):
        nxt = v[j + 1] if j + 1 < n else 0.0
        delta = rewards[j] + gamma * nxt - v[j]
        last = delta + gamma * lam * last
        adv[j] = last
    ret = adv + v
    return list(torch.split(adv, lengths)), list(torch.split(ret, lengths))


def value_loss(
    new_v: torch.Tensor, old_v: torch.Tensor, ret: torch.Tensor, clip: float = 0.2
) -> torch.Tensor:
    """Clipped value loss (per token, unreduced)."""
    clipped = old_v + torch.clamp(new_v - old_v, -clip, clip)
    return 0.5 * torch.maximum((new_v - ret) ** 2, (clipped - ret) ** 2)
