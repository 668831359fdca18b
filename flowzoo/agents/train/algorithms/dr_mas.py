"""Dr. MAS (``algo="dr-mas"``): GRPO whose advantages are normalised per agent, each agent's
reward minus the mean, over the std, of *that agent's own* rewards on the same problem.

Source: Feng, Zheng, He, Zhang & An (2026), "Dr. MAS: Stable Reinforcement Learning for
Multi-Agent LLM Systems" (arXiv 2602.08847), its agent-wise normalisation (Eq. 5) as its
released trainer computes it (``group_by_agent_id``: the GRPO group keyed by prompt *and*
agent, every step the agent took counted). The paper's case against the alternative: one
mean and std pooled over all agents of a prompt's rollouts sit apart from an agent whose
rewards differ from the rest, which inflates that agent's gradient norm.

In flowzoo an agent in Dr. MAS's sense is a role (its own prompt and policy; Voting's
parallel solvers are one): each turn's GRPO group (``group_by``) is split by the turn's role,
then each split group's own mean and std apply (GRPO's ``"group"`` normalisation, so
``std_norm=False`` centres only, as the released code's ``norm_adv_by_std_in_grpo``). With
``group_by="task"`` this is exactly Dr. MAS against ``algo="grpo"`` (one group per problem,
pooled over agents: the form the paper argues against). With the study's default
``group_by="task_role"`` the groups are one role's already, so plain GRPO *is* this form
there, number for number (tested): the study already normalises per agent.

Why the older switch ``adv_norm="per-role"`` is not Dr. MAS: it centres on the ``group_by``
group's mean (pooled over roles under ``group_by="task"``) and divides by one std per role
taken over that role's centred turns of the *whole batch*, across problems; Dr. MAS takes
both the mean and the std from the agent's own rewards on *one* problem. Two smaller
differences from the released code, kept as flowzoo's GRPO has them: the std is the
population std (the code's ``torch.std`` divides by n - 1), and a group of one turn gets
advantage 0 and is counted (the code gives it its raw reward: mean 0, std 1).
``filter_groups`` drops the turns of a split group whose rewards do not vary (their
advantages are all 0). Refused at the config on a one-role env (it would be GRPO) and with
an ``adv_norm`` other than ``"group"`` (its statistics are the agent's own by definition).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from typing import Any

from flowzoo.agents.train import losses
from flowzoo.agents.train.algorithms.base import Algorithm, Critic
from flowzoo.agents.train.algorithms.grpo import group_relative
from flowzoo.agents.train.batch import Batch, informative
from flowzoo.agents.train.losses import Advantages
from flowzoo.config import TrainConfig


def agent_keys(keys: Sequence[Hashable], roles: Sequence[str]) -> list[tuple[Hashable, str]]:
    """Each turn's group split by its role: the groups whose own statistics Dr. MAS
    normalises by (a key that already names the role or the agent splits no further)."""
    if len(keys) != len(roles):
        raise ValueError(f"{len(keys)} group keys but {len(roles)} roles")
    return list(zip(keys, roles, strict=True))


def advantages(
    cfg: TrainConfig, batch: Batch, critic: Critic | None = None, state: Any = None
) -> Advantages:
    """GRPO's group-relative advantages on the batch's groups split by role (no critic, no
    state); with ``filter_groups`` a split group without reward variance adds no loss."""
    keys = agent_keys(batch.groups, [t.role for t in batch.turns])
    adv, stats = group_relative(keys, batch.rewards, cfg.std_norm, "group")
    out = Advantages(scalar=list(adv), stats=dataclasses.asdict(stats))
    if cfg.filter_groups:
        dead = [i for i, ok in enumerate(informative(keys, batch.rewards)) if not ok]
        out.skip |= set(dead)
        out.stats["dropped_groups"] = len({keys[i] for i in dead})
        out.stats["dropped_turns"] = len(out.skip)
    return out


ALGORITHM = Algorithm("dr-mas", advantages, losses.policy_loss)

__all__ = ["ALGORITHM", "advantages", "agent_keys"]
