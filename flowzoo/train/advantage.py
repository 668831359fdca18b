"""Rewards -> advantages, as arrays aligned with the step's turns (``turn.index``).

The estimators behind :mod:`flowzoo.train.algorithm`'s seam. GRPO gives one scalar per turn
(groups named by ``GroupKey``); PPO gives per-token
advantages, returns and the old values from a critic and GAE over each agent's turns. The
learner asks :meth:`Advantages.tokens` for a turn and never needs to know which it was.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch

from flowzoo.config import TrainConfig
from flowzoo.train.algorithms.grpo import GroupKey, advantages, informative
from flowzoo.train.algorithms.ppo import gae, logprobs_and_values
from flowzoo.train.rollout import EpisodeRecord, TurnRecord


@dataclass
class Advantages:
    """Per-turn advantages for one step; index with ``turn.index``."""

    #: GRPO: one advantage per turn
    scalar: list[float] | None = None
    #: PPO: per-token advantages, returns and old values (None for turns with no tokens)
    token: list[torch.Tensor | None] | None = None
    returns: list[torch.Tensor | None] | None = None
    old_values: list[torch.Tensor | None] | None = None
    #: group statistics (sizes, singletons, dropped) for the metrics line
    stats: dict[str, Any] = field(default_factory=dict)
    #: turns (by index) that add no loss: uninformative groups (filter_groups) and truncated
    #: turns (mask_truncated)
    skip: set[int] = field(default_factory=set)

    def tokens(self, t: TurnRecord, like: torch.Tensor) -> torch.Tensor:
        """The turn's advantage for each of its completion tokens."""
        if self.scalar is not None:
            return torch.full_like(like, float(self.scalar[t.index]))
        return self.token[t.index]

    def value_targets(self, t: TurnRecord) -> tuple[torch.Tensor, torch.Tensor]:
        """PPO: (old values, returns) of the turn's tokens."""
        return self.old_values[t.index], self.returns[t.index]


@dataclass
class Critic:
    """What a critic-based estimator needs: the router (each policy's forward) and each
    policy's value head."""

    router: Any
    heads: dict[str, torch.nn.Module]


def index_turns(records: list[EpisodeRecord]) -> list[TurnRecord]:
    """The step's turns in one flat list, each told its position."""
    turns = [t for r in records for t in r.turns]
    for i, t in enumerate(turns):
        t.index = i
    return turns


def grpo(
    cfg: TrainConfig, records: list[EpisodeRecord], turns: list[TurnRecord], rewards: list[float]
) -> Advantages:
    """Group-relative advantages; the group of a turn is named by ``cfg.group_by``."""
    keys = group_keys(cfg, records, turns)
    adv, stats = advantages(keys, rewards, cfg.std_norm, cfg.adv_norm, [t.role for t in turns])
    out = Advantages(scalar=list(adv), stats=dataclasses.asdict(stats))
    if cfg.filter_groups:
        ok = informative(keys, rewards)
        out.skip |= {t.index for t, good in zip(turns, ok, strict=True) if not good}
        out.stats["dropped_groups"] = len({k for k, good in zip(keys, ok, strict=True) if not good})
        out.stats["dropped_turns"] = len(out.skip)
    return out


def group_keys(cfg: TrainConfig, records: list[EpisodeRecord], turns: list[TurnRecord]) -> list:
    """Each turn's GRPO group, as ``cfg.group_by`` names it."""
    return [
        GroupKey.of(cfg.group_by, str(records[t.episode].group), t.role, t.agent, t.turn)
        for t in turns
    ]


def mask_truncated(adv: Advantages, turns: list[TurnRecord]) -> None:
    """Leave out of the loss every turn cut at max_new_tokens (its end is not the model's)."""
    cut = {t.index for t in turns if not t.finished and t.completion_ids}
    adv.skip |= cut
    adv.stats["masked_truncated"] = len(cut)


def ppo(
    cfg: TrainConfig,
    critic: Critic,
    records: list[EpisodeRecord],
    turns: list[TurnRecord],
    rewards: list[float],
) -> Advantages:
    """GAE over each agent's turns with its policy's critic, normalised per policy."""
    router, heads = critic.router, critic.heads
    n = len(turns)
    out = Advantages(token=[None] * n, returns=[None] * n, old_values=[None] * n)
    for name in router.names:
        pol = router.prepare_update(name)
        head = heads[name]
        trajs: dict[tuple[int, str], list[TurnRecord]] = defaultdict(list)
        for r in records:
            for t in r.turns:
                if t.policy == name:
                    trajs[(r.index, t.agent)].append(t)
        flat = [t for ts in trajs.values() for t in ts if t.completion_ids]
        values: dict[int, torch.Tensor] = {}
        with torch.no_grad():
            for i in range(0, len(flat), cfg.micro_batch):
                mb = flat[i : i + cfg.micro_batch]
                _, vs = logprobs_and_values(
                    pol,
                    head,
                    [t.prompt_ids for t in mb],
                    [t.completion_ids for t in mb],
                    cfg.temperature,
                )
                for t, v in zip(mb, vs, strict=True):
                    values[t.index] = v.detach().cpu()
        advs, mine = [], []
        for ts in trajs.values():
            ts = [t for t in sorted(ts, key=lambda x: x.turn) if t.completion_ids]
            if not ts:
                continue
            a, ret = gae(
                [values[t.index] for t in ts], rewards[ts[-1].index], cfg.gamma, cfg.gae_lambda
            )
            for t, ai, ri in zip(ts, a, ret, strict=True):
                out.token[t.index] = ai.to(pol.device)
                out.returns[t.index] = ri.to(pol.device)
                out.old_values[t.index] = values[t.index].to(pol.device)
                advs.append(ai)
                mine.append(t.index)
        if advs:
            allv = torch.cat(advs)
            mu, sd = allv.mean(), allv.std(unbiased=False)
            for i in mine:
                out.token[i] = (out.token[i] - mu.to(out.token[i].device)) / (sd + 1e-6)
    return out
