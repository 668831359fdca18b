"""Training: rollout -> advantages -> update -> evaluation -> checkpoint, and what a run writes.

Read :mod:`flowzoo.agents.train.trainer` top to bottom first; the algorithm's one seam is
:mod:`flowzoo.agents.train.algorithms` (an advantage estimator and an objective, chosen once from
the config). Imports torch."""
