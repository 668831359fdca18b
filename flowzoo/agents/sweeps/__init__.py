"""Sweeps: a grid of runs declared in one file (``spec.py``: ``[base]``, ``[grid]``,
``[[extra]]``, ``--subset``) and the runner that plays them, resumably, each in its own
process (``runner.py``). Above the training side: it starts runs, the runs never see it."""
