"""RL algorithms, one file each, and the registry that picks one by ``cfg.algo``
(:func:`algorithm_for`).

Why one seam: the learner asks the algorithm for a batch's advantages, the model's outputs
and a turn's per-token loss; neither it nor the trainer branches on the algorithm's name or
imports its internals. The KL anchor (per role) and the loss aggregation are the learner's,
the same for every algorithm; the loss pieces the algorithms share are in
:mod:`flowzoo.agents.train.losses`.

The files: ``grpo.py`` (group-relative), ``ppo.py`` (value head + GAE), ``rloo.py``
(leave-one-out baseline) and the credit-assignment estimators: ``role_baseline.py``
(``algo="role-baseline"``, a per-role running baseline), ``dr_mas.py`` (``algo="dr-mas"``,
per-agent normalisation) and ``central_critic.py`` (PPO's ``critic_input="central"``,
MAPPO's centralised value). Where one does not apply (a centralised critic without PPO, a
per-role one on a one-role env), the config refuses it
(:meth:`flowzoo.config.TrainConfig.validate`) before any model loads.

Adding an algorithm: one file ``algorithms/<name>.py`` defining ``ALGORITHM`` (see
``rloo.py``; a ``-`` in the name is ``_`` in the file's) and its name in
:data:`flowzoo.config.ALGOS` (the torch-free CLI lists the choices from there; this registry
is read from it). The files are imported on first use, so importing one of them (``base``)
does not import them all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flowzoo.agents.train.algorithms.base import Algorithm
    from flowzoo.config import TrainConfig

_LOADED: dict[str, Algorithm] = {}


def _load(name: str) -> Algorithm:
    if name not in _LOADED:
        module = name.replace("-", "_")
        alg = importlib.import_module(f"{__name__}.{module}").ALGORITHM
        if alg.name != name:
            raise RuntimeError(
                f"flowzoo/agents/train/algorithms/{module}.py names itself {alg.name!r}"
            )
        _LOADED[name] = alg
    return _LOADED[name]


def all_algorithms() -> dict[str, Algorithm]:
    """Every algorithm the CLI offers (``config.ALGOS``), by name."""
    from flowzoo.config import ALGOS

    return {name: _load(name) for name in ALGOS}


def algorithm_for(cfg: TrainConfig) -> Algorithm:
    """The algorithm ``cfg.algo`` names (validated by the config, checked again here)."""
    from flowzoo.config import ALGOS

    if cfg.algo not in ALGOS:
        raise ValueError(f"unknown algo {cfg.algo!r}; valid: {', '.join(ALGOS)}")
    return _load(cfg.algo)


def __getattr__(name: str) -> Any:
    if name == "ALGORITHMS":  # the registry as a dict, loaded when first asked for
        return all_algorithms()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ALGORITHMS", "algorithm_for", "all_algorithms"]
