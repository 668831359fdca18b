"""The LLM policy agents and their training: the torch side of flowzoo (the ``[agents]``
extra). ``agents.models`` generates text (policies, routing, backends, served endpoints);
``agents.train`` trains it (rollout, algorithms, learner, evaluation); ``agents.runs`` keeps a
run's records; ``agents.sweeps`` runs declared grids of runs. Kept in one room so the
environment side (``envs``, ``tasks``, ``sandbox``) and ``analysis`` install and import
without torch: nothing outside this package but ``integrations``, the tiny-model factory
(``flowzoo.tiny``) and the CLI imports it (``tests/test_layout.py``)."""
