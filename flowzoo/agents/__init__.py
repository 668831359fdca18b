"""The LLM policy agents and their training: the torch side of flowzoo (the ``[agents]``
extra). ``agents.models`` generates text (policies, routing, backends, the tiny models);
``agents.train`` trains it (rollout, algorithms, learner, evaluation, run records). Kept in
one room so the environment side (``envs``, ``tasks``, ``sandbox``) and ``analysis`` install
and import without torch: nothing outside this package, ``integrations`` and the CLI imports
it (``tests/test_layout.py``)."""
