"""The registry of RL algorithms: ``cfg.algo`` -> the :class:`Algorithm` its file in
:mod:`flowzoo.agents.train.algorithms` exposes, chosen once (:func:`algorithm_for`).

Why one seam: the learner asks the algorithm for a batch's advantages, the model's outputs
and a turn's per-token loss; neither it nor the trainer branches on the algorithm's name or
imports its internals. The KL anchor (per role) and the loss aggregation are the
learner's, the same for every algorithm.

Adding an algorithm: one file ``flowzoo/agents/train/algorithms/<name>.py`` defining ``ALGORITHM``
(see ``rloo.py``; a ``-`` in the name is ``_`` in the file's, ``role-baseline`` ->
``role_baseline.py``) and its name in :data:`flowzoo.config.ALGOS` (the torch-free CLI lists
the choices from there; this registry is read from it).

The credit-assignment estimators, one file each: ``role_baseline.py`` (``algo="role-baseline"``,
a per-role running baseline), ``central_critic.py`` (PPO's ``critic_input="central"``, MAPPO's
centralised value) and ``agent_wise.py`` (GRPO's ``adv_norm="agent-wise"``, Dr. MAS). Where
one does not apply (a centralised critic without PPO, a per-role one on a one-role env), the
config refuses it (:meth:`flowzoo.config.TrainConfig.validate`) before any model loads.
"""

from __future__ import annotations

import importlib

from flowzoo.agents.train.algorithms.base import (
    Algorithm,
    Critic,
    Estimator,
    EstimatorState,
    Loss,
    Outputs,
    ValueTerms,
)
from flowzoo.config import ALGOS, TrainConfig


def _load(name: str) -> Algorithm:
    module = name.replace("-", "_")
    alg = importlib.import_module(f"flowzoo.agents.train.algorithms.{module}").ALGORITHM
    if alg.name != name:
        raise RuntimeError(f"flowzoo/agents/train/algorithms/{module}.py names itself {alg.name!r}")
    return alg


#: every algorithm the CLI offers (``config.ALGOS``), by name
ALGORITHMS: dict[str, Algorithm] = {name: _load(name) for name in ALGOS}


def algorithm_for(cfg: TrainConfig) -> Algorithm:
    """The algorithm ``cfg.algo`` names (validated by the config, checked again here)."""
    try:
        return ALGORITHMS[cfg.algo]
    except KeyError:
        raise ValueError(f"unknown algo {cfg.algo!r}; valid: {', '.join(ALGORITHMS)}") from None


__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "Critic",
    "Estimator",
    "EstimatorState",
    "Loss",
    "Outputs",
    "ValueTerms",
    "algorithm_for",
]
