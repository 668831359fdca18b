"""Run-keeping: the run directory and everything written into it, apart from the learning.

Why a room of its own: what makes a run trustworthy on disk (one writer per directory, no
writes through links or into FIFOs, each record whole or not at all, a stop signal turned
into one interrupt path, experiment trackers that never lose a step) is not what makes it
learn, and the two were ~2,000 lines each in one folder. What is here:

- ``rundir.py``: the run directory, its lock and what may be found in it;
- ``safefile.py``: the safe writes every record goes through;
- ``runlog.py``: ``metrics.jsonl``, the progress line and the run's log streams;
- ``signals.py``: SIGINT / SIGTERM / SIGHUP as one interrupt;
- ``trackers.py``: wandb, MLflow, trackio, TensorBoard (``report_to``);
- ``weights.py``: a model folder's weight files, hashed (which build a run started from)
  and checked loadable before a model is built on them.

Checkpoints stay with the learning (``agents/train/checkpoint.py``): they save the learner's
state (optimizer, sharded weights) and read the process layout; their files' digests are
read with ``weights.stream_sha256``. Nothing here imports the training side.
"""
