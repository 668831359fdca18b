"""Training: rollout -> one batch -> advantages and update -> evaluation -> checkpoint, and
what a run writes.

Read :mod:`flowzoo.agents.train.trainer` top to bottom first, then the learner and the
algorithm's file; the algorithm's one seam is :mod:`flowzoo.agents.train.algorithms` (its
advantages of a :class:`~flowzoo.agents.train.batch.Batch` and its loss, chosen once from the
config). Imports torch."""
