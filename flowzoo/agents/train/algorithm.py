"""The registry of RL algorithms: ``cfg.algo`` -> the :class:`Algorithm` its file in
:mod:`flowzoo.agents.train.algorithms` exposes, chosen once (:func:`algorithm_for`).

Why one seam: the learner asks the algorithm for a batch's advantages, the model's outputs
and a turn's per-token loss; neither it nor the trainer branches on the algorithm's name or
imports its internals. The KL anchor (per role) and the loss aggregation are the
learner's, the same for every algorithm.

Adding an algorithm: one file ``flowzoo/agents/train/algorithms/<name>.py`` defining ``ALGORITHM``
(see ``rloo.py``) and its name in :data:`flowzoo.config.ALGOS` (the torch-free CLI lists the
choices from there; this registry is read from it).
"""

from __future__ import annotations

import importlib

from flowzoo.agents.train.algorithms.base import Algorithm, Critic, Estimator, Loss, ValueTerms
from flowzoo.config import ALGOS, TrainConfig


def _load(name: str) -> Algorithm:
    alg = importlib.import_module(f"flowzoo.agents.train.algorithms.{name}").ALGORITHM
    if alg.name != name:
        raise RuntimeError(f"flowzoo/agents/train/algorithms/{name}.py names itself {alg.name!r}")
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
    "Loss",
    "ValueTerms",
    "algorithm_for",
]
