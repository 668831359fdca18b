"""One step's batch, built once from its rollouts and read by everything after them.

Why one object: the advantage estimator, the learner's loss, the step's metrics line and the
run records all read the same turns; each used to re-derive them from lists of episodes, so a
count could be taken from the last resampling round only, or be 0 for tree rollouts.
:meth:`Batch.of` takes the step's episodes whatever played them (every dynamic-sampling
round kept, tree siblings, one process's share) and fixes, once, each turn's position, its
reward (as the env mixed it), its group and whether that group can teach anything, and the
step's flag and tamper counts. The batch is frozen: assigning to it raises, and what it holds
is tuples and read-only mappings.

What an algorithm makes of a batch, :class:`~flowzoo.agents.train.losses.Advantages`, is
what the loss reads, so it lives with the loss pieces.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import torch

from flowzoo.agents.train.rollout import EpisodeRecord, TurnRecord
from flowzoo.config import GROUP_BY, TrainConfig


@dataclass(frozen=True)
class GroupKey:
    """What two turns must share to be compared (GRPO's and RLOO's groups)."""

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
    differ)? DAPO's dynamic sampling keeps problems that have one; ``filter_groups`` drops
    the rest, whose group-relative advantages are all 0."""
    members: dict[Hashable, list[float]] = defaultdict(list)
    for k, r in zip(keys, rewards, strict=True):
        members[k].append(float(r))
    ok = {
        k: len(v) > 1 and float(torch.tensor(v, dtype=torch.float64).std(unbiased=False)) >= eps
        for k, v in members.items()
    }
    return [ok[k] for k in keys]


@dataclass(frozen=True)
class Batch:
    """One step's turns and what is fixed about them before the update (see the module doc).

    Every per-turn tuple is aligned with ``turns``: ``rewards[i]``, ``groups[i]`` and
    ``informative[i]`` belong to ``turns[i]``, whose ``index`` is ``i`` and whose ``episode``
    is its episode's position in ``records``."""

    #: the step's episodes (one per tree sibling), in the order the turns follow
    records: tuple[EpisodeRecord, ...]
    #: every turn of every episode, flat
    turns: tuple[TurnRecord, ...]
    #: what each turn trains on: the env's reward, read when the batch was built
    rewards: tuple[float, ...]
    #: each turn's group as ``cfg.group_by`` names it
    groups: tuple[GroupKey, ...]
    #: whether each turn's group has reward variance (two or more members that differ)
    informative: tuple[bool, ...]
    #: positions of the turns cut at their token budget (their end is not the model's)
    truncated: frozenset[int]
    #: per role (in order of first appearance): its turns, those the env flagged (any
    #: flag), those caught tampering with their judge (``reward_tamper``)
    role_turns: Mapping[str, int]
    flagged: Mapping[str, int]
    tampered: Mapping[str, int]
    #: dynamic sampling's counts (rounds, problems, informative), None when it is off
    sampling: Mapping[str, int] | None = None

    @classmethod
    def of(
        cls,
        cfg: TrainConfig,
        records: Sequence[EpisodeRecord],
        sampling: Mapping[str, int] | None = None,
    ) -> Batch:
        """The batch of ``records``; tells each turn its position (``index``) and its
        episode's (``episode``), which the advantage arrays and the episode lookups use."""
        turns: list[TurnRecord] = []
        groups: list[GroupKey] = []
        for e, r in enumerate(records):
            for t in r.turns:
                t.index, t.episode = len(turns), e
                turns.append(t)
                groups.append(GroupKey.of(cfg.group_by, str(r.group), t.role, t.agent, t.turn))
        rewards = tuple(float(t.reward) for t in turns)
        count: dict[str, dict[str, int]] = {k: {} for k in ("turns", "flagged", "tampered")}
        for t in turns:
            for k, hit in (
                ("turns", True),
                ("flagged", bool(t.flags)),
                ("tampered", "reward_tamper" in t.flags),
            ):
                count[k][t.role] = count[k].get(t.role, 0) + hit
        return cls(
            records=tuple(records),
            turns=tuple(turns),
            rewards=rewards,
            groups=tuple(groups),
            informative=tuple(informative(groups, rewards)),
            truncated=frozenset(t.index for t in turns if t.cut),
            role_turns=MappingProxyType(count["turns"]),
            flagged=MappingProxyType(count["flagged"]),
            tampered=MappingProxyType(count["tampered"]),
            sampling=MappingProxyType(dict(sampling)) if sampling is not None else None,
        )

    def problems_with_signal(self) -> list[str]:
        """The problems (in order of appearance) with at least one informative group: what
        dynamic sampling counts."""
        ok = zip(self.turns, self.informative, strict=True)
        good = {str(self.records[t.episode].group) for t, signal in ok if signal}
        return [g for g in dict.fromkeys(str(r.group) for r in self.records) if g in good]
