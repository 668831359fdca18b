"""PPO: a value head on the policy's last hidden state and GAE over each agent's turns.

Each agent's turns in an episode form one trajectory (its completion tokens in order: a turn
with tool calls gives the tokens of every generated segment, the tool output left out); the
turn's own reward (``turn_rewards``: the overlong penalty included) reaches that turn; GAE with ``gamma``
and ``lam`` runs backwards over that token sequence. The policy loss is the same clipped
surrogate as GRPO's, per token.

What the critic reads is ``critic_input``: the acting agent's own prompt (``"local"``), or the
episode's whole transcript up to the turn (``"central"``, MAPPO's centralised value:
:mod:`.central_critic`, which also scores the values in the update).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch

from flowzoo.agents.train import losses
from flowzoo.agents.train.algorithms import central_critic
from flowzoo.agents.train.algorithms.base import Algorithm, Critic, ValueTerms
from flowzoo.agents.train.batch import Batch
from flowzoo.agents.train.losses import Advantages, model_outputs
from flowzoo.agents.train.rollout import TurnRecord
from flowzoo.agents.train.segments import critic_pieces, per_turn, pieces
from flowzoo.config import TrainConfig


class ValueHead(torch.nn.Module):
    """A scalar value per position from the last hidden state (zero-initialised)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.proj.weight)
        torch.nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden.float()).squeeze(-1)


def gae(
    values: list[torch.Tensor],
    turn_rewards: Sequence[float],
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Advantages and returns for one agent trajectory given per-turn token values and each
    turn's own reward (what GRPO credits that turn with: the outcome, less the overlong
    penalty where the turn was cut).

    Each turn's reward reaches its last token as the step from it to the next turn's
    (``R_k - R_{k+1}``, the last turn's whole ``R``): with ``gamma`` 1 a turn's return is its
    own reward, a penalty stays with the turn it was paid for, and equal turn rewards give
    exactly one final reward as before."""
    lengths = [len(v) for v in values]
    if len(turn_rewards) != len(values):
        raise ValueError(f"{len(values)} turns but {len(turn_rewards)} turn rewards")
    if sum(lengths) == 0:
        return [v.clone() for v in values], [v.clone() for v in values]
    v = torch.cat([x.detach().float() for x in values])
    n = len(v)
    rewards = torch.zeros(n)
    ends = torch.tensor(lengths).cumsum(0) - 1
    nxt_r = [float(x) for x in turn_rewards[1:]] + [0.0]
    for end, length, r, r_next in zip(ends.tolist(), lengths, turn_rewards, nxt_r, strict=True):
        if length:  # a turn without tokens has no position to carry its reward
            rewards[end] += float(r) - r_next
    adv = torch.zeros(n)
    last: torch.Tensor | float = 0.0
    for j in range(n - 1, -1, -1):
        nxt = v[j + 1] if j + 1 < n else 0.0
        delta = rewards[j] + gamma * nxt - v[j]
        last = delta + gamma * lam * last
        adv[j] = last
    ret = adv + v
    return list(torch.split(adv, lengths)), list(torch.split(ret, lengths))


def advantages(
    cfg: TrainConfig, batch: Batch, critic: Critic | None = None, state: Any = None
) -> Advantages:
    """GAE over each agent's turns in each episode of the batch, with its policy's critic
    (reading each turn's own prompt, or with ``critic_input="central"`` the episode's
    transcript up to it), normalised per policy."""
    if critic is None:
        raise ValueError("PPO's estimator needs a critic")
    router, heads = critic.router, critic.heads
    central = cfg.critic_input == "central"
    n = len(batch.turns)
    #: per turn, what the critic reads before each of its generated segments
    critic_in: list[list[list[int]] | None] = [None] * n
    token: list[torch.Tensor | None] = [None] * n
    returns: list[torch.Tensor | None] = [None] * n
    old_values: list[torch.Tensor | None] = [None] * n
    for name in router.names:
        pol = router.prepare_update(name)
        head = heads[name]
        trajs: dict[tuple[int, str], list[TurnRecord]] = defaultdict(list)
        for t in batch.turns:
            if t.policy == name:
                trajs[(t.episode, t.agent)].append(t)
        flat = [t for ts in trajs.values() for t in ts if t.n_tokens]
        for t in flat:  # what the critic reads before each completion (each segment's prompt)
            critic_in[t.index] = [s.prompt_ids for s in t.segments]
        if central:
            for i, ids in central_critic.critic_prompts(pol, batch, flat).items():
                critic_in[i] = ids
        values: dict[int, torch.Tensor] = {}
        with torch.no_grad():
            for i in range(0, len(flat), cfg.micro_batch):
                mb = flat[i : i + cfg.micro_batch]
                _, vs = model_outputs(
                    pol, head, critic_pieces(mb, critic_in), pieces(mb)[1], cfg.temperature
                )
                for t, v in zip(mb, per_turn(mb, vs), strict=True):
                    values[t.index] = v.detach().cpu()
        advs: list[torch.Tensor] = []
        mine: list[tuple[int, torch.Tensor]] = []
        for ts in trajs.values():
            ts = [t for t in sorted(ts, key=lambda x: x.turn) if t.n_tokens]
            if not ts:
                continue
            a, ret = gae(  # each turn's own reward, not only the last turn's
                [values[t.index] for t in ts],
                [batch.rewards[t.index] for t in ts],
                cfg.gamma,
                cfg.gae_lambda,
            )
            for t, ai, ri in zip(ts, a, ret, strict=True):
                here = ai.to(pol.device)
                token[t.index] = here
                returns[t.index] = ri.to(pol.device)
                old_values[t.index] = values[t.index].to(pol.device)
                advs.append(ai)
                mine.append((t.index, here))
        if advs:
            allv = torch.cat(advs)
            mu, sd = allv.mean(), allv.std(unbiased=False)
            for i, ti in mine:
                token[i] = (ti - mu.to(ti.device)) / (sd + 1e-6)
    if central:
        return central_critic.CentralAdvantages(
            token=token, returns=returns, old_values=old_values, critic_prompts=critic_in
        )
    return Advantages(token=token, returns=returns, old_values=old_values)


def loss(
    cfg: TrainConfig,
    role: str,
    new_lp: torch.Tensor,
    old_lp: torch.Tensor,
    adv: torch.Tensor,
    values: ValueTerms | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The clipped objective plus ``vf_coef`` x the clipped value loss."""
    pl, clipped = losses.policy_loss(cfg, role, new_lp, old_lp, adv, values)
    if values is None:
        raise ValueError("the PPO objective needs the critic's values")
    new_v, old_v, ret = values
    return pl + cfg.vf_coef * losses.value_loss(new_v, old_v, ret, cfg.value_clip), clipped


ALGORITHM = Algorithm("ppo", advantages, loss, value_head=ValueHead, outputs=central_critic.outputs)

__all__ = ["ALGORITHM", "ValueHead", "advantages", "gae", "loss"]
