"""Per-role running baseline (``algo="role-baseline"``): a turn's advantage is its reward minus
a running mean of its role's rewards, divided (``std_norm``) by the role's running std; no
groups, no critic. The loss is the shared clipped surrogate.

Source: role-conditioned advantage estimation as self-play LLM training uses it (SPIRAL:
Liu et al. 2025, "SPIRAL: Self-Play on Zero-Sum Games Incentivizes Reasoning via Multi-Agent
Multi-Turn Reinforcement Learning", arXiv 2506.24119, its role-conditioned advantage
estimation): one baseline per role, an exponential moving average of that role's returns,
because roles of one game earn rewards on different scales and a shared baseline credits one
role for the other's level. SPIRAL keeps one per (game, role); a flowzoo run plays one env,
so one per role. SPIRAL does not divide by a std: its form is ``std_norm=False``; the running
std (``std_norm=True``, the field's default) is flowzoo's option, so the advantages' scale
matches GRPO's when the two are compared.

The arithmetic, per role ``r`` with this step's rewards ``x_1..x_n`` (``d`` =
``baseline_decay``; ``m1``, ``m2`` the role's running first and second moments):

- a role seen for the first time starts at this step's ``m1 = mean(x)``, ``m2 = mean(x^2)``;
- each turn is centred on the role's mean *before* this step: ``c_i = x_i - m1`` (a
  baseline that has not seen the rewards it judges, but on the first step);
- the moments move: ``m1 <- d*m1 + (1-d)*mean(x)``, ``m2 <- d*m2 + (1-d)*mean(x^2)``;
- with ``std_norm``, ``a_i = c_i / (sqrt(max(m2 - m1^2, 0)) + 1e-6)``, the std *after* this
  step (it has seen this step's spread, so a first success after a run of failures is not
  divided by a std of 0); else ``a_i = c_i``.

Every turn of the step moves its role's moments, those ``filter_groups`` then leaves out of
the loss included (the baseline is the role's reward level, not the kept turns'). Under
torchrun the step's sums are taken over every process, so all hold the same baseline. The
moments are the estimator's state (:class:`RunningBaseline`): the learner holds it and the
checkpoint saves it, so a resumed run continues exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from flowzoo.agents.train import distributed, losses
from flowzoo.agents.train.algorithms.base import Algorithm, Critic
from flowzoo.agents.train.algorithms.rloo import leave_one_out
from flowzoo.agents.train.batch import Batch
from flowzoo.agents.train.losses import Advantages
from flowzoo.config import TrainConfig
from flowzoo.envs.registry import env_agents

#: added to the std it divides by (as GRPO's group std)
EPS = 1e-6
#: sums a list of floats over torchrun's processes
Reduce = Callable[[list[float]], list[float]]


class RunningBaseline:
    """Per role, the running first and second moments of its rewards (EMA with ``decay``)
    and the steps that moved them."""

    def __init__(self, decay: float, roles: Sequence[str] = ()) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"baseline decay must be in [0, 1], got {decay!r}")
        self.decay = float(decay)
        #: the env's roles: every process sums them in one order, even one without a turn
        self.roles = tuple(roles)
        #: role -> [mean, second moment, steps seen]
        self.moments: dict[str, list[float]] = {}

    def step(
        self,
        roles: Sequence[str],
        rewards: Sequence[float],
        std_norm: bool,
        reduce: Reduce | None = None,
    ) -> list[float]:
        """The advantages of one step's turns (see the module doc), moving each role's
        moments; ``reduce`` sums a list of floats over processes (None: this one only)."""
        if len(roles) != len(rewards):
            raise ValueError(f"{len(roles)} roles but {len(rewards)} rewards")
        # every role, in one fixed order (every process the same, under torchrun)
        order = sorted(set(self.roles) | set(roles) | set(self.moments))
        sums = []
        for r in order:
            xs = [float(x) for x, ro in zip(rewards, roles, strict=True) if ro == r]
            sums += [float(len(xs)), math.fsum(xs), math.fsum(x * x for x in xs)]
        if reduce is not None:
            sums = list(reduce(sums))
        scale: dict[str, float] = {}
        centre: dict[str, float] = {}
        d = self.decay
        for k, r in enumerate(order):
            n, s1, s2 = sums[3 * k : 3 * k + 3]
            if n == 0:  # a role that did not play this step keeps its moments
                continue
            mean, sq = s1 / n, s2 / n
            m = self.moments.setdefault(r, [mean, sq, 0.0])
            centre[r] = m[0]
            m[0], m[1], m[2] = d * m[0] + (1 - d) * mean, d * m[1] + (1 - d) * sq, m[2] + 1
            scale[r] = math.sqrt(max(m[1] - m[0] * m[0], 0.0)) + EPS if std_norm else 1.0
        return [(float(x) - centre[r]) / scale[r] for x, r in zip(rewards, roles, strict=True)]

    def state_dict(self) -> dict[str, Any]:
        """Plain data (a checkpoint loads tensors and plain data only)."""
        return {"decay": self.decay, "moments": {r: list(m) for r, m in self.moments.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved; a missing or foreign state is an error
        naming what it lacks (the checkpoint reports it as not fitting this run)."""
        if not isinstance(state, dict) or not isinstance(state.get("moments"), dict):
            raise ValueError(f"not a running-baseline state: {type(state).__name__}")
        if state.get("decay") != self.decay:
            raise ValueError(f"baseline decay {state.get('decay')!r}, this run {self.decay!r}")
        moments = {}
        for r, m in state["moments"].items():
            if not (isinstance(m, list) and len(m) == 3 and all(math.isfinite(x) for x in m)):
                raise ValueError(f"role {r!r}: bad running moments {m!r}")
            moments[str(r)] = [float(x) for x in m]
        self.moments = moments

    def means(self) -> dict[str, dict[str, float]]:
        """Per role, the running mean and std (for the metrics line)."""
        return {
            r: {"mean": m[0], "std": math.sqrt(max(m[1] - m[0] * m[0], 0.0))}
            for r, m in sorted(self.moments.items())
        }


