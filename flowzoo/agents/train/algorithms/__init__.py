"""RL algorithms, one file each: GRPO (group-relative), PPO (value head + GAE), RLOO
(leave-one-out baseline). Each exposes ``ALGORITHM``, an
:class:`~flowzoo.agents.train.algorithms.base.Algorithm`; :mod:`flowzoo.agents.train.algorithm` picks one
by ``cfg.algo``. The loss pieces they share are in :mod:`flowzoo.agents.train.losses`."""
