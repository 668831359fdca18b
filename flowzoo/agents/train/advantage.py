"""What every estimator shares: the :class:`Advantages` container (arrays aligned with the
step's turns, ``turn.index``), the critic handle, and the groups turns are compared in.

The estimators themselves live one per file in :mod:`flowzoo.agents.train.algorithms`: GRPO and
RLOO give one scalar per turn (groups named by :class:`GroupKey`); PPO gives per-token
advantages, returns and old values from a critic and GAE over each agent's turns. The
learner asks :meth:`Advantages.tokens` for a turn and never needs to know which it was.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from flowzoo.agents.train.rollout import EpisodeRecord, TurnRecord
from flowzoo.config import GROUP_BY, TrainConfig


@dataclass(frozen=True)
class GroupKey:
    """What two turns must share to be in the same group (GRPO, RLOO)."""

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


def group_keys(cfg: TrainConfig, records: list[EpisodeRecord], turns: list[TurnRecord]) -> list:
    """Each turn's GRPO group, as ``cfg.group_by`` names it."""
    return [
        GroupKey.of(cfg.group_by, str(records[t.episode].group), t.role, t.agent, t.turn)
        for t in turns
    ]


def informative_turns(
    cfg: TrainConfig, records: list[EpisodeRecord], turns: list[TurnRecord], rewards: list[float]
) -> list[bool]:
    """Per turn: whether its group (``cfg.group_by``) has reward variance; what
    ``filter_groups`` keeps and dynamic sampling counts, for any group-based algorithm."""
    return informative(group_keys(cfg, records, turns), rewards)


def drop_uninformative(
    out: Advantages, keys: list, turns: list[TurnRecord], rewards: list[float]
) -> None:
    """``filter_groups``: leave out of the loss every turn whose group has no reward variance
    (its advantages are all 0), counted in the step's group statistics."""
    ok = informative(keys, rewards)
    out.skip |= {t.index for t, good in zip(turns, ok, strict=True) if not good}
    out.stats["dropped_groups"] = len({k for k, good in zip(keys, ok, strict=True) if not good})
    out.stats["dropped_turns"] = len(out.skip)


def mask_truncated(adv: Advantages, turns: list[TurnRecord]) -> None:
    """Leave out of the loss every turn cut at max_new_tokens (its end is not the model's)."""
    cut = {t.index for t in turns if not t.finished and t.completion_ids}
    adv.skip |= cut
    adv.stats["masked_truncated"] = len(cut)
