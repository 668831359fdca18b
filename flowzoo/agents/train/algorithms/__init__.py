"""RL algorithms, one file each: GRPO (group-relative), PPO (value head + GAE), RLOO
(leave-one-out baseline), role-baseline (a per-role running baseline). Each exposes
``ALGORITHM``, an :class:`~flowzoo.agents.train.algorithms.base.Algorithm`;
:mod:`flowzoo.agents.train.algorithm` picks one by ``cfg.algo``. Two more estimators are one
file each but options of an algorithm: ``central_critic`` (PPO's ``critic_input="central"``)
and ``agent_wise`` (GRPO's ``adv_norm="agent-wise"``). The loss pieces they share are in
:mod:`flowzoo.agents.train.losses`."""