def new_state(cfg: TrainConfig) -> RunningBaseline:
    """A fresh baseline with the run's decay and its env's roles (none seen yet)."""
    roles = dict.fromkeys(env_agents(cfg.env, **cfg.env_options).values())
    return RunningBaseline(cfg.baseline_decay, tuple(roles))


def _reduce() -> Reduce | None:
    """Summing over torchrun's processes where there are several, else None."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    # NCCL reduces on this process's GPU (the one distributed.setup made current)
    nccl = dist.get_backend() == "nccl"
    device = f"cuda:{torch.cuda.current_device()}" if nccl else "cpu"
    info = distributed.DistInfo(dist.get_rank(), dist.get_world_size(), device)
    return lambda xs: distributed.sum_floats(xs, info)


def advantages(
    cfg: TrainConfig,
    batch: Batch,
    critic: Critic | None = None,
    state: RunningBaseline | None = None,
) -> Advantages:
    """Reward minus the role's running baseline (over its running std with ``std_norm``);
    moves ``state``. With ``filter_groups`` the turns of groups without reward variance add
    no loss, as for every critic-free algorithm (the group counts feed the run's
    no-signal warning)."""
    if state is None:
        raise ValueError("the role baseline needs its running state (the learner holds it)")
    adv = state.step([t.role for t in batch.turns], batch.rewards, cfg.std_norm, _reduce())
    _, stats = leave_one_out(batch.groups, batch.rewards)  # the group counts only
    out = Advantages(scalar=adv, stats={**stats, "baseline": state.means()})
    if cfg.filter_groups:
        out.drop_uninformative(batch)
    return out


ALGORITHM = Algorithm("role-baseline", advantages, losses.policy_loss, state=new_state)

__all__ = ["ALGORITHM", "RunningBaseline", "advantages", "new_state"]
